"""Small builders shared by the tests."""

from __future__ import annotations

import torch

from fedpd.config import load_config
from fedpd.runner import Simulation


def simulation(algorithm: dict, *, problem: dict | None = None, solver: dict | None = None,
               sampler: dict | None = None, run: dict | None = None) -> Simulation:
    cfg = {
        "problem": problem or {"name": "least_squares", "clients": 4, "dim": 3, "samples_per_client": 6},
        "algorithm": algorithm,
        "solver": solver or {"name": "exact"},
        "sampler": sampler or {"name": "all"},
        "run": {"rounds": 10, **(run or {})},
    }
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


class Recorder:
    """Wraps a solver and keeps the local solutions of every round (x_i for the participants)."""

    def __init__(self, inner):
        self.inner, self.rounds = inner, []

    def solve(self, problem, ids, x, objective, round, generator):
        res = self.inner.solve(problem, ids, x, objective, round, generator)
        self.rounds.append((ids.clone(), res.x.clone()))
        return res
