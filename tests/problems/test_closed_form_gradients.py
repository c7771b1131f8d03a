"""The closed-form gradient of multinomial logistic regression (the common convex baseline takes
it instead of an autograd pass) equals autograd's, bias or none, with weighted and padded rows;
problems it does not describe keep autograd."""

from __future__ import annotations

import pytest
import torch

from fedpd.problems import base

from helpers import simulation


def _rows(problem, k: int = 3, b: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    d, features = problem.model.dim, problem.train.x.shape[1:]
    x = torch.randn(k, d, generator=g, dtype=torch.float64)
    X = torch.randn(k, b, *features, generator=g, dtype=torch.float64)
    Y = torch.randint(0, 3, (k, b), generator=g)
    W = torch.rand(k, b, generator=g, dtype=torch.float64)
    W[0, 3:] = 0.0  # a client with padded (weight 0) rows
    return x, X, Y, W


def _autograd(problem, monkeypatch, *rows):
    with monkeypatch.context() as m:
        m.setattr(base, "softmax_regression", lambda p: None)
        return problem._client_gradients(*rows)


@pytest.mark.parametrize("bias", [True, False])
def test_softmax_regression_gradient_equals_autograd(bias, monkeypatch):
    sim = simulation({"name": "fedavg"}, problem={"name": "synthetic", "clients": 4, "dim": 6, "classes": 3, "seed": 1},
                     solver={"name": "sgd", "lr": 0.1}, run={"dtype": "float64"})
    problem = sim.problem
    linear = base.softmax_regression(problem)
    assert linear is not None
    if not bias:
        linear.bias = None
        problem.model = type(problem.model)(problem.model.module)
        assert base.softmax_regression(problem) is linear
    rows = _rows(problem)
    closed = problem._client_gradients(*rows)
    reference = _autograd(problem, monkeypatch, *rows)
    assert closed.shape == reference.shape == (3, problem.model.dim)
    torch.testing.assert_close(closed, reference, rtol=1e-12, atol=1e-12)


def test_problems_it_does_not_describe_keep_autograd():
    """A hidden layer, a regulariser, a single logit or another loss: autograd, as before."""
    def synthetic():
        return simulation({"name": "fedavg"}, problem={"name": "synthetic", "clients": 4, "dim": 6, "classes": 3},
                          solver={"name": "sgd", "lr": 0.1}).problem

    FlatModel = type(synthetic().model)
    hidden = synthetic()
    hidden.model = FlatModel(torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)))
    regularised = synthetic()
    regularised.regularizer = lambda x: 0.5 * x.square().sum()
    single_logit = synthetic()
    single_logit.model = FlatModel(torch.nn.Linear(6, 1))
    assert [base.softmax_regression(p) for p in (hidden, regularised, single_logit)] == [None] * 3
    least_squares = simulation({"name": "fedavg"}, solver={"name": "gd", "lr": 0.1})
    assert base.softmax_regression(least_squares.problem) is None
