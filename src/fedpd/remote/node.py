"""The node side of a remote engine: what a SuperNode (or any worker) does with each message.

A node hosts a fixed set of client ids and keeps their states in a :class:`VersionedStore` on
its own disk, one per run: every request carries the run's key (``run-key``), and the node
reads and writes only that run's folder (:func:`~fedpd.remote.filestore.open_run`). From the
run's config (sent with every message) it builds the problem, the algorithm and the local solver
exactly as the simulator does, so a client's ``local`` here is the very computation the
in-process engine would run — same code, same per-client streams, same numbers. It holds
nothing else between messages but the pieces it built for the run in progress: a node process
may be killed and restarted (or, in a Flower deployment, be a fresh process per message) and
continue from its files, and a warm process (``fedpd flower clientapp``) builds a run's pieces
once and drops them when another run's message comes.

A node that ``holds`` its store-dir (a SuperNode: ``holder``) takes the folder's lock with its
first message and checks it with every one: another live node's lock is a one-line refusal naming
it (:mod:`fedpd.remote.storelock`). Within a run's folder, a client whose state the journal says
was written but whose file is gone is refused by name — on a resume (``restore``) and whenever its
state is read — rather than restarted from its initial state (:mod:`fedpd.remote.filestore`).

A config may name plug-ins (import paths, :mod:`fedpd.plugins`); a node built with ``allowed``
imports only plug-in modules under those prefixes and answers anything else with an error (the
server then rejects its clients' uploads, counted). ``allowed=None``: any plug-in (the nodes of
one user's simulation). A hook of the config's algorithm that fails its check here
(:mod:`fedpd.hooks`: a state of the wrong shape, a plug-in's hook that raised) is answered as
``refused``: the server stops the run with that line, as the in-process engine does.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch

from fedpd import plugins
from fedpd.build import from_toml
from fedpd.context import ClientContext
from fedpd.engine import train_in_chunks
from fedpd.hooks import HookError, check_receive
from fedpd.problems.base import ClientData
from fedpd.remote.filestore import KEEP_RUNS, VersionedStore, open_run
from fedpd.remote.messages import Envelope, client_ranges, pack, unpack
from fedpd.remote.storelock import Holder, hold

_BUILT: dict[tuple, tuple] = {}  # (run key, config hash, plug-in policy) -> (cfg, problem, algorithm, solver)


def _pieces(config_toml: str, run_key: str = ""):
    """(cfg, problem, algorithm, solver) of a run's config, built once per run and process (under
    the plug-in policy in force, :func:`fedpd.plugins.restricted`). Only the latest run's are
    kept: nothing built for one run (a problem's data, an algorithm object) serves another."""
    key = (str(run_key), hashlib.sha256(config_toml.encode()).hexdigest(), plugins.policy())
    if key not in _BUILT:
        _BUILT.clear()  # one run at a time per process; the old run's pieces go before the new are built
        _BUILT[key] = from_toml(config_toml)
    return _BUILT[key]


class NodeRuntime:
    """One node: the clients ``hosted`` (ids of the run's partition), their states under ``root``
    (one folder per run; ``keep_runs``: how many runs' folders the cleanup keeps); ``allowed``:
    the plug-in module prefixes it may import (None: any); ``holder``: this node as the lock of
    ``root`` names it (:func:`fedpd.remote.storelock.holder`; None: ``root`` is not locked — the
    nodes of a simulation, in folders of the run's own)."""

    def __init__(self, hosted: list[int], root: str | Path, durable: bool = True,
                 allowed: tuple[str, ...] | None = None, keep_runs: int = KEEP_RUNS, holder: Holder | None = None):
        self.hosted, self.root, self.durable = sorted(int(i) for i in hosted), Path(root), durable
        self.allowed, self.keep_runs, self.holder = allowed, keep_runs, holder

    def folder(self, request: Envelope, create: bool = True):
        """The folder of the request's run (see :func:`~fedpd.remote.filestore.open_run`)."""
        if not request.config.get("run-key"):
            raise ValueError("the server sent no run-key (fedpd versions differ between server and node?)")
        return open_run(self.root, str(request.config["run-key"]), create=create,
                        run_dir=str(request.config.get("run-dir", "")), keep_runs=self.keep_runs, hosted=self.hosted)

    def store(self, request: Envelope) -> VersionedStore | None:
        """The request's run's store; None for stateless clients (FedAvg: nothing kept, no folder)."""
        _, problem, algorithm, _ = _pieces(request.config["config"], request.config.get("run-key", ""))
        init = algorithm.init_client(problem.x_init)
        return VersionedStore(self.folder(request), init, self.hosted, self.durable) if init else None

    def handle(self, request: Envelope) -> Envelope:
        """The reply to one request; a problem on this side is a reply with ``error`` set."""
        try:
            if self.holder is not None:  # before anything is read or written: the store-dir is this node's
                took = hold(self.root, self.holder)
                if took:
                    self.say(took)
            with plugins.restricted(self.allowed):
                return getattr(self, f"_{request.kind}")(request)
        except Exception as err:  # the server decides what a failed node means for the round
            error = f"{type(err).__name__}: {err}"[:500]
            if isinstance(err, HookError):  # the config's own algorithm: the server stops the run with this line
                return Envelope(request.kind, {"error": error, "refused": str(err)})
            self.log(request, error)
            return Envelope(request.kind, {"error": error})

    def log(self, request: Envelope, error: str) -> None:
        """One line in this node's own log (its stderr) for a request it could not serve: which
        clients, which request of which round (counted from 1, as the server's progress), why."""
        round = request.config.get("round")
        what = f"{request.kind} of round {int(round) + 1}" if round is not None else request.kind
        self.say(f"{what} refused: {error}")

    def say(self, line: str) -> None:
        print(f"fedpd node (clients {client_ranges(self.hosted)}): {line}", file=sys.stderr, flush=True)

    def _hello(self, request: Envelope) -> Envelope:
        return Envelope("hello", {"hosted": self.hosted})

    def _train(self, request: Envelope) -> Envelope:
        cfg, problem, algorithm, solver = _pieces(request.config["config"], request.config.get("run-key", ""))
        store = self.store(request)
        self._kept(request)  # an earlier round's commit, riding with this message
        if request.config.get("prune") is not None and store is not None:
            store.prune(int(request.config["prune"]))
        ids = [int(i) for i in request.config["ids"]]
        foreign = sorted(set(ids) - set(self.hosted))
        if foreign:
            raise ValueError(f"clients {foreign[:5]} are not hosted here")
        round, device = int(request.config["round"]), problem.device
        message = unpack("m", request.arrays, device)
        before = int(problem.sample_grads)
        ids_t = torch.tensor(ids, dtype=torch.int64)
        chunk = 1 if problem.per_client else cfg.run.client_chunk or len(ids)

        def held(start: int, stop: int):  # the states of ids[start:stop], as this node keeps them
            return {k: v.to(device) for k, v in store.get(ids[start:stop]).items()} if store is not None else {}

        trained = list(train_in_chunks(algorithm, problem, solver, cfg.run.seed, chunk, message, ids_t, held, round))
        uploads, states = [up for _, up, _, _ in trained], [new for _, _, new, _ in trained]
        upload = {k: torch.cat([u[k] for u in uploads]) for k in uploads[0]} if uploads else {}
        state = {k: torch.cat([s[k] for s in states]) for k in states[0]} if states and states[0] else {}
        if state and store is not None:  # stateless clients (FedAvg) keep nothing; the server sends no commit
            store.stage(round, ids, state)
        return Envelope("train", {"ids": ids, "sample_grads": int(problem.sample_grads) - before}, pack("u", upload))

    def _commit(self, request: Envelope) -> Envelope:
        self._keep(request, int(request.config["round"]), request.config["accepted"])
        return Envelope("commit", {})

    def _kept(self, request: Envelope) -> None:
        """Apply the commit a request of another kind carries (``commit-round``, ``commit-accepted``
        and the reply's arrays): a deployment's server sends a round's commit with the node's next
        message rather than as a message of its own."""
        if request.config.get("commit-round") is not None:
            self._keep(request, int(request.config["commit-round"]), request.config.get("commit-accepted") or [])

    def _keep(self, request: Envelope, round: int, accepted: list) -> None:
        """The clients ``accepted`` of those staged in ``round`` take the server's reply and keep their
        new states as version round + 1; the others keep theirs. Done once: a commit sent again (a
        retried message) finds nothing staged."""
        cfg, problem, algorithm, _ = _pieces(request.config["config"], request.config.get("run-key", ""))
        store = self.store(request)
        staged = store.staged(round) if store is not None else None
        if staged is None:  # committed before (a retried message), or nothing was trained here
            return
        ids, state = staged
        accepted = [int(i) for i in accepted]
        keep = torch.tensor([i in set(accepted) for i in ids], dtype=torch.bool)
        kept_ids = [i for i, k in zip(ids, keep.tolist()) if k]
        new = {k: v[keep].to(problem.device) for k, v in state.items()}
        reply = unpack("r", request.arrays, problem.device)
        if reply and kept_ids:
            part = torch.tensor(kept_ids, dtype=torch.int64)
            ctx = ClientContext(part, round, ClientData(problem, part), None, cfg.run.seed)
            new = check_receive(algorithm, new, reply, ctx)
        store.commit(round, kept_ids, new)

    def _restore(self, request: Envelope) -> Envelope:
        """The run starts here (0 rounds: its folder is made, older runs' cleaned up) or continues
        from its checkpoint of ``rounds`` rounds (its folder must be here). Builds nothing, unless a
        commit rides with it (a node that refuses the config's plug-ins says so on ``train``, where it
        counts)."""
        rounds = int(request.config["rounds"])
        folder = self.folder(request, create=rounds == 0)
        if rounds > 0:
            self._kept(request)  # the checkpoint's round includes a commit still to make
        store = VersionedStore(folder, {}, self.hosted, self.durable)
        store.rollback(rounds)
        store.check()  # every hosted client the journal says has a state must have it
        return Envelope("restore", {})

    def _seed(self, request: Envelope) -> Envelope:
        """A run that moves to these nodes on resume (from another engine, or from nodes that
        hosted other clients) starts its folder here, under its new key, with the states its
        clients ``ids`` have after ``rounds`` rounds (:mod:`fedpd.handover`)."""
        rounds, ids = int(request.config["rounds"]), [int(i) for i in request.config["ids"]]
        foreign = sorted(set(ids) - set(self.hosted))
        if foreign:
            raise ValueError(f"clients {foreign[:5]} are not hosted here")
        store = VersionedStore(self.folder(request), {}, self.hosted, self.durable)
        if ids:
            store.put(rounds, ids, unpack("s", request.arrays))
        return Envelope("seed", {})

    def _states(self, request: Envelope) -> Envelope:
        self._kept(request)
        store = self.store(request)
        ids = store.touched() if store is not None else []
        state = store.get(ids) if ids else {}
        key = request.config["key"]
        return Envelope("states", {"ids": ids}, pack("s", {key: state[key]} if ids else {}))
