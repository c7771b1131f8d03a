"""Fed+'s robust aggregation (eq. (25)): from the mean it moves at most δ a step; its limits (the mean
for a large δ, the geometric or coordinate median for a small one) and fixed points; hybrid
groups, warm starts, float32 and batched shapes."""

from __future__ import annotations

import pytest
import torch

from fedpd.aggregators import coordinate_median, fedplus_aggregate, geometric_median, mean
from fedpd.prox import prox

DT = torch.float64


def _w(K=7, d=3, seed=0):
    return torch.randn(K, d, generator=torch.Generator().manual_seed(seed), dtype=DT)


def _huber_objective(w, z, delta):
    """Σ_k Huber_δ(‖w_k − z‖) = Σ_k min_θ δ‖θ‖ + ½‖w_k − z − θ‖², the eq. (7) objective for
    Ψ = σδ‖·‖₂ divided by σ."""
    r = (w - z).norm(dim=-1)
    return torch.where(r <= delta, 0.5 * r**2, delta * r - 0.5 * delta**2).sum(-1)


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
