"""Small builders shared by the tests."""

from __future__ import annotations

import torch

from fedpd import registry
from fedpd.cli import main
from fedpd.config import load_config
from fedpd.context import ClientContext, ServerContext
from fedpd.problems.base import ClientData
from fedpd.simulation import Simulation
from fedpd.streams import ClientStreams


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


def fedpd_imports(path) -> list[tuple[str, str]]:
    """(module, name) of every ``from fedpd... import name`` in a source file; a plain
    ``import fedpd...`` fails (a user's module reaches fedpd's names through ``from`` imports)."""
    import ast
    from pathlib import Path

    imported = []
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fedpd":
            imported += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("fedpd") for a in node.names)
    return imported
