"""The one place the engine of a run is chosen (``run.engine``).

* :func:`make_engine` — the engine that runs a round's client half: in process
  (:class:`~fedpd.engine.InProcessEngine`, ``inprocess``; with ``run.workers`` > 1 it trains the
  participants on a :class:`~fedpd.workers.WorkerPool` of this machine), or on nodes reached by messages
  (:class:`~fedpd.remote.engine.RemoteEngine`): loopback nodes in this process (``loopback``) or
  the nodes behind a transport a runtime gives (``flower``).
* :func:`in_process` — whether the clients live in this process (the run then builds their store).
* :func:`open_runtime` — the runtime an engine needs held open for the length of a run: Flower's
  simulation (``run.engine = "flower"``, its transport), else none.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from fedpd.algorithms.base import Algorithm
from fedpd.attacks import Attack
from fedpd.build import client_chunk, hosted_clients
from fedpd.config import Config, RunOptions
from fedpd.engine import Engine, InProcessEngine
from fedpd.errors import ConfigError
from fedpd.problems.base import Problem
from fedpd.rundir import NODES
from fedpd.store import MemoryStore
from fedpd.threads import LocalWork
from fedpd.workers import WorkerPool, plan_workers


def in_process(run: RunOptions, transport=None) -> bool:
    """Whether the clients of a run with these ``[run]`` options live in this process (then in a
    client store of its own), rather than on nodes (``transport``: nodes already connected)."""
    return transport is None and run.engine == "inprocess"


def make_engine(cfg: Config, algorithm: Algorithm, problem: Problem, solver, attack: Attack, *, work: LocalWork,
                workdir: Path | None = None, transport=None, store=None) -> Engine:
    """The engine ``run.engine`` names; the in-process one keeps its clients in ``store`` (default
    a fresh memory store) and trains them here or on the worker processes ``run.workers`` and the
    round's ``work`` call for, a remote one on its nodes (``transport``: nodes already connected)."""
    init = algorithm.init_client(problem.x_init)
    run = cfg.run
    if in_process(run, transport):
        store = store if store is not None else MemoryStore(init, problem.num_clients)
        workers, threads = plan_workers(run.workers, run.threads, work, problem.device)
        pool = WorkerPool(cfg.to_toml(), workers, threads, run.node_timeout) if workers > 1 else None
        return InProcessEngine(algorithm, problem, solver, store, seed=run.seed,
                               chunk=client_chunk(run.client_chunk, problem), attack=attack, pool=pool)
    from fedpd.remote.engine import LoopbackTransport, RemoteEngine
    from fedpd.remote.node import NodeRuntime

    scratch = None
    if workdir is None:  # remote nodes keep their clients' states in files: somewhere to put them
        workdir = scratch = Path(tempfile.mkdtemp(prefix="fedpd-nodes-"))
    if transport is None:
        if cfg.run.engine != "loopback":
            raise ConfigError(f"run.engine: {cfg.run.engine!r} runs through fedpd.run (or its Flower app), not a bare "
                              f"Simulation")
        if cfg.run.nodes > problem.num_clients:
            raise ConfigError(f"run.nodes: {cfg.run.nodes} nodes for {problem.num_clients} clients "
                              f"(allowed: 1..{problem.num_clients})")
        transport = LoopbackTransport({k: NodeRuntime(hosted_clients(problem.num_clients, cfg.run.nodes, k),
                                                      Path(workdir) / NODES / f"node{k}", durable=False)
                                       for k in range(cfg.run.nodes)})
    engine = RemoteEngine(algorithm, cfg.to_toml(), transport, num_clients=problem.num_clients, seed=cfg.run.seed,
                          init_client=init, attack=attack, timeout=cfg.run.node_timeout,
                          context={"store-root": str(Path(workdir) / NODES), "plugin-path": list(cfg.plugin_path),
                                   "run-dir": str(Path(workdir).absolute())},
                          config_hash=config_hash(cfg))
    if scratch is not None:  # a run without a directory: its nodes' files go with the engine
        weakref.finalize(engine, shutil.rmtree, str(scratch), True)
    return engine


def config_hash(cfg: Config) -> str:
    """The hash of what a run is (its config without the options a resume may change): half of
    its key on the nodes, so a resume finds its clients' states and another config never does."""
    text = json.dumps(cfg.fingerprint(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextmanager
def open_runtime(cfg: Config, transport=None) -> Iterator[object | None]:
    """The transport a run of ``cfg`` reaches its nodes through, held open for the run:
    ``transport`` when given (a Flower ServerApp's Grid), Flower's simulation runtime with
    ``run.nodes`` virtual SuperNodes for ``run.engine = "flower"``, else None (no runtime)."""
    if transport is not None or cfg.run.engine != "flower":
        yield transport
        return
    from fedpd.flower.simulation import FlowerSession, backend_config

    with FlowerSession(cfg.run.nodes, backend_config(cfg)) as session:
        yield session.transport
