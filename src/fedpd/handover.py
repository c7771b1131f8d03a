"""A resume on another engine, or on nodes that host other clients: the run's client states move.

A checkpoint's engine entry says where its clients' states are: an in-process engine's holds its
client store (``store``: the rows themselves, or a disk store's description), a remote engine's
the run's token (``run``) and a digest of who hosted whom (``layout``), the states being in the
nodes' files. A resume on the same kind of engine with the same layout continues where the
states are (a remote engine's nodes roll back to the checkpoint's round). Otherwise
(:func:`moves`) they are read from where they are — the checkpoint, the run's disk store, or the
files of the loopback or simulated nodes under ``<run>/nodes`` — and handed to the new engine
(``take_over``: into its store, or onto its nodes under a new run key; the old run's node
folders go once the next checkpoint is on disk). A run's state does not
depend on its engine, so the resumed run writes the metrics an uninterrupted run on the new
engine writes. A deployment's SuperNodes keep the states on their machines: such a run resumes
only on nodes that host the same clients (one line says so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor

from fedpd.disk_store import DiskStore, default_store_dir
from fedpd.engine import InProcessEngine
from fedpd.errors import ConfigError
from fedpd.remote.filestore import RUNS, committed
from fedpd.rundir import NODES
from fedpd.store import MEAN_CHUNK_BYTES, MemoryStore, State


def moves(entry: dict, engine) -> bool:
    """Whether the checkpoint's engine ``entry`` keeps its client states somewhere ``engine``
    does not read them (then :func:`states` gives them and ``engine.take_over`` takes them)."""
    if isinstance(engine, InProcessEngine):
        return "store" not in entry
    if "store" in entry:  # an in-process run, resumed on nodes
        return True
    return entry.get("layout", engine.layout()) != engine.layout()  # no layout: written before it was kept


def states(entry: dict, *, init: State, num_clients: int, rounds: int, run_dir: Path | None, store_dir: str,
           device) -> Iterator[tuple[Tensor, State]]:
    """(ids ascending, their states) of every client that has taken part, after ``rounds``
    rounds, in chunks of at most 64 MiB, from where the checkpoint's engine ``entry`` keeps them
    (found now: a source that is not there is one line before anything moves)."""
    if not init or rounds == 0:
        return iter(())
    if "store" in entry:
        source = _in_process_store(entry["store"], init, num_clients, run_dir, store_dir)
        return _chunks(source.ids(), source.get, init, device, source)
    files = _node_files(entry, rounds, run_dir)

    def read(part: Tensor) -> State:
        rows = [torch.load(files[int(i)], map_location="cpu", weights_only=True) for i in part.tolist()]
        return {k: torch.stack([r[k] for r in rows]) for k in init}

    return _chunks(torch.tensor(list(files), dtype=torch.int64), read, init, device)


def _chunks(ids: Tensor, read, init: State, device, source=None) -> Iterator[tuple[Tensor, State]]:
    row_bytes = sum(v.numel() * v.element_size() for v in init.values())
    step = max(1, MEAN_CHUNK_BYTES // max(1, row_bytes))
    try:
        for a in range(0, ids.numel(), step):
            part = ids[a:a + step]
            yield part, {k: v.to(device) for k, v in read(part).items()}
    finally:
        if isinstance(source, DiskStore):
            source.close()


def _in_process_store(sd: dict, init: State, num_clients: int, run_dir: Path | None, store_dir: str):
    """The in-process client store a checkpoint entry describes, opened for reading."""
    if sd.get("kind") != "disk":
        return MemoryStore.from_state_dict(sd)
    store = DiskStore(init, num_clients)
    store.attach(default_store_dir(run_dir, store_dir), run_dir=run_dir, resume=True)
    store.load_state_dict(sd)
    return store


def left_behind(entry: dict, run_dir: Path | None) -> list[Path]:
    """The folders of a remote entry's run on its loopback or simulated nodes (``<run>/nodes/*``):
    once the moved run's next checkpoint is on disk nothing reads them (they are removed then)."""
    token = str(entry.get("run") or "")
    if "store" in entry or not token or run_dir is None:
        return []
    return sorted((Path(run_dir) / NODES).glob(f"*/{RUNS}/{token}-*"))


def _node_files(entry: dict, rounds: int, run_dir: Path | None) -> dict[int, Path]:
    """Client id -> the file of its state after ``rounds`` rounds, on the run's loopback or
    simulated nodes (``<run>/nodes/*``); one line when they are not there (a deployment's)."""
    folders = left_behind(entry, run_dir)
    if not folders:
        where = f"{Path(run_dir) / NODES}" if run_dir is not None else "this machine"
        raise ConfigError(f"the checkpoint's client states are on its nodes, not in {where} (a deployment's "
                          f"SuperNodes keep them): resume it on the same engine, its nodes hosting the same clients "
                          f"(allowed changes: run.rounds and how the clients run on them, e.g. run.node_timeout)")
    return committed(folders, rounds)
