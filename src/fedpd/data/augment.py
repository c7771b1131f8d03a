"""Batch image augmentation with tensor ops: random crop with zero padding + random horizontal flip
(the standard CIFAR recipe of He et al. 2016), for a whole batch at once, no per-sample Python loop."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def random_crop_flip(x: torch.Tensor, u: torch.Tensor, padding: int = 4, flip: bool = True) -> torch.Tensor:
    """Crop each image of ``x`` (``[B, C, H, W]`` or ``[K, B, C, H, W]``) from its zero-padded copy
    and flip it horizontally, as the uniforms ``u`` (``x``'s leading shape + [3], values in [0, 1))
    say: row offset, column offset, flip (< 1/2). Same shape out; a pure function of (x, u), so the
    caller decides whose random stream the crops come from.

    The image is padded once; per-sample row and column offsets index it through one advanced-indexing
    gather, and the flip reverses the column indices (``torch.where``) before the gather.
    """
    if x.dim() == 5:
        k, b = x.shape[:2]
        return random_crop_flip(x.reshape(k * b, *x.shape[2:]), u.reshape(k * b, 3), padding, flip).reshape(x.shape)
    if x.dim() != 4:
        raise ValueError(f"random_crop_flip: input shape {tuple(x.shape)}, expected [B, C, H, W] or [K, B, C, H, W]")
    if padding < 0:
        raise ValueError(f"random_crop_flip: padding={padding}, expected >= 0")
    n, c, h, w = x.shape
    if u.shape != (n, 3):
        raise ValueError(f"random_crop_flip: uniforms of shape {tuple(u.shape)}, expected {(n, 3)}")
    u = u.to(x.device)
    offsets = (u[:, :2] * (2 * padding + 1)).long().T  # [2, N]
    padded = F.pad(x, (padding, padding, padding, padding)) if padding else x
    rows = offsets[0, :, None] + torch.arange(h, device=x.device)            # [N, H]
    cols = offsets[1, :, None] + torch.arange(w, device=x.device)            # [N, W]
    if flip:
        cols = torch.where((u[:, 2] < 0.5)[:, None], cols.flip(1), cols)
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    chan = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[batch, chan, rows[:, None, :, None], cols[:, None, None, :]]
