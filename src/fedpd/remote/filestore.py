"""A node's durable client store: every hosted client's state in files, versioned by round,
one folder per run.

A SuperNode keeps the states of the clients it hosts on its own disk, so a node that is killed
and restarted continues with them, and a server that resumes from a checkpoint can bring every
node back to the checkpoint's round. Long-lived nodes serve run after run, so the states are
kept per run, under the run's key (:func:`run_key`: the run's random token and its config's
hash, both from the server) — a new run starts from the initial client states, never from
another run's. Layout (one ``store-dir`` per node)::

    <root>/node.lock                     the node that uses the store-dir (:mod:`~fedpd.remote.storelock`)
    <root>/runs/<key>/run.json           which run (key, the server's run directory, the clients
                                         of the node that made the folder), when it started; its
                                         time stamp says when the run last used it
    <root>/runs/<key>/c<id>/v<rounds>.pt the client's state after <rounds> rounds of that run
    <root>/runs/<key>/journal.log        which versions were written: "v<rounds> <client ranges>"
    <root>/runs/<key>/staged/r<round>-<node>.pt  states computed in round <round>, not yet
                                         committed (<node>: a digest of the node's clients)

Version v of a client is its state after v rounds (a client untouched so far has none and reads
its initial state). A round stages its new states; ``commit`` turns the accepted ones into
version round + 1; ``rollback(R)`` drops everything after R rounds; ``prune(R)`` drops the
versions a resume to round R (the last checkpoint) no longer needs. Files are written atomically
(a kill never leaves half a file) and read with ``weights_only`` (nothing in them runs).
``durable`` also fsyncs each file (deployment; a simulation skips it: a killed process's writes
survive in the page cache).

A client without a version file is one that never trained — unless the journal says a version
was written: then its state is missing (files removed, or a node started on another node's
store-dir), and reading it is a one-line error naming the clients, never a silent restart from
the initial state. A run's folder belongs to the clients of the node that made it: a node hosting
other clients is refused there (:func:`open_run`).

Cleanup (:func:`open_run`): when a run's folder is created, the folders of older runs go, except
the ``keep_runs`` most recently used ones (the new run's included) and any used within the last
:data:`IN_PROGRESS_S` seconds (a run in progress on the same node is never removed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path

import torch
from torch import Tensor

from fedpd.io import atomic_torch_save, atomic_write_text, remove_leftover_temps
from fedpd.remote.messages import client_ranges

State = dict[str, Tensor]
_VERSION = re.compile(r"v(\d+)\.pt")
RUNS, MARK, JOURNAL = "runs", "run.json", "journal.log"
_KEY = re.compile(r"[0-9a-f]{8,64}-[0-9a-f]{8,64}")
#: a run folder used this recently belongs to a run in progress: the cleanup never removes it
IN_PROGRESS_S = 3600
KEEP_RUNS = 3  # the default of a node's keep-runs


def run_key(token: str, config_hash: str) -> str:
    """The key of a run's node state: its token (random, drawn when the run starts, kept in its
    checkpoints, so a resume has the same and a new or overwritten run another) and the hash of
    its config (without the options a resume may change)."""
    key = f"{token}-{config_hash}"
    if not _KEY.fullmatch(key):
        raise ValueError(f"run key {key[:80]!r}: expected hex token-hash")
    return key


def open_run(root: str | Path, key: str, *, create: bool, run_dir: str = "", keep_runs: int = KEEP_RUNS,
             hosted: list[int] | None = None) -> Path:
    """The folder of run ``key`` under ``root``, marked as used now. A missing one is created
    (``create``; then older runs' folders are cleaned up, see the module docstring) or is a
    ValueError (a resume whose states are gone). ``hosted``: the clients of the node asking; a
    folder made by a node of other clients is a ValueError (it does not hold theirs)."""
    if not _KEY.fullmatch(str(key)):  # it becomes a path: nothing but the shape run_key makes
        raise ValueError(f"run-key {str(key)[:80]!r}: expected hex token-hash (fedpd versions differ?)")
    runs = Path(root) / RUNS
    folder = runs / key
    mark = folder / MARK
    if mark.exists():
        if hosted is not None:
            _check_clients(mark, client_ranges(hosted), root, key)
        os.utime(mark)
        return folder
    if not create:
        raise ValueError(f"the client states of run {key} are not in {folder.parent.parent} (removed by the "
                         f"keep-runs rule, or the node's store-dir changed): start the run again with overwrite")
    folder.mkdir(parents=True, exist_ok=True)
    about = {"key": key, "run_dir": run_dir, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if hosted is not None:
        about["clients"] = client_ranges(hosted)
    atomic_write_text(mark, json.dumps(about) + "\n")
    cleanup(runs, keep_runs, current=key)
    return folder


def _check_clients(mark: Path, mine: str, root, key: str) -> None:
    """One line if run ``key``'s folder was made by a node hosting other clients than ``mine``
    (a folder of an older fedpd names none: not checked)."""
    try:
        theirs = json.loads(mark.read_text()).get("clients")
    except (OSError, ValueError, AttributeError):
        return  # being written by the node that makes it (atomic: then complete), or not ours to judge
    if theirs is not None and theirs != mine:
        raise ValueError(f"store-dir {str(root)!r}: its folder of run {key} holds the states of clients {theirs}, "
                         f"not of this node's clients {mine} (started with another node's store-dir?): start this "
                         f"node with its own store-dir")


def cleanup(runs: Path, keep_runs: int, current: str = "") -> list[str]:
    """Remove the run folders under ``runs`` beyond the ``keep_runs`` most recently used, never
    ``current`` nor one used within :data:`IN_PROGRESS_S`; the keys removed."""
    def used(p: Path) -> float:
        try:
            return (p / MARK).stat().st_mtime
        except OSError:  # a folder being created by another run right now, or not a run's
            return time.time()

    folders = sorted((p for p in runs.iterdir() if p.is_dir() and _KEY.fullmatch(p.name)), key=used, reverse=True)
    now, removed = time.time(), []
    for p in folders[max(keep_runs, 1):]:
        if p.name != current and now - used(p) > IN_PROGRESS_S:
            shutil.rmtree(p, ignore_errors=True)  # another node process may be removing it too
            removed.append(p.name)
    return removed


def _save(obj, path: Path, durable: bool) -> None:
    if durable:
        atomic_torch_save(obj, path)
    else:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        torch.save(obj, tmp)
        os.replace(tmp, path)


def committed(run_folders: list[Path], rounds: int) -> dict[int, Path]:
    """Client id -> the file of its state after ``rounds`` rounds (its newest version up to then),
    over the folders of one run on several nodes; clients without one are left out. Reads only."""
    files: dict[int, tuple[int, Path]] = {}
    for folder in run_folders:
        for client in folder.glob("c*"):
            if not client.name[1:].isdigit():
                continue
            versions = [int(m.group(1)) for p in client.iterdir() if (m := _VERSION.fullmatch(p.name))]
            versions = [v for v in versions if v <= rounds]
            i = int(client.name[1:])
            if versions and max(versions) > files.get(i, (-1, None))[0]:
                files[i] = (max(versions), client / f"v{max(versions)}.pt")
    return {i: path for i, (_, path) in sorted(files.items())}


class VersionedStore:
    """The states of the clients ``hosted`` by one node, in files under ``root``."""

    def __init__(self, root: str | Path, init: State, hosted: list[int], durable: bool = True):
        self.root, self.durable = Path(root), durable
        self.init = {k: v.detach().cpu().clone() for k, v in init.items()}
        self.hosted = sorted(int(i) for i in hosted)
        # staged files are named by the node's clients: two nodes never write the same one
        self.tag = hashlib.sha256(client_ranges(self.hosted).encode()).hexdigest()[:12]
        (self.root / "staged").mkdir(parents=True, exist_ok=True)
        remove_leftover_temps(self.root / "staged", [f"r*-{self.tag}.pt"])

    def _staged_file(self, round: int) -> Path:
        return self.root / "staged" / f"r{round}-{self.tag}.pt"

    # --- the journal: which versions were written ---------------------------------------------
    def _written(self) -> dict[int, list[int]]:
        """Version -> the clients the journal says it was written for. A line cut short by a kill
        (or damaged) is skipped: the journal only ever says less than the files hold."""
        path = self.root / JOURNAL
        try:
            text = path.read_text()
        except FileNotFoundError:
            return {}
        out: dict[int, list[int]] = {}
        for line in text.split("\n"):
            m = re.fullmatch(r"v(\d+) ((?:\d+(?:-\d+)?)(?:,\d+(?:-\d+)?)*)", line)
            if m:
                ids = out.setdefault(int(m.group(1)), [])
                for part in m.group(2).split(","):
                    lo, _, hi = part.partition("-")
                    ids.extend(range(int(lo), int(hi or lo) + 1))
        return out

    def _newest_written(self) -> dict[int, int]:
        """Client -> the newest version the journal says was written for it."""
        newest: dict[int, int] = {}
        for v, ids in self._written().items():
            for i in ids:
                newest[i] = max(v, newest.get(i, 0))
        return newest

    def _journal(self, rounds: int, ids: list[int]) -> None:
        """Append that clients ``ids`` have version ``rounds`` (after their files are written)."""
        if not ids:
            return
        line = f"\nv{rounds} {client_ranges(ids)}\n".encode()  # (a leading newline ends a line cut short)
        fd = os.open(self.root / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, line)
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _rewrite_journal(self, written: dict[int, list[int]]) -> None:
        text = "".join(f"v{v} {client_ranges(ids)}\n" for v, ids in sorted(written.items()) if ids)
        if self.durable:
            atomic_write_text(self.root / JOURNAL, text)
        else:
            tmp = self.root / f".{JOURNAL}.{os.getpid()}.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.root / JOURNAL)

    def missing(self, ids: list[int] | None = None, versions: list[int] | None = None) -> list[int]:
        """The clients of ``ids`` (default: all hosted) whose newest written version has no file
        (a client the journal does not name never trained: its initial state is its state).
        ``versions``: those of ``ids``, when known."""
        ids = self.hosted if ids is None else [int(i) for i in ids]
        versions = [self.version(i) for i in ids] if versions is None else versions
        newest = self._newest_written()
        return [i for i, v in zip(ids, versions) if newest.get(i, 0) > v]

    def check(self, ids: list[int] | None = None, versions: list[int] | None = None) -> None:
        """One line naming the clients whose states are missing (:meth:`missing`)."""
        gone = self.missing(ids, versions)
        if gone:
            raise ValueError(f"the states of clients {client_ranges(gone)} are missing from {self.root} (its journal "
                             f"says they were written): the node's store-dir changed, their files were removed, or "
                             f"the run resumes from an older checkpoint than its last; restore them (this node's own "
                             f"store-dir), or start the run again with overwrite")

    # --- reading --------------------------------------------------------------------------
    def _versions(self, i: int) -> list[int]:
        folder = self.root / f"c{i}"
        if not folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _VERSION.fullmatch(p.name)))

    def version(self, i: int) -> int:
        """How many rounds client i's newest state has seen (0: never trained)."""
        versions = self._versions(i)
        return versions[-1] if versions else 0

    def get(self, ids: list[int]) -> State:
        """The newest committed states of clients ``ids`` stacked on a leading axis (CPU); one line
        if one of them is missing (:meth:`check`)."""
        if not self.init:
            return {}
        versions = [self.version(i) for i in ids]
        self.check(ids, versions)
        rows = []
        for i, v in zip(ids, versions):
            rows.append(self.init if v == 0 else torch.load(self.root / f"c{i}" / f"v{v}.pt", weights_only=True))
        return {k: torch.stack([r[k] for r in rows]) for k in self.init}

    def touched(self) -> list[int]:
        """Hosted clients with a committed state (ascending)."""
        return [i for i in self.hosted if self.version(i) > 0]

    # --- writing --------------------------------------------------------------------------
    def stage(self, round: int, ids: list[int], state: State) -> None:
        """Keep the states computed in ``round`` until the server says which to keep."""
        payload = {"ids": [int(i) for i in ids], "state": {k: v.detach().cpu() for k, v in state.items()}}
        _save(payload, self._staged_file(round), self.durable)

    def staged(self, round: int) -> tuple[list[int], State] | None:
        path = self._staged_file(round)
        if not path.exists():
            return None
        payload = torch.load(path, weights_only=True)
        return payload["ids"], payload["state"]

    def commit(self, round: int, ids: list[int], state: State) -> None:
        """Clients ``ids`` (rows of ``state``) take version round + 1; the round's staging goes."""
        if self.init:
            self.put(round + 1, ids, state)
        else:
            for i in ids:
                (self.root / f"c{i}").mkdir(exist_ok=True)
        self._staged_file(round).unlink(missing_ok=True)

    def put(self, rounds: int, ids: list[int], state: State) -> None:
        """Clients ``ids`` (rows of ``state``) take version ``rounds`` (a commit; or the states of
        a run that moves here from another engine or other nodes, :mod:`fedpd.handover`)."""
        for row, i in enumerate(ids):
            folder = self.root / f"c{i}"
            folder.mkdir(exist_ok=True)
            _save({k: v[row].detach().cpu().clone() for k, v in state.items()}, folder / f"v{rounds}.pt", self.durable)
        self._journal(rounds, [int(i) for i in ids])

    def rollback(self, rounds: int) -> None:
        """Forget everything after ``rounds`` rounds (a resume from the checkpoint of that round):
        the journal first (a kill midway leaves files it does not name, never the reverse)."""
        written = self._written()
        if any(v > rounds for v in written):
            self._rewrite_journal({v: ids for v, ids in written.items() if v <= rounds})
        for i in self.hosted:
            for v in self._versions(i):
                if v > rounds:
                    (self.root / f"c{i}" / f"v{v}.pt").unlink()
        for p in (self.root / "staged").iterdir():  # this node's, and those of a fedpd that named them r<round>.pt
            if p.name.endswith(f"-{self.tag}.pt") or re.fullmatch(r"r\d+\.pt", p.name):
                p.unlink()

    def prune(self, rounds: int) -> None:
        """Drop versions a resume to round ``rounds`` or later can never need. The journal keeps,
        of each client's versions up to ``rounds``, the newest and the oldest (a roll-back to before
        the newest, from an older checkpoint than the last, finds the state it needs gone and says so)."""
        for i in self.hosted:
            older = [v for v in self._versions(i) if v <= rounds]
            for v in older[:-1]:
                (self.root / f"c{i}" / f"v{v}.pt").unlink()
        written = self._written()
        old: dict[int, set[int]] = {}  # client -> its versions up to rounds
        for v, ids in written.items():
            if v <= rounds:
                for i in ids:
                    old.setdefault(i, set()).add(v)
        if any(len(vs) > 2 for vs in old.values()):
            kept = {v: set(ids) for v, ids in written.items() if v > rounds}
            for i, vs in old.items():
                kept.setdefault(min(vs), set()).add(i)
                kept.setdefault(max(vs), set()).add(i)
            self._rewrite_journal({v: sorted(ids) for v, ids in kept.items()})
