"""One result on any executor: for every algorithm, the metrics do not depend on how the engine
groups the clients (``run.client_chunk`` 1, 3 or all), in which order it runs them, or whether
they run in process, on 2 worker processes (``run.workers``) or on nodes reached by messages (the
loopback remote engine, 3 nodes).

Every random draw a client makes comes from its own stream (seed, purpose, round, client id), the
server aggregates the uploads in ascending client order, and the store's means are taken in
client order; so ``metrics.jsonl`` is bit-identical (``wall_s`` aside), with minibatch SGD,
momentum, weight decay and stragglers all drawing randomness. The permuted run keeps the
clients' states in the disk store, which must not change a bit either.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import fedpd
from fedpd import registry
from fedpd.simulation import Simulation

PROBLEM = {"name": "synthetic", "clients": 10, "dim": 5, "classes": 3, "max_client_samples": 30, "seed": 1}
SGD = {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 4, "straggler_fraction": 0.4, "momentum": 0.5,
       "weight_decay": 1e-3}
#: options that make an algorithm draw more of its randomness (FedPD's coin) or take its own path
EXTRA = {"fedpd": {"p": 0.5}, "fedpd_vr": {"p": 0.5, "refresh_every": 2}, "primal_dual": {"virtual_dual": True},
         "stochastic_saga": {"batch_size": 3}, "stochastic_admm": {"batch_size": 3}}


def config(name: str) -> dict:
    cls = registry.ALGORITHMS[name].build
    cfg = {"problem": PROBLEM, "algorithm": {"name": name, **EXTRA.get(name, {})},
           "sampler": {"name": "all"} if cls.participation == "all" else {"name": "uniform", "clients_per_round": 6},
           "run": {"rounds": 4, "eval_every": 2, "dtype": "float64", "seed": 3, "personal_eval": "always"}}
    if cls.uses_solver:
        cfg["solver"] = {k: v for k, v in SGD.items() if k not in cls.unused_solver_options}
    return cfg


def metrics(path: Path) -> list[dict]:
    records = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        r.pop("wall_s")
    return records


@pytest.fixture
def permuted(monkeypatch):
    """Make the simulation hand the engine its participants in a shuffled order."""
    draw = Simulation.participants

    def shuffled(self, round):
        ids = draw(self, round)
        return ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(100 + round))]

    monkeypatch.setattr(Simulation, "participants", shuffled)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(registry.ALGORITHMS))
def test_metrics_do_not_depend_on_chunking_or_order(name, tmp_path, request):
    cfg = config(name)
    runs = {}
    for chunk in (0, 1, 3):
        out = tmp_path / f"chunk{chunk}"
        fedpd.run(cfg, out, overrides=[f"run.client_chunk={chunk}"])
        runs[chunk] = metrics(out)
    out = tmp_path / "workers"  # on 2 worker processes, in chunks of 2 there
    fedpd.run(cfg, out, overrides=["run.workers=2", "run.client_chunk=2"])
    runs["workers"] = metrics(out)
    out = tmp_path / "loopback"  # by messages, to three nodes with file stores
    fedpd.run(cfg, out, overrides=["run.engine=loopback", "run.nodes=3"])
    runs["loopback"] = metrics(out)
    request.getfixturevalue("permuted")
    fedpd.run(cfg, tmp_path / "permuted", overrides=["run.client_chunk=2", "run.store=disk"])  # on disk too
    runs["permuted, disk store"] = metrics(tmp_path / "permuted")
    reference = runs[0]
    assert len(reference) == 3 and reference[-1]["round"] == 4
    assert reference[-1]["train_loss"] != reference[0]["train_loss"]  # the model moved
    for key, records in runs.items():
        assert records == reference, f"client_chunk / order {key!r} changed the metrics"


@pytest.mark.parametrize("name", ["fedavg", "scaffold", "fedpd", "afedpd", "fedplus", "apfl", "perfedavg", "qffl"])
def test_per_client_execution_is_executor_independent_and_agrees_with_vectorised(name, tmp_path, request):
    """run.execution = "per_client" (large models' way: one client at a time through the module)
    gives one result in any order and on remote nodes, and the vectorised numbers to rounding."""
    cfg = config(name)
    per_client = ["run.execution=per_client"]
    reference = metrics_of(fedpd.run(cfg, tmp_path / "a", overrides=per_client))
    loopback = metrics_of(fedpd.run(cfg, tmp_path / "b", overrides=[*per_client, "run.engine=loopback", "run.nodes=3"]))
    assert loopback == reference
    vectorised = metrics_of(fedpd.run(cfg, tmp_path / "c"))
    for a, b in zip(reference, vectorised):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], float):
                assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
            else:
                assert a[key] == b[key], key
    request.getfixturevalue("permuted")
    assert metrics_of(fedpd.run(cfg, tmp_path / "d", overrides=per_client)) == reference


def metrics_of(path_or_result) -> list[dict]:
    return metrics(path_or_result.out_dir)


def test_auto_execution_is_vectorised_on_a_gpu_and_by_model_size_on_the_cpu():
    """run.execution = "auto": the CPU runs models above PER_CLIENT_ABOVE parameters per client (they
    are faster so there), a GPU vectorises every model (2.4-3.4x faster for LeNet on an H100);
    an explicit choice holds on every device."""
    from fedpd.build import PER_CLIENT_ABOVE, runs_per_client

    assert PER_CLIENT_ABOVE == 50_000
    lenet = 62_006
    assert runs_per_client("auto", lenet, "cpu") is True
    assert runs_per_client("auto", 7_850, "cpu") is False
    assert runs_per_client("auto", lenet, "cuda") is False
    assert runs_per_client("auto", lenet, torch.device("cuda", 0)) is False
    assert runs_per_client("per_client", 7_850, "cuda") is True
    assert runs_per_client("vectorised", lenet, "cpu") is False
