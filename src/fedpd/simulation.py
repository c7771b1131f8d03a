"""One run's objects and state: :class:`Simulation` builds them from a config (:mod:`fedpd.build`),
takes the engine :mod:`fedpd.engines` chooses, runs a round (``step``), evaluates (``metrics``)
and gives its whole state for a checkpoint (``state_dict``, every tensor on the CPU).

It is the run's composition root: the one place that reads the config whole and hands each layer
below the values it uses; it never rewrites the config (``run.store = "auto"`` resolves to
:attr:`Simulation.store_kind`, which :meth:`Simulation.recorded` records).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import tomli_w
import torch
from torch import Tensor

from fedpd import handover
from fedpd.algorithms.base import Algorithm
from fedpd.algorithms.robust import defence_of
from fedpd.build import (build, build_attack, build_privacy, build_problem, build_store, exact_float32, local_work,
                         resolve_device)
from fedpd.checks import check_against_problem
from fedpd.config import Config
from fedpd.disk_store import DiskStore, default_store_dir
from fedpd.engine import Engine
from fedpd.engines import in_process, make_engine
from fedpd.evaluation import evaluate, evaluate_personal
from fedpd.hooks import call, check_init_server, check_model, check_tensors
from fedpd.sampling import UniformK
from fedpd.store import State
from fedpd.streams import server_generator
from fedpd.system import build_fleet, draw, seconds
from fedpd.asynchronous import build_asynchronous
from fedpd.threads import sequential_blas, set_threads

CHECKPOINT_FORMAT, CHECKPOINT_VERSION = "fedpd-checkpoint", 2


def _to(obj, device):
    """``obj`` (nested dicts / lists of tensors and plain values) with every tensor on ``device``."""
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device) for v in obj)
    return obj


class Simulation:
    """One run's pieces and state; ``step()`` runs a round, ``metrics()`` evaluates.

    ``workdir``: where a remote engine's loopback nodes keep their clients' states (the run
    directory; default a temporary one). ``transport``: the nodes of a remote engine (Flower's)."""

    def __init__(self, cfg: Config, workdir: Path | None = None, transport=None):
        self.cfg, self.workdir = cfg, workdir
        self.device = resolve_device(cfg.run.device)
        exact_float32(self.device)  # a GPU's record verifies against a CPU re-run
        sequential_blas()  # the data are built at any thread count with the same sums
        self.problem = build_problem(cfg, self.device)
        self.num_clients = self.problem.num_clients
        self.algorithm, self.solver, self.sampler = build(cfg, self.problem)
        self.work = local_work(cfg, self.problem, self.sampler)  # what the thread and worker rules weigh
        self.threads = set_threads(cfg.run.threads, self.work)  # run.threads; 0: fedpd.threads' rule
        # [privacy]: the mechanism the round takes its server step through (None: the algorithm's own step)
        self.privacy = build_privacy(cfg, self.algorithm, self.solver, self.sampler, self.problem)
        check_against_problem(cfg, self.problem, self.algorithm,  # e.g. a batch larger than every client
                              participants=self.work.participants)
        self.algorithm: Algorithm
        x0 = self.problem.x_init
        self.server: State = call(self.aggregation, "init_server", x0)
        check_init_server(self.algorithm, self.server, x0.shape)
        init = call(self.algorithm, "init_client", x0)
        check_tensors(self.algorithm, "init_client", init, "client state")
        self.in_process = in_process(cfg.run, transport)
        store = None  # remote engines keep client states on their nodes
        self.store_kind: str | None = None  # run.store resolved (auto: by size); None on nodes
        if self.in_process:
            store, self.store_kind, self.store_need = build_store(cfg, self.algorithm, self.sampler, init,
                                                                  self.num_clients)
        # the optimal attacks simulate the defence the algorithm was built with: the same object
        attack = build_attack(cfg).bind(self.num_clients).against(defence_of(cfg.options["algorithm"]))
        self.engine: Engine = make_engine(cfg, self.algorithm, self.problem, self.solver, attack, work=self.work,
                                          workdir=workdir, transport=transport, store=store)
        self.fleet = build_fleet(cfg, self.problem, self.sampler, self.algorithm, transport)
        self.engine.fleet = self.fleet
        self.engine.aggregation = self.privacy
        self.asynchronous = build_asynchronous(cfg, self.problem, self.algorithm, self.solver, self.fleet)
        self.round = 0
        self.elapsed = 0.0
        self._left_behind: list[Path] = []

    def recorded(self) -> dict:
        """The run's resolved config as its directory records it (``config.toml``, the checkpoint):
        ``run.store`` names the store its clients live in (``auto`` resolved), on nodes as given."""
        return self._with_store(self.cfg.resolved())

    def fingerprint(self) -> dict:
        """What a checkpoint of this run holds of its config (:meth:`fedpd.config.Config.fingerprint`,
        ``run.store`` as :meth:`recorded` says it)."""
        return self._with_store(self.cfg.fingerprint())

    def config_toml(self) -> str:
        """:meth:`recorded` as TOML: the run directory's ``config.toml``."""
        return tomli_w.dumps(self.recorded())

    def _with_store(self, resolved: dict) -> dict:
        if self.store_kind is not None:
            resolved["run"]["store"] = self.store_kind
        return resolved

    @property
    def aggregation(self):
        """What takes the server step (its state, diagnostics): [privacy]'s mechanism around the
        algorithm's step, or the algorithm."""
        return self.algorithm if self.privacy is None else self.privacy

    def close(self) -> None:
        """Release what the engine holds besides memory (``run.workers``' processes); a later
        ``step`` starts them again."""
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()

    def attach_store(self, out: Path, resume: bool) -> None:
        """Give a disk store its directory (``<out>/store`` or ``run.store_dir``), checked before
        anything is written: writable, free space, not another run's."""
        if isinstance(self.store, DiskStore):
            self.store.attach(default_store_dir(out, self.cfg.run.store_dir), run_dir=out, resume=resume,
                              need_bytes=self.store_need)

    @property
    def store(self):
        return self.engine.store

    @property
    def comm(self):
        return self.engine.comm

    def participants(self, round: int) -> Tensor:
        """Who takes part in ``round``: the sampler's draw from the server's stream of that round
        (with ``[system]``: of the clients available now, over-selected: :func:`fedpd.system.draw`)."""
        generator = server_generator(self.cfg.run.seed, "sampler", round)
        drawn = (self.sampler.sample(round, generator) if self.fleet is None
                 else draw(self.fleet, self.sampler, round, generator))
        return self.algorithm.participants(round, drawn, self.num_clients)

    def step(self) -> None:
        t0 = time.perf_counter()
        if self.asynchronous is not None:  # one server update of the asynchronous server
            self.server = self.asynchronous.step(self.server, self.engine, self.round)
        else:
            self.server = self.engine.run_round(self.server, self.participants(self.round), self.round)
        self.round += 1
        self.elapsed += time.perf_counter() - t0

    def eval_sample(self) -> Tensor | None:
        """The clients the metrics are taken over (``run.eval_clients``) of them, drawn
        once from the server's stream ("eval_clients", 0) and kept for the whole run (so the
        curve follows one fixed f_S); None for every client (0, or at least N)."""
        k = self.cfg.run.eval_clients
        if not k or k >= self.num_clients:
            return None
        if getattr(self, "_eval_ids", None) is None:
            drawn = UniformK(self.num_clients, k).sample(0, server_generator(self.cfg.run.seed, "eval_clients", 0))
            self._eval_ids = drawn.to(self.problem.train.offsets.device)
        return self._eval_ids

    def eval_train_sample(self, clients: Tensor | None) -> Tensor | None:
        """The training samples ``run.eval_train_samples`` takes the training metrics on: m of the
        P samples of ``clients`` (or of every client), drawn uniformly without replacement once
        from the server's stream ("eval_train_samples", 0) and kept for the whole run, as positions
        of the training split in ascending order; None for every sample (unset, or m >= P)."""
        m = self.cfg.run.eval_train_samples
        if m is None:
            return None
        if getattr(self, "_eval_samples", None) is None:
            split = self.problem.train
            if clients is None:
                pool = torch.arange(split.y.shape[0], device=split.offsets.device)
            else:
                sizes = split.sizes[clients]
                start = torch.repeat_interleave(split.offsets[clients] - (torch.cumsum(sizes, 0) - sizes), sizes)
                pool = start + torch.arange(int(sizes.sum()), device=split.offsets.device)
            if m >= pool.numel():
                self._eval_samples = pool[:0]  # empty: every sample
            else:
                g = server_generator(self.cfg.run.seed, "eval_train_samples", 0)
                self._eval_samples = pool[torch.randperm(pool.numel(), generator=g)[:m].to(pool.device)].sort().values
        return self._eval_samples if self._eval_samples.numel() else None

    def model(self) -> Tensor:
        """The model the metrics are taken at (the evaluation path)."""
        model = self.algorithm.evaluation_model(self.server, self.store)
        check_model(self.algorithm, "evaluation_model", model, self.problem.dim)
        return model

    def metrics(self) -> dict:
        t0 = time.perf_counter()
        record = {"round": self.round, **self.comm.state_dict(), "sample_grads": self.engine.sample_grads}
        if self.fleet is not None:
            record["sim_time_s"] = seconds(self.fleet.now)  # when this server model exists (fedpd.system)
        if self.asynchronous is not None:
            record.update(self.asynchronous.metrics())
        clients = self.eval_sample()  # None: every client
        if clients is not None:
            record["eval_clients"] = int(clients.numel())
        batch = self.cfg.run.eval_batch_size
        samples = self.eval_train_sample(clients)
        if samples is not None:
            record["eval_train_samples"] = int(samples.numel())
        record.update(evaluate(self.problem, self.model(), clients, batch, self.cfg.run.eval_metrics, samples))
        record.update(self.aggregation.diagnostics(self.server))
        if self.cfg.run.personal_eval != "never":
            personal = self.algorithm.personal_models(self.server, self.store, self.problem)
            if personal is not None:
                check_model(self.algorithm, "personal_models", personal, self.problem.dim, self.num_clients)
            if personal is None and self.cfg.run.personal_eval == "always":
                personal = self.model()
            if personal is not None:
                record.update(evaluate_personal(self.problem, personal.detach(), clients=clients, batch=batch))
        self.elapsed += time.perf_counter() - t0
        record["wall_s"] = round(self.elapsed, 4)
        return record

    def state_dict(self) -> dict:
        """All run state, every tensor on the CPU (a checkpoint reads back on any device)."""
        return _to({"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "config": self.fingerprint(),
                    "round": self.round, "elapsed": self.elapsed, "server": self.server,
                    "engine": self.engine.state_dict(), **self._timing_state()}, "cpu")

    def _timing_state(self) -> dict:
        """The clock's and the asynchronous server's state (none without ``[system]``: checkpoints as before)."""
        out = {} if self.fleet is None else {"system": self.fleet.state_dict()}
        if self.asynchronous is not None:
            out["asynchronous"] = self.asynchronous.state_dict()
        return out

    def load_state_dict(self, sd: dict) -> None:
        sd = _to(sd, self.device)
        self.round, self.elapsed = sd["round"], sd["elapsed"]
        self.server = sd["server"]
        if self.fleet is not None:
            self.fleet.load_state_dict(sd["system"])
        if self.asynchronous is not None:
            self.asynchronous.load_state_dict(sd["asynchronous"])
        entry = sd["engine"]
        if handover.moves(entry, self.engine):  # another engine's, or other nodes': the states move here
            init = self.algorithm.init_client(self.problem.x_init)
            self.engine.take_over(entry, handover.states(entry, init=init, num_clients=self.num_clients,
                                                         rounds=self.round, run_dir=self.workdir,
                                                         store_dir=self.cfg.run.store_dir, device=self.device),
                                  self.round)
            self._left_behind = handover.left_behind(entry, self.workdir)
        else:
            self.engine.load_state_dict(entry)

    def finish(self) -> None:
        """The run reached its target: an engine that holds work back sends it now (a deployment's
        remote engine: the last round's commits)."""
        finish = getattr(self.engine, "finish", None)
        if finish is not None:
            finish()

    def checkpointed(self) -> None:
        """The checkpoint of this round is on disk: the engine may drop older versions, and the
        node folders a moved run left behind (:mod:`fedpd.handover`) go."""
        self.engine.checkpointed(self.round)
        for folder in self._left_behind:
            shutil.rmtree(folder, ignore_errors=True)
        self._left_behind = []

