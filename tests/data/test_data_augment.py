"""random_crop_flip: every output is a crop of the zero-padded input (maybe flipped); a pure function of
the uniforms it is given; 5-D input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedpd.data.augment import random_crop_flip


def _u(n: int, seed: int) -> torch.Tensor:
    return torch.rand(n, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _is_crop(out: torch.Tensor, img: torch.Tensor, padding: int) -> tuple[int, int, bool] | None:
    """Brute force: the (dy, dx, flipped) whose crop of the padded image equals ``out``, or None."""
    h, w = img.shape[-2:]
    padded = F.pad(img, (padding,) * 4)
    for dy in range(2 * padding + 1):
        for dx in range(2 * padding + 1):
            crop = padded[:, dy:dy + h, dx:dx + w]
            if torch.equal(out, crop):
                return dy, dx, False
            if torch.equal(out, crop.flip(-1)):
                return dy, dx, True
    return None


def test_outputs_are_padded_crops_and_flips():
    x = torch.rand(64, 3, 8, 10, generator=torch.Generator().manual_seed(0))
    out = random_crop_flip(x, _u(64, 1), padding=2)
    assert out.shape == x.shape and out.dtype == x.dtype
    found = [_is_crop(out[i], x[i], 2) for i in range(len(x))]
    assert all(f is not None for f in found)
    assert {f[2] for f in found} == {False, True}  # both flip states occur
    assert len({f[:2] for f in found}) > 10  # many offsets occur


def test_deterministic_given_uniforms():
    x = torch.rand(16, 3, 32, 32)
    a = random_crop_flip(x, _u(16, 7))
    b = random_crop_flip(x, _u(16, 7))
    c = random_crop_flip(x, _u(16, 8))
    assert torch.equal(a, b) and not torch.equal(a, c)
    # the extremes of [0, 1) map to the extreme offsets, no further
    edge = random_crop_flip(
        x[:2], torch.tensor([[0.0, 0.0, 0.9], [1 - 2**-53, 1 - 2**-53, 0.9]], dtype=torch.float64), padding=4
    )
    padded = torch.nn.functional.pad(x[:2], (4,) * 4)
    assert torch.equal(edge[0], padded[0, :, :32, :32]) and torch.equal(edge[1], padded[1, :, 8:, 8:])


def test_client_axis_and_no_padding():
    x = torch.rand(3, 5, 1, 6, 6)
    out = random_crop_flip(x, _u(15, 0).reshape(3, 5, 3))
    assert out.shape == x.shape
    assert all(_is_crop(out[k, b], x[k, b], 4) is not None for k in range(3) for b in range(5))
    flat = random_crop_flip(x.reshape(15, 1, 6, 6), _u(15, 0))
    assert torch.equal(flat.reshape(x.shape), out)
    plain = random_crop_flip(x[0], _u(5, 0), padding=0)
    assert all(torch.equal(plain[i], x[0, i]) or torch.equal(plain[i], x[0, i].flip(-1)) for i in range(5))
    with pytest.raises(ValueError):
        random_crop_flip(torch.rand(3, 6, 6), _u(3, 0))
    with pytest.raises(ValueError):
        random_crop_flip(torch.rand(3, 1, 6, 6), _u(2, 0))
