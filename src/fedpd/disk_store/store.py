""":class:`DiskStore`: the client-store contract of :mod:`fedpd.store` on disk, composed of the
row files (:mod:`~fedpd.disk_store.blocks`), the row index (:mod:`~fedpd.disk_store.index`) and
the undo journal (:mod:`~fedpd.disk_store.journal`), with its identity in ``store.json`` and the
checkpoint protocol that makes a resume exact (see :mod:`fedpd.disk_store`)."""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedpd.disk_store import system
from fedpd.disk_store.blocks import RowFiles, as_bytes, bytes_of
from fedpd.disk_store.index import INDEX, RowIndex
from fedpd.disk_store.journal import UndoJournal, undo_log
from fedpd.disk_store.system import StoreError, _human
from fedpd.io import _fsync_dir, atomic_write_text, remove_leftover_temps
from fedpd.store import State, ordered_mean

STORE_FORMAT, STORE_VERSION = "fedpd-disk-store", 1
MANIFEST = "store.json"


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
        self.record_bytes = sum(bytes_of(v) for v in self._cpu_init.values())
        self.journal = journal
        self.directory: Path | None = None
        self.run_dir: str | None = None
        self._mode = "new"  # new | resume
        self._expect: dict | None = None  # a checkpoint's store entry (load_state_dict)
        self._open = False
        self.blocks: RowFiles | None = None
        self.index = RowIndex(num_clients if self.keys else 0)
        self.undo: UndoJournal | None = None
        self.token = ""
        self.epoch = 0  # the last committed checkpoint epoch (0: none yet)
        self.committed = 0  # rows of that checkpoint
        self._saved: set[int] = set()  # rows < committed whose pre-image is in the undo log
        self._pending: tuple[int, int] | None = None  # (epoch, rows) of the last state_dict()
        self._finalizer = None
        self._foreign = False  # the directory holds a store another run directory created

    # --- where the store lives ------------------------------------------------------------
    def attach(self, directory: Path, *, run_dir: Path | None, resume: bool,
               need_bytes: int = 0) -> None:
        """Use ``directory`` (checked now, before anything is written; created on first use).

        A fresh run refuses a directory that holds another run's store; a resume refuses one that
        is missing. ``need_bytes``: the most this run may still write (free space is checked). A
        store of no keys (an algorithm that keeps no client state) writes nothing, but the directory
        the config names is checked all the same."""
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
        base = system.existing_ancestor(directory)
        system.check_writable(base)
        have = sum(p.stat().st_size for p in directory.glob("*")) if directory.is_dir() else 0
        free = system.free_bytes(base)
        if need_bytes - have > free:
            raise StoreError(
                f"run.store_dir: {str(base)!r} has {_human(free)} free; this run's disk store may need "
                f"{_human(need_bytes - have)} more (its clients' states and undo log) (allowed: a directory "
                f"with more space, fewer rounds, or more frequent checkpoints)"
            )

    # --- its identity: store.json --------------------------------------------------------------
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

    def _write_manifest(self) -> None:
        atomic_write_text(self.directory / MANIFEST, json.dumps({
            "format": STORE_FORMAT, "version": STORE_VERSION, "token": self.token, "run_dir": self.run_dir,
            "num_clients": self.num_clients, "keys": self._layout(), "epoch": self.epoch}, indent=1))

    @property
    def _manifest_epoch(self) -> int | None:
        try:
            return json.loads((self.directory / MANIFEST).read_text()).get("epoch")
        except (OSError, ValueError):
            return None

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
        self.epoch = self.committed = self.index.rows = 0
        self._open_files(create=True)
        self._write_manifest()

    def _open_files(self, create: bool) -> None:
        self.blocks = RowFiles(self.directory, self._cpu_init, create)
        self.index.open(self.directory, create)
        self.undo = UndoJournal(self.directory)
        if create:
            _fsync_dir(self.directory)

    def _open_checkpoint(self) -> None:
        d, sd = self.directory, self._expect
        remove_leftover_temps(d, (MANIFEST,))
        self.token, self.epoch, self.committed = sd["token"], int(sd["epoch"]), int(sd["rows"])
        self._open_files(create=False)
        self.blocks.check_rows(self.committed)
        self.index.load(self.committed)
        undo = undo_log(d, self.epoch)
        if undo.exists():
            for row, record in UndoJournal.records(undo, self.record_bytes):
                if 0 <= row < self.committed:
                    self._restore_pre_image(row, record)
            self.blocks.fsync()
        self.blocks.truncate(self.committed)
        self.index.truncate()
        self.undo.remove_all()  # applied, or of epochs this checkpoint never reached
        _fsync_dir(d)
        if self._manifest_epoch != self.epoch:
            self._write_manifest()

    def _restore_pre_image(self, row: int, record: bytes) -> None:
        self.blocks.put_back(row, record)

    def _close(self) -> None:
        for part in (self.blocks, self.index, self.undo):
            if part is not None:
                part.close()
        self._open = False

    def close(self) -> None:
        """Close the files (a temporary directory is removed)."""
        self._close()
        if self._finalizer is not None:
            self._finalizer()

    # --- the contract -----------------------------------------------------------------------
    def __len__(self) -> int:
        return self.index.rows if self.keys else 0

    def get(self, ids: Tensor) -> State:
        """States of clients ``ids`` stacked on a leading axis (copies)."""
        if not self.keys:
            return {}
        self._ensure_open()
        rows = self.index.row_of[ids.detach().cpu().numpy()]
        have = rows >= 0
        out = {}
        for k in self.keys:
            init = self.init[k]
            if bool(have.all()):
                block = self.blocks.read(k, rows)
            else:
                block = self._cpu_init[k].expand(rows.size, *init.shape).clone()
                if bool(have.any()):
                    block[torch.from_numpy(np.flatnonzero(have))] = self.blocks.read(k, rows[have])
            out[k] = block.to(init.device)
        return out

    def put(self, ids: Tensor, state: State) -> None:
        if not self.keys:
            return
        self._ensure_open()
        ids_np = ids.detach().cpu().numpy().astype(np.int64)
        rows = self.index.row_of[ids_np].copy()
        try:
            new = rows < 0
            if bool(new.any()):
                rows[new] = self.index.allocate(ids_np[new])
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
                self._write_rows(k, rows[order], as_bytes(src.contiguous()))
        except OSError as err:
            raise StoreError(f"disk store {str(self.directory)!r}: {err.strerror or err} while writing client states; "
                             f"the last checkpoint is intact (free space, then continue with --resume)") from None

    def _append_undo(self, rows: np.ndarray) -> None:
        """The pre-images of committed rows ``rows`` into this epoch's undo log, durably, before
        they are overwritten."""
        self.undo.append(self.epoch, rows.tolist(), self.blocks.record(rows))
        self._saved.update(rows.tolist())

    def _write_rows(self, key: str, rows: np.ndarray, raw: np.ndarray) -> None:
        self.blocks.write(key, rows, raw)

    def mean(self, key: str) -> Tensor:
        """Mean of ``key`` over all N clients, summed in ascending client order (the memory
        store's chunks: the same numbers)."""
        self._ensure_open()
        _, rows = self.index.ascending()
        init = self.init[key]
        return ordered_mean(lambda a, b: self.blocks.read(key, rows[a:b]).to(init.device), rows.size, init,
                            self.num_clients)

    def full(self, key: str) -> Tensor:
        """``key`` of all N clients, [N, ...] in memory (untouched clients hold the initial state)."""
        self._ensure_open()
        out = self._cpu_init[key].expand(self.num_clients, *self._cpu_init[key].shape).clone()
        ids, rows = self.index.ascending()
        if ids.size:
            out[torch.from_numpy(ids)] = self.blocks.read(key, rows)
        return out.to(self.init[key].device)

    def ids(self) -> Tensor:
        if not self.keys:
            return torch.zeros(0, dtype=torch.int64)
        self._ensure_open()
        return torch.from_numpy(self.index.ascending()[0].astype(np.int64))

    # --- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Make every row durable and describe them: (token, epoch, rows), no row data."""
        self._ensure_open()
        if self.keys:
            self.blocks.fsync()
            self.index.fsync()
        self._pending = (self.epoch + 1, self.index.rows)
        return {"kind": "disk", "format": STORE_FORMAT, "token": self.token, "epoch": self.epoch + 1,
                "rows": self.index.rows, "num_clients": self.num_clients,
                "init": {k: v for k, v in self._cpu_init.items()}}

    def checkpoint_saved(self) -> None:
        """The checkpoint of the last :meth:`state_dict` is on disk: its rows are committed, the
        previous epoch's undo log is dropped and a new one starts."""
        if self._pending is None or not self.keys:
            return
        old = self.epoch
        self.epoch, self.committed = self._pending
        self._pending = None
        self._saved.clear()
        self._drop_undo(old)
        self._write_manifest()

    def _drop_undo(self, epoch: int) -> None:
        self.undo.end_epoch(epoch)

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
