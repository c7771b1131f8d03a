"""A client reads its own objective through the public API: ``ctx.loss(x)`` and
``ctx.gradient(x)`` give f_i and ∇f_i of every participant of a call at given points, batched over
the client axis, on its own samples only, computed the way the solver's gradients are
(``run.execution``) and counted in ``sample_grads`` as they are.

On least squares, f_i(x) = 1/(2n_i)‖A_i x − b_i‖² + (ridge/2)‖x‖², both are written out by hand."""

from __future__ import annotations

import pytest
import torch

from fedpd.problems.base import ClientSplit
from helpers import client_data, context, simulation

F64 = torch.float64
PROBLEM = {"name": "least_squares", "clients": 4, "dim": 3, "samples_per_client": 6, "ridge": 0.5, "seed": 1}
RIDGE = 0.5


def by_hand(sim, i: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(f_i(x), ∇f_i(x)) of least squares with the ridge term."""
    A, b = client_data(sim, i)
    r = A @ x - b
    return 0.5 * (r @ r) / len(b) + 0.5 * RIDGE * (x @ x), A.T @ r / len(b) + RIDGE * x


def unequal_clients(sim) -> None:
    """Give the simulation's problem clients of 2, 7, 4 and 5 samples (padding in every call)."""
    g = torch.Generator().manual_seed(4)
    sizes = (2, 7, 4, 5)
    xs = [torch.randn(n, 3, generator=g, dtype=F64) for n in sizes]
    ys = [torch.randn(n, generator=g, dtype=F64) for n in sizes]
    sim.problem.train = ClientSplit.from_parts(xs, ys)


@pytest.mark.parametrize("execution", ["vectorised", "per_client"])
@pytest.mark.parametrize("sizes", ["equal", "unequal"])
def test_loss_and_gradient_are_each_clients_own(execution, sizes):
    sim = simulation({"name": "fedavg"}, problem=PROBLEM, solver={"name": "gd"})
    sim.problem.per_client = execution == "per_client"
    if sizes == "unequal":
        unequal_clients(sim)
    ids = torch.tensor([2, 0, 3])
    ctx = context(sim, ids)
    x = torch.randn(3, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    loss, grad = ctx.loss(x), ctx.gradient(x)
    assert loss.shape == (3,) and grad.shape == (3, 3)
    for k, i in enumerate(ids.tolist()):
        f, g = by_hand(sim, i, x[k])
        torch.testing.assert_close(loss[k], f, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(grad[k], g, rtol=1e-12, atol=1e-12)
    # one [d] point is every client's
    point = x[1]
    torch.testing.assert_close(ctx.loss(point), torch.stack([by_hand(sim, i, point)[0] for i in ids.tolist()]),
                               rtol=1e-12, atol=1e-12)


def test_a_minibatch_is_the_clients_own_samples():
    sim = simulation({"name": "fedavg"}, problem=PROBLEM, solver={"name": "gd"})
    ids = torch.tensor([1, 3])
    ctx = context(sim, ids)
    batch = ctx.data.minibatch(4, ctx.rng("objective"))
    X, Y, _ = batch
    x = torch.ones(3, dtype=F64)
    for k in range(2):  # each row's samples are rows of its own client's data
        A, b = client_data(sim, int(ids[k]))
        assert all(any(torch.equal(row, a) for a in A) for row in X[k])
        r = X[k] @ x - Y[k]
        torch.testing.assert_close(ctx.loss(x, batch)[k], 0.5 * (r @ r) / 4 + 0.5 * RIDGE * (x @ x))
        torch.testing.assert_close(ctx.gradient(x, batch)[k], X[k].T @ r / 4 + RIDGE * x)


def test_counted_as_computation_like_the_solvers_gradients():
    """Each call adds the real samples it reads (padding excluded): Σ n_i for the full data, K·B
    for a minibatch — a loss evaluation counts as a gradient call does."""
    sim = simulation({"name": "fedavg"}, problem=PROBLEM, solver={"name": "gd"})
    unequal_clients(sim)
    ids = torch.tensor([0, 1, 3])
    ctx = context(sim, ids)
    x = torch.zeros(3, dtype=F64)
    before = int(sim.problem.sample_grads)
    ctx.loss(x)
    assert int(sim.problem.sample_grads) - before == 2 + 7 + 5
    ctx.gradient(x)
    assert int(sim.problem.sample_grads) - before == 2 * (2 + 7 + 5)
    ctx.loss(x, ctx.data.minibatch(4, ctx.rng("objective")))
    assert int(sim.problem.sample_grads) - before == 2 * 14 + 3 * 4


def test_a_point_of_the_wrong_shape_is_refused_in_one_line():
    sim = simulation({"name": "fedavg"}, problem=PROBLEM, solver={"name": "gd"})
    ctx = context(sim, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"\[d\] or \[K, d\] with K = 3, got \[2, 3\]"):
        ctx.loss(torch.zeros(2, 3, dtype=F64))
