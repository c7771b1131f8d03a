"""FedGeoMed+ / FedCoMed+ with ``delta_rule = "spread"``: δ on the scale of the uploads, so the median
variants act as medians whatever the scale of the model."""

from __future__ import annotations

import pytest
import torch

from fedpd import run
from fedpd.aggregators import coordinate_median, fedplus_aggregate
from fedpd.algorithms.fedplus_delta import rule_delta, spread
from fedpd.config import load_config
from fedpd.data import resolve_data_dir
from fedpd.errors import ConfigError

#: where fedpd itself looks: $FEDPD_DATA, else the cache directory the README names (tests needing a
#: dataset skip, naming it, when it is not there)
DATA_DIR = str(resolve_data_dir(None))


def _rows(scale: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """16 honest rows around c with per-coordinate spread ``scale``, 4 IPM rows at −100 · c (the
    honest update is c, the broadcast model 0)."""
    g = torch.Generator().manual_seed(seed)
    c = torch.full((50,), 5 * scale, dtype=torch.float64)
    honest = c + scale * torch.randn(16, 50, generator=g, dtype=torch.float64)
    return torch.cat([honest, (-100 * honest.mean(0)).expand(4, 50)]), honest


def test_spread_is_the_median_residual_and_ignores_a_minority():
    rows, honest = _rows(1.0)
    m, _ = coordinate_median(rows)
    r = (rows - m).abs().flatten()
    assert spread(rows, "l1") == pytest.approx(float(r[r > 0].median()))
    assert spread(rows, "l2") == pytest.approx(float((rows - m).norm(dim=1).median()))
    # the four far rows barely move it: it is the honest rows' scale
    assert 0.3 < spread(rows, "l1") < 3.0
    assert spread(rows * 1000, "l1") == pytest.approx(1000 * spread(rows, "l1"))  # scale-equivariant
    # coordinates nobody moves do not drive it to 0
    padded = torch.cat([rows, torch.zeros(20, 500, dtype=torch.float64)], 1)
    assert spread(padded, "l1") == pytest.approx(spread(rows, "l1"))
    assert spread(torch.ones(5, 3), "l1") == 0.0


@pytest.mark.parametrize("kind", ["l1", "l2"])
@pytest.mark.parametrize("scale", [1e-5, 1.0, 1e3])
def test_with_the_rule_eq25_is_a_median_at_every_scale(kind, scale):
    """Fixed δ = 0.1 is a median for big models and a mean for small ones; δ = 0.5·spread is a
    median at every scale: IPM's rows move it by a fraction of the honest spread only."""
    rows, honest = _rows(scale)
    med, _ = coordinate_median(honest)
    mean = rows.mean(0)
    ruled, info = fedplus_aggregate(rows, kind, rule_delta(rows, kind, 0.5), init="median", max_iter=5000)
    assert info["converged"]
    assert (ruled - med).abs().max() < 1.5 * scale  # within the honest spread of the honest median
    assert (mean - med).abs().max() > 50 * scale  # the mean is dragged far away
    fixed, _ = fedplus_aggregate(rows, kind, 0.1, init="median", max_iter=5000)
    r = rows - mean
    within = (r.abs().max() if kind == "l1" else r.norm(dim=1).max()) < 0.1
    assert bool(within) == (scale < 1e-3)
    if within:  # every residual, the attackers' too, below δ: the "median" variant is exactly the mean
        assert torch.allclose(fixed, mean, rtol=0, atol=1e-9 * float(mean.abs().max()))


def _ipm(algorithm: dict, rounds: int = 15) -> float:
    cfg = {"problem": {"name": "fedpd_logreg", "non_iid": "weak", "clients": 20, "samples_per_client": 100},
           "algorithm": {"sigma": 1.0, "init": "median", **algorithm},
           "solver": {"name": "gd", "lr": 0.5, "local_steps": 5}, "sampler": {"name": "all"},
           "attack": {"name": "ipm", "fraction": 0.2, "epsilon": 100.0},
           "run": {"rounds": rounds, "eval_every": rounds}}
    return run(cfg).history[-1]["test_acc"]


@pytest.mark.parametrize("name", ["fedcomed_plus", "fedgeomed_plus"])
def test_median_variant_holds_under_ipm_100_with_the_rule(name):
    """δ too large for the model (here 100): the median variant is a mean and IPM ε = 100 (4 of 20)
    breaks it; with delta_rule = "spread" the same method acts as a median and keeps its accuracy."""
    clean = run({"problem": {"name": "fedpd_logreg", "non_iid": "weak", "clients": 20, "samples_per_client": 100},
                 "algorithm": {"name": name, "sigma": 1.0, "delta": 0.5, "delta_rule": "spread", "init": "median"},
                 "solver": {"name": "gd", "lr": 0.5, "local_steps": 5}, "run": {"rounds": 15, "eval_every": 15}}
                ).history[-1]["test_acc"]
    ruled = _ipm({"name": name, "delta": 0.5, "delta_rule": "spread"})
    fixed = _ipm({"name": name, "delta": 100.0})
    assert clean > 0.85
    assert ruled > clean - 0.05
    assert fixed < 0.6


def test_delta_travels_with_the_model_and_is_counted():
    cfg = {"problem": {"name": "least_squares", "clients": 4, "dim": 3}, "solver": {"name": "gd", "lr": 0.1},
           "algorithm": {"name": "fedcomed_plus", "delta": 0.5, "delta_rule": "spread"}, "run": {"rounds": 3}}
    res = run(cfg)
    fixed = run({**cfg, "algorithm": {"name": "fedcomed_plus", "delta": 0.5}})
    assert res.final("downlink_floats") == fixed.final("downlink_floats") + 3 * 4  # one float per participant
    server = res.simulation.server
    assert server["delta"].ndim == 0 and float(server["delta"]) > 0


@pytest.mark.parametrize("algorithm, key", [
    ({"name": "fedplus", "psi": "sq_l2", "delta_rule": "spread"}, "delta_rule"),
    ({"name": "fedplus", "psi": "l1", "delta_rule": "spread", "aggregator": "coordinate_median"}, "delta_rule"),
    ({"name": "fedplus", "psi": "l2", "delta_rule": "spread", "groups": [{"pattern": "*", "psi": "l1"}]}, "delta_rule"),
    ({"name": "fedavg_plus", "delta_rule": "spread"}, "delta_rule"),
    ({"name": "fedcomed_plus", "delta_rule": "auto"}, "delta_rule"),
])
def test_the_rule_is_refused_where_it_means_nothing(algorithm, key):
    with pytest.raises(ConfigError, match=f"algorithm.{key}"):
        load_config({"problem": {"name": "least_squares"}, "algorithm": algorithm})


def test_fixed_rule_is_unchanged():
    cfg = {"problem": {"name": "least_squares", "clients": 4, "dim": 3}, "solver": {"name": "gd", "lr": 0.1},
           "algorithm": {"name": "fedgeomed_plus", "delta": 0.5}, "run": {"rounds": 3}}
    a = run(cfg).history
    b = run({**cfg, "algorithm": {**cfg["algorithm"], "delta_rule": "fixed"}}).history
    strip = lambda h: [{k: v for k, v in r.items() if k != "wall_s"} for r in h]  # noqa: E731
    assert strip(a) == strip(b)


def test_mnist_fedcomed_plus_ipm_100_fixed_falls_spread_holds():
    """The measurement on real MNIST: FedCoMed+ with δ = 0.1 thresholds nothing (it is the
    mean) and IPM ε = 100 breaks it; with the rule it holds."""
    from fedpd.data import dataset_status

    if dataset_status("mnist", DATA_DIR).state != "present":
        pytest.skip(f"MNIST not found in {DATA_DIR} (set FEDPD_DATA to the folder that holds mnist/)")

    def acc(algorithm):
        cfg = {"problem": {"name": "dataset", "dataset": "mnist", "clients": 20, "data_dir": DATA_DIR,
                           "max_samples": 20000},
               "algorithm": {"name": "fedcomed_plus", "sigma": 1.0, "init": "median", **algorithm},
               "solver": {"name": "sgd", "lr": 0.05, "local_steps": 20, "batch_size": 50},
               "attack": {"name": "ipm", "fraction": 0.2, "epsilon": 100.0},
               "run": {"rounds": 15, "eval_every": 15, "threads": 1}}
        return run(cfg).history[-1]["test_acc"]

    assert acc({"delta": 0.1}) < 0.3
    assert acc({"delta": 0.5, "delta_rule": "spread"}) > 0.85
