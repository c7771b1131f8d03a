"""The run loop: sampling, rounds, evaluation, ``metrics.jsonl``, checkpoints, exact resume.

A run directory holds the resolved ``config.toml`` and ``checkpoint.pt`` (server state, every
client's state, the communication counters and all RNG states), both written atomically, and
``metrics.jsonl`` (one JSON object per evaluation), appended and fsynced line by line and
rewritten atomically on resume to the records up to the checkpoint. Resuming from the
checkpoint replays the same random streams, so a run killed at any point and resumed writes the
same ``metrics.jsonl`` as one that never stopped (``wall_s`` aside). ``run.rounds`` is the only
key a resume may change.
"""

from __future__ import annotations

import inspect
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedpd import registry
from fedpd.algorithms.base import Algorithm, RoundContext
from fedpd.checks import check_against_problem, check_finite  # issue 16
from fedpd.comm import CommCounter
from fedpd.config import Config, load_config
from fedpd.engine import InProcessEngine
from fedpd.errors import ConfigError
from fedpd.evaluation import evaluate, evaluate_personal
from fedpd.io import append_jsonl, atomic_torch_save, atomic_write_text, read_jsonl
from fedpd.problems.base import Problem
from fedpd.progress import Progress
from fedpd.store import ClientStore, State
from fedpd.tensorboard import open_writer  # issue 16
from fedpd.threads import set_threads  # issue 16

CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.jsonl"
CONFIG = "config.toml"
STREAMS = ("sampler", "algorithm", "solver", "attack")  # append only: earlier streams keep their seeds
#: the --set keys a resume may change: the target, and keys that change no result (issue 16)
RESUMABLE = ("run.rounds", "run.threads", "run.allow_nonfinite", "run.tensorboard")


def build_problem(cfg: Config) -> Problem:
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
    return problem.to(dtype)


def build_attack(cfg: Config):
    """The run's fault / attack (``[attack]``, default none), not yet bound to a run."""
    return registry.ATTACKS[cfg.names["attack"]].build(**cfg.options["attack"].model_dump())


def build(cfg: Config, problem: Problem):
    num_clients = problem.num_clients
    if cfg.names["solver"] == "exact" and problem.quadratic is None:
        raise ConfigError(f"solver.name: 'exact' needs a quadratic problem (least_squares); "
                          f"'{cfg.names['problem']}' is not (allowed: gd, sgd)")
    algo_entry = registry.ALGORITHMS[cfg.names["algorithm"]]
    algorithm = algo_entry.build(**cfg.options["algorithm"].model_dump())
    solver = registry.SOLVERS[cfg.names["solver"]].build(**cfg.options["solver"].model_dump())
    algorithm.setup(problem, solver)  # e.g. SAM presets need a gradient solver: fail before anything runs
    sampler_opts = cfg.options["sampler"].model_dump()
    if sampler_opts.get("clients_per_round", 0) > num_clients:
        raise ConfigError(f"sampler.clients_per_round: {sampler_opts['clients_per_round']} exceeds the problem's "
                          f"{num_clients} clients (allowed: 1..{num_clients})")
    if algorithm.participation == "all" and cfg.names["sampler"] != "all":
        raise ConfigError(f"sampler.name: algorithm '{cfg.names['algorithm']}' needs every client every round "
                          f"(allowed: all)")
    sampler = registry.SAMPLERS[cfg.names["sampler"]].build(num_clients, **sampler_opts)
    return algorithm, solver, sampler


def _generators(seed: int) -> dict[str, torch.Generator]:
    seeds = np.random.SeedSequence(seed).generate_state(len(STREAMS), dtype=np.uint64)
    return {name: torch.Generator().manual_seed(int(s) & (2**63 - 1)) for name, s in zip(STREAMS, seeds)}


class Simulation:
    """One run's pieces and state; ``step()`` runs a round, ``metrics()`` evaluates."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.problem = build_problem(cfg)
        self.threads = set_threads(cfg, self.problem)  # run.threads; 0: fedpd.threads' rule (issue 16)
        self.num_clients = self.problem.num_clients
        self.algorithm, self.solver, self.sampler = build(cfg, self.problem)
        check_against_problem(cfg, self.problem)  # e.g. a batch larger than every client (issue 16)
        self.algorithm: Algorithm
        self.gens = _generators(cfg.run.seed)
        self.attack = build_attack(cfg).bind(self.num_clients, self.gens["attack"])
        self.engine = InProcessEngine(cfg.run.client_chunk or None, attack=self.attack if self.attack.active else None)
        x0 = self.problem.x_init
        self.server: State = self.algorithm.init_server(x0)
        self.store = ClientStore(self.algorithm.init_client(x0), self.num_clients)
        self.comm = CommCounter()
        self.round = 0
        self.elapsed = 0.0

    def _ctx(self, ids: Tensor) -> RoundContext:
        return RoundContext(self.problem, self.solver, ids, self.round, self.gens["solver"], self.num_clients)

    def step(self) -> None:
        t0 = time.perf_counter()
        ids = self.algorithm.participants(self.round, self.sampler.sample(self.round, self.gens["sampler"]),
                                          self.num_clients)
        self.server = self.engine.run_round(self.algorithm, self.server, self.store, self.comm, ids, self._ctx,
                                            self.gens["algorithm"])
        self.round += 1
        self.elapsed += time.perf_counter() - t0

    def model(self) -> Tensor:
        return self.algorithm.model(self.server, self.store)

    def metrics(self) -> dict:
        t0 = time.perf_counter()
        record = {"round": self.round, **self.comm.state_dict(), "sample_grads": int(self.problem.sample_grads)}
        record.update(evaluate(self.problem, self.model()))
        record.update(self.algorithm.diagnostics(self.server, self.store))
        if self.cfg.run.personal_eval != "never":
            personal = self.algorithm.personal_models(self.server, self.store, self.problem)
            if personal is None and self.cfg.run.personal_eval == "always":
                personal = self.model()
            if personal is not None:
                record.update(evaluate_personal(self.problem, personal.detach()))
        self.elapsed += time.perf_counter() - t0
        record["wall_s"] = round(self.elapsed, 4)
        return record

    def state_dict(self) -> dict:
        return {"version": 1, "round": self.round, "elapsed": self.elapsed, "server": self.server,
                "store": self.store.state_dict(), "comm": self.comm.state_dict(),
                "sample_grads": int(self.problem.sample_grads), "rng": {k: g.get_state() for k, g in self.gens.items()}}

    def load_state_dict(self, sd: dict) -> None:
        self.round, self.elapsed = sd["round"], sd["elapsed"]
        self.server = sd["server"]
        self.store = ClientStore.from_state_dict(sd["store"])
        self.comm.load_state_dict(sd["comm"])
        self.problem.sample_grads = sd.get("sample_grads", 0)
        for k, g in self.gens.items():
            g.set_state(sd["rng"][k])


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


def _prepare_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r}: exists and is not a directory")
    held = [p for p in (METRICS, CHECKPOINT) if (out / p).exists()]
    if held and not overwrite:
        raise ConfigError(f"run directory {str(out)!r} already holds results ({', '.join(held)}); "
                          f"continue it with --resume {out} (Python: resume={str(out)!r}), or replace it with "
                          f"--overwrite (Python: overwrite=True)")
    out.mkdir(parents=True, exist_ok=True)
    for p in held:
        (out / p).unlink()


def _restore(sim: Simulation, out: Path) -> None:
    """Load the run directory's checkpoint into ``sim`` (none yet: the run starts at round 0)."""
    if not (out / CHECKPOINT).exists():
        return
    try:
        sd = torch.load(out / CHECKPOINT, weights_only=False)
    except Exception as err:  # a checkpoint is written atomically, so this is outside damage
        raise ConfigError(f"--resume {str(out)!r}: checkpoint cannot be read ({type(err).__name__})") from None
    sim.load_state_dict(sd)


def run(config: str | Path | dict | Config | None = None, out: str | Path | None = None, *,
        overrides: list[str] | tuple[str, ...] = (), resume: str | Path | None = None,
        progress: bool = False, overwrite: bool = False, label: str = "") -> RunResult:
    """Run a config (path, dict or :class:`Config`) and return its history and final state.

    ``out``: run directory to write (``None``: nothing is written). ``resume``: continue the
    run in that directory from its last checkpoint (its own ``config.toml`` is used).
    """
    if resume is not None:
        out = Path(resume)
        if not (out / CONFIG).is_file():
            raise ConfigError(f"--resume {str(out)!r}: no {CONFIG} there (not a fedpd run directory)")
        cfg = load_config(out / CONFIG, overrides)
        for item in overrides:  # anything else would continue the checkpoint under another run
            key = item.partition("=")[0].strip()
            if key not in RESUMABLE:
                raise ConfigError(f"--set {key}: run.rounds is the only key that can change on resume, besides "
                                  f"those that change no result ({', '.join(RESUMABLE[1:])})")
    else:
        if config is None:
            raise ConfigError("no config given")
        cfg = load_config(config, overrides)
    sim = Simulation(cfg)  # every check that needs the problem passes before anything is written
    if out is not None and resume is None:
        out = Path(out)
        _prepare_out(out, overwrite)
    history: list[dict] = []
    if out is not None:
        out = Path(out)
        if resume is None:
            atomic_write_text(out / CONFIG, cfg.to_toml())
        else:
            _restore(sim, out)
            if cfg.run.rounds < sim.round:
                raise ConfigError(f"run.rounds: {cfg.run.rounds} is below the checkpoint's round {sim.round} "
                                  f"(allowed: {sim.round} or more)")
            if overrides:  # a new target: config.toml keeps saying what the run is
                atomic_write_text(out / CONFIG, cfg.to_toml())
        # what an uninterrupted run of cfg.run.rounds writes up to the checkpoint (a changed target
        # drops the old target's final record)
        history = [r for r in read_jsonl(out / METRICS) if r.get("round", 0) <= sim.round
                   and (r.get("round", 0) % cfg.run.eval_every == 0 or r.get("round") == cfg.run.rounds)]
        if resume is not None:
            atomic_write_text(out / METRICS, "".join(json.dumps(r) + "\n" for r in history))
    return _loop(sim, cfg, out, history, progress, label)


def _loop(sim: Simulation, cfg: Config, out: Path | None, history: list[dict], progress: bool, label: str) -> RunResult:
    rounds, every = cfg.run.rounds, cfg.run.eval_every
    ckpt_every = cfg.run.checkpoint_every or every
    bar = Progress(rounds, sim.round, label=label, enabled=progress)
    tb = open_writer(cfg, out, sim.round)  # run.tensorboard: the metrics as TensorBoard scalars too (issue 16)

    def record():
        m = sim.metrics()
        history.append(m)
        if out is not None:
            append_jsonl(out / METRICS, m)
        if tb is not None:
            tb.add(m)
        bar.update(sim.round, m)
        check_finite(cfg, m, history, out)  # NaN / Inf: the run stops unless run.allow_nonfinite (issue 16)

    def checkpoint():
        if out is not None:
            atomic_torch_save(sim.state_dict(), out / CHECKPOINT)

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
