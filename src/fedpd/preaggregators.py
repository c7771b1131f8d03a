"""Pre-aggregation: steps that map the round's K rows to new rows before a robust rule reads them.

A defence is then a chain, ``pre = ["arc", "nnm"]`` before ``aggregator = "trimmed_mean"``: each
step is a function of the rows (and, for bucketing, the round's server stream), applied in the
order given, and the rule aggregates what the last step returns. Set in a config as
``algorithm.aggregator_options.pre`` (a name or a list of names) beside the rule's own options;
``bucket_size`` is bucketing's s and ``n_byzantine`` the f that NNM and ARC need (the same key
Krum and Bulyan read, so one f serves the whole chain). The steps:

* ``nnm`` — nearest-neighbour mixing (Allouah, Farhadkhani, Guerraoui, Gupta, Pinot, Stephan,
  "Fixing by mixing: a recipe for optimal Byzantine ML under heterogeneity", AISTATS 2023, Alg. 1);
* ``bucketing`` — (Karimireddy, He, Jaggi, "Byzantine-robust learning on heterogeneous datasets
  via bucketing", ICLR 2022, Alg. 1);
* ``arc`` — adaptive robust clipping (Allouah, Guerraoui, Gupta, Jellouli, Rizk, Stephan,
  "Adaptive gradient clipping for robust federated learning", ICLR 2025; arXiv:2405.14432).

The rows are models or updates; NNM and bucketing average rows, so they give the same updates
either way, while ARC clips norms and so works on the updates ``w − reference`` (the reference is
the server model the round started from, 0 without one). Pre-aggregation mixes clients, so a
per-client weight means nothing after it: ``weights = "samples"`` is refused with a ``pre``.
"""

from __future__ import annotations

import math
from typing import Callable, Literal, get_args

import torch
from pydantic import Field, field_validator
from torch import Tensor

from fedpd.errors import ConfigError
from fedpd.options import Options, shown, validate
from fedpd.ordered import ordered_norm

__all__ = ["nnm", "bucketing", "arc", "STEPS", "DESCRIPTIONS", "PreOptions", "split_options", "Chain", "rows_needed"]

Step = Literal["nnm", "bucketing", "arc"]


class PreOptions(Options):
    pre: list[Step] | Step = Field(default_factory=list, description="pre-aggregation before the rule, in order: "
                                   "nnm, bucketing, arc (a name or a list)")
    bucket_size: int = Field(2, ge=1, description="s: rows averaged per bucket (bucketing; refused without it)")
    n_byzantine: int | None = Field(None, ge=0, description="f: Byzantine rows tolerated (nnm and arc need it; refused "
                                    "where neither they nor the rule read it)")

    @field_validator("pre", mode="before")
    @classmethod
    def _known_steps(cls, pre):
        # one message for a name and a list alike (pydantic's would name a branch of the union)
        if not all(isinstance(s, str) and s in get_args(Step) for s in _steps(pre)):
            raise ValueError(f"expected a step or a list of steps, each one of {', '.join(get_args(Step))} "
                             f"(got {shown(pre)})")
        return pre


#: the keys of ``aggregator_options`` that belong to the chain, not to the rule
KEYS = tuple(PreOptions.model_fields)


def _check(w: Tensor) -> Tensor:
    if not isinstance(w, Tensor) or w.dim() != 2 or w.shape[0] < 1 or not w.is_floating_point():
        shown = tuple(w.shape) if isinstance(w, Tensor) else type(w).__name__
        raise ConfigError(f"w must be a floating-point tensor of shape [K, d] with K >= 1, got {shown}")
    return w


def _needs_majority(step: str, K: int, f: int) -> None:
    if K <= 2 * f:
        raise ConfigError(f"pre-aggregation '{step}' needs K > 2*n_byzantine; got K={K}, n_byzantine={f} "
                          f"(allowed: n_byzantine <= {(K - 1) // 2})")


def nnm(w: Tensor, n_byzantine: int) -> Tensor:
    """Nearest-neighbour mixing (Allouah et al., AISTATS 2023, Alg. 1): for each row i,

        N_i = the K − f rows nearest to x_i in ℓ2 (x_i itself included),
        y_i = (1/(K − f)) Σ_{j∈N_i} x_j,

    and the rule then aggregates y_1 … y_K. Distances as Krum's (``torch.cdist`` without the
    matrix-product shortcut); ties broken by the lower row index (a stable sort), so the mix does
    not depend on the thread count. ConfigError unless K > 2f (the paper's n > 2f). Cost: K²
    distances of d entries and K means of K − f rows. ByzFL's ``NNM(f)`` is this step.
    """
    w = _check(w)
    K, f = w.shape[0], n_byzantine
    _needs_majority("nnm", K, f)
    dist = torch.cdist(w, w, compute_mode="donot_use_mm_for_euclid_dist")
    near = dist.argsort(dim=1, stable=True)[:, :K - f].sort(dim=1).values  # each row's neighbours, by index
    return torch.stack([w.index_select(0, near[i]).mean(0) for i in range(K)])


def bucketing(w: Tensor, bucket_size: int, generator: torch.Generator | None) -> Tensor:
    """Bucketing (Karimireddy, He, Jaggi, ICLR 2022, Alg. 1): with a random permutation π of the K
    rows, bucket i averages s consecutive permuted rows,

        y_i = mean(x_π((i−1)s+1), …, x_π(min(is, K))),   i = 1 … ⌈K/s⌉,

    (the last bucket holds the K mod s left over, when s does not divide K), and the rule
    aggregates the ⌈K/s⌉ bucket means. π is ``torch.randperm(K, generator=generator)``; fedpd
    passes the server's stream for the round (purpose "pre_aggregation": :mod:`fedpd.streams`),
    so every engine and a resumed run draw the same π. The paper's analysis needs δ·s ≤ 1/2 for
    a Byzantine share δ = f/K (each Byzantine row can spoil a whole bucket); the rule after it
    must tolerate f bad rows among ⌈K/s⌉ (:func:`rows_needed` refuses an s for which its own
    condition fails). ByzFL's ``Bucketing(s)`` draws π from torch's global generator: seeded
    alike, the two make the same buckets.
    """
    w = _check(w)
    if generator is None:
        raise ConfigError("pre-aggregation 'bucketing' draws a permutation: pass generator (fedpd passes the "
                          "round's server stream)")
    K, s = w.shape[0], bucket_size
    perm = torch.randperm(K, generator=generator).to(w.device)
    return torch.stack([w.index_select(0, perm[start:start + s]).mean(0) for start in range(0, K, s)])


def arc(w: Tensor, n_byzantine: int, reference: Tensor | None = None) -> Tensor:
    """Adaptive robust clipping (Allouah, Guerraoui, Gupta, Jellouli, Rizk, Stephan, ICLR 2025,
    Alg. 1): of the updates Δ_i = x_i − reference, the k = ⌊2 (f/K)(K − f)⌋ of largest norm are
    clipped to the norm of the (k+1)-th largest,

        Δ_i ← Δ_i · min(1, ‖Δ_(k+1)‖ / ‖Δ_i‖),

    the others pass unchanged; the rows returned are reference + Δ_i. Ties in norm: the row of
    lower index counts as larger (a stable sort). k is computed in integers, 2f(K − f) // K.
    ConfigError unless K > 2f (the paper's f < n/2; then k <= K − 1). Without ``reference`` the
    rows themselves are clipped (they are taken as updates): ByzFL's ``ARC(f)``, which computes k
    as int(2f/K·(K − f)) in floating point (the same k unless rounding puts 2f(K − f)/K just below
    an integer it equals).
    """
    w = _check(w)
    K, f = w.shape[0], n_byzantine
    _needs_majority("arc", K, f)
    k = 2 * f * (K - f) // K
    if k == 0:
        return w
    ref = torch.zeros_like(w[0]) if reference is None else reference.to(dtype=w.dtype, device=w.device)
    diff = w - ref
    norms = ordered_norm(diff, dim=1)
    order = torch.argsort(-norms, stable=True)
    bound = norms[order[k]]
    scale = torch.ones_like(norms)
    big = order[:k]
    scale[big] = torch.where(norms[big] > bound, bound / norms[big].clamp_min(torch.finfo(w.dtype).tiny),
                             torch.ones_like(norms[big]))
    return ref + diff * scale[:, None]


STEPS: dict[str, Callable] = {"nnm": nnm, "bucketing": bucketing, "arc": arc}
#: each step's one line (what ``fedpd list`` shows)
DESCRIPTIONS = {
    "nnm": "nearest-neighbour mixing: each row replaced by the mean of its K - f nearest (Allouah et al. 2023)",
    "bucketing": "rows averaged in random buckets of s before the rule (Karimireddy et al. 2022)",
    "arc": "adaptive robust clipping: the 2f(K - f)/K longest updates clipped to the next one's norm "
           "(Allouah et al. 2025)",
}


def _steps(pre) -> list:
    return list(pre) if isinstance(pre, (list, tuple)) else [pre]  # a name (or what PreOptions refuses)


def split_options(rule: str, rule_fields, options: dict) -> tuple[PreOptions | None, dict]:
    """(the chain's options, or None without ``pre``; the rule's own options) of
    ``aggregator_options``. ``n_byzantine`` stays with a rule that reads it too (Krum, Bulyan).
    ConfigError, one line, for a ``pre`` before the mean, an f missing where a step needs it."""
    if not _steps(options.get("pre", [])):
        extra = [k for k in ("bucket_size",) if k in options]
        if extra:
            raise ConfigError(f"aggregator_options.{extra[0]}: only used by pre-aggregation (allowed: with "
                              f"pre = \"bucketing\")")
        return None, {k: v for k, v in options.items() if k != "pre"}
    own = {k: v for k, v in options.items() if k not in KEYS or (k == "n_byzantine" and k in rule_fields)}
    chain = validate(PreOptions, {k: v for k, v in options.items() if k in KEYS}, "aggregator_options")
    steps = _steps(chain.pre)
    if rule in ("mean", "fedplus"):
        raise ConfigError(f"aggregator_options.pre: pre-aggregation goes before a robust rule, not '{rule}' "
                          f"(allowed: coordinate_median, trimmed_mean, krum, bulyan, geometric_median, "
                          f"centered_clipping, norm_bounding)")
    needs_f = [s for s in steps if s in ("nnm", "arc")]
    if needs_f and chain.n_byzantine is None:
        raise ConfigError(f"aggregator_options.n_byzantine: pre-aggregation '{needs_f[0]}' needs f, the Byzantine "
                          f"rows tolerated (allowed: an integer >= 1)")
    if needs_f and chain.n_byzantine == 0:  # f = 0: NNM mixes every row into the mean, ARC clips none
        does = ("replaces every row by the mean of all K: the defence becomes the plain mean" if needs_f[0] == "nnm"
                else "clips no row: the step does nothing")
        raise ConfigError(f"aggregator_options.n_byzantine: 0 with pre-aggregation '{needs_f[0]}', which then "
                          f"{does} (allowed: n_byzantine >= 1 and < K/2, or no '{needs_f[0]}' in pre)")
    if len(set(steps)) != len(steps):
        raise ConfigError(f"aggregator_options.pre: {steps} repeats a step (allowed: each of nnm, bucketing, arc "
                          f"at most once)")
    if "bucket_size" in options and "bucketing" not in steps:  # set, and read by nothing
        raise ConfigError(f"aggregator_options.bucket_size: bucketing's s, but pre = {steps} has no bucketing, so it "
                          f"would be ignored (allowed: \"bucketing\" in pre, or no bucket_size)")
    if chain.n_byzantine is not None and not needs_f and "n_byzantine" not in rule_fields:
        raise ConfigError(f"aggregator_options.n_byzantine: read by nnm, arc, krum and bulyan, but neither pre = "
                          f"{steps} nor '{rule}' has them, so it would be ignored (allowed: no n_byzantine)")
    return chain.model_copy(update={"pre": steps}), own


def rows_needed(chain: PreOptions | None, rule_min: int) -> int:
    """The fewest rows K the chain and a rule that needs ``rule_min`` rows accept: bucketing leaves
    ⌈K/s⌉, so K >= (rule_min − 1)·s + 1; NNM and ARC need K > 2f."""
    if chain is None:
        return rule_min
    need = rule_min
    if "bucketing" in chain.pre:
        need = (rule_min - 1) * chain.bucket_size + 1
    if any(s in chain.pre for s in ("nnm", "arc")):
        need = max(need, 2 * chain.n_byzantine + 1)
    return need


class Chain:
    """The pre-aggregation steps of ``options``: ``chain(w, reference, generator) -> rows``."""

    def __init__(self, options: PreOptions):
        self.options = options
        self.steps = list(options.pre)

    def __call__(self, w: Tensor, reference: Tensor | None, generator: torch.Generator | None) -> Tensor:
        o = self.options
        for step in self.steps:
            if step == "nnm":
                w = nnm(w, o.n_byzantine)
            elif step == "bucketing":
                w = bucketing(w, o.bucket_size, generator)
            else:
                w = arc(w, o.n_byzantine, reference)
        return w

    def describe(self) -> str:
        parts = [f"bucketing (s = {self.options.bucket_size})" if s == "bucketing" else s.upper() for s in self.steps]
        return " → ".join(parts)


def buckets(K: int, s: int) -> int:
    """⌈K/s⌉: the rows bucketing leaves of K."""
    return math.ceil(K / s)
