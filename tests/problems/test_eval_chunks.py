"""Evaluation in chunks sized by the model: ``run.eval_batch_size`` samples per chunk, or
(0) as many as keep the activations saved for the gradient within a budget — so a conv net no
longer keeps 8 192 samples' activations. The chunking changes the metrics at rounding only."""

from __future__ import annotations

import math

import pytest
import torch

from fedpd import evaluation
from fedpd.evaluation import chunk_size, evaluate, evaluate_personal
from fedpd.flat import FlatModel
from fedpd.models import build_model
from fedpd.problems import losses
from fedpd.problems.base import ClientSplit, Problem
from helpers import simulation


def image_problem(model: str = "lenet", clients: int = 3, samples: int = 40) -> Problem:
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(samples + 7 * i, 3, 32, 32, generator=g, dtype=torch.float64) for i in range(clients)]
    ys = [torch.randint(0, 10, (samples + 7 * i,), generator=g) for i in range(clients)]
    torch.manual_seed(0)
    flat = FlatModel(build_model(model, input_shape=(3, 32, 32), num_classes=10).double())
    split = ClientSplit.from_parts(xs, ys)
    return Problem(model, split, split, flat, losses.cross_entropy, flat.initial(torch.float64), classifies=True,
                   predict=losses.argmax_predict)


def test_automatic_chunk_follows_the_activation_memory_of_a_sample():
    conv = image_problem("lenet")
    logistic = simulation(
        {"name": "fedavg"}, problem={"name": "synthetic", "clients": 3}, solver={"name": "gd"}
    ).problem
    per_sample = evaluation._saved_bytes(conv, 2) - evaluation._saved_bytes(conv, 1)
    assert per_sample > 100_000  # a LeNet sample keeps its conv activations (float64)
    assert chunk_size(conv) == evaluation.ACTIVATION_BUDGET // per_sample < evaluation.CHUNK
    assert chunk_size(logistic) == evaluation.CHUNK  # a small model keeps the largest chunk
    assert chunk_size(conv, 5) == 5  # run.eval_batch_size decides when set


@pytest.mark.parametrize("clients", [None, torch.tensor([0, 2])])
def test_chunked_evaluation_gives_the_one_chunk_metrics_to_rounding(clients):
    problem = image_problem()
    x = problem.x_init + 0.01 * torch.randn(
        problem.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    one = evaluate(problem, x, clients, batch=10_000)
    for batch in (5, 33):
        chunked = evaluate(problem, x, clients, batch=batch)
        assert chunked.keys() == one.keys()
        for k, v in one.items():
            assert math.isclose(chunked[k], v, rel_tol=1e-10), (batch, k)
    personal_one = evaluate_personal(problem, x, clients=clients, batch=10_000)
    personal = evaluate_personal(problem, x, clients=clients, batch=7)
    for k, v in personal_one.items():
        assert math.isclose(personal[k], v, rel_tol=1e-10), k


def test_run_eval_batch_size_reaches_the_evaluation(monkeypatch):
    seen = []
    chunks = evaluation._chunks

    def spy(split, clients, chunk=evaluation.CHUNK):
        seen.append(chunk)
        return chunks(split, clients, chunk)

    monkeypatch.setattr(evaluation, "_chunks", spy)
    sim = simulation({"name": "fedavg"}, problem={"name": "synthetic", "clients": 3}, solver={"name": "gd"},
                     run={"eval_batch_size": 6, "personal_eval": "always"})
    sim.metrics()
    assert seen and set(seen) == {6}


def test_measuring_the_chunk_size_keeps_no_reference_to_the_data():
    """The measuring forward saves nothing: a pack hook that returned the tensor tied a ReLU's saved
    output to its own node, a cycle through autograd's C++ graph that gc cannot free, and held the
    training set (188 MB per MNIST problem, so a worker running many runs ran out of memory)."""
    import gc
    import weakref

    problem = image_problem("mlp")
    data = weakref.ref(problem.train.x)
    assert chunk_size(problem) >= 1
    del problem
    gc.collect()
    assert data() is None
