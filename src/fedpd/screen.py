"""The round protocol's upload screen (:mod:`fedpd.protocol`): a row with a NaN/Inf entry, a
missing key or a wrong shape is rejected — never averaged in — and counted in the metrics as
``rejected_uploads``. A rejected participant is treated as if it had dropped out of the round: its
client state is not updated and it gets no reply; the run goes on.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import Tensor

State = dict[str, Tensor]


def screen(uploads: list[State], sizes: list[int]) -> tuple[State, Tensor]:
    """Stack the uploads of several groups of clients and flag the well-formed rows.

    ``uploads[j]`` holds group j's tensors ``[sizes[j], ...]`` (a group: a chunk of an engine, a
    node's reply). Every key's expected trailing shape is the one most clients sent (a group that
    disagrees, or lacks a key, or has the wrong number of rows, is rejected whole: it cannot be
    stacked). Empties ``uploads`` as it stacks them. Returns the stacked uploads (rejected
    groups' rows filled with NaN, so the row count stays K) and a [K] bool mask of the rows that
    are well-formed and finite.
    """
    keys = Counter(k for u in uploads for k in u)
    shapes: dict[str, tuple] = {}
    for key in keys:
        votes = Counter()
        for u, n in zip(uploads, sizes):
            t = u.get(key)
            if isinstance(t, Tensor) and t.dim() >= 1 and t.shape[0] == n:
                votes[tuple(t.shape[1:])] += n
        if votes:
            shapes[key] = votes.most_common(1)[0][0]
    # keys most clients did not send are not part of the message
    total = sum(sizes)
    kept = [k for k in shapes if sum(n for u, n in zip(uploads, sizes) if k in u) * 2 > total]
    parts: dict[str, list[Tensor]] = {k: [] for k in kept}
    ok_parts = []
    for u, n in zip(uploads, sizes):
        good = all(isinstance(u.get(k), Tensor) and u[k].dim() >= 1 and u[k].shape[0] == n
                   and tuple(u[k].shape[1:]) == shapes[k] for k in kept)
        good = good and set(u) <= set(kept)
        for k in kept:
            parts[k].append(u[k] if good else torch.full((n, *shapes[k]), float("nan"), dtype=_dtype(uploads, k),
                                                         device=_device(uploads, k)))
        ok_parts.append(torch.full((n,), good, dtype=torch.bool))
    uploads.clear()  # the caller's list lets go, so each group's tensors are freed once copied
    stacked = {k: _stack(v) for k, v in parts.items()}
    ok = torch.cat(ok_parts) if ok_parts else torch.zeros(0, dtype=torch.bool)
    return stacked, ok & finite_rows(stacked, ok.numel())


def _stack(parts: list[Tensor]) -> Tensor:
    """``torch.cat(parts)``, emptying ``parts`` as it copies: K uploads of a large model are then
    held about once, not twice (the parts and their concatenation)."""
    if len({(p.dtype, p.device) for p in parts}) != 1:
        return torch.cat(parts)  # mixed types: cat's promotion rules
    out = torch.empty((sum(p.shape[0] for p in parts), *parts[0].shape[1:]), dtype=parts[0].dtype,
                      device=parts[0].device)
    row = 0
    for i, part in enumerate(parts):
        out[row:row + part.shape[0]] = part
        row += part.shape[0]
        parts[i] = None
    return out


def finite_rows(upload: State, k: int | None = None) -> Tensor:
    """[K] bool (on the CPU): rows whose every entry, in every key, is finite (all True for no keys)."""
    ok = torch.ones(k if k is not None else next(iter(upload.values())).shape[0], dtype=torch.bool)
    for t in upload.values():
        if not t.is_floating_point() or t.numel() == 0:
            continue  # integers are finite
        rows = t.reshape(t.shape[0], -1)
        # a row's max and min are finite iff every entry is (NaN propagates through both): two
        # reductions, no [K, d] temporary, ~20x faster than isfinite(rows).all(1)
        ok &= (rows.amax(1).isfinite() & rows.amin(1).isfinite()).cpu()
    return ok


def _dtype(uploads: list[State], key: str) -> torch.dtype:
    for u in uploads:
        t = u.get(key)
        if isinstance(t, Tensor) and t.is_floating_point():
            return t.dtype
    return torch.get_default_dtype()


def _device(uploads: list[State], key: str) -> torch.device:
    for u in uploads:
        t = u.get(key)
        if isinstance(t, Tensor):
            return t.device
    return torch.device("cpu")
