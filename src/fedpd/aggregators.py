"""Robust aggregators: one place for every way fedpd combines the K uploaded models.

Every aggregator takes ``w``, a ``[K, d]`` floating tensor (row k is client k's model or update),
and an optional ``weights`` ``[K]`` (non-negative, not all zero; normalised here), and returns
``(aggregate [d], info)``. ``info`` is a dict of plain Python values; every aggregator reports
``iterations`` (int, 0 for closed forms) and ``converged`` (bool); some add more (``selected``,
``scores``, ``trimmed``, ``objective``, ``change``, ``weights_ignored``).

All work is batched over the client axis; the only Python loops are the iterations of the
iterative solvers (Weiszfeld, Fed+'s fixed-point iteration). Aggregators assume finite input:
screen rows first with :func:`finite_rows`.

``weights`` are honoured by mean, geometric_median, coordinate_median (weighted median),
centered_clipping, norm_bounding and fedplus. trimmed_mean, krum and bulyan treat every client
alike, as in their papers; they accept ``weights`` for a uniform interface, ignore it and say so
in ``info["weights_ignored"]``.

The defences that clip (centered_clipping, norm_bounding) also take ``reference`` [d], the point
the rows are clipped about: the algorithms pass the server model the round started from (for
FedAvg the previous round's aggregate), so they need no state of their own
(:func:`takes_reference`). Called without one, the reference is 0 (the rows are then updates).

Each aggregator declares beside itself its config name, options model and description
(:func:`fedpd.options.declares`), the fewest rows it aggregates (its options' ``min_rows()``,
:class:`RuleOptions`: Krum's 2f + 3) and, as attributes, what it needs: ``robust = False`` (the
mean: no pre-aggregation before it), ``centres_on_last_aggregate`` (centered clipping, under client
momentum), ``python_only`` arguments no config gives, ``chosen_by`` (Fed+'s own, not an
``algorithm.aggregator``). A plug-in rule declares the same, and is read the same way: no rule is
known by its name. ``AGGREGATORS`` maps each name to its function; :func:`pipeline` reads
``algorithm.aggregator_options`` once — the rule's own options and the pre-aggregation steps before
it (:mod:`fedpd.preaggregators`) — into a :class:`Pipeline`, ``f(w, weights=None, reference=None,
generator=None) -> (aggregate, info)`` (also :func:`make_aggregator`), which
:class:`fedpd.defence.Defence` wraps with the weights and client momentum.
"""

from __future__ import annotations

import inspect
import math
from typing import Callable, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedpd import names
from fedpd.errors import ConfigError
from fedpd.options import STEPS_MAX, NoOptions, Options, declares, shown, validate
from fedpd.ordered import ordered_norm
from fedpd.preaggregators import STEPS, Step, step_class
from fedpd.prox import _PROX, _apply_plan, _group_plan, check_delta, check_kind

__all__ = [
    "AGGREGATORS",
    "make_aggregator",
    "finite_rows",
    "mean",
    "geometric_median",
    "coordinate_median",
    "trimmed_mean",
    "krum",
    "bulyan",
    "centered_clipping",
    "norm_bounding",
    "fedplus_aggregate",
    "takes_reference",
]


# --- argument checks -----------------------------------------------------------------------
def _check_w(w) -> Tensor:
    if not isinstance(w, Tensor):
        raise ConfigError(f"w must be a torch.Tensor of shape [K, d], got {type(w).__name__}")
    if w.dim() != 2 or w.shape[0] < 1:
        raise ConfigError(f"w must have shape [K, d] with K >= 1, got {tuple(w.shape)}")
    if not w.is_floating_point():
        raise ConfigError(f"w must be a floating-point tensor, got dtype {w.dtype}")
    return w


def _weights(weights, w: Tensor, dtype: torch.dtype | None = None) -> Tensor | None:
    """``weights`` as a [K] tensor on w's device summing to 1, or None; in ``dtype`` (default
    w's): the weighted median normalises in float64 so that exact ties stay ties."""
    if weights is None:
        return None
    K = w.shape[0]
    beta = torch.as_tensor(weights, device=w.device).to(dtype or w.dtype)
    if beta.shape != (K,):
        raise ConfigError(f"weights must have shape [{K}] (one per row of w), got {tuple(beta.shape)}")
    if not bool(torch.isfinite(beta).all()) or bool((beta < 0).any()):
        raise ConfigError("weights must be finite and >= 0")
    total = beta.sum()
    if not float(total) > 0:
        raise ConfigError("weights must not all be zero")
    return beta / total


def _positive_real(x, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {x!r}")
    return float(x)


def _int_at_least(x, low: int, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < low:
        raise ConfigError(f"{name} must be an integer >= {low}, got {x!r}")
    return x


def _weighted_mean(w: Tensor, beta: Tensor | None) -> Tensor:
    return w.mean(dim=0) if beta is None else beta @ w


def finite_rows(w: Tensor) -> Tensor:
    """BoolTensor [K]: True for rows of ``w`` whose entries are all finite (no NaN, no ±Inf).

    Aggregators assume finite input; callers drop (``w[finite_rows(w)]``) or reject the rest.
    """
    _check_w(w)
    return torch.isfinite(w).all(dim=1)


# --- options (what `aggregator_options` may hold, per aggregator) ------------------------------
class RuleOptions(Options):
    """A rule's options, which also declare the fewest rows the rule aggregates with them
    (:meth:`min_rows`; 1 unless a rule says otherwise). A plug-in rule's ``Options`` may subclass
    this, or define ``min_rows()`` itself: a run whose rounds give fewer uploads is refused before
    it starts, as for Krum."""

    def min_rows(self) -> int:
        return 1


class GeometricMedianOptions(RuleOptions):
    eps: float = Field(1e-8, gt=0, description="smoothing: distances below eps count as eps")
    tol: float = Field(1e-7, gt=0, description="stop when the relative change is below tol")
    max_iter: int = Field(100, ge=1, le=STEPS_MAX, description="Weiszfeld iteration cap")


class TrimmedMeanOptions(RuleOptions):
    trim_ratio: float = Field(ge=0, le=0.5, description="share trimmed at each end per coordinate (required)")


class KrumOptions(RuleOptions):
    n_byzantine: int = Field(ge=0, description="f: Byzantine clients tolerated; needs K > 2f + 2 (required)")
    m: int = Field(1, ge=1, description="rows averaged (multi-Krum); 1 is Krum")

    def min_rows(self) -> int:
        return max(2 * self.n_byzantine + 3, self.m + self.n_byzantine)  # K > 2f + 2 and m <= K − f


class BulyanOptions(RuleOptions):
    n_byzantine: int = Field(ge=0, description="f: Byzantine clients tolerated; needs K >= 4f + 3 (required)")

    def min_rows(self) -> int:
        return 4 * self.n_byzantine + 3


class CenteredClippingOptions(RuleOptions):
    tau: float = Field(gt=0, description="τ: the clipping radius about the reference (required)")
    iterations: int = Field(1, ge=1, le=STEPS_MAX,
                            description="L: clipping iterations (1, as in the paper's experiments)")


class NormBoundingOptions(RuleOptions):
    max_norm: float = Field(gt=0, description="M: each update x_i − reference is clipped to norm M (required)")


class FedPlusAggregateOptions(RuleOptions):
    prox_kind: Literal["zero", "sq_l2", "l2", "l1", "indicator"] = Field("l2", description="Ψ of eq. (25)")
    delta: float = Field(0.1, ge=0, description="δ, the smoothing of Ψ")
    tol: float = Field(1e-7, gt=0)
    max_iter: int = Field(1000, ge=1, le=STEPS_MAX)


# --- closed forms --------------------------------------------------------------------------
@declares("mean", NoOptions, "weighted mean of the client rows (FedAvg)")
def mean(w: Tensor, weights: Tensor | None = None) -> tuple[Tensor, dict]:
    """Weighted mean Σ_k β_k w_k with β = weights / Σ weights (plain mean without weights);
    without weights, ByzFL's ``Average``."""
    w = _check_w(w)
    return _weighted_mean(w, _weights(weights, w)), {"iterations": 0, "converged": True}


@declares(
    "coordinate_median", NoOptions, "coordinate-wise median, mean of the two middle values for even K (Yin et al.)"
)
def coordinate_median(w: Tensor, weights: Tensor | None = None) -> tuple[Tensor, dict]:
    """Coordinate-wise median (Yin et al. 2018; Fed+ eq. (5)).

    The true median: for even K the mean of the two middle values per coordinate (torch.median
    returns the lower one, which biases the result). With ``weights`` it is the weighted median:
    per coordinate the values are sorted, the lower median is the first value whose cumulative
    weight reaches half the total, the upper one the first that passes it, and the result is
    their mean — equal to the above for equal weights and always a minimiser of
    Σ_k β_k |w_k − z| per coordinate. ByzFL's ``Median`` is this on numpy arrays, and the lower
    middle value for even K on torch tensors (torch.median).
    """
    w = _check_w(w)
    beta = _weights(weights, w, torch.float64)  # a float32 normalisation would break exact half-weight ties
    K = w.shape[0]
    if beta is None:
        s = w.sort(dim=0).values
        agg = 0.5 * (s[(K - 1) // 2] + s[K // 2])
        return agg, {"iterations": 0, "converged": True}
    s, order = w.sort(dim=0)
    cum = beta[order].cumsum(dim=0)  # [K, d], float64, last row == 1 up to rounding
    slack = 1e-9  # exact ties (cum == 1/2) must be found despite rounding in the cumulative sum
    lower = (cum < 0.5 - slack).sum(dim=0, keepdim=True).clamp_max(K - 1)
    upper = (cum <= 0.5 + slack).sum(dim=0, keepdim=True).clamp_max(K - 1)
    agg = 0.5 * (s.gather(0, lower) + s.gather(0, upper))
    return agg.squeeze(0), {"iterations": 0, "converged": True}


@declares("trimmed_mean", TrimmedMeanOptions,
          "coordinate-wise mean after dropping the floor(trim_ratio*K) largest and smallest (Yin et al.)")
def trimmed_mean(w: Tensor, trim_ratio: float, weights: Tensor | None = None) -> tuple[Tensor, dict]:
    """Coordinate-wise trimmed mean (Yin et al. 2018): per coordinate drop the b = ⌊βK⌋ largest
    and b smallest values and average the remaining K − 2b. ConfigError unless 0 <= β <= 1/2 and
    2b < K (β = 1/2 with odd K is the median). ``weights`` is ignored (info["weights_ignored"]).
    ByzFL's ``TrMean(f)`` is this rule with b = f (β = f/K).
    """
    w = _check_w(w)
    beta = _check_trim_ratio(trim_ratio)
    K = w.shape[0]
    b = math.floor(beta * K + 1e-9)  # the 1e-9 keeps e.g. 0.3 * 10 = 2.9999… from dropping to 2
    if 2 * b >= K:
        raise ConfigError(
            f"trim_ratio={trim_ratio} trims 2*{b} >= K={K} rows; use a trim_ratio with 2*floor(trim_ratio*K) < K"
        )
    s = w.sort(dim=0).values
    agg = s[b : K - b].mean(dim=0)
    return agg, {"iterations": 0, "converged": True, "trimmed": b, "weights_ignored": weights is not None}


def _check_trim_ratio(trim_ratio) -> float:
    if isinstance(trim_ratio, bool) or not isinstance(trim_ratio, (int, float)) or not 0 <= trim_ratio <= 0.5:
        raise ConfigError(f"trim_ratio must be a number in [0, 0.5], got {trim_ratio!r}")
    return float(trim_ratio)


@declares(
    "krum", KrumOptions, "Krum / multi-Krum: the m rows closest to their K-f-2 nearest neighbours (Blanchard et al.)"
)
def krum(w: Tensor, n_byzantine: int, m: int = 1, weights: Tensor | None = None) -> tuple[Tensor, dict]:
    """Krum / multi-Krum (Blanchard et al. 2017).

    With f = ``n_byzantine``, the score of row k is the sum of squared distances to its
    K − f − 2 nearest other rows; Krum returns the row with the lowest score, multi-Krum
    (``m`` > 1) the mean of the m lowest-scoring rows (ties: lower index first).
    ConfigError unless K > 2f + 2 and 1 <= m <= K − f. ``weights`` is ignored. ByzFL's ``Krum(f)``
    and ``MultiKrum(f)`` score over the K − f − 1 nearest: they are this rule with f − 1 (and
    m = K − f for multi-Krum).
    info: ``selected`` (row indices, best first) and ``scores`` (all K).
    """
    w = _check_w(w)
    f = _int_at_least(n_byzantine, 0, "n_byzantine")
    m = _int_at_least(m, 1, "m")
    K = w.shape[0]
    if K <= 2 * f + 2:
        raise ConfigError(f"krum needs K > 2*n_byzantine + 2; got K={K}, n_byzantine={f}")
    if m > K - f:
        raise ConfigError(f"m must be in [1, K - n_byzantine] = [1, {K - f}], got {m}")
    dist2 = torch.cdist(w, w, compute_mode="donot_use_mm_for_euclid_dist").square()
    dist2.fill_diagonal_(float("inf"))
    n_near = K - f - 2
    scores = dist2.sort(dim=1).values[:, :n_near].sum(dim=1)
    selected = torch.argsort(scores, stable=True)[:m]
    agg = w[selected].mean(dim=0)
    return agg, {
        "iterations": 0,
        "converged": True,
        "selected": selected.tolist(),
        "scores": scores.tolist(),
        "weights_ignored": weights is not None,
    }


@declares("bulyan", BulyanOptions,
          "Bulyan: n-2f rows by repeated Krum, then per coordinate the mean of the n-4f nearest the median "
          "(El Mhamdi et al.)")
def bulyan(w: Tensor, n_byzantine: int, weights: Tensor | None = None) -> tuple[Tensor, dict]:
    """Bulyan (El Mhamdi, Guerraoui, Rouault, "The hidden vulnerability of distributed learning in
    Byzantium", ICML 2018, §4), for n = K rows of which f = ``n_byzantine`` may be Byzantine:

    1. selection: R = all rows, S = ∅; θ = n − 2f times: pick from R the row with the lowest
       Krum score — the sum of squared distances to its |R| − f − 2 nearest others in R (at least
       one; ties: lower index) — and move it from R to S;
    2. aggregation: per coordinate j, the mean of the β = θ − 2f values of S closest to the
       coordinate-wise median of S (the mean of the two middle values for even θ), i.e.
       G_j = (1/β) Σ_{x ∈ M_j} x_j, M_j = argmin_{M ⊂ S, |M| = β} Σ_{x ∈ M} |x_j − med_j|
       (ties: the smaller value first).

    ConfigError unless n >= 4f + 3 (the paper's condition). ``weights`` is ignored.
    info: ``selected`` (the θ row indices, in the order chosen). ByzFL has no Bulyan.
    """
    w = _check_w(w)
    f = _int_at_least(n_byzantine, 0, "n_byzantine")
    K = w.shape[0]
    if K < 4 * f + 3:
        allowed = f"n_byzantine <= {(K - 3) // 4}" if K >= 3 else "at least 3 rows"
        raise ConfigError(f"bulyan needs K >= 4*n_byzantine + 3; got K={K}, n_byzantine={f} (allowed: {allowed})")
    theta, beta = K - 2 * f, K - 4 * f
    dist2 = torch.cdist(w, w, compute_mode="donot_use_mm_for_euclid_dist").square()
    dist2.fill_diagonal_(float("inf"))
    remaining = torch.ones(K, dtype=torch.bool, device=w.device)
    selected: list[int] = []
    for _ in range(theta):
        r = int(remaining.sum())
        n_near = max(r - f - 2, 1)
        d = dist2[remaining][:, remaining]  # [r, r], the diagonal inf
        near = min(n_near, r - 1)
        scores = d.sort(dim=1).values[:, :near].sum(dim=1) if near > 0 else torch.zeros(r, dtype=w.dtype,
                                                                                        device=w.device)
        pick = int(remaining.nonzero().flatten()[int(torch.argsort(scores, stable=True)[0])])
        selected.append(pick)
        remaining[pick] = False
    s = w[selected].sort(dim=0).values  # [θ, d]
    med = 0.5 * (s[(theta - 1) // 2] + s[theta // 2])
    closest = (s - med).abs().argsort(dim=0, stable=True)[:beta]  # ties: the smaller value (sorted first)
    agg = s.gather(0, closest).mean(dim=0)
    return agg, {"iterations": 0, "converged": True, "selected": selected, "weights_ignored": weights is not None}


def _reference(reference, w: Tensor) -> Tensor:
    if reference is None:
        return torch.zeros(w.shape[1], dtype=w.dtype, device=w.device)
    if not isinstance(reference, Tensor) or reference.shape != (w.shape[1],):
        shown = tuple(reference.shape) if isinstance(reference, Tensor) else type(reference).__name__
        raise ConfigError(f"reference must be a tensor of shape [{w.shape[1]}], got {shown}")
    return reference.to(dtype=w.dtype, device=w.device)


def _clip_factors(diff: Tensor, bound: float) -> Tensor:
    """min(1, bound / ‖diff_i‖) per row (1 for a zero row)."""
    norms = ordered_norm(diff, dim=1)
    return torch.where(norms > bound, bound / norms.clamp_min(torch.finfo(diff.dtype).tiny), torch.ones_like(norms))


@declares("centered_clipping", CenteredClippingOptions,
          "centered clipping: v <- v + mean_i clip_tau(x_i - v), L times from the last aggregate "
          "(Karimireddy et al.)")
def centered_clipping(w: Tensor, tau: float, iterations: int = 1, weights: Tensor | None = None,
                      reference: Tensor | None = None) -> tuple[Tensor, dict]:
    """Centered clipping (Karimireddy, He, Jaggi, "Learning from history for Byzantine robust
    optimization", ICML 2021, eq. (CC)), momentum-free: from v_0 = ``reference``, L = ``iterations`` times

        v_{l+1} = v_l + (1/n) Σ_i (x_i − v_l) · min(1, τ / ‖x_i − v_l‖),

    the 1/n replaced by the normalised β_i with ``weights``. The paper centres on the last
    aggregate; fedpd's algorithms pass the server model the round started from (FedAvg's last
    aggregate), so no state is kept here. Without ``reference`` v_0 = 0 (rows taken as updates).
    A row within τ of v enters unclipped, a farther one moves v by at most τ/n.
    info: ``iterations`` (L), ``clipped`` (rows clipped in the last iteration). ByzFL's
    ``CenteredClipping`` starts from 0, then from its own last output (a state it keeps): this
    rule without ``reference`` on its first call.
    """
    w = _check_w(w)
    tau = _positive_real(tau, "tau")
    iterations = _int_at_least(iterations, 1, "iterations")
    beta = _weights(weights, w)
    v = _reference(reference, w)
    clipped = 0
    for _ in range(iterations):
        diff = w - v
        scale = _clip_factors(diff, tau)
        clipped = int((scale < 1).sum())
        v = v + _weighted_mean(diff * scale[:, None], beta)
    return v, {"iterations": iterations, "converged": True, "clipped": clipped}


@declares("norm_bounding", NormBoundingOptions,
          "norm bounding: each update x_i - x_ref clipped to norm M, then averaged (Sun et al.)")
def norm_bounding(w: Tensor, max_norm: float, weights: Tensor | None = None,
                  reference: Tensor | None = None) -> tuple[Tensor, dict]:
    """Norm bounding (Sun, Kairouz, Suresh, McMahan, "Can you really backdoor federated learning?",
    2019, §3): each update Δ_i = x_i − x_ref is clipped to norm M = ``max_norm`` and the clipped
    updates averaged,

        x = x_ref + Σ_i β_i Δ_i / max(1, ‖Δ_i‖ / M),

    β_i = 1/n (or the normalised ``weights``: the paper weighs by sample counts). x_ref =
    ``reference``, the server model the round started from (0 without one: rows are updates).
    info: ``clipped`` (rows whose update was longer than M). Without ``reference``, ByzFL's
    ``Clipping(c = M)`` then its ``Average``.
    """
    w = _check_w(w)
    bound = _positive_real(max_norm, "max_norm")
    beta = _weights(weights, w)
    ref = _reference(reference, w)
    diff = w - ref
    scale = _clip_factors(diff, bound)
    agg = ref + _weighted_mean(diff * scale[:, None], beta)
    return agg, {"iterations": 0, "converged": True, "clipped": int((scale < 1).sum())}


# --- iterative solvers ---------------------------------------------------------------------
def _check_iteration(tol, max_iter) -> tuple[float, int]:
    return _positive_real(tol, "tol"), _int_at_least(max_iter, 1, "max_iter")


def _converged(change: Tensor, z: Tensor, tol: float) -> bool:
    """‖Δz‖ <= tol (1 + ‖z‖): relative change, with the 1 guarding z ≈ 0."""
    return bool(change <= tol * (1.0 + ordered_norm(z)))


@declares("geometric_median", GeometricMedianOptions, "geometric median by smoothed Weiszfeld (RFA, Pillutla et al.)")
def geometric_median(
    w: Tensor,
    weights: Tensor | None = None,
    eps: float = 1e-8,
    tol: float = 1e-7,
    max_iter: int = 100,
) -> tuple[Tensor, dict]:
    """Geometric median argmin_z Σ_k β_k ‖w_k − z‖ (Fed+ eq. (4)) by smoothed Weiszfeld, as in
    RFA (Pillutla et al. 2022): from the weighted mean, repeat

        z ← Σ_k c_k w_k / Σ_k c_k,   c_k = β_k / max(eps, ‖w_k − z‖),

    until ‖Δz‖ <= tol (1 + ‖z‖) or ``max_iter`` updates. ``eps`` > 0 keeps the step defined
    when z lands on a row. info: ``iterations`` (updates made), ``converged``, ``objective``
    (Σ β_k ‖w_k − z‖ at the result, β normalised). ByzFL's ``GeometricMedian`` makes a fixed T
    smoothed Weiszfeld steps from 0 rather than from the mean until converged: at convergence both
    give the geometric median.
    """
    w = _check_w(w)
    beta = _weights(weights, w)
    eps = _positive_real(eps, "eps")
    tol, max_iter = _check_iteration(tol, max_iter)
    if beta is None:
        beta = torch.full((w.shape[0],), 1.0 / w.shape[0], dtype=w.dtype, device=w.device)
    z = beta @ w
    converged, it = False, 0
    while it < max_iter:
        dist = ordered_norm(w - z, dim=1)
        c = beta / dist.clamp_min(eps)
        z_new = (c @ w) / c.sum()
        change = ordered_norm(z_new - z)
        z = z_new
        it += 1
        if _converged(change, z, tol):
            converged = True
            break
    objective = float(beta @ ordered_norm(w - z, dim=1))
    return z, {"iterations": it, "converged": converged, "objective": objective}


def _rounding_level(z: Tensor, w_mean: Tensor, theta: Tensor, beta: Tensor | None) -> float:
    """A bound on the floating-point noise in one step z ← mean(w) − mean(θ)."""
    size = sum(float(ordered_norm(t)) for t in (z, w_mean, _weighted_mean(theta.abs(), beta)))
    return 8 * torch.finfo(z.dtype).eps * (1.0 + size)


@declares(
    "fedplus",
    FedPlusAggregateOptions,
    "Fed+ aggregation (eq. 25): prox fixed point; l2 ~ geometric median, l1 ~ median",
)
def fedplus_aggregate(
    w: Tensor,
    prox_kind: str = "l2",
    delta: float = 0.1,
    tol: float = 1e-7,
    max_iter: int = 1000,
    groups: list[tuple] | None = None,
    weights: Tensor | None = None,
    init: Tensor | str | None = None,
) -> tuple[Tensor, dict]:
    """Fed+'s aggregation 𝒜 by the fixed-point iteration of eq. (25) (also (16), (22)):

        z ← mean(w);  repeat  θ_k = prox_{prox_kind}(w_k − z; delta),  z ← mean(w) − mean(θ)

    until converged or ``max_iter`` updates (means are β-weighted with ``weights``). Converged
    means ‖Δz‖ <= tol (1 + ‖z‖) and, when an "l1" / "l2" part is present, also ‖Δz‖ <= tol δ
    (smallest such δ) or ‖Δz‖ at rounding level: their steps never exceed δ, so the relative
    test alone would pass while z still creeps towards the fixed point from far away (e.g. from
    the mean past huge outliers). With a step <= tol δ the distance to the fixed point is about
    tol R (R the typical ‖w_k − z‖) for "l2".
    ``init`` picks the start: None / "mean" (the paper's), "median" (the coordinate-wise
    median) or a [d] tensor (e.g. last round's aggregate). The fixed point does not depend on
    the start, the number of iterations does: a step moves z by at most δ (per coordinate for
    "l1", in norm for "l2"), so from the mean, far outliers need ‖mean − result‖/δ iterations
    and a capped run stops short of the robust aggregate — start from "median" then.
    With ``groups`` (list of ``(index, kind, delta)``, see :func:`fedpd.prox.prox_grouped`) each
    part of the vector gets its own Ψ — the per-layer hybrid — and ``(prox_kind, delta)`` covers
    the remaining coordinates.

    What it computes: since w_k − z − prox(w_k − z) is the gradient of the Moreau envelope
    Ψ̂_{1/σ}/σ (eq. (6)), one step is gradient descent with step 1 on the 1-smooth convex
    function Σ_k β_k Ψ̂_{1/σ}(w_k − z)/σ, whose minimiser is 𝒜(W) of eq. (7). So:
    "sq_l2", "indicator": the mean (a fixed point at once); "zero": every z is a fixed point and
    a minimiser, and the aggregate is defined as the mean on those coordinates (whole vector or
    group), whatever ``init``; "l2": the minimiser of Σ β_k Huber_δ(‖w_k − z‖) — the mean once δ
    >= max_k ‖w_k − mean‖, the geometric median exactly once δ < min_k ‖w_k − GM‖ (δ → 0);
    "l1": the same per coordinate — the mean for large δ, a coordinate-wise median for small δ
    (exactly the median for odd K; for even K any point between the two middle values may come
    out). Near the geometric median the contraction per step is about 1 − δ/R (R the typical
    distance to the rows), so small δ needs many iterations.

    info: ``iterations``, ``converged``, ``change`` (last ‖Δz‖).
    """
    w = _check_w(w)
    kind = check_kind(prox_kind, "prox_kind")
    delta = check_delta(delta)
    tol, max_iter = _check_iteration(tol, max_iter)
    beta = _weights(weights, w)
    w_mean = _weighted_mean(w, beta)
    if init is None or (isinstance(init, str) and init == "mean"):
        z = w_mean
    elif isinstance(init, str) and init == "median":
        z = coordinate_median(w, weights)[0]
    elif isinstance(init, Tensor) and init.shape == w_mean.shape:
        z = init.to(dtype=w.dtype, device=w.device)
    else:
        shown = tuple(init.shape) if isinstance(init, Tensor) else repr(init)
        raise ConfigError(f"init must be 'mean', 'median' or a tensor of shape [{w.shape[1]}]; got {shown}")
    if groups is not None:
        plan = _group_plan(groups, w.shape[1], w.device, default=(kind, delta))  # validated once
        prox_fn = lambda v: _apply_plan(v, plan)  # noqa: E731
        parts = [(k, dl) for _, k, dl in plan]
        zero = [idx for idx, k, _ in plan if k == "zero"]
        pinned = torch.cat(zero) if zero else None
    else:
        op = _PROX[kind]
        prox_fn = lambda v: op(v, delta)  # noqa: E731
        parts = [(kind, delta)]
        pinned = slice(None) if kind == "zero" else None
    # Ψ = 0 (prox = identity) makes (25) the identity on its coordinates: every z is a fixed point
    # and a minimiser of (7) there, so the aggregate is defined as the mean there, whatever the start
    if pinned is not None:
        z = z.clone()
        z[pinned] = w_mean[pinned]
    # l1 / l2 steps are capped at δ: a step that is small next to ‖z‖ may still be a stall far from
    # the fixed point, so for them the step must also be small next to δ (see the docstring)
    step_scale = min((dl for k, dl in parts if k in ("l1", "l2")), default=math.inf)
    converged, it, change = False, 0, float("nan")
    while it < max_iter:
        theta = prox_fn(w - z)
        z_new = w_mean - _weighted_mean(theta, beta)
        if pinned is not None:
            z_new[pinned] = w_mean[pinned]
        change_t = ordered_norm(z_new - z)
        z = z_new
        it += 1
        change = float(change_t)
        if _converged(change_t, z, tol) and (
            change <= tol * step_scale
            or change <= _rounding_level(z, w_mean, theta, beta)
        ):
            converged = True
            break
    return z, {"iterations": it, "converged": converged, "change": change}


# --- what each rule declares besides its options ----------------------------------------------
# (a plug-in rule may set the same attributes; a rule that sets none is robust, takes no python-only
# arguments and centres nowhere in particular; its minimum rows come from its Options' min_rows)
mean.robust = False  # the plain mean: no pre-aggregation goes before it
centered_clipping.centres_on_last_aggregate = True  # with client momentum: from the last aggregate momentum
fedplus_aggregate.python_only = ("groups", "init")  # Fed+'s layer groups and start tensor: no config gives them
fedplus_aggregate.chosen_by = "Fed+'s own aggregate, chosen by Fed+'s psi"  # not an algorithm.aggregator

# --- registry ------------------------------------------------------------------------------
#: every rule by name, Fed+'s eq. (25) included (adding a rule: its function here, listed in this tuple)
AGGREGATORS: dict[str, Callable] = {fn.name: fn for fn in (mean, geometric_median, coordinate_median, trimmed_mean,
                                                           krum, bulyan, centered_clipping, norm_bounding,
                                                           fedplus_aggregate)}
#: the rules ``algorithm.aggregator`` may name (Fed+'s own is chosen by Fed+'s psi)
RULES: dict[str, Callable] = {name: fn for name, fn in AGGREGATORS.items() if not getattr(fn, "chosen_by", "")}
#: what ``algorithm.aggregator`` names (:func:`fedpd.names.resolve`)
KIND = names.Kind("aggregator", names.table(*AGGREGATORS.values()), declared=True, args=("w",), keywords=("weights",),
                  plugin="an aggregator is a function (w, weights=None, **options) -> (aggregate, info)")


def takes_reference(fn: Callable) -> bool:
    """Whether aggregator ``fn`` takes ``reference`` (the server model the rows are clipped about)."""
    try:
        return "reference" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def aggregator_function(name: str) -> Callable[..., tuple[Tensor, dict]]:
    """The aggregator ``name`` names: a built-in of :data:`AGGREGATORS`, or a plug-in (an import path
    ``package.module:function`` or an installed entry point, :mod:`fedpd.names`): a function
    ``(w [K, d], weights=None, **options) -> (aggregate [d], info)`` whose ``Options`` (a pydantic
    model; default none) validates ``algorithm.aggregator_options``. ConfigError (one line)
    otherwise."""
    return names.resolve(KIND, name).build


# --- a rule with its options, and the chain before it ------------------------------------------
class Rule:
    """A rule with its options bound: ``rule(w, weights=None, reference=None) -> (aggregate, info)``,
    and what it declares — ``min_rows`` (its ``Options.min_rows()``: Krum's 2f + 3; 1 without one),
    ``robust`` (False for the mean: no pre-aggregation before it), ``takes_reference`` (its signature
    names ``reference``) and ``centres_on_last_aggregate`` (centered clipping under client momentum)."""

    def __init__(self, name: str, fn: Callable, options, bound: dict):
        self.name, self.fn, self.options, self.bound = name, fn, options, bound
        declared = getattr(options, "min_rows", None)
        self.min_rows = int(declared()) if callable(declared) else 1
        self.robust = bool(getattr(fn, "robust", True))
        self.centres_on_last_aggregate = bool(getattr(fn, "centres_on_last_aggregate", False))
        self.takes_reference = takes_reference(fn)

    def __call__(self, w: Tensor, weights: Tensor | None = None, reference: Tensor | None = None):
        if self.takes_reference:
            return self.fn(w, weights=weights, reference=reference, **self.bound)
        return self.fn(w, weights=weights, **self.bound)  # a reference is of no use to it

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, {self.bound})"


class Pipeline:
    """The pre-aggregation ``steps`` (:mod:`fedpd.preaggregators`), in order, then ``rule``:
    ``pipeline(w, weights=None, reference=None, generator=None) -> (aggregate, info)``. ``generator``
    is the steps' randomness (bucketing's permutation); ``min_rows`` the fewest rows the whole chain
    accepts, from what each part declares (the rule's minimum, then each step's ``rows_needed``
    from the last to the first)."""

    def __init__(self, rule: Rule, steps: tuple[Step, ...] = ()):
        self.rule, self.steps = rule, tuple(steps)
        need = rule.min_rows
        for step in reversed(self.steps):
            need = step.rows_needed(need)
        self.min_rows = need
        self.__name__ = f"{rule.name}_aggregator"  # (what make_aggregator's functions were called)

    def __call__(self, w: Tensor, weights: Tensor | None = None, reference: Tensor | None = None,
                 generator: torch.Generator | None = None) -> tuple[Tensor, dict]:
        if not self.steps:
            return self.rule(w, weights, reference)
        if weights is not None:
            raise ConfigError("aggregator_options.pre: pre-aggregation mixes the rows, so per-client weights "
                              "mean nothing after it (allowed: weights = \"uniform\")")
        rows = _check_w(w)
        for step in self.steps:
            rows = _checked_step(step, step(rows, reference, generator), rows)
        try:
            agg, info = self.rule(rows, None, reference)
        except ConfigError as err:
            raise ConfigError(f"after {self.describe()} the rule sees {rows.shape[0]} rows of {w.shape[0]}: "
                              f"{err}") from None
        return agg, {**info, "pre_rows": rows.shape[0]}

    def describe(self) -> str:
        """The chain in a message: "ARC → NNM"."""
        return " → ".join(step.describe() for step in self.steps)

    def __repr__(self) -> str:
        return f"Pipeline({[s.describe() for s in self.steps]} → {self.rule!r})"


def _checked_step(step, out, rows: Tensor) -> Tensor:
    """A step's output, or ConfigError naming the step: a float tensor [K', d] of the rows' d."""
    if not (isinstance(out, Tensor) and out.dtype == rows.dtype and out.dim() == 2 and out.shape[1] == rows.shape[1]
            and out.shape[0] >= 1):
        got = f"a tensor of shape {tuple(out.shape)}, {out.dtype}" if isinstance(out, Tensor) else names.what(out)
        raise ConfigError(f"aggregator_options.pre: {step.describe()} returned {got} for rows of shape "
                          f"{tuple(rows.shape)} (allowed: rows [K', {rows.shape[1]}] of {rows.dtype})")
    return out


# --- algorithm.aggregator_options, read once -----------------------------------------------------
def _listing(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _steps_named(pre) -> list:
    return list(pre) if isinstance(pre, (list, tuple)) else [pre]  # a name, or what is refused below


def _chain(rule_name: str, fn: Callable, rule_fields, options: dict) -> tuple[list[Step], dict]:
    """(the steps ``options["pre"]`` names, built with the keys each declares; the rule's own
    options). ``n_byzantine`` stays with a rule that reads it too (Krum, Bulyan: one f for all).
    ConfigError, one line, for what the chain cannot take or a key nothing reads."""
    listed = _steps_named(options.get("pre", []))
    step_keys: dict[str, str] = {}  # a built-in step's key -> the first step that reads it
    for name, cls in STEPS.items():
        for k in cls.Options.model_fields:
            step_keys.setdefault(k, name)
    if not listed:
        extra = [k for k in options if k in step_keys and k not in rule_fields]
        if extra:
            raise ConfigError(f"aggregator_options.{extra[0]}: only used by pre-aggregation (allowed: with pre = "
                              f"\"{step_keys[extra[0]]}\")")
        return [], {k: v for k, v in options.items() if k != "pre"}
    if not all(isinstance(s, str) for s in listed):
        raise ConfigError(f"aggregator_options.pre: expected a step or a list of steps, each one of "
                          f"{', '.join(STEPS)} or an import path package.module:Class (got {shown(options['pre'])})")
    classes = []
    for s in listed:
        try:
            classes.append(step_class(s))
        except ConfigError as err:
            if s in STEPS or ":" in s:  # a plug-in that cannot be used: its own reason
                raise ConfigError(f"aggregator_options.pre: {err}") from None
            raise ConfigError(f"aggregator_options.pre: expected a step or a list of steps, each one of "
                              f"{', '.join(STEPS)} or an import path package.module:Class (got "
                              f"{shown(options['pre'])})") from None
    if not getattr(fn, "robust", True):
        robust = [n for n, f in RULES.items() if getattr(f, "robust", True)]
        raise ConfigError(f"aggregator_options.pre: pre-aggregation goes before a robust rule, not '{rule_name}' "
                          f"(allowed: {', '.join(robust)})")
    if len(set(listed)) != len(listed):
        raise ConfigError(f"aggregator_options.pre: {listed} repeats a step (allowed: each of "
                          f"{', '.join(STEPS)} at most once)")
    read: set[str] = set()  # the keys the listed steps read
    steps = []
    for name, cls in zip(listed, classes):
        fields = cls.Options.model_fields
        missing = [k for k, f in fields.items() if f.is_required() and k not in options]
        if missing:
            raise ConfigError(f"aggregator_options.{missing[0]}: pre-aggregation '{name}' needs "
                              f"{fields[missing[0]].description} (allowed: set {missing[0]})")
        given = validate(cls.Options, {k: v for k, v in options.items() if k in fields}, "aggregator_options")
        steps.append(cls(**given.model_dump()))
        read |= set(fields)
    for key in options:
        if key == "pre" or key in read or key in rule_fields or key not in step_keys:
            continue  # a key of no step: the rule's, refused there if unknown to it
        readers = [n for n, c in STEPS.items() if key in c.Options.model_fields]
        rules = [n for n, f in RULES.items() if key in getattr(f, "Options", NoOptions).model_fields]
        if not rules and len(readers) == 1:
            symbol = STEPS[readers[0]].Options.model_fields[key].description.split(":")[0]
            raise ConfigError(f"aggregator_options.{key}: {readers[0]}'s {symbol}, but pre = {listed} has no "
                              f"{readers[0]}, so it would be ignored (allowed: \"{readers[0]}\" in pre, or no {key})")
        raise ConfigError(f"aggregator_options.{key}: read by {_listing(readers + rules)}, but neither pre = {listed} "
                          f"nor '{rule_name}' has them, so it would be ignored (allowed: no {key})")
    own = {k: v for k, v in options.items()
           if k in rule_fields or (k not in step_keys and k not in read and k != "pre")}
    return steps, own


def _check_python_only(extra: dict) -> None:
    for group in extra.get("groups") or ():  # (index, kind, delta): the index needs d, checked at call
        if not isinstance(group, (tuple, list)) or len(group) != 3:
            raise ConfigError(f"each group must be an (index, kind, delta) tuple, got {group!r}")
        check_kind(group[1], "group kind")
        check_delta(group[2], "group delta")
    if isinstance(extra.get("init"), str) and extra["init"] not in ("mean", "median"):
        raise ConfigError(f"init must be 'mean', 'median' or a tensor; got {extra['init']!r}")


def pipeline(name: str, options: dict | None = None) -> Pipeline:
    """The :class:`Pipeline` that ``algorithm.aggregator = name`` and ``aggregator_options =
    options`` name: the rule (a key of :data:`AGGREGATORS` or a plug-in) with its own options
    validated and bound, after the pre-aggregation steps ``options["pre"]`` names, each built with
    the keys its ``Options`` declares (:mod:`fedpd.preaggregators`). Unknown name, unknown or missing
    option, an option value out of range, a key nothing reads → ConfigError naming it (values that
    depend on K are checked at call time). A rule's python-only arguments (``fedplus``: groups,
    init tensors) are bound unchecked by its model."""
    fn = aggregator_function(name)
    options = dict(options or {})
    extra = {k: options.pop(k) for k in getattr(fn, "python_only", ()) if k in options}
    _check_python_only(extra)
    model = getattr(fn, "Options", NoOptions)
    steps, own = _chain(name, fn, model.model_fields, options)
    validated = validate(model, own, "aggregator_options")
    return Pipeline(Rule(name, fn, validated, {**validated.model_dump(), **extra}), tuple(steps))


def make_aggregator(name: str, **options) -> Pipeline:
    """``f(w, weights=None, reference=None, generator=None) -> (aggregate, info)`` for aggregator
    ``name`` with ``options`` (a rule's own and a pre-aggregation chain's: :func:`pipeline`);
    ``reference`` reaches only the rules and steps that use it, ``generator`` is the chain's
    randomness (bucketing's permutation)."""
    return pipeline(name, options)


def min_rows(name: str, options: dict) -> int:
    """The fewest rows aggregator ``name`` accepts with ``options`` (Krum: 2f + 3), its
    pre-aggregation included (bucketing leaves ⌈K/s⌉ rows; NNM and ARC need K > 2f): what each
    part declares (:attr:`Pipeline.min_rows`)."""
    return pipeline(name, options).min_rows
