"""The per-step machinery of a neural round (issue 21): the batches of all Q local steps come from
one stream call and are exactly the numbers step-by-step draws give (a step's stream is named by
q, so nothing else may change); the module is bound to the iterate once, and each step's gradient
is written into the solver's buffer."""

from __future__ import annotations

import numpy as np
import torch

from fedpd.context import ClientContext
from fedpd.flat import FlatModel
from fedpd.problems import losses
from fedpd.problems.base import ClientData, ClientSplit, Problem
from fedpd.problems.dataset import AugmentedSplit
from fedpd.solvers import SGDSolver
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
    for split_cls, image in ((ClientSplit, False), (AugmentedSplit, True)):
        prob = problem(split_cls, image)
        ids = torch.tensor([2, 0, 1])
        solver = SGDSolver(lr=0.1, local_steps=5, batch_size=3, straggler_fraction=0.5)
        ctx = ClientContext(ids, 4, ClientData(prob, ids), solver, seed=11)
        run = solver.start(ctx)
        calls = []
        children = ClientStreams.children
        with monkeypatch.context() as m:
            m.setattr(ClientStreams, "children", lambda self, labels: calls.append(list(labels)) or children(self, labels))
            batches = [run.batch(q) for q in range(run.rounds)]
        assert calls == [list(range(run.rounds))]  # one stream call for all the steps
        expected_rng = ClientContext(ids, 4, ClientData(prob, ids), solver, seed=11)
        expected_rng.rng("stragglers")
        rng = expected_rng.rng("batches")
        for q, (X, Y, W) in enumerate(batches):
            X_q, Y_q, W_q = prob.train.minibatch(ids, 3, rng.child(q, 0))
            assert torch.equal(X, X_q) and torch.equal(Y, Y_q) and torch.equal(W, W_q), (split_cls, q)


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
    assert all(p.grad.data_ptr() == g.data_ptr() for p, g in zip(params, out[0].split(prob.model.numels)))
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
