"""The mean and the medians (fedpd.aggregators): the weighted mean, the geometric median against an
independent Newton solve, the coordinate and weighted medians by hand, ties included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpd.aggregators import coordinate_median, geometric_median, mean

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


@pytest.mark.parametrize("weights", [[3.0, 2.0, 4.0, 1.0], [0.25, 0.25, 0.125, 0.375]])
def test_weighted_median_in_float32_is_the_midpoint_at_an_exact_half_weight_tie(weights):
    """Sorted values 1, 2, 3, 4 whose first two weigh exactly half: the documented midpoint 2.5
    (float32 normalisation of 3, 2, 4, 1 rounded the cumulative weight past the tie: 2.0)."""
    w = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=torch.float32)
    beta = torch.tensor(weights, dtype=torch.float32)
    if weights[0] + weights[1] == 0.5 * sum(weights):
        agg, _ = coordinate_median(w, beta)
        assert agg.dtype == torch.float32 and agg.item() == 2.5
