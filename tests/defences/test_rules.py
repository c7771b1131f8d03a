"""Every robust rule (fedpd.aggregators): robustness to two huge outliers, finite rows, the registry
entries and their options, and the one-line errors of bad options and inputs — a typo in
aggregator_options named with the options the rule takes. Each rule's own numbers are in its
module (test_krum.py, test_bulyan.py, ...)."""

from __future__ import annotations

import pytest
import torch

from fedpd.aggregators import (
    AGGREGATORS,
    coordinate_median,
    fedplus_aggregate,
    finite_rows,
    geometric_median,
    krum,
    make_aggregator,
    mean,
    trimmed_mean,
)
from fedpd.errors import ConfigError
from fedpd.options import Options
from fedpd.registry import AGGREGATORS as LISTED
from helpers import one_line_error, run_cli
from registry_checks import check_rule

DT = torch.float64


def _w(K=7, d=3, seed=0):
    return torch.randn(K, d, generator=torch.Generator().manual_seed(seed), dtype=DT)


# --- robustness ----------------------------------------------------------------------------
def test_robust_aggregators_resist_two_huge_outliers():
    g = torch.Generator().manual_seed(7)
    K, d = 10, 20
    centre = torch.randn(d, generator=g, dtype=DT)
    w = centre + 0.1 * torch.randn(K, d, generator=g, dtype=DT)
    inlier_mean = w[2:].mean(0)
    w[:2] = 1e6 * torch.randn(2, d, generator=g, dtype=DT)
    near = 0.2  # inlier spread per coordinate is 0.1; the inlier mean's distance to the centre ~0.15
    results = {
        "mean": mean(w)[0],
        "geometric_median": geometric_median(w, max_iter=1000)[0],
        "coordinate_median": coordinate_median(w)[0],
        "trimmed_mean": trimmed_mean(w, 0.2)[0],
        "krum": krum(w, n_byzantine=2)[0],
        "multi_krum": krum(w, n_byzantine=2, m=6)[0],
        "fedplus_l2": fedplus_aggregate(w, "l2", 0.1, init="median")[0],
        "fedplus_l1": fedplus_aggregate(w, "l1", 0.1, init="median")[0],
    }
    assert (results.pop("mean") - inlier_mean).norm() > 1e4
    for name, agg in results.items():
        err = (agg - inlier_mean).norm() / d**0.5  # RMS per coordinate
        assert err < near, (name, float(err))


# --- finite rows, registry, errors ---------------------------------------------------------
def test_finite_rows():
    w = _w(K=4, d=3)
    w[1, 2] = float("nan")
    w[3, 0] = float("-inf")
    assert finite_rows(w).tolist() == [True, False, True, False]


def test_registry_and_make_aggregator():
    for name, fn in AGGREGATORS.items():  # every rule, whatever the registry holds (tests/registry_checks.py)
        check_rule(name, fn)
        assert issubclass(fn.Options, Options)
    w = _w(K=8, d=3)
    beta = torch.rand(8, generator=torch.Generator().manual_seed(0), dtype=DT)
    agg, info = make_aggregator("mean")(w, beta)
    torch.testing.assert_close(agg, mean(w, beta)[0])
    agg, info = make_aggregator("krum", n_byzantine=1, m=2)(w)
    assert agg.tolist() == krum(w, 1, m=2)[0].tolist() and len(info["selected"]) == 2
    agg, _ = make_aggregator("fedplus", prox_kind="sq_l2", delta=0.5)(w)
    torch.testing.assert_close(agg, w.mean(0), rtol=0, atol=1e-10)
    agg, _ = make_aggregator("trimmed_mean", trim_ratio=0.25)(w, weights=beta)
    torch.testing.assert_close(agg, trimmed_mean(w, 0.25)[0])
    make_aggregator("geometric_median", eps=1e-6, tol=1e-6, max_iter=10)(w)
    make_aggregator("coordinate_median")(w, beta)


def test_make_aggregator_errors():
    with pytest.raises(ConfigError, match="mean, geometric_median"):
        make_aggregator("median")
    with pytest.raises(ConfigError, match="alpha: unknown key.*allowed: eps, tol, max_iter"):
        make_aggregator("geometric_median", alpha=1)
    with pytest.raises(ConfigError, match="n_byzantine: missing"):
        make_aggregator("krum")
    with pytest.raises(ConfigError, match="trim_ratio: missing"):
        make_aggregator("trimmed_mean")
    with pytest.raises(ConfigError, match="trim_ratio"):
        make_aggregator("trimmed_mean", trim_ratio=0.7)
    with pytest.raises(ConfigError, match="prox_kind"):
        make_aggregator("fedplus", prox_kind="huber")
    with pytest.raises(ConfigError, match="delta"):
        make_aggregator("fedplus", delta=-1)
    with pytest.raises(ConfigError, match="group kind"):
        make_aggregator("fedplus", groups=[(slice(0, 2), "bad", 0.1)])
    with pytest.raises(ConfigError, match="max_iter"):
        make_aggregator("geometric_median", max_iter=0)
    with pytest.raises(ConfigError, match="tol"):
        make_aggregator("fedplus", tol=0.0)
    with pytest.raises(ConfigError, match="init"):
        make_aggregator("fedplus", init="trimmed")


def test_bad_inputs_raise_config_error():
    w = _w(K=4, d=3)
    for fn in (mean, geometric_median, coordinate_median):
        with pytest.raises(ConfigError, match="weights must have shape"):
            fn(w, torch.ones(3, dtype=DT))
        with pytest.raises(ConfigError, match=">= 0"):
            fn(w, torch.tensor([1.0, -1.0, 1.0, 1.0], dtype=DT))
        with pytest.raises(ConfigError, match="all be zero"):
            fn(w, torch.zeros(4, dtype=DT))
        with pytest.raises(ConfigError, match=r"shape \[K, d\]"):
            fn(w[0])
        with pytest.raises(ConfigError, match="floating"):
            fn(torch.ones(4, 3, dtype=torch.long))
    with pytest.raises(ConfigError, match="eps"):
        geometric_median(w, eps=0.0)
    with pytest.raises(ConfigError, match="prox_kind"):
        fedplus_aggregate(w, "nope", 0.1)
    with pytest.raises(ConfigError, match="delta"):
        fedplus_aggregate(w, "l2", -0.1)
    with pytest.raises(ConfigError, match="init"):
        fedplus_aggregate(w, "l2", 0.1, init=torch.zeros(5, dtype=DT))
    with pytest.raises(ConfigError, match="overlap"):
        fedplus_aggregate(w, "l2", 0.1, groups=[(slice(0, 5), "l1", 0.1), (slice(0, 1), "l1", 0.1)])
    with pytest.raises(ConfigError, match="init"):
        fedplus_aggregate(w, "l2", 0.1, init="median_of_means")


# --- the rules' registry entries and options --------------------------------------
@pytest.mark.parametrize("name, options", [("centered_clipping", {"tau": 1.0, "iterations": 3}),
                                           ("norm_bounding", {"max_norm": 1.0}), ("bulyan", {"n_byzantine": 1})])
def test_registered_with_their_options(name, options):
    assert name in AGGREGATORS and name in LISTED
    entry = LISTED[name]
    assert set(options) <= set(entry.options.model_fields) and "\n" not in entry.description
    w = torch.randn(7, 3, generator=torch.Generator().manual_seed(0), dtype=DT)
    agg, _ = make_aggregator(name, **options)(w, reference=torch.zeros(3, dtype=DT))
    assert agg.shape == (3,)


@pytest.mark.parametrize("name, options, message", [
    ("centered_clipping", {}, "aggregator_options.tau: missing"),
    ("centered_clipping", {"tau": -1.0}, "aggregator_options.tau"),
    ("centered_clipping", {"tau": 1.0, "iterations": 0}, "aggregator_options.iterations"),
    ("centered_clipping", {"tau": 1.0, "radius": 2}, "aggregator_options.radius"),
    ("norm_bounding", {}, "aggregator_options.max_norm: missing"),
    ("norm_bounding", {"max_norm": 0}, "aggregator_options.max_norm"),
    ("bulyan", {}, "aggregator_options.n_byzantine: missing"),
    ("bulyan", {"n_byzantine": -1}, "aggregator_options.n_byzantine"),
])
def test_bad_options_give_one_line(name, options, message):
    with pytest.raises(ConfigError) as err:
        make_aggregator(name, **options)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_fedpd_list_shows_them(capsys):
    from fedpd.cli import main

    for name, option in (("centered_clipping", "tau"), ("bulyan", "n_byzantine"), ("norm_bounding", "max_norm")):
        main(["list", name])
        out = capsys.readouterr().out
        assert f'algorithm.aggregator = "{name}"' in out and option in out


KRUM = '[problem]\nname = "least_squares"\nclients = 8\n[algorithm]\nname = "fedavg"\naggregator = "krum"\n'


@pytest.mark.parametrize("form", ["toml", "dotted", "inline"])
def test_a_typo_in_aggregator_options_names_the_key_and_the_aggregators_options(tmp_path, capsys, form):
    config = tmp_path / "krum.toml"
    config.write_text(KRUM + ("aggregator_options = {f = 100}\n" if form == "toml" else ""))
    extra = {"toml": [], "dotted": ["--set", "algorithm.aggregator_options.f=100"],
             "inline": ["--set", "algorithm.aggregator_options={f = 100}"]}[form]
    line = one_line_error(*run_cli(["run", config, "--out", tmp_path / "r", "--quiet", *extra], capsys)[::2])
    assert "algorithm.aggregator_options.f: unknown key (allowed for aggregator 'krum': n_byzantine, m)" in line, line
    assert not (tmp_path / "r").exists()
