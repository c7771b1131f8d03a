"""Proximal operators of Fed+'s regularisers: closed forms, optimality, hybrid groups, errors."""

import pytest
import torch

from fedpd.errors import ConfigError
from fedpd.prox import (
    PROX_KINDS,
    prox,
    prox_grouped,
    prox_indicator,
    prox_l1,
    prox_l2,
    prox_sq_l2,
    prox_zero,
)

DT = torch.float64


def _v(K=12, d=7, seed=0):
    """Rows with very different norms so both regimes (shrunk to 0 / kept) occur for δ ≈ 1."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.logspace(-2.5, 1, K, dtype=DT).unsqueeze(1)
    return torch.randn(K, d, generator=g, dtype=DT) * scale


def _psi(kind, theta, delta):
    """Ψ/σ, the δ-scaled regulariser, row-wise."""
    if kind == "zero":
        return torch.zeros(theta.shape[:-1], dtype=theta.dtype)
    if kind == "sq_l2":
        return 0.5 * delta * theta.square().sum(-1)
    if kind == "l2":
        return delta * theta.norm(dim=-1)
    if kind == "l1":
        return delta * theta.abs().sum(-1)
    raise AssertionError(kind)


def _objective(kind, theta, v, delta):
    return _psi(kind, theta, delta) + 0.5 * (theta - v).square().sum(-1)


# --- closed forms --------------------------------------------------------------------------
@pytest.mark.parametrize("delta", [0.0, 0.3, 1.0, 5.0])
def test_closed_forms(delta):
    v = _v()
    assert torch.equal(prox("zero", v, delta), v)
    torch.testing.assert_close(prox("sq_l2", v, delta), v / (1 + delta), rtol=0, atol=1e-15)
    norms = v.norm(dim=1, keepdim=True)
    expected_l2 = torch.clamp(1 - delta / norms, min=0) * v
    torch.testing.assert_close(prox("l2", v, delta), expected_l2, rtol=0, atol=1e-14)
    expected_l1 = torch.where(v > delta, v - delta, torch.where(v < -delta, v + delta, torch.zeros_like(v)))
    torch.testing.assert_close(prox("l1", v, delta), expected_l1, rtol=0, atol=1e-15)
    assert torch.equal(prox("indicator", v, delta), torch.zeros_like(v))


def test_dispatch_matches_functions_and_1d_rows():
    v = _v()
    fns = {"zero": prox_zero, "sq_l2": prox_sq_l2, "l2": prox_l2, "l1": prox_l1, "indicator": prox_indicator}
    for kind, fn in fns.items():
        out = prox(kind, v, 0.7)
        assert torch.equal(out, fn(v, 0.7))
        assert out.shape == v.shape and out.dtype == v.dtype
        # batched == row by row, and a [d] input is one row
        for k in (0, 5, 11):
            torch.testing.assert_close(prox(kind, v[k], 0.7), out[k], rtol=0, atol=0)
    assert PROX_KINDS == ("zero", "sq_l2", "l2", "l1", "indicator")


def test_l2_regimes_both_occur_and_zero_rows_safe():
    v = _v()
    theta = prox_l2(v, 1.0)
    norms = v.norm(dim=1)
    assert (norms <= 1.0).any() and (norms > 1.0).any()
    assert torch.equal(theta[norms <= 1.0], torch.zeros_like(theta[norms <= 1.0]))
    z = torch.zeros(3, 4, dtype=DT)
    for delta in (0.0, 0.5):
        out = prox_l2(z, delta)
        assert torch.isfinite(out).all() and torch.equal(out, z)
    assert torch.isfinite(prox_l2(torch.zeros(3, 4, dtype=torch.float32), 0.5)).all()


def test_input_not_modified():
    v = _v()
    v0 = v.clone()
    for kind in PROX_KINDS:
        prox(kind, v, 0.5)
    assert torch.equal(v, v0)


# --- optimality ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["zero", "sq_l2", "l2", "l1"])
@pytest.mark.parametrize("delta", [0.0, 0.2, 1.0])
def test_prox_minimises_objective_against_perturbations(kind, delta):
    """J(θ) = Ψ_δ(θ) + ½‖θ − v‖² is 1-strongly convex, so its minimiser θ* satisfies
    J(θ* + u) >= J(θ*) + ½‖u‖² for every u: check that for many random u at several scales."""
    v = _v(seed=1)
    theta = prox(kind, v, delta)
    base = _objective(kind, theta, v, delta)  # [K]
    g = torch.Generator().manual_seed(2)
    for scale in (1e-4, 1e-2, 1.0):
        for _ in range(30):
            u = torch.randn(v.shape, generator=g, dtype=DT) * scale
            pert = _objective(kind, theta + u, v, delta)
            bound = base + 0.5 * u.square().sum(-1)
            assert (pert >= bound - 1e-12).all(), (kind, delta, scale)
    # also against sparse perturbations that keep zero coordinates at zero (the kinks of l1)
    u = torch.zeros_like(v)
    u[:, 0] = 1e-3
    assert (_objective(kind, theta + u, v, delta) >= base - 1e-12).all()


def test_indicator_is_only_feasible_point():
    v = _v()
    assert torch.equal(prox_indicator(v, 3.0), torch.zeros_like(v))


def test_sq_l2_optimality_condition():
    v = _v()
    for delta in (0.1, 2.0):
        theta = prox_sq_l2(v, delta)
        torch.testing.assert_close(v - theta, delta * theta, rtol=0, atol=1e-14)


@pytest.mark.parametrize("delta", [0.05, 0.5, 2.0])
def test_l2_subgradient_condition(delta):
    """v − θ ∈ δ ∂‖θ‖₂: equals δθ/‖θ‖ where θ ≠ 0, has norm <= δ where θ = 0."""
    v = _v(seed=3)
    theta = prox_l2(v, delta)
    g = v - theta
    tn = theta.norm(dim=1)
    nz = tn > 0
    assert nz.any() and (~nz).any()
    torch.testing.assert_close(g[nz], delta * theta[nz] / tn[nz, None], rtol=0, atol=1e-12)
    assert (g[~nz].norm(dim=1) <= delta + 1e-12).all()


@pytest.mark.parametrize("delta", [0.05, 0.5, 2.0])
def test_l1_subgradient_condition(delta):
    """v − θ ∈ δ ∂‖θ‖₁ coordinate-wise: δ sign(θ_i) where θ_i ≠ 0, |·| <= δ where θ_i = 0."""
    v = _v(seed=4)
    theta = prox_l1(v, delta)
    g = v - theta
    nz = theta != 0
    assert nz.any() and (~nz).any()
    torch.testing.assert_close(g[nz], delta * torch.sign(theta[nz]), rtol=0, atol=1e-12)
    assert (g[~nz].abs() <= delta + 1e-12).all()


# --- per-layer hybrid ----------------------------------------------------------------------
def test_prox_grouped_matches_parts_and_uses_per_group_norms():
    v = _v(K=5, d=10, seed=5)
    mask = torch.zeros(10, dtype=torch.bool)
    mask[[7, 9]] = True
    groups = [
        (slice(0, 4), "l2", 0.5),
        (torch.tensor([4, 5, 6]), "l1", 0.2),
        (mask, "sq_l2", 1.0),
        ([8], "indicator", 0.0),
    ]
    out = prox_grouped(v, groups)
    torch.testing.assert_close(out[:, :4], prox_l2(v[:, :4], 0.5), rtol=0, atol=0)  # norm over the group only
    torch.testing.assert_close(out[:, 4:7], prox_l1(v[:, 4:7], 0.2), rtol=0, atol=0)
    torch.testing.assert_close(out[:, [7, 9]], v[:, [7, 9]] / 2.0, rtol=0, atol=0)
    assert torch.equal(out[:, 8], torch.zeros(5, dtype=DT))
    # a single row works too
    torch.testing.assert_close(prox_grouped(v[2], groups), out[2], rtol=0, atol=0)
    # one group covering everything equals the plain prox
    torch.testing.assert_close(prox_grouped(v, [(slice(None), "l2", 0.5)]), prox_l2(v, 0.5), rtol=0, atol=0)


def test_prox_grouped_default_and_coverage_errors():
    v = _v(K=3, d=6)
    out = prox_grouped(v, [(slice(0, 2), "l1", 0.1)], default=("sq_l2", 1.0))
    torch.testing.assert_close(out[:, 2:], v[:, 2:] / 2.0, rtol=0, atol=0)
    with pytest.raises(ConfigError, match="uncovered"):
        prox_grouped(v, [(slice(0, 2), "l1", 0.1)])
    with pytest.raises(ConfigError, match="overlap"):
        prox_grouped(v, [(slice(0, 4), "l1", 0.1), ([3, 4, 5], "l2", 0.1)])
    with pytest.raises(ConfigError, match="indices"):
        prox_grouped(v, [([0, 1, 2, 3, 4, 6], "l1", 0.1)])
    with pytest.raises(ConfigError, match="mask"):
        prox_grouped(v, [(torch.ones(5, dtype=torch.bool), "l1", 0.1)])
    with pytest.raises(ConfigError, match="group kind"):
        prox_grouped(v, [(slice(None), "huber", 0.1)])
    with pytest.raises(ConfigError, match="group delta"):
        prox_grouped(v, [(slice(None), "l1", -1.0)])
    with pytest.raises(ConfigError, match="tuple"):
        prox_grouped(v, [(slice(None), "l1")])


# --- errors --------------------------------------------------------------------------------
def test_bad_arguments_raise_config_error():
    v = _v()
    with pytest.raises(ConfigError, match="zero, sq_l2, l2, l1, indicator"):
        prox("huber", v, 0.1)
    for bad in (-0.1, float("nan"), float("inf"), True, "0.1", None):
        with pytest.raises(ConfigError, match="delta"):
            prox("l2", v, bad)
    with pytest.raises(ConfigError, match="delta"):
        prox("indicator", v, -1.0)
    with pytest.raises(ConfigError, match="floating"):
        prox("l1", torch.ones(3, 2, dtype=torch.long), 0.1)
    with pytest.raises(ConfigError, match="Tensor"):
        prox("l1", [[1.0, 2.0]], 0.1)
    # messages are one line
    try:
        prox("nope", v, 0.1)
    except ConfigError as exc:
        assert "\n" not in str(exc)
