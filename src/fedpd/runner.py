"""The run loop: sampling, rounds, evaluation, ``metrics.jsonl``, checkpoints, exact resume.

A run directory holds the resolved ``config.toml`` and ``checkpoint.pt`` (the server state, every
client's state, the communication and computation counters, and the config it belongs to), both
written atomically, and ``metrics.jsonl`` (one JSON object per evaluation), appended and fsynced
line by line and rewritten atomically on resume to the records up to the checkpoint. Every random
stream is a function of (seed, purpose, round, client) (:mod:`fedpd.streams`), so a checkpoint
holds no generator state and a run killed at any point and resumed writes the same
``metrics.jsonl`` as one that never stopped (``wall_s`` aside).

A checkpoint is read without executing code (``torch.load(weights_only=True)``), every tensor in
it lives on the CPU (a run started on a GPU resumes on a CPU and the other way round), and one
that is foreign, damaged, of another format or of another config is refused with one line; so is
a ``metrics.jsonl`` that is missing, not UTF-8 or shorter than the checkpoint. A resume may change
``run.rounds`` (the target) and how the run is executed (``run.device``, ``run.threads``,
``run.client_chunk``), nothing else.
"""

from __future__ import annotations

import inspect
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from fedpd import registry
from fedpd.algorithms.base import Algorithm
from fedpd.attacks import Attack
from fedpd.checks import check_against_problem, check_finite
from fedpd.config import RESUMABLE, Config, first_difference, load_config
from fedpd.context import FederationInfo
from fedpd.disk_store import DiskStore, choose_store, default_store_dir, log, state_bytes, store_budget
from fedpd.engine import Engine, InProcessEngine
from fedpd.errors import ConfigError
from fedpd.evaluation import evaluate, evaluate_personal
from fedpd.io import append_jsonl, atomic_torch_save, atomic_write_text, read_jsonl, remove_leftover_temps
from fedpd.problems.base import Problem
from fedpd.progress import Progress
from fedpd.sampling import UniformK
from fedpd.solvers import GradientSolver
from fedpd.store import MemoryStore, State
from fedpd.streams import server_generator
from fedpd.tensorboard import open_writer
from fedpd.threads import set_threads

CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.jsonl"
CONFIG = "config.toml"
CHECKPOINT_FORMAT, CHECKPOINT_VERSION = "fedpd-checkpoint", 2


def resolve_device(name: str) -> torch.device:
    """``run.device`` as a torch device; a device this machine does not have is a ConfigError."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        return torch.device("mps" if mps is not None and mps.is_available() else "cpu")
    if name.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(name.partition(":")[2] or 0)
        if index >= count:
            have = f"{count} CUDA device(s)" if count else "no CUDA device"
            raise ConfigError(f"run.device: {name!r} is not present (torch sees {have}; allowed: cpu, auto"
                              f"{', cuda:0..cuda:' + str(count - 1) if count else ''})")
    if name == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ConfigError("run.device: 'mps' is not present on this machine (allowed: cpu, auto)")
    return torch.device(name)


#: ``run.execution = "auto"``: models with more parameters than this train one client at a time
#: through the module (per client), smaller ones vectorised over the clients of a chunk. Measured
#: with benchmarks/side_by_side.py (docs/performance.md): logistic regression (7 850 parameters)
#: is 1.3x faster vectorised, the MLP 784-200-200-10 (199 210) and the CNNs faster per client.
PER_CLIENT_ABOVE = 50_000


def build_problem(cfg: Config, device: torch.device | str = "cpu") -> Problem:
    entry = registry.PROBLEMS[cfg.names["problem"]]
    takes_model = "model" in inspect.signature(entry.build).parameters  # e.g. the dataset problem
    if not takes_model:
        for key, value in cfg.model.items():
            if (key, value) != ("name", "auto"):
                raise ConfigError(f"model.{key}: problem '{cfg.names['problem']}' has a fixed model "
                                  f"(allowed: no [model] section, or name = \"auto\")")
    extra = {"model": dict(cfg.model)} if takes_model else {}
    problem = entry.build(**cfg.options["problem"].model_dump(), **extra)
    problem = build_attack(cfg).apply_data(problem)  # outliers by data (a no-op for other attacks)
    # auto: float64 for the built-in problems, the problem's own choice (float32 for datasets)
    auto = problem.info.get("dtype", torch.float64)
    dtype = {"auto": auto, "float64": torch.float64, "float32": torch.float32}[cfg.run.dtype]
    problem = problem.to(dtype, device)
    execution = cfg.run.execution
    problem.per_client = execution == "per_client" or (execution == "auto" and problem.dim > PER_CLIENT_ABOVE)
    return problem


def build_attack(cfg: Config) -> Attack:
    """The run's fault / attack (``[attack]``, default none), not yet bound to a run."""
    return registry.ATTACKS[cfg.names["attack"]].build(**cfg.options["attack"].model_dump())


def check_solver(cfg: Config, algorithm: Algorithm, solver, problem: Problem) -> None:
    """The one place that checks the solver against the algorithm and the problem."""
    name, solver_name = cfg.names["algorithm"], cfg.names["solver"]
    options = cfg.options["solver"]
    if not algorithm.uses_solver:
        changed = [k for k, f in type(options).model_fields.items() if getattr(options, k) != f.default]
        if solver_name != registry.DEFAULT_NAMES["solver"] or changed:
            key = changed[0] if changed else "name"
            raise ConfigError(f"solver.{key}: algorithm '{name}' runs no local solver (its step size is "
                              f"algorithm.eta; allowed: no [solver] section)")
        return
    if solver_name == "exact" and problem.quadratic is None:
        raise ConfigError(f"solver.name: 'exact' needs a quadratic problem (least_squares, fedplus_regression); "
                          f"'{cfg.names['problem']}' is not (allowed: gd, sgd)")
    if algorithm.needs_gradient_solver and not isinstance(solver, GradientSolver):
        raise ConfigError(f"solver.name: algorithm '{name}' takes local gradient steps (allowed: gd, sgd)")
    fields = type(options).model_fields
    for key in algorithm.unused_solver_options:
        if key in fields and getattr(options, key) != fields[key].default:
            raise ConfigError(f"solver.{key}: algorithm '{name}' has no use for it in its local steps "
                              f"(allowed: {fields[key].default})")


def federation_info(problem: Problem) -> FederationInfo:
    return FederationInfo(problem.num_clients, problem.dim, problem.model, problem.x_init.dtype, problem.device,
                          int(problem.train.sizes.max()) if problem.num_clients else 0)


def build(cfg: Config, problem: Problem):
    """(algorithm, solver, sampler) of a config, every cross-check done before anything runs."""
    num_clients = problem.num_clients
    algorithm = registry.ALGORITHMS[cfg.names["algorithm"]].build(**cfg.options["algorithm"].model_dump())
    solver = registry.SOLVERS[cfg.names["solver"]].build(**cfg.options["solver"].model_dump())
    check_solver(cfg, algorithm, solver, problem)
    sampler_opts = cfg.options["sampler"].model_dump()
    if sampler_opts.get("clients_per_round", 0) > num_clients:
        raise ConfigError(f"sampler.clients_per_round: {sampler_opts['clients_per_round']} exceeds the problem's "
                          f"{num_clients} clients (allowed: 1..{num_clients})")
    if algorithm.participation == "all" and cfg.names["sampler"] != "all":
        raise ConfigError(f"sampler.name: algorithm '{cfg.names['algorithm']}' needs every client every round "
                          f"(allowed: all)")
    sampler = registry.SAMPLERS[cfg.names["sampler"]].build(num_clients, **sampler_opts)
    need = algorithm.min_uploads()
    if need > 1:
        aggregator = getattr(cfg.options["algorithm"], "aggregator", "the aggregator")
        if sampler.per_round is None:
            raise ConfigError(f"sampler.name: aggregator '{aggregator}' needs {need} uploads every round and "
                              f"'{cfg.names['sampler']}' gives a varying number (allowed: uniform, all)")
        if sampler.per_round < need:
            raise ConfigError(f"algorithm.aggregator_options: aggregator '{aggregator}' with these options needs at "
                              f"least {need} uploads per round; the sampler gives {sampler.per_round} (allowed: "
                              f"fewer Byzantine clients or more participants)")
    algorithm.setup(federation_info(problem), solver)  # e.g. Fed+'s layer groups: fail before anything runs
    return algorithm, solver, sampler


def _to(obj, device):
    """``obj`` (nested dicts / lists of tensors and plain values) with every tensor on ``device``."""
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device) for v in obj)
    return obj


def hosted_clients(num_clients: int, nodes: int, k: int) -> list[int]:
    """The clients node k of ``nodes`` hosts: the k-th contiguous block of the ids."""
    return list(range(k * num_clients // nodes, (k + 1) * num_clients // nodes))


def make_engine(cfg: Config, algorithm: Algorithm, problem: Problem, solver, attack: Attack, *,
                workdir: Path | None = None, transport=None, store=None) -> Engine:
    """The engine ``run.engine`` names; the in-process one keeps its clients in ``store`` (default
    a fresh memory store), a remote one on its nodes."""
    init = algorithm.init_client(problem.x_init)
    if transport is None and cfg.run.engine == "inprocess":
        chunk = 1 if problem.per_client else cfg.run.client_chunk or None  # per client: one at a time anyway
        store = store if store is not None else MemoryStore(init, problem.num_clients)
        return InProcessEngine(algorithm, problem, solver, store, seed=cfg.run.seed, chunk=chunk, attack=attack)
    from fedpd.remote.engine import LoopbackTransport, RemoteEngine
    from fedpd.remote.node import NodeRuntime

    if workdir is None:  # remote nodes keep their clients' states in files: somewhere to put them
        import tempfile

        workdir = Path(tempfile.mkdtemp(prefix="fedpd-nodes-"))
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
    return RemoteEngine(algorithm, cfg.to_toml(), transport, num_clients=problem.num_clients, seed=cfg.run.seed,
                        init_client=init, attack=attack, timeout=cfg.run.node_timeout,
                        context={"store-root": str(Path(workdir) / NODES)})


class Simulation:
    """One run's pieces and state; ``step()`` runs a round, ``metrics()`` evaluates.

    ``workdir``: where a remote engine's loopback nodes keep their clients' states (the run
    directory; default a temporary one). ``transport``: the nodes of a remote engine (Flower's)."""

    def __init__(self, cfg: Config, workdir: Path | None = None, transport=None):
        self.cfg = cfg
        self.device = resolve_device(cfg.run.device)
        self.problem = build_problem(cfg, self.device)
        self.threads = set_threads(cfg, self.problem)  # run.threads; 0: fedpd.threads' rule
        self.num_clients = self.problem.num_clients
        self.algorithm, self.solver, self.sampler = build(cfg, self.problem)
        check_against_problem(cfg, self.problem)  # e.g. a batch larger than every client
        self.algorithm: Algorithm
        x0 = self.problem.x_init
        self.server: State = self.algorithm.init_server(x0)
        store = self._make_store(self.algorithm.init_client(x0)) if cfg.run.engine == "inprocess" and transport is None \
            else None  # remote engines keep client states on their nodes
        attack = build_attack(cfg).bind(self.num_clients)
        self.engine: Engine = make_engine(self.cfg, self.algorithm, self.problem, self.solver, attack, workdir=workdir,
                                          transport=transport, store=store)
        self.round = 0
        self.elapsed = 0.0

    # --- the client store (memory or disk) -------------------------------------------------
    def _make_store(self, init: State):
        """The store ``run.store`` asks for; ``auto`` is resolved by size into ``self.cfg`` (so
        the run's config.toml says which), with one line on stderr when it picks the disk."""
        cfg, n, row = self.cfg, self.num_clients, state_bytes(init)
        everyone = type(self.algorithm).participants is not Algorithm.participants  # e.g. SAGA's first pass
        rows, need, undo = store_budget(n, row, self.sampler.per_round, cfg.run.rounds,
                                        cfg.run.checkpoint_every or cfg.run.eval_every, everyone)
        kind, note = choose_store(cfg.run.store, n, row, rows, self.sampler.per_round)
        if kind != cfg.run.store:
            self.cfg = load_config(cfg, [f"run.store={kind}"])
        log(note)
        self.store_need = need + undo + 8 * rows
        return MemoryStore(init, n) if kind == "memory" else DiskStore(init, n)

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
        """Who takes part in ``round``: the sampler's draw from the server's stream of that round."""
        drawn = self.sampler.sample(round, server_generator(self.cfg.run.seed, "sampler", round))
        return self.algorithm.participants(round, drawn, self.num_clients)

    def step(self) -> None:
        t0 = time.perf_counter()
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

    def model(self) -> Tensor:
        """The model the metrics are taken at (the evaluation path)."""
        return self.algorithm.evaluation_model(self.server, self.store)

    def metrics(self) -> dict:
        t0 = time.perf_counter()
        record = {"round": self.round, **self.comm.state_dict(), "sample_grads": self.engine.sample_grads}
        clients = self.eval_sample()  # None: every client
        if clients is not None:
            record["eval_clients"] = int(clients.numel())
        record.update(evaluate(self.problem, self.model(), clients))
        record.update(self.algorithm.diagnostics(self.server))
        if self.cfg.run.personal_eval != "never":
            personal = self.algorithm.personal_models(self.server, self.store, self.problem)
            if personal is None and self.cfg.run.personal_eval == "always":
                personal = self.model()
            if personal is not None:
                record.update(evaluate_personal(self.problem, personal.detach(), clients=clients))
        self.elapsed += time.perf_counter() - t0
        record["wall_s"] = round(self.elapsed, 4)
        return record

    def state_dict(self) -> dict:
        """All run state, every tensor on the CPU (a checkpoint reads back on any device)."""
        return _to({"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "config": self.cfg.fingerprint(),
                    "round": self.round, "elapsed": self.elapsed, "server": self.server,
                    "engine": self.engine.state_dict()}, "cpu")

    def load_state_dict(self, sd: dict) -> None:
        sd = _to(sd, self.device)
        self.round, self.elapsed = sd["round"], sd["elapsed"]
        self.server = sd["server"]
        self.engine.load_state_dict(sd["engine"])


def read_checkpoint(path: Path, cfg: Config) -> dict:
    """The checkpoint at ``path``, loaded without executing code (``weights_only``) and checked to
    belong to ``cfg``; otherwise one line naming the file and the reason (nothing is changed)."""
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        if type(err).__name__ == "UnpicklingError":
            raise ConfigError(f"{path}: not a fedpd checkpoint (it holds objects a checkpoint never contains; "
                              f"refused without loading them)") from None
        raise ConfigError(f"{path}: damaged, cannot be read ({type(err).__name__}: {str(err).splitlines()[0][:120]})") from None
    if not isinstance(sd, dict) or sd.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{path}: not a fedpd checkpoint")
    if sd.get("version") != CHECKPOINT_VERSION:
        raise ConfigError(f"{path}: checkpoint format version {sd.get('version')!r}; this fedpd reads version "
                          f"{CHECKPOINT_VERSION} (start the run again with --overwrite)")
    differs = first_difference(sd.get("config"), cfg.fingerprint())
    if differs:
        raise ConfigError(f"{path}: belongs to a run with another config ({differs} differs from "
                          f"{CONFIG}); refusing to continue it")
    return sd


def _restore(sim: Simulation, out: Path) -> None:
    """Load the run directory's checkpoint into ``sim`` (none yet: the run starts at round 0)."""
    if (out / CHECKPOINT).exists():
        sim.load_state_dict(read_checkpoint(out / CHECKPOINT, sim.cfg))


def _kept_history(out: Path, cfg: Config, round: int) -> list[dict]:
    """The records of metrics.jsonl an uninterrupted run of ``cfg`` has written by ``round`` (a
    changed target drops the old target's final record); a file that cannot give them is refused."""
    path = out / METRICS
    if not path.exists():
        if round > 0:
            raise ConfigError(f"{path}: missing, but the checkpoint is at round {round} (restore the file, or start "
                              f"again with --overwrite)")
        return []
    every = cfg.run.eval_every
    history = [r for r in read_jsonl(path) if r.get("round", 0) <= round
               and (r.get("round", 0) % every == 0 or r.get("round") == cfg.run.rounds)]
    have = {r.get("round") for r in history}
    lost = [t for t in range(0, round + 1, every) if t not in have] if round > 0 else []
    if lost:
        raise ConfigError(f"{path}: has no record of round {lost[0]}, but the checkpoint is at round {round} "
                          f"(the file was cut short or edited; start again with --overwrite)")
    return history


@dataclass
class RunResult:
    """What :func:`run` returns: the metric history, the final model and all final state."""

    history: list[dict]
    model: Tensor
    simulation: Simulation
    out_dir: Path | None = None
    config: Config = field(default=None)  # type: ignore[assignment]

    def final(self, key: str):
        return self.history[-1].get(key) if self.history else None


NODES = "nodes"  # the loopback engine's node stores, inside the run directory


def _check_out(out: Path, overwrite: bool) -> list[str]:
    """The results ``out`` already holds (refused unless ``overwrite``)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r}: exists and is not a directory")
    held = [p for p in (METRICS, CHECKPOINT, NODES) if (out / p).exists()]
    if held and not overwrite:
        raise ConfigError(f"run directory {str(out)!r} already holds results ({', '.join(held)}); "
                          f"continue it with --resume {out} (Python: resume={str(out)!r}), or replace it with "
                          f"--overwrite (Python: overwrite=True)")
    return held


def _prepare_out(out: Path, overwrite: bool) -> None:
    held = _check_out(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    for p in held:
        if (out / p).is_dir():
            shutil.rmtree(out / p)
        else:
            (out / p).unlink()


def run(config: str | Path | dict | Config | None = None, out: str | Path | None = None, *,
        overrides: list[str] | tuple[str, ...] = (), resume: str | Path | None = None,
        progress: bool = False, overwrite: bool = False, label: str = "", transport=None) -> RunResult:
    """Run a config (path, dict or :class:`Config`) and return its history and final state.

    ``out``: run directory to write (``None``: nothing is written). ``resume``: continue the
    run in that directory from its last checkpoint (its own ``config.toml`` is used).
    ``run.engine = "flower"`` runs the clients on Flower's simulation runtime (``fedpd.flower``);
    ``transport``: the nodes of a remote engine that is already connected (a Flower ServerApp
    passes its Grid's).
    """
    if resume is not None:
        out = Path(resume)
        if not (out / CONFIG).is_file():
            raise ConfigError(f"--resume {str(out)!r}: no {CONFIG} there (not a fedpd run directory)")
        cfg = load_config(out / CONFIG, overrides)
        kept = load_config(out / CONFIG).resolved()
        for item in overrides:  # anything else would continue the checkpoint under another run
            key = item.partition("=")[0].strip()
            section, _, name = key.partition(".")
            same = name in kept.get(section, {}) and cfg.resolved()[section].get(name) == kept[section][name]
            if key not in {f"run.{k}" for k in RESUMABLE} and not same:  # restating a value is no change
                raise ConfigError(f"--set {key}: a resume may change only {', '.join('run.' + k for k in RESUMABLE)} "
                                  f"(the target, and how the run is executed)")
    else:
        if config is None:
            raise ConfigError("no config given")
        cfg = load_config(config, overrides)
    out = Path(out) if out is not None else None
    if out is not None and resume is None:
        _check_out(out, overwrite)
    if cfg.run.engine == "flower" and transport is None:
        from fedpd.flower.simulation import run_on_flower

        return run_on_flower(cfg, out, resume=resume is not None, rewrite_config=bool(overrides), progress=progress,
                             overwrite=overwrite, label=label)
    return execute(cfg, out, resume=resume is not None, rewrite_config=bool(overrides), progress=progress,
                   overwrite=overwrite, label=label, transport=transport)


def execute(cfg: Config, out: Path | None, *, resume: bool = False, rewrite_config: bool = False,
            progress: bool = False, overwrite: bool = False, label: str = "", transport=None,
            workdir: Path | None = None) -> RunResult:
    """Run a validated config in ``out`` (start it, or continue it from its checkpoint);
    ``workdir``: where remote nodes keep client states when there is no ``out``."""
    sim = Simulation(cfg, workdir=out if out is not None else workdir, transport=transport)  # every check first
    cfg = sim.cfg  # run.store = "auto" resolved
    if out is not None:
        sim.attach_store(out, resume=resume)  # the disk store's checks, before anything is written
    if out is not None and not resume:
        _prepare_out(out, overwrite)
    history: list[dict] = []
    if out is not None:
        if not resume:
            atomic_write_text(out / CONFIG, cfg.to_toml())
        else:
            _restore(sim, out)  # every check first: a refused resume changes nothing
            if cfg.run.rounds < sim.round:
                raise ConfigError(f"run.rounds: {cfg.run.rounds} is below the checkpoint's round {sim.round} "
                                  f"(allowed: {sim.round} or more)")
            history = _kept_history(out, cfg, sim.round)
            remove_leftover_temps(out, (CHECKPOINT, METRICS, CONFIG))  # from a kill during a write
            if rewrite_config:  # a new target: config.toml keeps saying what the run is
                atomic_write_text(out / CONFIG, cfg.to_toml())
            atomic_write_text(out / METRICS, "".join(json.dumps(r) + "\n" for r in history))
    return _loop(sim, cfg, out, history, progress, label)


def _loop(sim: Simulation, cfg: Config, out: Path | None, history: list[dict], progress: bool, label: str) -> RunResult:
    rounds, every = cfg.run.rounds, cfg.run.eval_every
    ckpt_every = cfg.run.checkpoint_every or every
    bar = Progress(rounds, sim.round, label=label, enabled=progress)
    tb = open_writer(cfg, out, sim.round)  # run.tensorboard: the metrics as TensorBoard scalars too

    def record():
        m = sim.metrics()
        history.append(m)
        if out is not None:
            append_jsonl(out / METRICS, m)
        if tb is not None:
            tb.add(m)
        bar.update(sim.round, m)
        check_finite(cfg, m, history, out)  # NaN / Inf: the run stops unless run.allow_nonfinite

    def checkpoint():
        if out is not None:
            atomic_torch_save(sim.state_dict(), out / CHECKPOINT)
            sim.engine.checkpointed(sim.round)  # a versioned store may now drop what this checkpoint replaces

    try:
        due = sim.round % every == 0 or sim.round == rounds
        if due and not (history and history[-1]["round"] == sim.round):  # round 0, or a target cut to here
            record()
        while sim.round < rounds:
            sim.step()
            evaluated = sim.round % every == 0 or sim.round == rounds
            if evaluated:
                record()
            else:
                bar.update(sim.round)
            if sim.round % ckpt_every == 0 or sim.round == rounds:
                checkpoint()
    finally:
        bar.close()
        if tb is not None:
            tb.close()
    return RunResult(history, sim.model().detach(), sim, out, cfg)
