"""Batch image augmentation with tensor ops: random crop with zero padding + random horizontal flip
(the standard CIFAR recipe of He et al. 2016), for a whole batch at once, no per-sample Python loop."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def random_crop_flip(x: torch.Tensor, generator: torch.Generator | None = None, padding: int = 4,
                     flip: bool = True) -> torch.Tensor:
    """Randomly crop each image of ``x`` (``[B, C, H, W]`` or ``[K, B, C, H, W]``) from its zero-padded copy
    and flip it horizontally with probability 1/2; same shape out. Deterministic for a given ``generator``.

    The image is padded once; per-sample row and column offsets index it through one advanced-indexing
    gather, and the flip reverses the column indices (``torch.where``) before the gather.
    """
    if x.dim() == 5:
        k, b = x.shape[:2]
        return random_crop_flip(x.reshape(k * b, *x.shape[2:]), generator, padding, flip).reshape(x.shape)
    if x.dim() != 4:
        raise ValueError(f"random_crop_flip: input shape {tuple(x.shape)}, expected [B, C, H, W] or [K, B, C, H, W]")
    if padding < 0:
        raise ValueError(f"random_crop_flip: padding={padding}, expected >= 0")
    n, c, h, w = x.shape
    gen_device = generator.device if generator is not None else torch.device("cpu")
    offsets = torch.randint(0, 2 * padding + 1, (2, n), generator=generator, device=gen_device).to(x.device)
    flips = torch.rand(n, generator=generator, device=gen_device).to(x.device) < 0.5
    padded = F.pad(x, (padding, padding, padding, padding)) if padding else x
    rows = offsets[0, :, None] + torch.arange(h, device=x.device)            # [N, H]
    cols = offsets[1, :, None] + torch.arange(w, device=x.device)            # [N, W]
    if flip:
        cols = torch.where(flips[:, None], cols.flip(1), cols)
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    chan = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[batch, chan, rows[:, None, :, None], cols[:, None, None, :]]
