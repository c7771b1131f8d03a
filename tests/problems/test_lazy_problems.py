"""Problems and evaluation that scale with the participants: the Synthetic
problem generates a client's samples on demand from the client's own stream — the same data as
the eager build — and ``run.eval_clients`` takes the metrics over a fixed seeded sample of
clients, saying so in every record."""

from __future__ import annotations

import json

import pytest
import torch

import fedpd
from fedpd.cli import main
from fedpd.evaluation import evaluate, evaluate_personal
from fedpd.problems import lazy as on_demand
from fedpd.problems.lazy import LazyRows, is_lazy
from fedpd.problems.synthetic import fedprox_synthetic
from fedpd.streams import ClientStreams

SMALL = dict(clients=40, dim=6, classes=3, max_client_samples=60, seed=3)


def pair(**kw):
    return fedprox_synthetic(**{**SMALL, **kw}, lazy=False), fedprox_synthetic(**{**SMALL, **kw}, lazy=True)


@pytest.mark.parametrize("iid", [False, True])
def test_lazy_build_gives_the_eager_build_s_data(iid):
    eager, lazy = pair(iid=iid)
    assert not is_lazy(eager.train) and is_lazy(lazy.train) and isinstance(lazy.test.y, LazyRows)
    for split in ("train", "test"):
        e, z = getattr(eager, split), getattr(lazy, split)
        assert torch.equal(e.offsets, z.offsets)
        assert torch.equal(e.x, z.x[:]) and torch.equal(e.y, z.y[:])
        assert torch.equal(e.x[17:250], z.x[17:250])
    ids = torch.tensor([31, 2, 0, 39, 2])
    for a, b in zip(eager.train.padded(ids), lazy.train.padded(ids)):
        assert torch.equal(a, b)
    rng = ClientStreams.of(7, "batches", 3, ids)
    for a, b in zip(eager.train.minibatch(ids, 5, rng.child(0)), lazy.train.minibatch(ids, 5, rng.child(0))):
        assert torch.equal(a, b)


def test_clients_do_not_depend_on_how_many_there_are():
    """Client k's samples come from its own generator: the first 10 clients of a problem of 10
    and of 10⁵ (built lazily) hold the same samples where their sizes agree."""
    few = fedprox_synthetic(clients=10, seed=4)
    many = fedprox_synthetic(clients=100_000, seed=4)
    assert is_lazy(many.train) and not is_lazy(few.train)
    assert torch.equal(few.train.sizes, many.train.sizes[:10])  # the sizes' draw starts the same
    for k in range(10):
        a, b = int(few.train.offsets[k]), int(few.train.offsets[k + 1])
        assert torch.equal(few.train.x[a:b], many.train.x[a:b])


def test_a_million_clients_build_without_generating_their_data():
    problem = fedprox_synthetic(clients=10**6)
    source = problem.train.x.source
    assert problem.num_clients == 10**6 and is_lazy(problem.train)
    assert problem.train.x.shape[0] > 10**8  # hundreds of millions of samples, none in memory
    assert source.generated <= 1  # one client, for the shapes
    X, Y, W = problem.train.padded(torch.tensor([999_999, 3]))
    assert X.shape[0] == 2 and source.generated <= 3


def test_float32_lazy_equals_float32_eager():
    eager, lazy = pair()
    eager.to(torch.float32)
    lazy.to(torch.float32)
    assert lazy.train.x[:5].dtype == torch.float32
    assert torch.equal(eager.train.x, lazy.train.x[:])


def test_evaluation_is_bit_identical_on_the_lazy_split():
    eager, lazy = pair()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(eager.dim, generator=g, dtype=torch.float64)
    assert evaluate(eager, x) == evaluate(lazy, x)
    some = torch.tensor([1, 5, 6, 22, 39])
    assert evaluate(eager, x, some) == evaluate(lazy, x, some)
    models = torch.randn(eager.num_clients, eager.dim, generator=g, dtype=torch.float64)
    assert evaluate_personal(eager, models) == evaluate_personal(lazy, models)
    assert evaluate_personal(eager, models, clients=some) == evaluate_personal(lazy, models, clients=some)


def test_evaluation_over_a_sample_is_the_mean_of_those_clients_f_i():
    problem, _ = pair()
    x = torch.randn(problem.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    some = torch.tensor([0, 4, 9, 30])
    losses, tests, n_test = [], 0.0, 0
    for i in some.tolist():
        a, b = int(problem.train.offsets[i]), int(problem.train.offsets[i + 1])
        losses.append(problem.loss(problem.model(x, problem.train.x[a:b]), problem.train.y[a:b]).mean())
        a, b = int(problem.test.offsets[i]), int(problem.test.offsets[i + 1])
        tests += float(problem.loss(problem.model(x, problem.test.x[a:b]), problem.test.y[a:b]).sum())
        n_test += b - a
    m = evaluate(problem, x, some)
    assert m["train_loss"] == pytest.approx(float(torch.stack(losses).mean()), rel=1e-12)
    assert m["test_loss"] == pytest.approx(tests / n_test, rel=1e-12)
    assert m["train_loss"] != pytest.approx(evaluate(problem, x)["train_loss"], rel=1e-6)


def config(**run) -> dict:
    return {"problem": {"name": "synthetic", **SMALL}, "algorithm": {"name": "afedpd", "eta": 10.0},
            "solver": {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 4},
            "sampler": {"name": "uniform", "clients_per_round": 5},
            "run": {"rounds": 6, "eval_every": 2, "seed": 1, **run}}


def records(result) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in result.history]


def test_a_run_on_the_lazy_problem_equals_the_eager_run(monkeypatch):
    eager = records(fedpd.run(config()))
    monkeypatch.setattr(on_demand, "EAGER_LIMIT", 0)  # every synthetic problem built lazily
    lazy = fedpd.run(config())
    assert is_lazy(lazy.simulation.problem.train)
    assert records(lazy) == eager


def test_eval_clients_records_say_so_and_the_sample_is_fixed():
    full = records(fedpd.run(config()))
    assert all("eval_clients" not in r for r in full)
    everyone = records(fedpd.run(config(eval_clients=SMALL["clients"])))  # at least N: every client
    assert everyone == full
    result = fedpd.run(config(eval_clients=7))
    sampled = records(result)
    assert all(r["eval_clients"] == 7 for r in sampled)
    assert [r["train_loss"] for r in sampled] != [r["train_loss"] for r in full]
    # the same (fixed) 7 clients at every evaluation: recompute the last record's metric on them
    sim = result.simulation
    ids = sim.eval_sample()
    assert ids.numel() == 7 and torch.equal(ids, ids.sort().values) and torch.equal(ids, sim.eval_sample())
    assert evaluate(sim.problem, sim.model(), ids)["train_loss"] == sampled[-1]["train_loss"]
    # not redrawn by round: the first record (the initial model) over the same clients
    assert fedpd.run(config(eval_clients=7, rounds=2)).history[0]["train_loss"] == sampled[0]["train_loss"]


def test_a_million_client_run_costs_what_its_participants_cost(tmp_path):
    cfg = {"problem": {"name": "synthetic", "clients": 10**6, "dim": 10, "classes": 3},
           "algorithm": {"name": "feddyn"}, "solver": {"name": "sgd", "lr": 0.05, "local_steps": 2, "batch_size": 4},
           "sampler": {"name": "uniform", "clients_per_round": 10},
           "run": {"rounds": 3, "eval_every": 3, "eval_clients": 50, "store": "disk"}}
    result = fedpd.run(cfg, tmp_path / "r")
    source = result.simulation.problem.train.x.source
    assert [r["eval_clients"] for r in result.history] == [50, 50]
    assert source.generated <= 1 + 3 * 10 + 50  # the participants and the evaluation sample, no one else
    assert len(result.simulation.store) <= 30
    lines = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["round"] == 3 and lines[-1]["eval_clients"] == 50


def test_a_data_attack_on_a_lazy_problem_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[problem]\nname = "synthetic"\nclients = 1000000\n[algorithm]\nname = "fedavg"\n'
                   '[attack]\nname = "label_flip"\nfraction = 0.1\n[run]\nrounds = 1\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "generated on demand" in err, err


@pytest.mark.parametrize("override, needle", [("problem.clients=1000000000000", "problem.clients"),
                                              ("problem.dim=300000000", "problem.dim")])
def test_n_or_d_too_large_to_build_is_one_line(tmp_path, capsys, override, needle):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[problem]\nname = "synthetic"\nclients = 3\n[algorithm]\nname = "feddyn"\n[run]\nrounds = 1\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet", "--set", override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "of memory to build" in err, err
    assert not (tmp_path / "r").exists()
