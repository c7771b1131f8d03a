"""A client store on disk for 10⁵–10⁶ clients or large states, with exact resume.

:class:`DiskStore` meets the :class:`fedpd.store.ClientStore` contract with the same numbers as
:class:`fedpd.store.MemoryStore` (a state is copied byte for byte; the mean is summed in the
same ascending-client chunks), but keeps the rows in files:

* ``data-<key>.bin`` — one file per state key, row r of every key at offset r·(row bytes). A row
  is allocated (appended) when its client first takes part, so the files grow with the clients
  that have taken part, never with N. Rows are read and written with ``pread``/``pwrite``, not
  mapped: mapped pages that were touched count in the process's resident memory until the
  kernel reclaims them, and a run over 40 GB of state must stay far below that.
* ``index.i64`` — the client id of every row, append-only. In memory the store keeps the
  inverse, ``row_of`` (int64 [N], −1 for untouched clients): 8 bytes per registered client.
* ``undo-<e>.log`` — the undo log of checkpoint epoch e (below).
* ``store.json`` — the store's identity: a random token, the run directory it belongs to, N,
  the state keys with their shapes and dtypes, and the last committed checkpoint epoch.

**Exact resume.** A checkpoint (``state_dict``) does not copy the rows: it fsyncs the files and
records (token, epoch e+1, committed rows R). Afterwards, before a row r < R is overwritten for
the first time, its pre-image (every key's bytes, with a CRC) is appended to ``undo-<e+1>.log``
and the log is fsynced; rows ≥ R are new and need no undo (they are cut off). Once the run loop
has written ``checkpoint.pt`` it calls :meth:`DiskStore.checkpoint_saved`, which deletes the
previous epoch's undo log. Resuming from a checkpoint of epoch c applies ``undo-<c>.log`` (the
pre-images put back the rows of checkpoint c), truncates the files to the committed R rows,
fsyncs, and deletes every undo log. A kill at any point leaves either the checkpoint of epoch c
with its complete undo log, or (between writing ``checkpoint.pt`` and deleting the old log) the
checkpoint of epoch c+1 with no overwrite after it; both resume to the checkpoint's state.
``tests/test_disk_store.py`` kills runs at each of these points.

A checkpoint of the in-memory store holds the rows themselves; this one holds a few numbers and
the initial state, so ``checkpoint.pt`` stays small whatever the state's size.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import struct
import sys
import tempfile
import weakref
import zlib
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedpd.errors import FedpdError
from fedpd.io import _fsync_dir, atomic_write_text, remove_leftover_temps
from fedpd.store import State, ordered_mean

STORE_FORMAT, STORE_VERSION = "fedpd-disk-store", 1
MANIFEST = "store.json"
INDEX = "index.i64"
_RECORD = struct.Struct("<IIq")  # magic, crc32 of (row, payload), row
_MAGIC = 0x55444653  # "SFDU"
GiB = 1 << 30


class StoreError(FedpdError):
    """The disk store cannot be used or written (one line; the last checkpoint stays intact)."""


def _human(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _key_file(key: str) -> str:
    return f"data-{key}.bin" if re.fullmatch(r"[A-Za-z0-9_]+", key) else f"data-{key.encode().hex()}.bin"


def _bytes_of(t: Tensor) -> int:
    return t.numel() * t.element_size()


def _as_bytes(t: Tensor) -> np.ndarray:
    """A contiguous CPU tensor [K, ...] as a uint8 numpy array [K, row bytes] sharing its memory."""
    return t.reshape(t.shape[0], -1).view(torch.uint8).numpy()


def _runs(rows: np.ndarray) -> list[tuple[int, int, int]]:
    """(position in ``rows``, first row, length) of the runs of consecutive rows of a sorted array."""
    if rows.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [rows.size]])
    return [(int(a), int(rows[a]), int(b - a)) for a, b in zip(starts, ends)]


def _pread_full(fd: int, view: memoryview, offset: int, what: str) -> None:
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise StoreError(f"{what}: shorter than the store's index says (the store is damaged)")
        done += n


def _pwrite_full(fd: int, data, offset: int) -> None:
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while len(view):
        view = view[os.write(fd, view):]


def mem_available() -> int:
    """Bytes of memory available to new work (MemAvailable), or the total where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux/macOS
        return 8 * GiB


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def state_bytes(init: State) -> int:
    """Bytes of one client's state."""
    return sum(_bytes_of(v) for v in init.values())


class DiskStore:
    """Client states in files under a directory, rows allocated on first participation.

    ``journal``: keep undo logs so a run resumes exactly from its last checkpoint (off for runs
    without a run directory, which cannot resume). The directory is given by :meth:`attach`
    (the run loop: ``<run>/store`` or ``run.store_dir``); a store used without one (a
    :class:`fedpd.simulation.Simulation` driven by hand) opens a temporary directory, removed with it.
    """

    kind = "disk"

    def __init__(self, init: State, num_clients: int, *, journal: bool = True):
        self.init = {k: v.detach().clone() for k, v in init.items()}
        self.num_clients = num_clients
        self.keys = sorted(self.init)
        self._cpu_init = {k: v.detach().to("cpu").contiguous() for k, v in self.init.items()}
        self.row_bytes = {k: _bytes_of(v) for k, v in self._cpu_init.items()}
        self.record_bytes = sum(self.row_bytes.values())
        self.journal = journal
        self.directory: Path | None = None
        self.run_dir: str | None = None
        self._mode = "new"  # new | resume
        self._expect: dict | None = None  # a checkpoint's store entry (load_state_dict)
        self._open = False
        self._fds: dict[str, int] = {}
        self._index_fd = -1
        self._undo_fd = -1
        self.token = ""
        self.epoch = 0  # the last committed checkpoint epoch (0: none yet)
        self.committed = 0  # rows of that checkpoint
        self.rows = 0  # rows allocated now
        self.row_of = np.full(num_clients, -1, dtype=np.int64) if self.keys else np.zeros(0, dtype=np.int64)
        self._saved: set[int] = set()  # rows < committed whose pre-image is in the undo log
        self._pending: tuple[int, int] | None = None  # (epoch, rows) of the last state_dict()
        self._finalizer = None
        self._foreign = False  # the directory holds a store another run directory created

    # --- where the store lives ------------------------------------------------------------
    def attach(self, directory: Path, *, run_dir: Path | None, resume: bool,
               need_bytes: int = 0) -> None:
        """Use ``directory`` (checked now, before anything is written; created on first use).

        A fresh run refuses a directory that holds another run's store; a resume refuses one that
        is missing. ``need_bytes``: the most this run may still write (free space is checked)."""
        if not self.keys:
            return
        directory = Path(directory).absolute()
        self.directory, self.run_dir = directory, str(Path(run_dir).absolute()) if run_dir is not None else None
        self._mode = "resume" if resume else "new"
        manifest = self._read_manifest() if (directory / MANIFEST).exists() else None
        if directory.exists() and not directory.is_dir():
            raise StoreError(f"run.store_dir: {str(directory)!r} exists and is not a directory")
        self._foreign = manifest is not None and manifest.get("run_dir") != self.run_dir
        if not resume and self._foreign:
            raise StoreError(f"run.store_dir: {str(directory)!r} holds the client store of another run "
                             f"({manifest.get('run_dir') or 'a run without a directory'}); refusing to overwrite it "
                             f"(allowed: an empty or new directory)")
        if not resume and manifest is None and directory.is_dir() and any(directory.iterdir()):
            raise StoreError(f"run.store_dir: {str(directory)!r} is not empty and holds no fedpd store "
                             f"(allowed: an empty or new directory)")
        if resume and manifest is not None:
            self._check_manifest(manifest)
        base = _existing_ancestor(directory)
        self._check_writable(base)
        have = sum(p.stat().st_size for p in directory.glob("*")) if directory.is_dir() else 0
        free = shutil.disk_usage(base).free
        if need_bytes - have > free:
            raise StoreError(f"run.store_dir: {str(base)!r} has {_human(free)} free; this run's disk store may need "
                             f"{_human(need_bytes - have)} more (its clients' states and undo log) (allowed: a directory "
                             f"with more space, fewer rounds, or more frequent checkpoints)")

    @staticmethod
    def _check_writable(base: Path) -> None:
        try:
            fd, probe = tempfile.mkstemp(prefix=".fedpd-probe-", dir=base)
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            raise StoreError(f"run.store_dir: cannot write in {str(base)!r} ({err.strerror or err}); the disk store "
                             f"needs a writable directory") from None

    def _read_manifest(self) -> dict:
        path = self.directory / MANIFEST
        try:
            manifest = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise StoreError(f"{path}: not a fedpd disk store ({type(err).__name__})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
            raise StoreError(f"{path}: not a fedpd disk store")
        if manifest.get("version") != STORE_VERSION:
            raise StoreError(f"{path}: disk store version {manifest.get('version')!r}; this fedpd reads version "
                             f"{STORE_VERSION}")
        return manifest

    def _layout(self) -> dict:
        return {k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
                for k, v in self._cpu_init.items()}

    def _check_manifest(self, manifest: dict) -> None:
        where = self.directory / MANIFEST
        if manifest.get("num_clients") != self.num_clients or manifest.get("keys") != self._layout():
            raise StoreError(f"{where}: the store of another run (its clients or state layout differ from this "
                             f"run's); refusing to continue")

    # --- opening: create, or roll back to the checkpoint -----------------------------------
    def _ensure_open(self) -> None:
        if self._open or not self.keys:
            return
        if self.directory is None:  # driven by hand: a private temporary directory
            self.directory = Path(tempfile.mkdtemp(prefix="fedpd-store-"))
            self.journal = False
            self._mode = "new"
            self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.directory), True)
        try:
            if self._mode == "resume" and self._expect is not None:
                self._open_checkpoint()
            else:
                self._create()
        except OSError as err:
            self._close()
            raise StoreError(f"run.store_dir: {err.strerror or err} in {str(self.directory)!r} "
                             f"({type(err).__name__}); the disk store cannot be used") from None
        self._open = True

    def _create(self) -> None:
        d = self.directory
        if self._foreign:  # a resume with no checkpoint yet: only our own leftovers may be replaced
            raise StoreError(f"run.store_dir: {str(d)!r} holds the client store of another run; refusing to "
                             f"overwrite it (allowed: the run's own store directory)")
        if d.exists():  # checked in attach(): our own leftovers (a run killed before its first checkpoint)
            for p in d.iterdir():
                if p.is_file() and (p.name.startswith(("data-", "undo-", ".")) or p.name in (INDEX, MANIFEST)):
                    p.unlink()
        d.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(12)
        self.epoch = self.committed = self.rows = 0
        self._open_files(create=True)
        self._write_manifest()

    def _write_manifest(self) -> None:
        atomic_write_text(self.directory / MANIFEST, json.dumps({
            "format": STORE_FORMAT, "version": STORE_VERSION, "token": self.token, "run_dir": self.run_dir,
            "num_clients": self.num_clients, "keys": self._layout(), "epoch": self.epoch}, indent=1))

    def _open_files(self, create: bool) -> None:
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0) | getattr(os, "O_BINARY", 0)
        for k in self.keys:
            self._fds[k] = os.open(self.directory / _key_file(k), flags, 0o666)
        self._index_fd = os.open(self.directory / INDEX, flags, 0o666)
        if create:
            _fsync_dir(self.directory)

    def _open_checkpoint(self) -> None:
        d, sd = self.directory, self._expect
        remove_leftover_temps(d, (MANIFEST,))
        self.token, self.epoch, self.committed = sd["token"], int(sd["epoch"]), int(sd["rows"])
        self._open_files(create=False)
        for k in self.keys:
            if os.fstat(self._fds[k]).st_size < self.committed * self.row_bytes[k]:
                raise StoreError(f"{d / _key_file(k)}: shorter than the checkpoint's {self.committed} rows (the store "
                                 f"is damaged)")
        index = np.empty(self.committed, dtype=np.int64)
        if self.committed:
            _pread_full(self._index_fd, memoryview(index).cast("B"), 0, str(d / INDEX))
        if index.size and (int(index.min()) < 0 or int(index.max()) >= self.num_clients
                           or np.unique(index).size != index.size):
            raise StoreError(f"{d / INDEX}: damaged (client ids out of range or repeated)")
        self.row_of[:] = -1
        self.row_of[index] = np.arange(self.committed, dtype=np.int64)
        undo = d / f"undo-{self.epoch}.log"
        if undo.exists():
            self._roll_back(undo)
        for k in self.keys:
            os.ftruncate(self._fds[k], self.committed * self.row_bytes[k])
            os.fsync(self._fds[k])
        os.ftruncate(self._index_fd, self.committed * 8)
        os.fsync(self._index_fd)
        for p in d.glob("undo-*.log"):  # applied, or of epochs this checkpoint never reached
            p.unlink()
        _fsync_dir(d)
        self.rows = self.committed
        if self._manifest_epoch != self.epoch:
            self._write_manifest()

    def _roll_back(self, undo: Path) -> None:
        """Put back the pre-images of ``undo`` (complete, intact records only)."""
        size = self.record_bytes
        with open(undo, "rb") as f:
            while True:
                head = f.read(_RECORD.size)
                if len(head) < _RECORD.size:
                    break
                magic, crc, row = _RECORD.unpack(head)
                payload = f.read(size)
                if magic != _MAGIC or len(payload) < size or zlib.crc32(payload, zlib.crc32(head[8:])) != crc:
                    break  # a record cut short by the kill: its row was never overwritten
                if 0 <= row < self.committed:
                    self._restore_pre_image(row, payload)
        for k in self.keys:
            os.fsync(self._fds[k])

    def _restore_pre_image(self, row: int, payload: bytes) -> None:
        at = 0
        for k in self.keys:
            n = self.row_bytes[k]
            _pwrite_full(self._fds[k], payload[at:at + n], row * n)
            at += n

    def _close(self) -> None:
        for fd in [*self._fds.values(), self._index_fd, self._undo_fd]:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fds, self._index_fd, self._undo_fd = {}, -1, -1
        self._open = False

    def close(self) -> None:
        """Close the files (a temporary directory is removed)."""
        self._close()
        if self._finalizer is not None:
            self._finalizer()

    # --- the contract -----------------------------------------------------------------------
    def __len__(self) -> int:
        return self.rows if self.keys else 0

    def _read(self, key: str, rows: np.ndarray) -> Tensor:
        """Rows ``rows`` (all allocated) of ``key``: a CPU tensor [len(rows), ...]."""
        init = self._cpu_init[key]
        out = torch.empty((rows.size, *init.shape), dtype=init.dtype)
        if rows.size == 0:
            return out
        n = self.row_bytes[key]
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        buf = out if bool((order == np.arange(rows.size)).all()) else torch.empty_like(out)
        raw = _as_bytes(buf)
        for pos, first, length in _runs(sorted_rows):
            _pread_full(self._fds[key], memoryview(raw[pos:pos + length]).cast("B"), first * n,
                        str(self.directory / _key_file(key)))
        if buf is not out:
            out[torch.from_numpy(order)] = buf
        return out

    def get(self, ids: Tensor) -> State:
        """States of clients ``ids`` stacked on a leading axis (copies)."""
        if not self.keys:
            return {}
        self._ensure_open()
        rows = self.row_of[ids.detach().cpu().numpy()]
        have = rows >= 0
        out = {}
        for k in self.keys:
            init = self.init[k]
            if bool(have.all()):
                block = self._read(k, rows)
            else:
                block = self._cpu_init[k].expand(rows.size, *init.shape).clone()
                if bool(have.any()):
                    block[torch.from_numpy(np.flatnonzero(have))] = self._read(k, rows[have])
            out[k] = block.to(init.device)
        return out

    def put(self, ids: Tensor, state: State) -> None:
        if not self.keys:
            return
        self._ensure_open()
        ids_np = ids.detach().cpu().numpy().astype(np.int64)
        rows = self.row_of[ids_np].copy()
        try:
            new = rows < 0
            if bool(new.any()):
                fresh = np.arange(self.rows, self.rows + int(new.sum()), dtype=np.int64)
                _pwrite_full(self._index_fd, ids_np[new], self.rows * 8)
                rows[new] = fresh
                self.row_of[ids_np[new]] = fresh
                self.rows += fresh.size
            if self.journal:
                old = [int(r) for r in rows if r < self.committed and int(r) not in self._saved]
                if old:
                    self._append_undo(np.array(sorted(old), dtype=np.int64))
            order = np.argsort(rows, kind="stable")
            for k in self.keys:
                src = state[k].detach().to("cpu", self._cpu_init[k].dtype)
                src = src.reshape(rows.size, *self._cpu_init[k].shape)
                if not bool((order == np.arange(rows.size)).all()):
                    src = src[torch.from_numpy(order)]
                self._write_rows(k, rows[order], _as_bytes(src.contiguous()))
        except OSError as err:
            raise StoreError(f"disk store {str(self.directory)!r}: {err.strerror or err} while writing client states; "
                             f"the last checkpoint is intact (free space, then continue with --resume)") from None

    def _append_undo(self, rows: np.ndarray) -> None:
        """Append the pre-images of committed rows ``rows`` to this epoch's undo log, durably,
        before they are overwritten."""
        if self._undo_fd < 0:
            path = self.directory / f"undo-{self.epoch}.log"
            self._undo_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0), 0o666)
            _fsync_dir(self.directory)
        pre = {k: _as_bytes(self._read(k, rows)) for k in self.keys}
        parts = []
        for j, row in enumerate(rows.tolist()):
            payload = b"".join(pre[k][j].tobytes() for k in self.keys)
            row_bytes = struct.pack("<q", row)
            parts.append(struct.pack("<II", _MAGIC, zlib.crc32(payload, zlib.crc32(row_bytes))) + row_bytes + payload)
        _write_all(self._undo_fd, b"".join(parts))
        os.fdatasync(self._undo_fd)
        self._saved.update(rows.tolist())

    def _write_rows(self, key: str, rows: np.ndarray, raw: np.ndarray) -> None:
        """Write rows ``rows`` (sorted) of ``key`` from ``raw`` [len(rows), row bytes]."""
        n = self.row_bytes[key]
        for pos, first, length in _runs(rows):
            _pwrite_full(self._fds[key], raw[pos:pos + length], first * n)

    def _ascending(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids ascending, their rows) of the clients that have taken part."""
        ids = np.flatnonzero(self.row_of >= 0)
        return ids, self.row_of[ids]

    def mean(self, key: str) -> Tensor:
        """Mean of ``key`` over all N clients, summed in ascending client order (the memory
        store's chunks: the same numbers)."""
        self._ensure_open()
        _, rows = self._ascending()
        init = self.init[key]
        return ordered_mean(lambda a, b: self._read(key, rows[a:b]).to(init.device), rows.size, init, self.num_clients)

    def full(self, key: str) -> Tensor:
        """``key`` of all N clients, [N, ...] in memory (untouched clients hold the initial state)."""
        self._ensure_open()
        out = self._cpu_init[key].expand(self.num_clients, *self._cpu_init[key].shape).clone()
        ids, rows = self._ascending()
        if ids.size:
            out[torch.from_numpy(ids)] = self._read(key, rows)
        return out.to(self.init[key].device)

    # --- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Make every row durable and describe them: (token, epoch, rows), no row data."""
        self._ensure_open()
        if self.keys:
            for fd in [*self._fds.values(), self._index_fd]:
                os.fsync(fd)
        self._pending = (self.epoch + 1, self.rows)
        return {"kind": "disk", "format": STORE_FORMAT, "token": self.token, "epoch": self.epoch + 1,
                "rows": self.rows, "num_clients": self.num_clients, "init": {k: v for k, v in self._cpu_init.items()}}

    def checkpoint_saved(self) -> None:
        """The checkpoint of the last :meth:`state_dict` is on disk: its rows are committed, the
        previous epoch's undo log is dropped and a new one starts."""
        if self._pending is None or not self.keys:
            return
        old = self.epoch
        self.epoch, self.committed = self._pending
        self._pending = None
        self._saved.clear()
        if self._undo_fd >= 0:
            os.close(self._undo_fd)
            self._undo_fd = -1
        self._drop_undo(old)
        self._write_manifest()

    def _drop_undo(self, epoch: int) -> None:
        (self.directory / f"undo-{epoch}.log").unlink(missing_ok=True)

    @property
    def _manifest_epoch(self) -> int | None:
        try:
            return json.loads((self.directory / MANIFEST).read_text()).get("epoch")
        except (OSError, ValueError):
            return None

    def load_state_dict(self, sd: dict) -> None:
        """Continue from a checkpoint's store entry: checked now against the store directory
        (one line if it is another run's), rolled back to it when the store is first used."""
        if not self.keys:
            return
        if sd.get("kind") != "disk" or sd.get("format") != STORE_FORMAT:
            raise StoreError("checkpoint: its client store is not a disk store (run.store differs)")
        if self.directory is None:
            raise StoreError("run.store_dir: a disk-store checkpoint needs its store directory (resume the run "
                             "with fedpd run --resume)")
        where = self.directory / MANIFEST
        if not where.exists():
            raise StoreError(f"run.store_dir: {str(self.directory)!r} holds no client store (store.json missing), but "
                             f"the checkpoint's states are there; restore it, or start again with --overwrite")
        manifest = self._read_manifest()
        self._check_manifest(manifest)
        if manifest.get("token") != sd.get("token"):
            raise StoreError(f"run.store_dir: {str(self.directory)!r} holds the client store of another run (its "
                             f"token differs from the checkpoint's); refusing to continue")
        epoch, have = int(sd["epoch"]), manifest.get("epoch")
        if not isinstance(have, int) or not (have == epoch or have + 1 == epoch):
            raise StoreError(f"{where}: the store is at checkpoint epoch {have}, the checkpoint at {epoch} (the "
                             f"checkpoint was replaced by an older one?); refusing to continue")
        self._close()
        self._mode, self._expect = "resume", dict(sd)
        self.init = {k: v.to(self.init[k].device) for k, v in sd["init"].items()}
        self._cpu_init = {k: v.detach().to("cpu").contiguous() for k, v in sd["init"].items()}


def store_budget(num_clients: int, row_bytes: int, per_round: int | None, rounds: int, checkpoint_every: int,
                 everyone_first: bool = False) -> tuple[int, int, int]:
    """(rows, state bytes, undo bytes) this run can reach at most: rows = clients that can take
    part by ``rounds`` (K·T for a sampler of K per round, else N), the undo log at most the rows
    a checkpoint interval can overwrite."""
    k = num_clients if per_round is None else per_round
    rows = num_clients if everyone_first else min(num_clients, k * rounds)
    undo_rows = min(rows, k * max(1, checkpoint_every))
    return rows, rows * row_bytes, undo_rows * (row_bytes + _RECORD.size)


def choose_store(requested: str, num_clients: int, row_bytes: int, rows: int,
                 per_round: int | None = None) -> tuple[str, str]:
    """The store kind for ``run.store`` and the line that says why (empty: nothing to say).

    ``auto``: memory while the clients' states (at most ``rows`` rows) take at most an eighth of
    the available memory (the memory store may hold two copies while it grows and a third while
    it writes a checkpoint), else disk. Raises a one-line error when the chosen store cannot
    hold the run."""
    need = rows * row_bytes
    avail = mem_available()
    k = num_clients if per_round is None else per_round
    if 3 * k * row_bytes > avail:  # a round holds its participants' states, their new states and uploads
        raise StoreError(f"sampler: a round's {k} participants hold {_human(3 * k * row_bytes)} of states, new states "
                         f"and uploads ({_human(row_bytes)} each), more than the {_human(avail)} of memory available "
                         f"(allowed: fewer participants per round, or a smaller model)")
    kind, note = requested, ""
    if requested == "auto":
        kind = "disk" if row_bytes and need > avail / 8 else "memory"
        if kind == "disk":
            note = (f"fedpd: run.store = auto chose the disk store: the clients' states may reach {_human(need)} "
                    f"({rows} clients x {_human(row_bytes)}), more than 1/8 of the {_human(avail)} of memory available")
    if kind == "memory" and need > avail:
        raise StoreError(f"run.store: 'memory' cannot hold this run's client states ({_human(need)}: {rows} clients x "
                         f"{_human(row_bytes)}; {_human(avail)} of memory available) (allowed: disk, auto)")
    if kind == "disk" and row_bytes and 8 * num_clients > avail // 2:
        raise StoreError(f"problem.clients: {num_clients} clients need {_human(8 * num_clients)} of memory for the "
                         f"disk store's index (8 bytes per client); {_human(avail)} available")
    return kind, note


def default_store_dir(run_dir: Path | None, store_dir: str) -> Path | None:
    """``run.store_dir`` if set, else ``<run>/store`` (None: no run directory, a temporary one)."""
    if store_dir:
        return Path(store_dir)
    return None if run_dir is None else Path(run_dir) / "store"


def log(line: str) -> None:
    if line:
        print(line, file=sys.stderr)
