"""Engines run rounds; the in-process engine runs every client in this process.

The contract an engine meets (:class:`Engine`), written down so that other engines — Flower
SuperNodes, Ray workers — can be tested against the same suite (``tests/engine_conformance.py``):

* ``run_round(server, ids, round) -> server`` — one round of the protocol of
  :mod:`fedpd.protocol` (coin, broadcast, dropouts, local work, counting, attack, screen,
  aggregate, reply) with participants ``ids`` given in any order (possibly none). The result
  depends only on (config, round, ids as a set, states): not on the order of ``ids``, on how
  clients are grouped or where they run. Engines differ only in the client half
  (:class:`fedpd.protocol.Clients`), and they share the server half by calling
  :func:`fedpd.protocol.run_round`.
* ``store`` — the client states (:class:`fedpd.store.ClientStore`), read by the evaluation path.
* ``comm`` — the :class:`fedpd.comm.CommCounter` every message passes through.
* ``sample_grads`` — per-sample gradients the clients have computed so far.
* ``state_dict()`` / ``load_state_dict(sd)`` — everything above, for an exact resume;
  ``take_over(sd, states, rounds)`` — continue from another engine's checkpoint entry, its client
  states given (:mod:`fedpd.handover`);
  ``checkpointed(rounds)`` — told once the run's checkpoint of that many rounds is on disk (a
  store that keeps versions may then drop older ones); ``close()`` (optional) — the run is over:
  release processes the engine holds.

:class:`InProcessEngine` processes the participants in chunks of ``chunk`` clients, each chunk
as one vectorised [chunk, d] computation (``None``: all participants at once; 1: one client at a
time). A client's work depends only on itself (its data, state, id-keyed streams), so the chunk
size changes speed and memory, never a result.
"""

from __future__ import annotations

from typing import Iterator, Protocol

import torch
from torch import Tensor

from fedpd.algorithms.base import Algorithm, State
from fedpd.allocator import keep_freed_memory
from fedpd.attacks import Attack
from fedpd.comm import WORK, CommCounter
from fedpd.context import ClientContext
from fedpd.hooks import call, check_clients, check_local, check_receive, check_uploads
from fedpd.problems.base import ClientData, Problem
from fedpd.protocol import run_round
from fedpd.store import ClientStore


class Engine(Protocol):
    """What every engine provides (see the module docstring)."""

    store: ClientStore
    comm: CommCounter

    @property
    def sample_grads(self) -> int: ...

    def run_round(self, server: State, ids: Tensor, round: int) -> State: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, sd: dict) -> None: ...

    def take_over(self, sd: dict, states, rounds: int) -> None: ...

    def checkpointed(self, rounds: int) -> None: ...


def train_in_chunks(algorithm: Algorithm, problem: Problem, solver, seed: int, chunk: int | None, message: State,
                    ids: Tensor, states, round: int) -> Iterator[tuple[Tensor, State, State, ClientContext]]:
    """``local`` on clients ``ids`` in consecutive chunks of ``chunk`` (None: all at once), each
    chunk's states read by ``states(start, stop)`` (positions in ``ids``): one (chunk's ids, its
    uploads, its new states, its context) per chunk, each as it is done (a caller that sums the
    uploads as they come holds one chunk's). Every engine's client half runs this (in a process
    that keeps freed memory for the next step: :mod:`fedpd.allocator`)."""
    keep_freed_memory()
    step = ids.numel() if chunk is None else chunk
    for start in range(0, ids.numel(), max(step, 1)):
        part = ids[start:start + step]
        ctx = ClientContext(part, round, ClientData(problem, part), solver, seed)
        before = states(start, start + part.numel())
        shapes = {k: v.shape for k, v in before.items()}  # taken first: local may change its input in place
        up, new = check_local(algorithm, call(algorithm, "local", message, before, ctx))
        check_uploads(algorithm, up, part.numel())
        check_clients(algorithm, "local", new, shapes, part.numel())
        if problem.tally_work:  # the clock's compute time (fedpd.system), taken off by the round protocol
            up = {**up, WORK: ctx.data.work}
        yield part, up, new, ctx


class InProcessEngine:
    """Every client in this process, in vectorised chunks of ``chunk`` clients (None: all);
    with a ``pool`` (:class:`fedpd.workers.WorkerPool`, ``run.workers`` > 1) the round's
    participants are trained on its worker processes, in groups, and committed here."""

    def __init__(self, algorithm: Algorithm, problem: Problem, solver, store: ClientStore, *, seed: int,
                 chunk: int | None = None, attack: Attack | None = None, pool=None):
        self.algorithm, self.problem, self.solver, self.store = algorithm, problem, solver, store
        self.seed, self.chunk, self.pool = seed, chunk, pool
        self.attack = attack if attack is not None else Attack().bind(store.num_clients)
        self.comm = CommCounter()
        self._pending: list[tuple[Tensor, State, ClientContext]] = []

    #: the clients' devices, links and clock (``[system]``: fedpd.system.Fleet), set by the run; None: no clock
    fleet = None
    #: what takes the server step in the algorithm's place ([privacy]: fedpd.privacy.PrivateAggregation),
    #: set by the run; None: the algorithm itself
    aggregation = None

    @property
    def sample_grads(self) -> int:
        return int(self.problem.sample_grads)

    def run_round(self, server: State, ids: Tensor, round: int) -> State:
        return run_round(self.algorithm, server, ids, round, clients=self, comm=self.comm, attack=self.attack,
                         seed=self.seed, num_clients=self.store.num_clients, fleet=self.fleet,
                         aggregation=self.aggregation)

    # --- the client half (fedpd.protocol.Clients) ------------------------------------------
    #: chunks are trained in ascending id order and given as each is done (fedpd.protocol sums a
    #: plain mean's uploads as they come: a round then holds one chunk's uploads, not K)
    in_id_order = True

    def train(self, message: State, ids: Tensor, round: int) -> Iterator[tuple[Tensor, State]]:
        ids = ids.sort().values
        if self.pool is not None and ids.numel() > 1:
            trained = self._train_on_workers(message, ids, round)
        else:
            trained = train_in_chunks(self.algorithm, self.problem, self.solver, self.seed, self.chunk, message, ids,
                                      lambda a, b: self.store.get(ids[a:b]), round)
        self._pending = []
        for part, up, new, ctx in trained:
            self._pending.append((part, new, ctx))
            yield part, up

    def _train_on_workers(self, message: State, ids: Tensor, round: int):
        """The participants in groups of ``chunk`` (None: one contiguous group per worker), handed
        to whichever worker is free next (a slow or busy core does not hold the round up); each
        trains its group from the states read here, and the new states come back pending here,
        in the groups' (ascending id) order."""
        size = self.chunk or -(-ids.numel() // self.pool.size)
        groups = list(torch.split(ids, size))
        results = self.pool.train(message, [(g, self.store.get(g)) for g in groups], round)
        trained = []
        for group, (up, new, sample_grads) in zip(groups, results):
            self.problem.sample_grads = self.problem.sample_grads + sample_grads  # counted where computed
            trained.append((group, up, new, ClientContext(group, round, ClientData(self.problem, group), self.solver,
                                                          self.seed)))
        return trained

    def commit(self, ids: Tensor, reply: State, round: int) -> None:
        for part, new, ctx in self._pending:
            keep = torch.isin(part, ids)
            if not bool(keep.any()):
                continue  # rejected or dropped: the state of before the round stays
            if not bool(keep.all()):
                part, ctx = part[keep], ctx.select(keep)
                new = {k: v[keep.to(v.device)] for k, v in new.items()}
            if reply:
                new = check_receive(self.algorithm, new, reply, ctx)
            self.store.put(part, new)
        self._pending = []

    # --- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"store": self.store.state_dict(), "comm": self.comm.state_dict(), "sample_grads": self.sample_grads}

    def load_state_dict(self, sd: dict) -> None:
        self.store.load_state_dict(sd["store"])
        self.comm.load_state_dict(sd["comm"])
        self.problem.sample_grads = sd["sample_grads"]

    def take_over(self, sd: dict, states, rounds: int) -> None:
        """Continue a run whose client states were on another engine: the counters from its
        checkpoint entry ``sd``, and ``states`` — (ids, their states) in chunks — into the store
        (:mod:`fedpd.handover`)."""
        self.comm.load_state_dict(sd["comm"])
        self.problem.sample_grads = sd["sample_grads"]
        for ids, state in states:
            self.store.put(ids, state)

    def checkpointed(self, rounds: int) -> None:
        hook = getattr(self.store, "checkpoint_saved", None)  # the disk store's undo log of the last epoch
        if hook is not None:
            hook()

    def close(self) -> None:
        """Stop the worker processes, if any (a later round starts them again)."""
        if self.pool is not None:
            self.pool.close()
