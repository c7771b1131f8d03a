"""Sums whose order of additions is fixed by the shape of what is summed, never by the thread count.

torch runs a reduction on one thread when it has fewer than ``at::internal::GRAIN_SIZE`` (32 768)
elements; above that, a reduction *to one number* (``x.sum()``, a [1, d] row's norm) is split
over the intra-op threads and their partial sums are added in an order that depends on how many
there are — the same data give other last bits at 1 and at 2 threads (measured on MNIST: a
float32 channel mean moved the training loss by 3e-3 relative after 5 rounds). Reductions with
many outputs (``x.sum(0)`` of [K, d]) give each output to one thread and are unaffected.

So every sum fedpd computes itself on data or models of unbounded size goes through here: a
reduction of up to :data:`BLOCK` elements is the one torch call it always was (bit for bit the
numbers of every earlier fedpd on the small built-in problems), a longer one is cut into blocks of
:data:`BLOCK` that are each reduced in one call and then added one after another, first to last.
The result depends on the data and their shape alone: the same at any thread count, on every
engine, chunking and resume. (It may still differ between kinds of CPU, whose vector width
changes the order inside one torch call, and between devices: docs/architecture.md,
"Determinism".)
"""

from __future__ import annotations

import torch
from torch import Tensor

#: elements summed by one torch call: below torch's grain size, so that call runs on one thread
BLOCK = 1 << 14


def ordered_sum(x: Tensor, dim: int | None = None, dtype: torch.dtype | None = None) -> Tensor:
    """``x.sum(dim)`` (``dim`` None: every element) in blocks of :data:`BLOCK` along ``dim``, added
    first to last; ``dtype``: accumulate (and return) in it, e.g. float64 for float32 data."""
    if dim is None:
        x, dim = x.reshape(-1), 0
    n = x.shape[dim]
    if n <= BLOCK:
        return x.sum(dim, dtype=dtype)
    total = x.narrow(dim, 0, BLOCK).sum(dim, dtype=dtype)
    for start in range(BLOCK, n, BLOCK):
        total = total + x.narrow(dim, start, min(BLOCK, n - start)).sum(dim, dtype=dtype)
    return total


def ordered_sq_norm(x: Tensor, dim: int | None = None) -> Tensor:
    """‖x‖² along ``dim`` (None: of every element): ``ordered_sum(x * x, dim)``."""
    return ordered_sum(x * x, dim)


def ordered_norm(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """The L2 norm along ``dim`` (None: of every element; ``keepdim`` applies to a ``dim``):
    ``torch.linalg.vector_norm`` for up to :data:`BLOCK` elements (its numbers), else the square
    root of :func:`ordered_sq_norm`."""
    n = x.numel() if dim is None else x.shape[dim]
    if n <= BLOCK:
        return torch.linalg.vector_norm(x, dim=dim, keepdim=keepdim and dim is not None)
    norm = ordered_sq_norm(x, dim).sqrt()
    return norm.unsqueeze(dim) if keepdim and dim is not None else norm


def ordered_mean(x: Tensor, dim: int | None = None) -> Tensor:
    """``x.mean(dim)`` (up to :data:`BLOCK` elements: that call), else :func:`ordered_sum` / count."""
    n = x.numel() if dim is None else x.shape[dim]
    return x.mean(dim) if n <= BLOCK else ordered_sum(x, dim) / n
