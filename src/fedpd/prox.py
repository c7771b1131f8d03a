"""Proximal operators of Fed+'s regularisers Ψ (Kundu et al., "Robustness and Personalization
in Federated Learning: A Unified Approach via Regularization", the Fed+ paper).

Fed+ computes every personal component as θ_k = prox_Ψ^{1/σ}(w_k − w̃) (eq. (11), Alg. 1 line 17),
where eq. (6) defines prox_Ψ^{1/σ}(v) = argmin_θ Ψ(θ) + σ/2‖θ − v‖². Every Ψ of the paper carries
the factor σ (Ψ = σδ/2‖·‖², σδ‖·‖₂, σδ‖·‖₁), so σ cancels and each operator here is

    prox(v) = argmin_θ  Ψ_δ(θ) + ½‖θ − v‖²,   Ψ_δ = Ψ / σ,

i.e. only δ appears. Kinds (also Table 1 of the paper):

=============  ==================================  =======================================
kind           Ψ (paper)                           prox(v)
=============  ==================================  =======================================
"zero"         Ψ ≡ 0 (local training, no FL)        v
"sq_l2"        σδ/2‖·‖² (FedAvg+)                  v / (1 + δ)
"l2"           σδ‖·‖₂ (FedGeoMed+)                 max(0, 1 − δ/‖v‖₂) v      (block soft threshold)
"l1"           σδ‖·‖₁ (FedCoMed+)                  sign(v) max(|v| − δ, 0)   (eq. (19))
"indicator"    0 at 0, +∞ elsewhere (FedProx)      0
=============  ==================================  =======================================

All operators act row-wise along the last axis: ``v`` is ``[K, d]`` (one row per client; any
leading axes work) or ``[d]`` (a single row). They are pure batched tensor ops, keep ``v``'s
dtype and device and never modify ``v``.

``prox_grouped`` is the per-layer hybrid of Fed+ ("Hybridization via the Unified Fed+ Framework
with Layer-specific Ψ"): parts of the flat parameter vector get their own Ψ and δ.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence, Union

import torch
from torch import Tensor

from fedpd.errors import ConfigError
from fedpd.ordered import ordered_norm

__all__ = [
    "PROX_KINDS",
    "prox",
    "prox_zero",
    "prox_sq_l2",
    "prox_l2",
    "prox_l1",
    "prox_indicator",
    "prox_grouped",
    "check_delta",
    "check_kind",
]

Index = Union[slice, Tensor, Sequence[int]]


# --- argument checks -----------------------------------------------------------------------
def check_delta(delta, name: str = "delta") -> float:
    """``delta`` as a float; ConfigError unless it is a finite real number >= 0."""
    if isinstance(delta, Tensor):
        if delta.numel() != 1:
            raise ConfigError(f"{name} must be a single finite number >= 0, got a tensor of shape {tuple(delta.shape)}")
        delta = delta.item()
    if isinstance(delta, bool) or not isinstance(delta, (int, float)):
        raise ConfigError(f"{name} must be a finite number >= 0, got {delta!r}")
    delta = float(delta)
    if not math.isfinite(delta) or delta < 0:
        raise ConfigError(f"{name} must be a finite number >= 0, got {delta!r}")
    return delta


def _check_v(v) -> Tensor:
    if not isinstance(v, Tensor):
        raise ConfigError(f"v must be a torch.Tensor of shape [K, d] or [d], got {type(v).__name__}")
    if v.dim() == 0:
        raise ConfigError("v must be a tensor of shape [K, d] or [d], got a 0-d tensor")
    if not v.is_floating_point():
        raise ConfigError(f"v must be a floating-point tensor, got dtype {v.dtype}")
    return v


# --- the operators -------------------------------------------------------------------------
def prox_zero(v: Tensor, delta: float = 0.0) -> Tensor:
    """Ψ ≡ 0: prox(v) = argmin_θ ½‖θ − v‖² = v (returned as a copy).

    Fed+ with Ψ ≡ 0 gives θ_k = w_k − w̃: every party trains on its own (Table 1, "Local SGD
    without FL"; Corollary part (a)). ``delta`` is validated and otherwise ignored.
    """
    _check_v(v)
    check_delta(delta)
    return v.clone()


def prox_sq_l2(v: Tensor, delta: float) -> Tensor:
    """FedAvg+: Ψ = σδ/2‖·‖², so prox_Ψ^{1/σ}(v) = argmin_θ δ/2‖θ‖² + ½‖θ − v‖² = v / (1 + δ).

    This is θ_k = [1 + δ]^{-1}(w_k − w̃) of the FedAvg+ paragraph (Section 4.4) and of the
    Corollary, part (c). Optimality: v − θ = δθ.
    """
    _check_v(v)
    delta = check_delta(delta)
    return v / (1.0 + delta)


def prox_l2(v: Tensor, delta: float) -> Tensor:
    """FedGeoMed+: Ψ = σδ‖·‖₂, so prox_Ψ^{1/σ}(v) = argmin_θ δ‖θ‖₂ + ½‖θ − v‖² (row-wise)
    = max(0, 1 − δ/‖v‖₂) v, the block soft-threshold of the FedGeoMed+ paragraph (and eq. (16)).

    The norm is taken over the last axis (one norm per client row). Rows with ‖v‖₂ <= δ,
    including v = 0, map exactly to 0 (no division by zero). Optimality:
    v − θ = δθ/‖θ‖ if θ ≠ 0, ‖v‖ <= δ if θ = 0.
    """
    _check_v(v)
    delta = check_delta(delta)
    norm = ordered_norm(v, dim=-1, keepdim=True)
    tiny = torch.finfo(v.dtype).tiny
    scale = torch.where(norm > delta, 1.0 - delta / norm.clamp_min(tiny), torch.zeros_like(norm))
    return scale * v


def prox_l1(v: Tensor, delta: float) -> Tensor:
    """FedCoMed+: Ψ = σδ‖·‖₁, so prox_Ψ^{1/σ}(v) = argmin_θ δ‖θ‖₁ + ½‖θ − v‖²
    = sign(v) max(|v| − δ, 0), element-wise soft-thresholding (eq. (19); the paper's
    "max{0, v − δ sign(v)}" means exactly this, applied to the magnitude).

    Optimality: v_i − θ_i = δ sign(θ_i) if θ_i ≠ 0, |v_i| <= δ if θ_i = 0.
    """
    _check_v(v)
    delta = check_delta(delta)
    return torch.sign(v) * torch.clamp(v.abs() - delta, min=0.0)


def prox_indicator(v: Tensor, delta: float = 0.0) -> Tensor:
    """Ψ = indicator of {0} (0 at θ = 0, +∞ elsewhere): prox(v) = 0 for every v.

    Fed+ with this Ψ has θ_k = 0, the aggregate is the mean and the local step is FedProx's
    proximal pull to w̃ (Table 1, FedProx row; Corollary part (b)). ``delta`` is validated and
    otherwise ignored.
    """
    _check_v(v)
    check_delta(delta)
    return torch.zeros_like(v)


_PROX: dict[str, Callable[[Tensor, float], Tensor]] = {
    "zero": prox_zero,
    "sq_l2": prox_sq_l2,
    "l2": prox_l2,
    "l1": prox_l1,
    "indicator": prox_indicator,
}

#: The allowed ``kind`` names, in the order of the module table.
PROX_KINDS: tuple[str, ...] = tuple(_PROX)


def check_kind(kind, name: str = "kind") -> str:
    """``kind`` itself; ConfigError unless it is one of PROX_KINDS."""
    if not isinstance(kind, str) or kind not in _PROX:
        raise ConfigError(f"{name} must be one of {', '.join(PROX_KINDS)}; got {kind!r}")
    return kind


def prox(kind: str, v: Tensor, delta: float = 0.0) -> Tensor:
    """prox_Ψ^{1/σ}(v) = argmin_θ Ψ_δ(θ) + ½‖θ − v‖² for the Fed+ regulariser ``kind``
    (one of PROX_KINDS, see the module docstring), row-wise over the last axis of ``v``.

    Fed+ eq. (6) defines the operator, eq. (11) / Alg. 1 line 17 apply it to w_k − w̃, and the
    aggregation (25) iterates it. Unknown ``kind`` or ``delta`` < 0 → ConfigError.
    """
    return _PROX[check_kind(kind)](v, delta)


# --- the per-layer hybrid ------------------------------------------------------------------
def _as_index(part, d: int, device) -> Tensor:
    """One group's coordinates as a 1-D LongTensor of positions in [0, d)."""
    if isinstance(part, slice):
        return torch.arange(d, device=device)[part]
    if isinstance(part, Tensor):
        idx = part.to(device)
    else:
        try:
            idx = torch.as_tensor(list(part), device=device)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"a group's index must be a slice, a bool mask or integer indices; got {part!r}") from exc
    if idx.dtype == torch.bool:
        if idx.shape != (d,):
            raise ConfigError(f"a group's bool mask must have shape [{d}], got {tuple(idx.shape)}")
        return idx.nonzero().flatten()
    if idx.numel() == 0:
        return idx.reshape(0).long()
    if idx.is_floating_point() or idx.is_complex() or idx.dim() != 1:
        raise ConfigError("a group's index must be a slice, a [d] bool mask or a 1-D tensor of integer indices")
    idx = idx.long()
    if int(idx.min()) < -d or int(idx.max()) >= d:
        raise ConfigError(f"a group's indices must lie in [-{d}, {d}), got range [{int(idx.min())}, {int(idx.max())}]")
    return idx % d


def prox_grouped(v: Tensor, groups: Sequence[tuple], default: tuple[str, float] | None = None) -> Tensor:
    """Per-layer hybrid prox of Fed+: each part of the flat vector gets its own Ψ and δ.

    ``groups`` is a list of ``(index, kind, delta)``; ``index`` selects coordinates of the last
    axis of ``v`` (a ``slice``, a ``[d]`` bool mask, or a 1-D tensor / list of integer
    positions) and that part gets ``prox(kind, ·, delta)``, with row-wise norms (for "l2")
    taken over that part only — one norm per client and layer. Coordinates covered by no group
    get ``default = (kind, delta)``; with ``default=None`` they are not allowed. Groups must
    not overlap. Any problem → ConfigError.

    The loop is over groups (layers), never over clients.
    """
    v = _check_v(v)
    return _apply_plan(v, _group_plan(groups, v.shape[-1], v.device, default))


def _group_plan(groups, d: int, device, default=None) -> list[tuple[Tensor, str, float]]:
    """Validated ``[(index LongTensor, kind, delta), ...]`` covering each of the d coordinates once."""
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        raise ConfigError(f"groups must be a list of (index, kind, delta) tuples, got {type(groups).__name__}")
    parts = []
    for g in groups:
        if not isinstance(g, (tuple, list)) or len(g) != 3:
            raise ConfigError(f"each group must be an (index, kind, delta) tuple, got {g!r}")
        part, kind, delta = g
        parts.append((_as_index(part, d, device), check_kind(kind, "group kind"), check_delta(delta, "group delta")))
    if default is not None:
        if not isinstance(default, (tuple, list)) or len(default) != 2:
            raise ConfigError(f"default must be a (kind, delta) tuple or None, got {default!r}")
        default = (check_kind(default[0], "default kind"), check_delta(default[1], "default delta"))

    count = torch.zeros(d, dtype=torch.long, device=device)
    for idx, _, _ in parts:
        count.index_add_(0, idx, torch.ones_like(idx))
    if bool((count > 1).any()):
        first = int((count > 1).nonzero()[0])
        raise ConfigError(f"groups must not overlap; coordinate {first} is in more than one group")
    uncovered = (count == 0).nonzero().flatten()
    if uncovered.numel() and default is None:
        raise ConfigError(
            f"groups leave {uncovered.numel()} of {d} coordinates uncovered (first: {int(uncovered[0])}); "
            "cover all or pass default=(kind, delta)"
        )
    if uncovered.numel():
        parts.append((uncovered, default[0], default[1]))
    return [p for p in parts if p[0].numel()]


def _apply_plan(v: Tensor, plan: list[tuple[Tensor, str, float]]) -> Tensor:
    out = torch.empty_like(v)
    for idx, kind, delta in plan:
        out[..., idx] = _PROX[kind](v[..., idx], delta)
    return out
