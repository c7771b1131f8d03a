"""Training a part of the model through the solver: ``LocalObjective.free``
holds the other coordinates at their start values, bit for bit, and minimises over the free
ones — GD's steps by hand on least squares, the exact solver's restricted minimiser in closed
form, every solver option kept off the fixed part — and ``FlatModel.mask`` names the parts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedpd.flat import FlatModel
from fedpd.solvers import ExactSolver, GradientSolver, LocalObjective, SGDSolver

from helpers import context, ls_grad, ls_hessian, simulation

IDS = torch.tensor([0, 2])
FREE = torch.tensor([True, False, True])  # coordinates 0 and 2 move, 1 stays


@pytest.fixture
def sim():
    return simulation({"name": "fedprox", "mu": 0.5}, solver={"name": "gd", "lr": 0.1, "local_steps": 3})


def start(sim) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(len(IDS), sim.problem.x_init.numel(), generator=g, dtype=torch.float64)


def test_gd_on_the_free_coordinates_is_gd_on_the_restricted_objective_by_hand(sim):
    x0, center = start(sim), torch.zeros(len(IDS), 3, dtype=torch.float64)
    objective = LocalObjective(mu=0.5, center=center, free=FREE)
    got = GradientSolver(lr=0.1, local_steps=3).solve(context(sim, IDS), x0, objective)
    for row, i in enumerate(IDS.tolist()):
        x = x0[row].clone()
        for _ in range(3):  # x_F ← x_F − η (∇f_i(x) + μ(x − c))_F, x_1 untouched
            step = ls_grad(sim, i, x) + 0.5 * (x - center[row])
            x[FREE] -= 0.1 * step[FREE]
        assert torch.allclose(got.x[row], x, rtol=1e-12, atol=1e-14)
        assert got.x[row, 1] == x0[row, 1]  # bit for bit
        full = ls_grad(sim, i, x0[row]) + 0.5 * x0[row]
        assert float(got.start_grad_sq[row]) == pytest.approx(float(full[FREE].pow(2).sum()), rel=1e-12)


def test_the_exact_solver_gives_the_restricted_minimiser_and_gd_converges_to_it(sim):
    x0 = start(sim)
    exact = ExactSolver().solve(context(sim, IDS), x0, LocalObjective(free=FREE)).x
    for row, i in enumerate(IDS.tolist()):
        H, h = ls_hessian(sim, i)  # f_i = ½xᵀHx − hᵀx + const: H_FF x_F = h_F − H_F1 x_1
        x_f = torch.linalg.solve(H[FREE][:, FREE], h[FREE] - H[FREE][:, ~FREE] @ x0[row, ~FREE])
        assert torch.allclose(exact[row, FREE], x_f, rtol=1e-10) and exact[row, 1] == x0[row, 1]
    lr = 1 / max(float(torch.linalg.eigvalsh(ls_hessian(sim, i)[0][FREE][:, FREE]).max()) for i in IDS.tolist())
    many = GradientSolver(lr=lr, local_steps=100).solve(context(sim, IDS), x0, LocalObjective(free=FREE)).x
    assert torch.allclose(many, exact, rtol=1e-10, atol=1e-12)


def test_every_solver_option_leaves_the_fixed_coordinates_alone(sim):
    x0 = start(sim)
    solver = SGDSolver(lr=0.05, local_steps=4, batch_size=3, momentum=0.9, weight_decay=0.1, sam_radius=0.05,
                       clip_norm=0.5, straggler_fraction=0.5)
    objective = LocalObjective(linear=torch.ones(len(IDS), 3, dtype=torch.float64), mu=2.0,
                               center=-x0, free=FREE)
    got = solver.solve(context(sim, IDS), x0, objective).x
    assert torch.equal(got[:, 1], x0[:, 1]) and not torch.equal(got[:, FREE], x0[:, FREE])
    per_client = torch.stack([FREE, ~FREE])  # a [K, d] mask: each client its own part
    got = solver.solve(context(sim, IDS), x0, LocalObjective(free=per_client)).x
    assert torch.equal(got[~per_client], x0[~per_client]) and not torch.equal(got[per_client], x0[per_client])


def test_a_models_parts_by_parameter_or_module_name():
    module = nn.Sequential()
    module.add_module("body", nn.Linear(3, 4))
    module.add_module("head", nn.Linear(4, 2))
    flat = FlatModel(module)  # body.weight 12, body.bias 4, head.weight 8, head.bias 2
    head = flat.mask("head")
    assert head.dtype == torch.bool and head.shape == (26,)
    assert head.nonzero().flatten().tolist() == list(range(16, 26))
    assert flat.mask("body.bias", "head.bias").nonzero().flatten().tolist() == [12, 13, 14, 15, 24, 25]
    with pytest.raises(ValueError, match="no parameter or module 'neck'.*body.weight, body.bias, head.weight"):
        flat.mask("neck")
