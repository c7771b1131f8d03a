"""The per-step machinery of a neural round: the batches of all Q local steps come from
one stream call and are exactly the numbers step-by-step draws give (a step's stream is named by
q, so nothing else may change); the module is bound to the iterate once, and each step's gradient
is written into the solver's buffer."""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from fedpd.context import ClientContext
from fedpd.flat import FlatModel
from fedpd.problems import losses
from fedpd.problems.base import ClientData, ClientSplit, Problem
from fedpd.problems.dataset import AugmentedSplit
from fedpd import solvers
from fedpd.solvers import LocalObjective, SGDSolver
from fedpd.streams import ClientStreams


def test_children_draw_what_each_child_draws():
    rng = ClientStreams.of(5, "batches", 3, torch.tensor([0, 7, 2]))
    together = rng.children(range(4)).child(0).uniform(6).view(3, 4, 6)
    for q in range(4):
        assert torch.equal(together[:, q], rng.child(q, 0).uniform(6))


def problem(split_cls=ClientSplit, image: bool = False) -> Problem:
    g = torch.Generator().manual_seed(0)
    shape = (3, 8, 8) if image else (5,)
    xs = [torch.randn(n, *shape, generator=g) for n in (9, 4, 13)]
    ys = [torch.randint(0, 3, (n,), generator=g) for n in (9, 4, 13)]
    split = ClientSplit.from_parts(xs, ys)
    train = split_cls(split.x, split.y, split.offsets)
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(np.prod(shape)), 4), torch.nn.Tanh(),
                                 torch.nn.Linear(4, 3))
    flat = FlatModel(module)
    return Problem("p", train, split, flat, losses.cross_entropy, flat.initial(), classifies=True)


def test_a_local_run_draws_every_step_batch_at_once_and_the_same_numbers(monkeypatch):
    default = solvers.GATHER_BYTES
    for split_cls, image in ((ClientSplit, False), (AugmentedSplit, True)):
        step_bytes = 3 * 3 * (int(np.prod((3, 8, 8) if image else (5,))) * 4 + 8)  # 3 clients' batches of 3
        for gather_bytes in (default, 1, 2 * step_bytes):  # all steps at once, one, two
            monkeypatch.setattr(solvers, "GATHER_BYTES", gather_bytes)
            prob = problem(split_cls, image)
            ids = torch.tensor([2, 0, 1])
            solver = SGDSolver(lr=0.1, local_steps=5, batch_size=3, straggler_fraction=0.5)
            ctx = ClientContext(ids, 4, ClientData(prob, ids), solver, seed=11)
            run = solver.start(ctx)
            calls, gathers = [], []
            children, batches_from = ClientStreams.children, ClientData.batches_from
            with monkeypatch.context() as m:
                m.setattr(
                    ClientStreams, "children", lambda self, labels: calls.append(list(labels)) or children(self, labels)
                )
                m.setattr(
                    ClientData, "batches_from", lambda self, u: gathers.append(u.shape[1]) or batches_from(self, u)
                )
                batches = [run.batch(q) for q in range(run.rounds)]
            assert calls == [list(range(run.rounds))]  # one stream call for all the steps
            assert sum(gathers) == run.rounds and gathers[0] == 1  # the first step sizes the gathers
            if gather_bytes == default:
                assert gathers == [1, run.rounds - 1]
            elif gather_bytes == 1:
                assert gathers == [1] * run.rounds
            else:
                assert gathers == [1, 2, 2]
            expected_rng = ClientContext(ids, 4, ClientData(prob, ids), solver, seed=11)
            expected_rng.rng("stragglers")
            rng = expected_rng.rng("batches")
            for q, (X, Y, W) in enumerate(batches):
                X_q, Y_q, W_q = prob.train.minibatch(ids, 3, rng.child(q, 0))
                assert torch.equal(X, X_q) and torch.equal(Y, Y_q), (split_cls, gather_bytes, q)
                assert W is None and bool(W_q.eq(1).all())  # unit weights, said once instead of checked per step


def test_per_client_gradient_binds_the_module_once_and_writes_into_the_buffer():
    prob = problem()
    prob.per_client = True
    ids = torch.tensor([1])
    data = ClientData(prob, ids)
    x = prob.x_init[None].clone()
    X, Y, W = data.all()
    fresh = data.gradient(x, X, Y, W)
    out = torch.empty_like(x)
    assert data.gradient(x, X, Y, W, out=out) is out and torch.equal(out, fresh)
    params = list(prob.model.module.parameters())
    assert all(p.data_ptr() == v.data_ptr() for p, v in zip(params, x[0].split(prob.model.numels)))
    grads = zip(params, out[0].split(prob.model.numels))
    assert all(p.grad is not None and p.grad.data_ptr() != g.data_ptr() for p, g in grads)  # copied out by one cat
    x.add_(0.5)  # the solver's in-place step: the module sees it without being bound again
    stepped = data.gradient(x, X, Y, W, out=out).clone()
    assert torch.equal(data.gradient(x.clone(), X, Y, W), stepped)  # a fresh vector at that point agrees
    data.gradient(x, X, Y, W, out=out)
    marker = params[0].data.clone()
    params[0].data = marker
    data.gradient(x, X, Y, W, out=out)  # the same iterate: not bound again
    assert params[0].data_ptr() == marker.data_ptr()
    data.gradient(x.clone(), X, Y, W, out=out)  # another vector: bound to it
    assert params[0].data_ptr() != marker.data_ptr()
    weighted = W.clone()
    weighted[0, 0] = 0.0  # a weighted batch takes the weighted mean, not the plain one
    assert not torch.equal(data.gradient(x, X, Y, weighted), stepped)
    assert torch.equal(data.gradient(x, X[:, :4], Y[:, :4], None), data.gradient(x, X[:, :4], Y[:, :4], W[:, :4]))


def test_a_frozen_parameter_has_a_zero_gradient_and_stays():
    prob = problem()
    prob.per_client = True
    frozen = prob.model.module[1].bias
    frozen.requires_grad_(False)
    ids = torch.tensor([0, 2])
    data = ClientData(prob, ids)
    x = prob.x_init.expand(2, -1).clone()
    X, Y, W = data.all()
    part = prob.model.slices()["1.bias"]
    g = data.gradient(x, X, Y, W)
    assert torch.equal(g[:, part], torch.zeros_like(g[:, part])) and g.abs().sum() > 0
    before = x.clone()
    data.descend(x, X, Y, W, 0.1)
    assert torch.equal(x[:, part], before[:, part]) and not torch.equal(x, before)


def test_cross_entropy_batch_mean_gives_the_per_sample_means_gradient_bitwise():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
    X, Y = torch.randn(10, 7), torch.randint(0, 5, (10,))
    fused = torch.autograd.grad(losses.BATCH_MEAN[losses.cross_entropy](net(X), Y), list(net.parameters()))
    per_sample = torch.autograd.grad(losses.cross_entropy(net(X), Y).mean(), list(net.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(fused, per_sample))


def test_a_plain_sgd_step_added_into_the_iterate_is_the_flat_step_bitwise():
    """FedAvg's local step (no terms, no momentum) takes the fused path, the first step too (its
    ‖∇f_i‖², per client from the parameters' gradients); an objective whose linear term is zero
    takes the flat one: the same iterates, bit for bit, in both executions and with stragglers
    (whose steps once some are done go the flat way); the same start ‖∇f_i‖² to rounding
    (vectorised: bit for bit)."""
    for per_client in (True, False):
        for stragglers in (0.0, 0.5):
            prob = problem()
            prob.per_client = per_client
            ids = torch.tensor([0, 1, 2])
            solver = SGDSolver(lr=0.3, local_steps=6, batch_size=4, straggler_fraction=stragglers)
            x0 = prob.x_init.expand(3, -1)
            results = []
            for objective in (LocalObjective(), LocalObjective(linear=torch.zeros_like(x0))):
                prob.sample_grads = 0
                res = solver.solve(ClientContext(ids, 2, ClientData(prob, ids), solver, seed=3), x0, objective)
                results.append((res, int(prob.sample_grads)))
            (fused, n_fused), (flat, n_flat) = results
            assert torch.equal(fused.x, flat.x) and not torch.equal(fused.x, x0), (per_client, stragglers)
            same = torch.equal if not per_client else partial(torch.allclose, rtol=1e-6, atol=0)
            assert same(fused.start_grad_sq, flat.start_grad_sq) and (flat.start_grad_sq > 0).all()
            assert n_fused == n_flat
            assert n_fused == 4 * int(fused.steps.sum())
