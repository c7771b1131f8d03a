"""run.eval_metrics and run.eval_train_samples: a run takes only the metrics it names, the
sampled training loss is the loss of the same seeded sample computed directly, the defaults are
unchanged, and bad values are one line."""

from __future__ import annotations

import pytest
import torch

from fedpd.cli import main
from fedpd.config import load_config
from fedpd.evaluation import METRICS, evaluate
from fedpd.simulation import Simulation
from fedpd.streams import server_generator

PROBLEM = {"name": "synthetic", "clients": 8, "dim": 4, "classes": 3, "max_client_samples": 20, "seed": 2}


def sim(**run) -> Simulation:
    return Simulation(load_config({"problem": PROBLEM, "algorithm": {"name": "fedavg"},
                                   "solver": {"name": "sgd", "lr": 0.1, "local_steps": 2, "batch_size": 4},
                                   "run": {"rounds": 2, "seed": 7, **run}}))


def metrics_after_a_round(s: Simulation) -> dict:
    s.step()
    return {k: v for k, v in s.metrics().items() if k != "wall_s"}


def test_defaults_unchanged_and_chosen_metrics_only():
    default = metrics_after_a_round(sim())
    assert set(METRICS) <= set(default)
    every = metrics_after_a_round(sim(eval_metrics=list(METRICS)))
    assert every == default  # naming every metric is the default, bit for bit
    s = sim(eval_metrics=["test_acc", "train_loss"])
    chosen = metrics_after_a_round(s)
    assert "grad_norm_sq" not in chosen and "test_loss" not in chosen
    assert chosen["test_acc"] == default["test_acc"] and chosen["train_loss"] == pytest.approx(default["train_loss"],
                                                                                                rel=1e-12)
    assert "train_loss" not in evaluate(s.problem, s.model(), metrics=["test_loss"])
    # the resolved config of a default run does not name the new options (old checkpoints resume)
    assert "eval_metrics" not in sim().cfg.to_toml() and "eval_train_samples" not in sim().cfg.to_toml()


def direct_loss(problem, x, positions, pool, weights_of) -> float:
    """f's estimate on the given training sample positions, by hand: (P/m) Σ ℓ_j / (N·n_i(j))."""
    split = problem.train
    with torch.no_grad():
        losses = problem.loss(problem.model(x, split.x[positions]), split.y[positions])
    owner = torch.searchsorted(split.offsets, positions, right=True) - 1
    return float((losses * weights_of(owner).to(losses.dtype)).sum() * pool / positions.numel())


def test_sampled_train_loss_is_the_loss_of_the_same_seeded_sample():
    m = 30
    s = sim(eval_metrics=["train_loss", "test_acc"], eval_train_samples=m)
    got = metrics_after_a_round(s)
    split, n = s.problem.train, s.problem.train.y.shape[0]
    positions = torch.randperm(n, generator=server_generator(7, "eval_train_samples", 0))[:m].sort().values
    sizes = split.sizes.double()
    expected = direct_loss(s.problem, s.model(), positions, n, lambda i: 1.0 / (len(sizes) * sizes[i]))
    assert got["eval_train_samples"] == m and got["train_loss"] == pytest.approx(expected, rel=1e-9)
    assert got["train_loss"] != pytest.approx(metrics_after_a_round(sim())["train_loss"], rel=1e-6)  # a sample
    s.step()  # the same sample in every evaluation
    assert torch.equal(s.eval_train_sample(None), positions)
    # with run.eval_clients: the sample is drawn from those clients' samples
    c = sim(eval_clients=3, eval_train_samples=10)
    record = metrics_after_a_round(c)
    ids = c.eval_sample()
    owners = torch.searchsorted(split.offsets, c.eval_train_sample(ids), right=True) - 1
    assert set(owners.tolist()) <= set(ids.tolist()) and record["eval_train_samples"] == 10
    # at least every sample: the plain metric, no record key
    everyone = metrics_after_a_round(sim(eval_train_samples=10 ** 6))
    assert "eval_train_samples" not in everyone and everyone == metrics_after_a_round(sim())


@pytest.mark.parametrize("override, needle", [
    ('run.eval_metrics=["accuracy"]', "accuracy"),
    ("run.eval_metrics=[]", "run.eval_metrics"),
    ('run.eval_metrics=["test_acc", "test_acc"]', "run.eval_metrics"),
    ("run.eval_train_samples=0", "run.eval_train_samples"),
    ('run.eval_metrics=["test_acc"]', None),  # fine
])
def test_bad_values_are_one_line(tmp_path, capsys, override, needle):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[problem]\nname = "least_squares"\n[algorithm]\nname = "fedavg"\n[solver]\nname = "gd"\n'
                   '[run]\nrounds = 1\n')
    code = main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet", "--set", override])
    err = capsys.readouterr().err.strip()
    if needle is None:
        assert code == 0, err
        return
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_train_samples_without_a_train_metric_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[problem]\nname = "least_squares"\n[algorithm]\nname = "fedavg"\n[solver]\nname = "gd"\n'
                   '[run]\nrounds = 1\neval_metrics = ["test_loss"]\neval_train_samples = 5\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run.eval_train_samples" in err and "train_loss" in err, err
