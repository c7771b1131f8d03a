"""Small builders shared by the tests: paths, simulations by hand, the CLI in this process, and the
configs and checks the tests of one-line refusals share."""

from __future__ import annotations

from pathlib import Path

import tomli_w
import torch

from fedpd import registry
from fedpd.cli import main
from fedpd.config import load_config
from fedpd.context import ClientContext, ServerContext
from fedpd.problems.base import ClientData
from fedpd.simulation import Simulation
from fedpd.streams import ClientStreams

#: the tests folder (where these shared modules and the scripts the tests start sit, whatever the
#: subfolder of the test module) and the repository's root
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def simulation(algorithm: dict, *, problem: dict | None = None, solver: dict | None = None,
               sampler: dict | None = None, run: dict | None = None) -> Simulation:
    uses_solver = registry.ALGORITHMS[algorithm["name"]].build.uses_solver
    cfg = {
        "problem": problem or {"name": "least_squares", "clients": 4, "dim": 3, "samples_per_client": 6},
        "algorithm": algorithm,
        "sampler": sampler or {"name": "all"},
        "run": {"rounds": 10, **(run or {})},
    }
    if solver is not None or uses_solver:  # Xu's methods take no [solver]
        cfg["solver"] = solver or {"name": "exact"}
    return Simulation(load_config(cfg))


def client_data(sim: Simulation, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    split = sim.problem.train
    a, b = int(split.offsets[i]), int(split.offsets[i + 1])
    return split.x[a:b], split.y[a:b]


def ls_grad(sim: Simulation, i: int, x: torch.Tensor) -> torch.Tensor:
    """∇f_i(x) of least squares, f_i = 1/(2n) ‖A x − b‖², by hand."""
    A, b = client_data(sim, i)
    return A.T @ (A @ x - b) / len(b)


def ls_hessian(sim: Simulation, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    A, b = client_data(sim, i)
    return A.T @ A / len(b), A.T @ b / len(b)


def streams(sim: Simulation, ids: torch.Tensor, purpose: str = "batches", call: int = 0) -> ClientStreams:
    """The streams the clients ``ids`` get for ``purpose`` in the simulation's next round (the
    ``call``-th ``ctx.rng(purpose)`` of the round), to replay their draws by hand."""
    return ClientStreams.of(sim.cfg.run.seed, purpose, sim.round, ids).child(call)


def step_batches(sim: Simulation, ids: torch.Tensor, batch_size: int, steps: int, call: int = 0, j: int = 0):
    """The minibatches (X, Y, W) of local steps 0..steps-1 of the next round, as the solver draws them."""
    rng = streams(sim, ids, "batches", call)
    return [sim.problem.train.minibatch(ids, batch_size, rng.child(q, j)) for q in range(steps)]


def context(sim: Simulation, ids: torch.Tensor, round: int = 0, seed: int | None = None) -> ClientContext:
    """A client context for clients ``ids`` of the simulation's problem (to call a solver directly)."""
    seed = sim.cfg.run.seed if seed is None else seed
    return ClientContext(ids, round, ClientData(sim.problem, ids), sim.solver, seed)


def server_context(sim: Simulation, ids: torch.Tensor) -> ServerContext:
    """A server context for uploads of clients ``ids`` in the simulation's current round."""
    return ServerContext(ids, sim.round, sim.num_clients, sim.cfg.run.seed)


def use_solver(sim: Simulation, solver) -> None:
    """Run the simulation's next rounds with ``solver`` (e.g. a :class:`Recorder`)."""
    sim.solver = sim.engine.solver = solver


class Recorder:
    """Wraps a solver and keeps the local solutions of every round (x_i for the participants)."""

    def __init__(self, inner):
        self.inner, self.rounds = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def solve(self, ctx, x, objective, tol=0.0):
        res = self.inner.solve(ctx, x, objective, tol)
        self.rounds.append((ctx.ids.clone(), res.x.clone()))
        return res


def run_cli(args, capsys) -> tuple[int, str, str]:
    """``fedpd ARGS`` in this process: (exit status, stdout, stderr)."""
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(code: int, err: str) -> str:
    """The one line of stderr of a command that exited with status 2."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    return lines[0]


def quick_run(out: Path, capsys, *extra: str) -> None:
    """``fedpd run examples/fedavg.toml`` for 2 rounds into ``out``, which must succeed."""
    code, _, err = run_cli(["run", ROOT / "examples" / "fedavg.toml", "--out", out, "--quiet", "--set",
                            "run.rounds=2", *extra], capsys)
    assert code == 0, err


#: a small valid config (least squares, FedAvg, full-batch GD, one round) that tests of one bad key
#: change in one place
BASE = {"problem": {"name": "least_squares", "clients": 5, "samples_per_client": 8, "dim": 3},
        "algorithm": {"name": "fedavg"}, "solver": {"name": "gd", "lr": 0.1, "local_steps": 2},
        "run": {"rounds": 1}}

#: FedAvg on least squares with ``{rounds}`` rounds and metrics every round, as TOML (``.format`` it)
FEDAVG_LS = """
[problem]
name = "least_squares"
clients = 4
[algorithm]
name = "fedavg"
[solver]
name = "gd"
[run]
rounds = {rounds}
eval_every = 1
"""

#: ``{algorithm}`` on least squares (4 clients of 50 samples), full-batch GD, 4 rounds, as TOML
SMALL_GD = """
[problem]
name = "least_squares"
clients = 4
samples_per_client = 50
[algorithm]
name = "{algorithm}"
[solver]
name = "gd"
lr = 0.1
local_steps = 2
[run]
rounds = 4
eval_every = 2
"""

#: FedAvg on least squares with 4 of 6 clients a round (a uniform sampler), 2 rounds, as TOML
SAMPLED_FEDAVG = """
[problem]
name = "least_squares"
clients = 6
[algorithm]
name = "fedavg"
[solver]
name = "gd"
lr = 0.1
[sampler]
name = "uniform"
clients_per_round = 4
[run]
rounds = 2
"""


def config_file(tmp_path: Path, **sections) -> Path:
    """BASE with ``sections`` merged in (a key given None is left out), as a TOML file."""
    cfg = {k: dict(v) for k, v in BASE.items()}
    for name, values in sections.items():
        merged = {**cfg.get(name, {}), **values}
        cfg[name] = {k: v for k, v in merged.items() if v is not None}
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps(cfg))
    return path


def refused(tmp_path: Path, capsys, path: Path, *args) -> str:
    """``fedpd run PATH ARGS``: its one line, after checking exit 2 and that nothing was written."""
    out = tmp_path / "run"
    code, stdout, err = run_cli(["run", path, "--out", out, "--quiet", *args], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("fedpd: error: "), (code, err)
    assert stdout == "" and not out.exists()
    return lines[0].removeprefix("fedpd: error: ")


def runs(tmp_path: Path, capsys, path: Path, *args, out: str = "run") -> Path:
    """``fedpd run PATH ARGS`` into ``tmp_path / out``, which must succeed and leave a checkpoint."""
    code, _, err = run_cli(["run", path, "--out", tmp_path / out, "--quiet", *args], capsys)
    assert code == 0, err
    assert (tmp_path / out / "checkpoint.pt").is_file()
    return tmp_path / out


#: a sweep's config: Synthetic, minibatch SGD, 3 of 6 clients a round, 4 rounds; ``{algorithm}`` to fill
SWEEP_CONFIG = """
[problem]
name = "synthetic"
clients = 6
dim = 4
classes = 3
max_client_samples = 12

[algorithm]
name = "{algorithm}"

[solver]
name = "sgd"
lr = 0.05
local_steps = 3
batch_size = 4

[sampler]
name = "uniform"
clients_per_round = 3

[run]
rounds = 4
eval_every = 2
dtype = "float64"
"""


def sweep_configs(tmp_path: Path, *algorithms: str) -> list[Path]:
    """SWEEP_CONFIG for each of ``algorithms`` (FedAvg and SCAFFOLD when none is named), as files."""
    out = []
    for algorithm in algorithms or ("fedavg", "scaffold"):
        out.append(tmp_path / f"{algorithm}.toml")
        out[-1].write_text(SWEEP_CONFIG.format(algorithm=algorithm))
    return out


def run_records(path: Path) -> list[dict]:
    """The records of the run directory ``path``'s metrics.jsonl, wall_s left out."""
    import json

    return [{k: v for k, v in json.loads(line).items() if k != "wall_s"} for line in (path / "metrics.jsonl").open()]


def is_public(module: str, name: str) -> bool:
    """Whether ``module.name`` is what fedpd or fedpd.algorithms exports under ``name``."""
    import importlib

    import fedpd
    import fedpd.algorithms

    obj = getattr(importlib.import_module(module), name)
    return any(name in getattr(pkg, "__all__", ()) and getattr(pkg, name) is obj for pkg in (fedpd, fedpd.algorithms))


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A package ``pkg`` under ``root`` of ``files`` (relative path: text)."""
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def import_byzfl():
    """ByzFL's aggregators and attacks (one namespace), or skip the test where ByzFL is not installed.
    Its package ``__init__`` imports its benchmark, which needs a torchvision built for the installed
    torch; the rules need only torch, numpy and scipy, so the package is imported without it."""
    import importlib
    import importlib.util
    import sys
    import types

    import pytest

    if "byzfl" not in sys.modules:  # the package without its benchmark, once per process
        spec = importlib.util.find_spec("byzfl")
        if spec is None:
            pytest.skip("byzfl is not installed (pip install 'fedpd[byzfl]'): the ByzFL comparisons need it")
        package = types.ModuleType("byzfl")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["byzfl"] = package
    aggregators = importlib.import_module("byzfl.aggregators")
    attacks = importlib.import_module("byzfl.attacks")
    names = {k: getattr(m, k) for m in (aggregators, attacks) for k in dir(m) if not k.startswith("_")}
    return types.SimpleNamespace(**names)


def fedpd_imports(path) -> list[tuple[str, str]]:
    """(module, name) of every ``from fedpd... import name`` in a source file; a plain
    ``import fedpd...`` fails (a user's module reaches fedpd's names through ``from`` imports)."""
    import ast

    imported = []
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fedpd":
            imported += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("fedpd") for a in node.names)
    return imported
