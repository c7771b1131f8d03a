"""A run's objects from its config, below every engine: the device, the problem (with a data
attack applied), the algorithm, the local solver and the sampler, every cross-check done before
anything runs, and the client store ``run.store`` asks for.

The in-process simulation (:mod:`fedpd.simulation`) and a remote node (:mod:`fedpd.remote.node`)
build their pieces here, so a client's ``local`` is the same computation wherever it runs. This
module imports no engine, runtime or run loop.
"""

from __future__ import annotations

import inspect

import torch

from fedpd import registry
from fedpd.algorithms.base import Algorithm, unused_server_step
from fedpd.algorithms.robust import algorithm_keywords
from fedpd.attacks import Attack
from fedpd.config import Config, load_config, tomllib  # tomllib: tomli before Python 3.11
from fedpd.context import FederationInfo
from fedpd.disk_store import DiskStore, choose_store, log, state_bytes, store_budget
from fedpd.errors import ConfigError
from fedpd.hooks import call
from fedpd.names import what
from fedpd.privacy import PrivateAggregation, private_aggregation
from fedpd.problems.base import Problem
from fedpd.solvers import GradientSolver
from fedpd.store import ClientStore, MemoryStore, State
from fedpd.threads import LocalWork, forward_flops


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


def exact_float32(device: torch.device) -> None:
    """On a CUDA device, float32 computed in float32: no TF32 in convolutions or matrix products.
    PyTorch lets cuDNN convolutions use TF32 by default (10-bit mantissas, about 1e-3 relative), so
    a LeNet run on a GPU would drift from the same run on a CPU by more than the 1e-4 that
    ``fedpd reproduce --verify`` allows a float32 record; without it the two differ only in the
    order of a sum's terms. (Process-wide flags: a run's process makes one device's runs.)"""
    if device.type == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


#: ``run.execution = "auto"`` on the CPU: models with more parameters than this train one client at
#: a time through the module (per client), smaller ones vectorised over the clients of a chunk.
#: Measured with benchmarks/side_by_side.py (docs/performance.md): logistic regression (7 850
#: parameters) is 1.3x faster vectorised, the MLP 784-200-200-10 (199 210) and the CNNs faster per
#: client.
PER_CLIENT_ABOVE = 50_000


def runs_per_client(execution: str, dim: int, device: torch.device | str) -> bool:
    """Whether clients train one at a time through the module (else vectorised, ``torch.func.vmap``).
    ``auto``: on a GPU always vectorised — on an H100 every medium-budget A-FedPD method (LeNet, 62 006
    parameters) ran a round 2.4-3.4x faster vectorised than per client (benchmarks/gpu_afedpd.py,
    docs/performance.md); on the CPU per client above :data:`PER_CLIENT_ABOVE` parameters."""
    if execution != "auto":
        return execution == "per_client"
    return torch.device(device).type != "cuda" and dim > PER_CLIENT_ABOVE


def run_dtype(cfg: Config) -> str:
    """The dtype a run computes in, without building it: ``run.dtype``, or for "auto" the problem's
    own — float32 for the problems that take a model (the dataset problem), float64 for the rest."""
    if cfg.run.dtype != "auto":
        return cfg.run.dtype
    return "float32" if "model" in inspect.signature(cfg.entries["problem"].build).parameters else "float64"


def build_problem(cfg: Config, device: torch.device | str = "cpu") -> Problem:
    entry = cfg.entries["problem"]
    takes_model = "model" in inspect.signature(entry.build).parameters  # e.g. the dataset problem
    if not takes_model:
        for key, value in cfg.model.items():
            if (key, value) != ("name", "auto"):
                raise ConfigError(f"model.{key}: problem '{cfg.names['problem']}' has a fixed model "
                                  f"(allowed: no [model] section, or name = \"auto\")")
    extra = {"model": dict(cfg.model)} if takes_model else {}
    problem = built(cfg, "problem", entry.build(**cfg.options["problem"].model_dump(), **extra))
    problem = build_attack(cfg).apply_data(problem)  # outliers by data (a no-op for other attacks)
    # auto: float64 for the built-in problems, the problem's own choice (float32 for datasets)
    auto = problem.info.get("dtype", torch.float64)
    dtype = {"auto": auto, "float64": torch.float64, "float32": torch.float32}[cfg.run.dtype]
    problem = problem.to(dtype, device)
    problem.per_client = runs_per_client(cfg.run.execution, problem.dim, device)
    problem.tally_work = cfg.system is not None  # the clock needs each client's work (fedpd.system)
    return problem


def build_attack(cfg: Config) -> Attack:
    """The run's fault / attack (``[attack]``, default none), not yet bound to a run."""
    return built(cfg, "attack", cfg.entries["attack"].build(**cfg.options["attack"].model_dump()))


#: what each kind's plug-in must give when called: (is it, what it should be)
GIVES = {"problem": (lambda p: isinstance(p, Problem), "a fedpd Problem (fedpd.problems.base.Problem)"),
         "attack": (lambda a: isinstance(a, Attack), "an Attack"),
         "solver": (lambda s: callable(getattr(s, "solve", None)), "a solver, with solve(ctx, x, objective, tol)"),
         "sampler": (lambda s: callable(getattr(s, "sample", None)) and hasattr(s, "per_round"),
                     "a sampler, with sample(round, generator) and per_round")}


def built(cfg: Config, section: str, obj):
    """``obj``, what ``section``'s entry gave, checked to be what that kind gives (a plug-in may
    not): ConfigError naming the key otherwise."""
    ok, wanted = GIVES[section]
    if not ok(obj):
        raise ConfigError(f"{section}.name: {cfg.names[section]} gave {what(obj)}, not {wanted}")
    return obj


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


def client_chunk(chunk: int, problem: Problem) -> int | None:
    """Clients computed together (``run.client_chunk``; None: all of a group): one at a time for a
    per-client model."""
    return 1 if problem.per_client else chunk or None


def expected_participants(sampler, num_clients: int) -> int:
    """Clients that train in a round: the sampler's ``per_round``, or for one whose number varies
    its ``expected_per_round`` (Bernoulli's q·N, at least 1), else every client."""
    per_round = sampler.per_round
    if per_round is None:
        per_round = getattr(sampler, "expected_per_round", None) or num_clients
    return min(num_clients, per_round)


def local_work(cfg: Config, problem: Problem, sampler) -> LocalWork:
    """A round's local training as the thread and worker rules weigh it (:class:`fedpd.threads.LocalWork`):
    the sampler's participants, ``run.client_chunk`` of them at once, the solver's batch (every
    sample of the largest client for full batches) and its local steps."""
    participants = expected_participants(sampler, problem.num_clients)
    sizes = problem.train.sizes
    largest = int(sizes.max()) if sizes.numel() else 0
    solver = cfg.options["solver"]
    batch = min(getattr(solver, "batch_size", None) or largest, largest)
    chunk = min(participants, cfg.run.client_chunk) if cfg.run.client_chunk else participants
    return LocalWork(participants, chunk, batch, getattr(solver, "local_steps", 1), lambda: forward_flops(problem))


def federation_info(problem: Problem) -> FederationInfo:
    return FederationInfo(problem.num_clients, problem.dim, problem.model, problem.x_init.dtype, problem.device,
                          int(problem.train.sizes.max()) if problem.num_clients else 0)


def build(cfg: Config, problem: Problem):
    """(algorithm, solver, sampler) of a config, every cross-check done before anything runs."""
    num_clients = problem.num_clients
    # the defence keys arrive as one Defence, read once with the config (fedpd.algorithms.robust)
    algorithm = cfg.entries["algorithm"].build(**algorithm_keywords(cfg.options["algorithm"]))
    unused = unused_server_step(algorithm)
    if unused:  # an override that would be skipped without a word
        raise ConfigError(f"algorithm.name: {unused}")
    solver = built(cfg, "solver", cfg.entries["solver"].build(**cfg.options["solver"].model_dump()))
    check_solver(cfg, algorithm, solver, problem)
    sampler_opts = cfg.options["sampler"].model_dump()
    if sampler_opts.get("clients_per_round", 0) > num_clients:
        raise ConfigError(f"sampler.clients_per_round: {sampler_opts['clients_per_round']} exceeds the problem's "
                          f"{num_clients} clients (allowed: 1..{num_clients})")
    if algorithm.participation == "all" and cfg.names["sampler"] != "all":
        raise ConfigError(f"sampler.name: algorithm '{cfg.names['algorithm']}' needs every client every round "
                          f"(allowed: all)")
    sampler = built(cfg, "sampler", cfg.entries["sampler"].build(num_clients, **sampler_opts))
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
    call(algorithm, "setup", federation_info(problem), solver)  # e.g. Fed+'s layer groups: fail before anything runs
    return algorithm, solver, sampler


def build_privacy(cfg: Config, algorithm: Algorithm, solver, sampler, problem: Problem) -> PrivateAggregation | None:
    """``[privacy]``: DP-FedAvg's clipped, noised mean wrapped around the algorithm's server step
    (None: off), refused in one line where its guarantee would not hold (after :func:`build`)."""
    return private_aggregation(cfg.options["privacy"], algorithm, algorithm_name=cfg.names["algorithm"],
                               sampler_name=cfg.names["sampler"], sampler=sampler, num_clients=problem.num_clients,
                               solver=solver, x0=problem.x_init, seed=cfg.run.seed, rounds=cfg.run.rounds)


def from_toml(config_toml: str):
    """(cfg, problem, algorithm, solver) of a run's resolved config TOML, built in another
    process (a worker of ``run.workers``, a remote node) exactly as the run's own process builds
    them, so a client's ``local`` there is the same computation.

    Plug-ins named by import path must be importable before the config is read: a fresh process
    makes them so here, first (the one hook for every process that builds a run from its TOML)."""
    cfg = load_config(tomllib.loads(config_toml))
    problem = build_problem(cfg, resolve_device(cfg.run.device))
    algorithm, solver, _ = build(cfg, problem)
    return cfg, problem, algorithm, solver


def hosted_clients(num_clients: int, nodes: int, k: int) -> list[int]:
    """The clients node k of ``nodes`` hosts: the k-th contiguous block of the ids."""
    return list(range(k * num_clients // nodes, (k + 1) * num_clients // nodes))



def build_store(cfg: Config, algorithm: Algorithm, sampler, init: State,
                num_clients: int) -> tuple[ClientStore, str, int]:
    """The in-process client store ``run.store`` asks for: (store, its kind, the bytes a disk
    store may write). ``auto`` is resolved by size (one line on stderr when it picks the disk)."""
    row = state_bytes(init)
    everyone = type(algorithm).participants is not Algorithm.participants  # e.g. SAGA's first pass
    rows, need, undo = store_budget(num_clients, row, sampler.per_round, cfg.run.rounds,
                                    cfg.run.checkpoint_every or cfg.run.eval_every, everyone)
    kind, note = choose_store(cfg.run.store, num_clients, row, rows, sampler.per_round)
    log(note)
    store = MemoryStore(init, num_clients) if kind == "memory" else DiskStore(init, num_clients)
    return store, kind, need + undo + 8 * rows
