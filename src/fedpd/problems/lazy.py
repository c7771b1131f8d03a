"""Clients' data generated on demand: a problem with 10⁶ clients builds in seconds.

A generated problem gives every client its own seeded generator, keyed by (problem seed, client
id) through :mod:`fedpd.streams`, so client i's samples are the same whether they are generated
with everybody's at build time (the eager split, for small N) or alone when client i is first
read (the lazy split). :class:`ClientSource` generates a client's samples (train rows first, then
test rows) and keeps the most recently used ones in a small cache; :class:`LazyRows` stands in for
a split's ``x`` or ``y`` tensor: indexing it with a slice or an index tensor of sample positions
generates just the clients that own them. A :class:`fedpd.problems.base.ClientSplit` whose ``x``
and ``y`` are LazyRows works everywhere a split is read (``padded``, ``minibatch``, ``samples``,
evaluation's slices) and holds only the offsets in memory (8 bytes per client).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from fedpd.disk_store.system import _human, mem_available
from fedpd.errors import ConfigError
from fedpd.problems.base import ClientSplit
from fedpd.streams import ClientStreams

#: build a generated problem eagerly (all clients' samples in memory) up to this many numbers
EAGER_LIMIT = 1 << 25  # 32 M numbers, 256 MB in float64


def check_memory(key: str, need: int, what: str) -> None:
    """One line (ConfigError) when building ``what`` needs more than the available memory."""
    avail = mem_available()
    if need > avail:
        raise ConfigError(f"{key}: {what} needs about {_human(need)} of memory to build; {_human(avail)} available "
                          f"(allowed: a smaller value)")


#: bytes each client of an eagerly built problem costs beyond its numbers (its tensors' objects)
CLIENT_OVERHEAD = 1024


def check_eager(clients: int, samples: int, dim: int) -> None:
    """One line before a problem built in memory (every client's samples made at once, then
    joined) would need more memory than is available."""
    need = clients * (CLIENT_OVERHEAD + 2 * 8 * samples * (dim + 1))
    check_memory("problem.clients", need, f"{clients} clients x {samples} samples x {dim} features")


def client_generators(seed: int, purpose: str, ids) -> list[torch.Generator]:
    """One torch generator per client of ``ids``, seeded from (problem seed, purpose, client):
    a client's draws do not depend on which other clients are generated, or in which order."""
    keys = ClientStreams.of(seed, purpose, 0, torch.as_tensor(ids, dtype=torch.int64).reshape(-1)).keys
    return [torch.Generator().manual_seed(int(k) & ((1 << 63) - 1)) for k in keys]


class ClientSource:
    """Client i's samples, (x [n_i, ...], y [n_i]) with its first ``n_train[i]`` rows for training,
    from ``generate(i)``; the last ``cache_bytes`` worth of clients are kept."""

    def __init__(self, generate: Callable[[int], tuple[Tensor, Tensor]], sizes: Tensor, n_train: Tensor,
                 cache_bytes: int = 256 << 20):
        self.generate, self.sizes, self.n_train = generate, sizes.to(torch.int64), n_train.to(torch.int64)
        self.cache: OrderedDict[int, tuple[Tensor, Tensor]] = OrderedDict()
        self.cache_bytes, self._held = cache_bytes, 0
        self.generated = 0  # clients generated so far (a client evicted and read again counts twice)

    @property
    def num_clients(self) -> int:
        return self.sizes.numel()

    def client(self, i: int) -> tuple[Tensor, Tensor]:
        hit = self.cache.get(i)
        if hit is not None:
            self.cache.move_to_end(i)
            return hit
        x, y = self.generate(i)
        self.generated += 1
        self.cache[i] = (x, y)
        self._held += x.numel() * x.element_size() + y.numel() * y.element_size()
        while self._held > self.cache_bytes and len(self.cache) > 1:
            _, (ox, oy) = self.cache.popitem(last=False)
            self._held -= ox.numel() * ox.element_size() + oy.numel() * oy.element_size()
        return x, y

    def part(self, i: int, part: str) -> tuple[Tensor, Tensor]:
        x, y = self.client(i)
        n = int(self.n_train[i])
        return (x[:n], y[:n]) if part == "train" else (x[n:], y[n:])

    def splits(self, lazy: bool) -> tuple[ClientSplit, ClientSplit]:
        """(train, test): generated now (``lazy`` False) or on demand."""
        if not lazy:
            xs, ys, n_train = [], [], []
            for i in range(self.num_clients):
                x, y = self.generate(i)
                xs.append(x)
                ys.append(y)
                n_train.append(int(self.n_train[i]))
            tr = ClientSplit.from_parts([x[:n] for x, n in zip(xs, n_train)], [y[:n] for y, n in zip(ys, n_train)])
            te = ClientSplit.from_parts([x[n:] for x, n in zip(xs, n_train)], [y[n:] for y, n in zip(ys, n_train)])
            return tr, te
        x0, y0 = self.client(0)  # one client, for the shapes and dtypes
        out = []
        for part, sizes in (("train", self.n_train), ("test", self.sizes - self.n_train)):
            offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
            out.append(ClientSplit(LazyRows(self, part, 0, offsets, x0.dtype, x0.shape[1:]),
                                   LazyRows(self, part, 1, offsets, y0.dtype, y0.shape[1:]), offsets))
        return out[0], out[1]


class LazyRows:
    """A split's ``x`` (``which`` 0) or ``y`` (1) whose rows are generated when indexed."""

    def __init__(self, source: ClientSource, part: str, which: int, offsets: Tensor, dtype: torch.dtype,
                 row_shape, device: torch.device | str = "cpu"):
        self.source, self.part, self.which = source, part, which
        self.offsets = offsets.cpu()
        self.dtype, self.row_shape, self.device = dtype, tuple(row_shape), torch.device(device)
        self._window = None

    @property
    def shape(self) -> torch.Size:
        return torch.Size((int(self.offsets[-1]), *self.row_shape))

    def dim(self) -> int:
        return 1 + len(self.row_shape)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def to(self, *args, **kwargs) -> "LazyRows":
        dtype, device = kwargs.get("dtype", self.dtype), kwargs.get("device", self.device)
        for a in args:
            if isinstance(a, torch.dtype):
                dtype = a
            elif a is not None:
                device = a
        return LazyRows(self.source, self.part, self.which, self.offsets, dtype, self.row_shape, device)

    def _rows_of(self, key: tuple) -> tuple[Tensor, Tensor]:
        """(the rows of clients ``key`` side by side, where each client's rows start); kept while
        the same clients are read again (a round's local steps read the same participants)."""
        if self._window is None or self._window[0] != key:
            blocks = [self.source.part(i, self.part)[self.which] for i in key]
            lengths = torch.tensor([b.shape[0] for b in blocks], dtype=torch.int64)
            block = torch.cat(blocks) if blocks else torch.empty((0, *self.row_shape), dtype=self.dtype)
            self._window = (key, block, torch.cumsum(lengths, 0) - lengths)
        return self._window[1], self._window[2]

    def take(self, ids: Tensor, local: Tensor) -> Tensor:
        """Rows ``local`` [K, m] (positions within each client) of clients ``ids`` [K]."""
        block, starts = self._rows_of(tuple(ids.tolist()))
        rows = block[starts[:, None] + local.cpu()]
        return rows.to(device=self.device, dtype=self.dtype)

    def __getitem__(self, index) -> Tensor:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise IndexError("LazyRows: slices must have step 1")
            flat, shape = torch.arange(start, max(start, stop)), None
        elif isinstance(index, int):
            return self[torch.tensor([index])][0]
        else:
            index = torch.as_tensor(index)
            flat, shape = index.reshape(-1).cpu().to(torch.int64), index.shape
        if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= len(self)):
            raise IndexError(f"LazyRows: sample index out of range 0..{len(self) - 1}")
        owners = torch.searchsorted(self.offsets, flat, right=True) - 1
        clients, inverse = torch.unique(owners, return_inverse=True)
        key = tuple(clients.tolist())
        block, starts = self._rows_of(key)
        rows = block[starts[inverse] + (flat - self.offsets[owners])] if key else block
        if shape is not None:
            rows = rows.reshape(*shape, *self.row_shape)
        return rows.to(device=self.device, dtype=self.dtype)


def is_lazy(split: ClientSplit) -> bool:
    return isinstance(split.x, LazyRows)


def sizes_numbers(sizes: Tensor, row_numbers: int) -> int:
    """How many numbers the eager build of clients of ``sizes`` samples would hold."""
    return int(np.int64(sizes.sum()) * max(1, row_numbers))
