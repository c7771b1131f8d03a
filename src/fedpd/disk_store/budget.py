"""Which client store a run gets (``run.store``) and what it may cost: the rows and bytes a run
can reach, the choice of ``auto`` by the memory available, and where a disk store lives."""

from __future__ import annotations

import sys
from pathlib import Path

from fedpd.disk_store import system
from fedpd.disk_store.blocks import bytes_of
from fedpd.disk_store.journal import RECORD
from fedpd.disk_store.system import StoreError, _human
from fedpd.store import State


def state_bytes(init: State) -> int:
    """Bytes of one client's state."""
    return sum(bytes_of(v) for v in init.values())


def store_budget(num_clients: int, row_bytes: int, per_round: int | None, rounds: int, checkpoint_every: int,
                 everyone_first: bool = False) -> tuple[int, int, int]:
    """(rows, state bytes, undo bytes) this run can reach at most: rows = clients that can take
    part by ``rounds`` (K·T for a sampler of K per round, else N), the undo log at most the rows
    a checkpoint interval can overwrite."""
    k = num_clients if per_round is None else per_round
    rows = num_clients if everyone_first else min(num_clients, k * rounds)
    undo_rows = min(rows, k * max(1, checkpoint_every))
    return rows, rows * row_bytes, undo_rows * (row_bytes + RECORD.size)


def choose_store(requested: str, num_clients: int, row_bytes: int, rows: int,
                 per_round: int | None = None) -> tuple[str, str]:
    """The store kind for ``run.store`` and the line that says why (empty: nothing to say).

    ``auto``: memory while the clients' states (at most ``rows`` rows) take at most an eighth of
    the available memory (the memory store may hold two copies while it grows and a third while
    it writes a checkpoint), else disk. Raises a one-line error when the chosen store cannot
    hold the run."""
    need = rows * row_bytes
    avail = system.mem_available()
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
