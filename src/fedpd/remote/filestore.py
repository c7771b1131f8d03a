"""A node's durable client store: every hosted client's state in files, versioned by round.

A SuperNode keeps the states of the clients it hosts on its own disk, so a node that is killed
and restarted continues with them, and a server that resumes from a checkpoint can bring every
node back to the checkpoint's round. Layout (one directory per node)::

    <root>/c<id>/v<rounds>.pt     the client's state after <rounds> rounds of the run
    <root>/staged/r<round>.pt     states computed in round <round>, not yet committed

Version v of a client is its state after v rounds (a client untouched so far has none and reads
its initial state). A round stages its new states; ``commit`` turns the accepted ones into
version round + 1; ``rollback(R)`` drops everything after R rounds; ``prune(R)`` drops the
versions a resume to round R (the last checkpoint) no longer needs. Files are written atomically
(a kill never leaves half a file) and read with ``weights_only`` (nothing in them runs).
``durable`` also fsyncs each file (deployment; a simulation skips it: a killed process's writes
survive in the page cache).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from torch import Tensor

from fedpd.io import atomic_torch_save, remove_leftover_temps

State = dict[str, Tensor]
_VERSION = re.compile(r"v(\d+)\.pt")


def _save(obj, path: Path, durable: bool) -> None:
    if durable:
        atomic_torch_save(obj, path)
    else:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        torch.save(obj, tmp)
        os.replace(tmp, path)


class VersionedStore:
    """The states of the clients ``hosted`` by one node, in files under ``root``."""

    def __init__(self, root: str | Path, init: State, hosted: list[int], durable: bool = True):
        self.root, self.durable = Path(root), durable
        self.init = {k: v.detach().cpu().clone() for k, v in init.items()}
        self.hosted = sorted(int(i) for i in hosted)
        (self.root / "staged").mkdir(parents=True, exist_ok=True)
        remove_leftover_temps(self.root / "staged", ["*"])

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
        """The newest committed states of clients ``ids`` stacked on a leading axis (CPU)."""
        if not self.init:
            return {}
        rows = []
        for i in ids:
            v = self.version(i)
            rows.append(self.init if v == 0 else torch.load(self.root / f"c{i}" / f"v{v}.pt", weights_only=True))
        return {k: torch.stack([r[k] for r in rows]) for k in self.init}

    def touched(self) -> list[int]:
        """Hosted clients with a committed state (ascending)."""
        return [i for i in self.hosted if self.version(i) > 0]

    # --- writing --------------------------------------------------------------------------
    def stage(self, round: int, ids: list[int], state: State) -> None:
        """Keep the states computed in ``round`` until the server says which to keep."""
        payload = {"ids": [int(i) for i in ids], "state": {k: v.detach().cpu() for k, v in state.items()}}
        _save(payload, self.root / "staged" / f"r{round}.pt", self.durable)

    def staged(self, round: int) -> tuple[list[int], State] | None:
        path = self.root / "staged" / f"r{round}.pt"
        if not path.exists():
            return None
        payload = torch.load(path, weights_only=True)
        return payload["ids"], payload["state"]

    def commit(self, round: int, ids: list[int], state: State) -> None:
        """Clients ``ids`` (rows of ``state``) take version round + 1; the round's staging goes."""
        for row, i in enumerate(ids):
            folder = self.root / f"c{i}"
            folder.mkdir(exist_ok=True)
            if self.init:
                _save({k: v[row].detach().cpu().clone() for k, v in state.items()}, folder / f"v{round + 1}.pt",
                      self.durable)
        (self.root / "staged" / f"r{round}.pt").unlink(missing_ok=True)

    def rollback(self, rounds: int) -> None:
        """Forget everything after ``rounds`` rounds (a resume from the checkpoint of that round)."""
        for i in self.hosted:
            for v in self._versions(i):
                if v > rounds:
                    (self.root / f"c{i}" / f"v{v}.pt").unlink()
        for p in (self.root / "staged").iterdir():
            p.unlink()

    def prune(self, rounds: int) -> None:
        """Drop versions a resume to round ``rounds`` or later can never need."""
        for i in self.hosted:
            older = [v for v in self._versions(i) if v <= rounds]
            for v in older[:-1]:
                (self.root / f"c{i}" / f"v{v}.pt").unlink()
