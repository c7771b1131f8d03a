"""Robust aggregators and Fed+'s aggregation (eq. (25)): references, hand examples, limits,
robustness, registry and argument errors; and every algorithm whose server averages models
routes that average through them (and docs/fedplus.md lists exactly those algorithms)."""

import re
from pathlib import Path

import numpy as np
import pytest

from fedpd.options import Options
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
from fedpd.algorithms.fedopt import ServerOptimiser
from fedpd.algorithms.robust import RobustMeans
from fedpd.errors import ConfigError
from fedpd.prox import prox
from fedpd.registry import ALGORITHMS
from fedpd.runner import run
from tests.helpers import context, server_context, simulation
from tests.registry_checks import check_rule

DT = torch.float64


def _w(K=7, d=3, seed=0):
    return torch.randn(K, d, generator=torch.Generator().manual_seed(seed), dtype=DT)


def _reference_geometric_median(w, beta=None):
    """Independent solver: damped Newton on Σ β_k ‖w_k − z‖ in float64 numpy, explicit loop
    over rows, backtracking line search, run to a tiny gradient."""
    W = np.asarray(w, dtype=np.float64)
    K, d = W.shape
    b = np.full(K, 1.0 / K) if beta is None else np.asarray(beta, dtype=np.float64) / np.sum(beta)

    def f(z):
        return sum(b[k] * np.linalg.norm(W[k] - z) for k in range(K))

    # the minimiser may be a data point w_j: optimal iff ‖Σ_{k≠j} β_k (w_j − w_k)/‖w_j − w_k‖‖ <= β_j
    for j in range(K):
        pull = sum(b[k] * (W[j] - W[k]) / np.linalg.norm(W[j] - W[k]) for k in range(K) if k != j)
        if np.linalg.norm(pull) <= b[j]:
            return W[j].copy(), 0.0

    z = np.median(W, axis=0)  # a different starting point from the library's
    for _ in range(200):
        g = np.zeros(d)
        H = np.zeros((d, d))
        for k in range(K):
            r = z - W[k]
            n = np.linalg.norm(r)
            g += b[k] * r / n
            H += b[k] * (np.eye(d) - np.outer(r, r) / n**2) / n
        if np.linalg.norm(g) < 1e-14:
            break
        step = np.linalg.solve(H, g)
        t = 1.0
        while f(z - t * step) > f(z) - 1e-4 * t * g @ step and t > 1e-12:
            t *= 0.5
        z = z - t * step
    return z, np.linalg.norm(g)


def _huber_objective(w, z, delta):
    """Σ_k Huber_δ(‖w_k − z‖) = Σ_k min_θ δ‖θ‖ + ½‖w_k − z − θ‖², the eq. (7) objective for
    Ψ = σδ‖·‖₂ divided by σ."""
    r = (w - z).norm(dim=-1)
    return torch.where(r <= delta, 0.5 * r**2, delta * r - 0.5 * delta**2).sum(-1)


# --- mean ----------------------------------------------------------------------------------
def test_mean_plain_and_weighted():
    w = _w()
    agg, info = mean(w)
    torch.testing.assert_close(agg, w.mean(0), rtol=0, atol=1e-15)
    assert info == {"iterations": 0, "converged": True}
    beta = torch.tensor([1.0, 2, 3, 4, 0, 0, 5], dtype=DT)
    agg_w, _ = mean(w, beta)
    torch.testing.assert_close(agg_w, (beta[:, None] * w).sum(0) / beta.sum(), rtol=0, atol=1e-15)
    torch.testing.assert_close(mean(w, 10 * beta)[0], agg_w, rtol=0, atol=1e-15)


# --- geometric median ----------------------------------------------------------------------
@pytest.mark.parametrize("seed,weighted", [(0, False), (1, False), (2, True)])
def test_geometric_median_matches_independent_newton_solve(seed, weighted):
    w = _w(K=9, d=4, seed=seed)
    beta = torch.rand(9, generator=torch.Generator().manual_seed(seed), dtype=DT) + 0.2 if weighted else None
    ref, grad_norm = _reference_geometric_median(w.numpy(), None if beta is None else beta.numpy())
    assert grad_norm < 1e-10  # the reference really is the minimiser
    agg, info = geometric_median(w, beta, tol=1e-12, max_iter=10_000)
    assert info["converged"] and 0 < info["iterations"] < 10_000
    np.testing.assert_allclose(agg.numpy(), ref, rtol=0, atol=1e-6)
    # default settings already get close and report what they did
    agg_d, info_d = geometric_median(w, beta)
    assert isinstance(info_d["iterations"], int) and isinstance(info_d["converged"], bool)
    np.testing.assert_allclose(agg_d.numpy(), ref, rtol=0, atol=1e-4)
    assert isinstance(info["objective"], float)


def test_geometric_median_reports_non_convergence_and_handles_point_at_row():
    w = _w(K=9, d=4)
    _, info = geometric_median(w, tol=1e-15, max_iter=2)
    assert info == {**info, "iterations": 2, "converged": False}
    # collinear points: the geometric median is the middle one (a data point; eps keeps it finite)
    w = torch.tensor([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [10.0, 0.0]], dtype=DT)
    agg, info = geometric_median(w, tol=1e-12, max_iter=10_000)
    assert torch.isfinite(agg).all()
    torch.testing.assert_close(agg, torch.tensor([2.0, 0.0], dtype=DT), rtol=0, atol=1e-6)


# --- coordinate median ---------------------------------------------------------------------
def test_coordinate_median_hand_examples():
    w = torch.tensor([[1.0, 40.0], [2.0, 10.0], [4.0, 30.0], [3.0, 20.0]], dtype=DT)
    agg, info = coordinate_median(w)
    # the true median of an even count is the mean of the two middle values (torch.median: lower)
    assert agg.tolist() == [2.5, 25.0]
    assert torch.median(w, dim=0).values.tolist() == [2.0, 20.0]
    assert info["iterations"] == 0 and info["converged"] is True
    odd = torch.tensor([[5.0, -1.0], [1.0, 7.0], [3.0, 0.0]], dtype=DT)
    assert coordinate_median(odd)[0].tolist() == [3.0, 0.0]


def test_weighted_coordinate_median():
    w = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=DT)
    # equal weights: same as unweighted
    assert coordinate_median(w, torch.ones(4, dtype=DT))[0].tolist() == [2.5]
    # weights 1,1,1,3: cumulative 1,2,3 | 6 of 6 -> the half is reached exactly at 3: midpoint of 3 and 4
    assert coordinate_median(w, torch.tensor([1.0, 1, 1, 3], dtype=DT))[0].tolist() == [3.5]
    assert coordinate_median(w, torch.tensor([1.0, 1, 1, 4], dtype=DT))[0].tolist() == [4.0]
    # zero weight rows are ignored, weights given as tenths (rounding in the cumulative sum)
    w2 = torch.tensor([[1.0, 5.0], [2.0, 6.0], [100.0, -100.0], [3.0, 7.0], [4.0, 8.0]], dtype=DT)
    beta = torch.tensor([0.1, 0.1, 0.0, 0.1, 0.1], dtype=DT)
    assert coordinate_median(w2, beta)[0].tolist() == [2.5, 6.5]


def test_weighted_median_minimises_weighted_l1():
    w = _w(K=8, d=5, seed=3)
    beta = torch.rand(8, generator=torch.Generator().manual_seed(4), dtype=DT)
    agg, _ = coordinate_median(w, beta)
    obj = lambda z: (beta[:, None] * (w - z).abs()).sum(0)  # noqa: E731
    for shift in (1e-3, -1e-3, 0.1, -0.1):
        assert (obj(agg + shift) >= obj(agg) - 1e-12).all()


# --- trimmed mean --------------------------------------------------------------------------
def test_trimmed_mean_drops_extremes():
    w = torch.tensor([[1.0, -50.0], [2.0, 0.0], [3.0, 1.0], [4.0, 2.0], [100.0, 3.0]], dtype=DT)
    agg, info = trimmed_mean(w, 0.2)  # b = 1 per side
    assert agg.tolist() == [3.0, 1.0]
    assert info["trimmed"] == 1 and info["weights_ignored"] is False
    assert trimmed_mean(w, 0.0)[0].tolist() == w.mean(0).tolist()
    # 0.3 * 10 rounds to 2.9999...; floor must still give 3
    w10 = torch.arange(10, dtype=DT).unsqueeze(1)
    agg10, info10 = trimmed_mean(w10, 0.3)
    assert info10["trimmed"] == 3 and agg10.tolist() == [4.5]
    assert trimmed_mean(w, 0.2, weights=torch.ones(5, dtype=DT))[1]["weights_ignored"] is True


def test_trimmed_mean_bad_ratio():
    w = _w(K=4, d=2)
    with pytest.raises(ConfigError, match="trim_ratio"):
        trimmed_mean(w, -0.1)
    assert trimmed_mean(w[:2], 0.49)[1]["trimmed"] == 0  # floor(0.98) = 0: nothing to trim, allowed
    # β = 1/2: the median for odd K, too much for even K (2 * floor(K/2) = K)
    torch.testing.assert_close(trimmed_mean(w[:3], 0.5)[0], coordinate_median(w[:3])[0], rtol=0, atol=0)
    with pytest.raises(ConfigError, match="K=4"):
        trimmed_mean(w, 0.5)
    with pytest.raises(ConfigError, match="trim_ratio"):
        trimmed_mean(w, 0.6)


# --- krum ----------------------------------------------------------------------------------
def test_krum_picks_cluster_centre_and_ignores_outlier():
    w = torch.tensor([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [100.0, 100.0]], dtype=DT)
    agg, info = krum(w, n_byzantine=1)
    # K − f − 2 = 3 nearest: centre 1+1+1 = 3, each arm 1+2+2 = 5, outlier huge
    assert agg.tolist() == [0.0, 0.0]
    assert info["selected"] == [0]
    assert info["scores"][:5] == pytest.approx([3.0, 5.0, 5.0, 5.0, 5.0], abs=1e-12) and info["scores"][5] > 1e4
    agg5, info5 = krum(w, n_byzantine=1, m=5)
    assert sorted(info5["selected"]) == [0, 1, 2, 3, 4]
    assert agg5.tolist() == [0.0, 0.0]
    # exactly tied scores (integer distances): the lower index comes first
    w = torch.tensor([[0.0, 0.0], [3.0, 0.0], [-3.0, 0.0], [0.0, 4.0], [0.0, -4.0], [50.0, 50.0]], dtype=DT)
    _, info3 = krum(w, n_byzantine=1, m=3)
    assert info3["scores"][:5] == [34.0, 59.0, 59.0, 66.0, 66.0]
    assert info3["selected"] == [0, 1, 2]


def test_krum_bad_arguments():
    w = _w(K=4, d=2)
    with pytest.raises(ConfigError, match="K > 2"):
        krum(w, n_byzantine=1)
    with pytest.raises(ConfigError, match="n_byzantine"):
        krum(w, n_byzantine=-1)
    with pytest.raises(ConfigError, match="m must"):
        krum(_w(K=6), n_byzantine=1, m=6)
    with pytest.raises(ConfigError, match="m must"):
        krum(_w(K=6), n_byzantine=1, m=0)


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


def test_fedplus_from_the_mean_moves_at_most_delta_per_step():
    """Why the robustness test starts Fed+ at the median: every step of (25) moves z by at most
    δ (in norm for l2), so from the mean a capped run cannot get past huge outliers' pull."""
    g = torch.Generator().manual_seed(7)
    w = 0.1 * torch.randn(10, 20, generator=g, dtype=DT)
    w[:2] = 1e6
    for n in (1, 10, 100):
        z, info = fedplus_aggregate(w, "l2", 0.1, max_iter=n)
        assert not info["converged"] and float((z - w.mean(0)).norm()) <= n * 0.1 + 1e-6
    z, info = fedplus_aggregate(w, "l2", 0.1, init="median")
    assert info["converged"] and info["iterations"] < 1000 and float(z.abs().max()) < 0.2


# --- Fed+ aggregation (eq. (25)) -----------------------------------------------------------
@pytest.mark.parametrize("delta", [0.01, 0.1, 1.0, 10.0])
def test_fedplus_sq_l2_is_the_mean(delta):
    w = _w(K=10, d=50, seed=1)
    agg, info = fedplus_aggregate(w, "sq_l2", delta, tol=1e-12, max_iter=100)
    torch.testing.assert_close(agg, w.mean(0), rtol=0, atol=1e-10)
    assert info["converged"] and info["iterations"] <= 2
    beta = torch.arange(1.0, 11.0, dtype=DT)
    agg_w, _ = fedplus_aggregate(w, "sq_l2", delta, weights=beta)
    torch.testing.assert_close(agg_w, mean(w, beta)[0], rtol=0, atol=1e-10)


@pytest.mark.parametrize("init", ["mean", "median", "zeros", "far"])
@pytest.mark.parametrize("kind", ["indicator", "zero"])
def test_fedplus_indicator_and_zero_give_the_mean_from_any_start(kind, init):
    """For Ψ = 0 every z is a fixed point of (25) (θ_k = w_k − z), so the iteration alone would
    return its start; the aggregate is defined as the mean, whatever ``init``."""
    w = _w(K=6, d=8)
    start = {"zeros": torch.zeros(8, dtype=DT), "far": torch.full((8,), 50.0, dtype=DT)}.get(init, init)
    agg, info = fedplus_aggregate(w, kind, 0.5, init=start)
    torch.testing.assert_close(agg, w.mean(0), rtol=0, atol=1e-12)
    assert info["converged"] and info["iterations"] <= 2
    beta = torch.arange(1.0, 7.0, dtype=DT)
    torch.testing.assert_close(fedplus_aggregate(w, kind, 0.5, weights=beta, init=start)[0], mean(w, beta)[0],
                               rtol=0, atol=1e-12)


def test_fedplus_zero_group_is_the_mean_from_any_start():
    """A "zero" group of the hybrid is the (weighted) mean on its coordinates, the other groups are
    unaffected (here l2 with small δ: the geometric median of its block)."""
    w = _w(K=7, d=6, seed=8)
    gm_head, _ = geometric_median(w[:, :3], tol=1e-14, max_iter=100_000)
    groups = [(slice(0, 3), "l2", 0.2), (slice(3, 6), "zero", 0.0)]
    for start in (torch.zeros(6, dtype=DT), "median"):
        agg, info = fedplus_aggregate(w, "l1", 0.1, tol=1e-13, max_iter=100_000, groups=groups, init=start)
        assert info["converged"]
        torch.testing.assert_close(agg[3:], w[:, 3:].mean(0), rtol=0, atol=1e-12)
        torch.testing.assert_close(agg[:3], gm_head, rtol=0, atol=1e-7)


def test_fedplus_result_is_a_fixed_point_of_eq25_and_minimises_eq7():
    w = _w(K=8, d=5, seed=2)
    delta = 0.3
    z, info = fedplus_aggregate(w, "l2", delta, tol=1e-13, max_iter=50_000)
    assert info["converged"]
    torch.testing.assert_close(z, w.mean(0) - prox("l2", w - z, delta).mean(0), rtol=0, atol=1e-10)
    g = torch.Generator().manual_seed(3)
    base = _huber_objective(w, z, delta)
    for scale in (1e-3, 1e-1):
        u = scale * torch.randn(50, 5, generator=g, dtype=DT)
        assert (_huber_objective(w, z + u[:, None, :], delta) >= base - 1e-12).all()


def test_fedplus_large_delta_limit_is_the_mean():
    """Once δ >= max_k ‖w_k − mean‖ every θ_k = 0 and 𝒜 is the mean (l2); per coordinate for l1."""
    w = _w(K=7, d=3)
    big = float((w - w.mean(0)).norm(dim=1).max()) + 1e-9
    for kind in ("l2", "l1"):
        agg, info = fedplus_aggregate(w, kind, big)
        torch.testing.assert_close(agg, w.mean(0), rtol=0, atol=1e-12)
        assert info["iterations"] == 1 and info["converged"]


@pytest.mark.parametrize("seed", [0, 5])
def test_fedplus_l2_small_delta_limit_is_the_geometric_median(seed):
    """The paper calls FedGeoMed+'s 𝒜 a δ-approximation of the geometric median: it minimises
    Σ Huber_δ(‖w_k − z‖), equal to Σ‖w_k − z‖ − Kδ/2 near the median once δ < min_k ‖w_k − GM‖,
    so for such δ it *is* the geometric median; for large δ it is the mean."""
    w = _w(K=7, d=3, seed=seed)
    gm, _ = geometric_median(w, tol=1e-14, max_iter=100_000)
    delta = 0.5 * float((w - gm).norm(dim=1).min())
    agg, info = fedplus_aggregate(w, "l2", delta, tol=1e-13, max_iter=100_000)
    assert info["converged"]
    torch.testing.assert_close(agg, gm, rtol=0, atol=1e-8)
    # and it moves from the mean towards GM as δ shrinks
    dists = [
        float((fedplus_aggregate(w, "l2", dl, tol=1e-12, max_iter=100_000)[0] - gm).norm()) for dl in (3.0, 1.0, 0.5)
    ]
    assert dists[0] > dists[1] > dists[2] > 1e-8 and dists[0] > 0.9 * float((w.mean(0) - gm).norm())


def test_fedplus_l1_small_delta_limit_is_the_coordinate_median():
    w = _w(K=9, d=4, seed=6)
    cm, _ = coordinate_median(w)
    s = w.sort(dim=0).values
    gap = float(torch.minimum(s[4] - s[3], s[5] - s[4]).min())
    agg, info = fedplus_aggregate(w, "l1", 0.5 * gap, tol=1e-13, max_iter=100_000)
    assert info["converged"]
    torch.testing.assert_close(agg, cm, rtol=0, atol=1e-9)
    # even K: a point between the two middle values per coordinate (any of them minimises Σ|·|)
    w8 = w[:8]
    s8 = w8.sort(dim=0).values
    agg8, _ = fedplus_aggregate(w8, "l1", 1e-3, tol=1e-13, max_iter=100_000)
    assert ((agg8 >= s8[3] - 1e-9) & (agg8 <= s8[4] + 1e-9)).all()


def test_fedplus_groups_hybrid():
    w = _w(K=7, d=6, seed=8)
    gm_head, _ = geometric_median(w[:, :3], tol=1e-14, max_iter=100_000)
    groups = [(slice(0, 3), "l2", 0.2), (slice(3, 6), "sq_l2", 0.1)]  # 0.2 < min_k ‖w_k − GM‖ ≈ 1
    agg, info = fedplus_aggregate(w, "l1", 0.1, tol=1e-13, max_iter=100_000, groups=groups)
    assert info["converged"]
    torch.testing.assert_close(agg[:3], gm_head, rtol=0, atol=1e-7)  # layer 1: geometric median
    torch.testing.assert_close(agg[3:], w[:, 3:].mean(0), rtol=0, atol=1e-10)  # layer 2: mean
    # uncovered coordinates fall back to (prox_kind, delta)
    agg2, _ = fedplus_aggregate(w, "indicator", 0.0, groups=[(slice(0, 3), "sq_l2", 1.0)])
    torch.testing.assert_close(agg2, w.mean(0), rtol=0, atol=1e-12)


def test_fedplus_warm_start_and_info():
    w = _w(K=7, d=3)
    z, info = fedplus_aggregate(w, "l2", 0.2, tol=1e-12, max_iter=100_000)
    z2, info2 = fedplus_aggregate(w, "l2", 0.2, tol=1e-12, max_iter=100_000, init=z)
    assert info2["iterations"] < info["iterations"] and info2["iterations"] <= 2
    torch.testing.assert_close(z2, z, rtol=0, atol=1e-9)
    _, info3 = fedplus_aggregate(w, "l2", 0.01, tol=1e-15, max_iter=3)
    assert info3["iterations"] == 3 and info3["converged"] is False and isinstance(info3["change"], float)


def test_fedplus_float32_and_batched_shape():
    w = _w(K=5, d=4).float()
    agg, _ = fedplus_aggregate(w, "l1", 0.1)
    assert agg.dtype == torch.float32 and agg.shape == (4,)


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


# --- algorithms whose server averages models ------------------------------------------------
#: every algorithm with an ``aggregator`` key (generated, so a new one is tested and documented)
TAKES_ONE = sorted(name for name, entry in ALGORITHMS.items() if "aggregator" in entry.options.model_fields)
#: those whose server model is the aggregate of the model uploads (the others replace a mean inside
#: their step: tests/test_robust_means.py)
AVERAGING = [name for name in TAKES_ONE if not issubclass(ALGORITHMS[name].build, RobustMeans)]
LS5 = {"name": "least_squares", "clients": 5, "dim": 3, "samples_per_client": 6}
GD2 = {"name": "gd", "lr": 0.05, "local_steps": 2}


def _aggregate_rows(name: str, rows: torch.Tensor, **options):
    """One server aggregation of ``name`` whose model uploads are replaced by ``rows``."""
    sim = simulation({"name": name, **options}, problem=LS5, solver=GD2)
    alg, ids = sim.algorithm, torch.arange(5)
    up, _ = alg.local(alg.broadcast(sim.server), sim.store.get(ids), context(sim, ids))
    key = next(k for k in up if k in alg.model_uploads)
    new, _ = alg.aggregate(sim.server, {**up, key: rows.to(up[key].dtype)}, server_context(sim, ids))
    return new, alg.diagnostics(new)


#: the FedOpt family's adaptive steps move from the aggregate (tests/test_fedopt.py); FedAvgM with β = 0,
#: η = 1 is FedAvg
PLAIN = {"fedavgm": {"beta": 0.0}}


def _server_steps_from_the_aggregate(name: str) -> bool:
    return issubclass(ALGORITHMS[name].build, ServerOptimiser) and name not in PLAIN


@pytest.mark.parametrize("name", [n for n in AVERAGING if not _server_steps_from_the_aggregate(n)])
def test_averaging_algorithms_route_through_the_robust_aggregator(name):
    """coordinate_median ignores one huge outlier upload; the default mean does not."""
    rows = _w(K=5, d=3, seed=4)
    rows[0] = 1e6
    new, metrics = _aggregate_rows(name, rows, aggregator="coordinate_median", **PLAIN.get(name, {}))
    torch.testing.assert_close(new["x0"], coordinate_median(rows)[0], rtol=0, atol=1e-12)
    assert metrics["agg_iterations"] == 0 and metrics["agg_unconverged_rounds"] == 0
    plain, _ = _aggregate_rows(name, rows, aggregator="mean", **PLAIN.get(name, {}))
    assert float(plain["x0"].abs().max()) > 1e5


def test_docs_list_exactly_the_algorithms_that_take_an_aggregator():
    text = (Path(__file__).resolve().parent.parent / "docs" / "fedplus.md").read_text()
    marker = "`aggregator` is a key of exactly these algorithms:"
    assert marker in text
    listed = text.split(marker, 1)[1].split(".", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", listed)) == TAKES_ONE


@pytest.mark.parametrize("name", ["fedavg", "apfl"])
def test_unconverged_robust_aggregation_is_counted(name):
    """A geometric median stopped by its cap shows in ``agg_unconverged_rounds``."""
    def last(max_iter):
        cfg = {"problem": LS5, "solver": GD2, "run": {"rounds": 3},
               "algorithm": {"name": name, "aggregator": "geometric_median",
                             "aggregator_options": {"max_iter": max_iter, "tol": 1e-12}}}
        return run(cfg).history[-1]

    capped, free = last(1), last(1000)
    assert capped["agg_iterations"] == 1 and capped["agg_unconverged_rounds"] == 3
    assert 1 < free["agg_iterations"] < 1000 and free["agg_unconverged_rounds"] == 0
