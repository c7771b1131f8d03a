"""δ for FedGeoMed+ and FedCoMed+ on the scale of the uploads: ``algorithm.delta_rule = "spread"``.

Fed+ (Kundu, Yu, Wynter, Lim 2022) aggregates by eq. (7), 𝒜(W) = argmin_z Σ_k Ψ̂(w_k − z), which for
Ψ = σδ‖·‖₂ (FedGeoMed+) is the minimiser of Σ_k Huber_δ(‖w_k − z‖) and for Ψ = σδ‖·‖₁ (FedCoMed+)
the same per coordinate (docs/fedplus.md). A residual below δ enters quadratically (as in a mean),
one above δ linearly (as in a median). So the *same* δ makes the aggregate a median on one model
and a plain mean on another: on MNIST's logistic regression the largest entry of |w_k − w̃| was
0.078, below the paper's recommended δ = 0.1, so FedCoMed+ thresholded nothing, was exactly the
mean and fell to inner-product manipulation (IPM, ε = 100), while δ = 0.001 held. δ has the units
of the parameters; a fixed value cannot be right for every model, data set and stage of training.

The rule (Huber's own recipe for his M-estimator: a threshold proportional to a robust scale of
the residuals) sets, at every aggregation,

    δ_t = delta · s_t,   s_t = a robust spread of the rows W the server aggregates:
      FedCoMed+ (l1): the median of the non-zero |w_kj − m_j|,
      FedGeoMed+ (l2): the median over k of ‖w_k − m‖,

m the coordinate-wise median of the rows. ``delta`` is then dimensionless: residuals larger than
``delta`` times the typical one enter linearly. A minority of arbitrary rows cannot move a median
far, so s_t (and δ_t) are what the honest rows make them; with ``delta`` ≤ 1 most honest residuals
lie above δ_t and the aggregate behaves as the (geometric or coordinate-wise) median, while every
row far away — an attacker's — is clipped to δ_t (its pull on the aggregate is bounded by
δ_t · f/(K − f) per coordinate for l1, in norm for l2). "Non-zero" for l1 keeps coordinates that
no party moves (e.g. always-black pixels of MNIST) from driving s_t to 0.

δ_t is computed by the server from what it aggregates (the whole [N, d] table with Alg. 1's
``aggregate_over = "all"``), used in that round's eq. (25), and sent to the parties with the next
model (one float per participant, counted as communication), which use it in their θ_k =
prox(w_k − w̃) — so Ψ stays one function for the aggregate and the personal parts, as in the paper,
only its δ follows the scale of the models. Before the first aggregation δ = 0 (every w_k is w̃⁰
then, so θ_k = 0 whatever δ).
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedpd.aggregators import coordinate_median
from fedpd.ordered import ordered_norm

RULES = ("fixed", "spread")


def spread(rows: Tensor, kind: str) -> float:
    """The robust spread s of ``rows`` [K, d] about their coordinate-wise median (see the module
    docstring); 0.0 when every row is the median."""
    m, _ = coordinate_median(rows)
    r = rows - m
    if kind == "l1":
        nz = r.abs().flatten()
        nz = nz[nz > 0]
        return float(nz.median()) if nz.numel() else 0.0
    if kind == "l2":
        return float(ordered_norm(r, dim=1).median())
    raise ValueError(f"delta_rule 'spread' applies to psi l1 or l2, not {kind!r}")


def rule_delta(rows: Tensor, kind: str, scale: float) -> float:
    """δ_t = scale · spread(rows, kind)."""
    return scale * spread(rows, kind)


def as_tensor(value: float, like: Tensor) -> Tensor:
    return torch.tensor(float(value), dtype=like.dtype, device=like.device)
