"""Per-sample losses (outputs, targets) -> [B], and the regularisers of the papers' problems."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def logistic_pm1(outputs: Tensor, targets: Tensor) -> Tensor:
    """log(1 + exp(−b·aᵀx)) with labels b ∈ {−1, +1} (FedPD's §5 loss)."""
    return F.softplus(-targets * outputs.squeeze(-1))


def cross_entropy(outputs: Tensor, targets: Tensor) -> Tensor:
    """Multinomial cross-entropy on logits, class indices as targets."""
    return F.cross_entropy(outputs, targets, reduction="none")


#: per-sample losses whose batch mean torch computes in one fused op: the same gradient,
#: without the per-sample tensor and the mean's autograd node (a minibatch's loss, every step)
BATCH_MEAN = {cross_entropy: F.cross_entropy}


def half_squared(outputs: Tensor, targets: Tensor) -> Tensor:
    """½(aᵀx − b)² (least squares)."""
    return 0.5 * (outputs.squeeze(-1) - targets) ** 2


def nonconvex_penalty(lam: float, alpha: float):
    """r(x) = Σ_j λ·α·x_j² / (1 + α·x_j²), FedPD §5 (after Antoniadis et al.)."""

    def r(x: Tensor) -> Tensor:
        ax2 = alpha * x * x
        return lam * (ax2 / (1 + ax2)).sum()

    return r


def sign_predict(outputs: Tensor) -> Tensor:
    return torch.where(outputs.squeeze(-1) >= 0, 1.0, -1.0).to(outputs.dtype)


def argmax_predict(outputs: Tensor) -> Tensor:
    return outputs.argmax(-1)
