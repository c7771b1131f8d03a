"""Where clients' states live between rounds: the client-store contract and the in-memory store.

A client's state is a small named collection of tensors (the algorithm's ``init_client``). A
store must meet :class:`ClientStore`:

* ``get(ids)`` — the states of clients ``ids`` stacked on a leading axis, in the order of
  ``ids`` (copies: the caller may change them). A client that never took part has its initial
  state; reading it does not make it "taken part".
* ``put(ids, state)`` — store the rows of ``state`` as the new states of ``ids`` (distinct ids).
* ``mean(key)`` — the mean of ``key`` over all N clients (untouched clients count with their
  initial state), computed in ascending client order so that it does not depend on the order in
  which clients first took part. It serves the evaluation path (FedPD's server model between
  communications is the mean of the clients' anchors); an algorithm's rules never read it.
* ``full(key)`` — ``key`` of all N clients, [N, ...] (evaluation: personalised metrics).
* ``ids()`` — the clients that have taken part, ascending (a resume on another engine moves
  their states, :mod:`fedpd.handover`).
* ``state_dict()`` / ``load_state_dict(sd)`` — everything needed to continue bit-exactly after a
  restart (plain tensors, ints, strings, lists and dicts: a checkpoint is loaded without
  executing code). ``len(store)`` is the number of clients that have taken part.

:class:`MemoryStore` materialises a row only when a client first takes part, so memory grows
with the clients that have taken part, not with N: 10⁵ registered clients cost nothing until
they train. Rows are gathered and scattered with one index op per key.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from fedpd.ordered import ordered_sum

State = dict[str, Tensor]

#: the mean over clients is summed in chunks of this many bytes of rows, in ascending client
#: order, by every store alike (so a disk store gives the memory store's numbers)
MEAN_CHUNK_BYTES = 64 << 20


def ordered_mean(read, count: int, init: Tensor, num_clients: int) -> Tensor:
    """The mean over ``num_clients`` clients of ``count`` stored rows and ``num_clients - count``
    untouched ones (``init``). ``read(a, b)`` gives the stored rows a..b-1 of the clients in
    ascending id order; they are summed chunk by chunk in that order."""
    step = max(1, MEAN_CHUNK_BYTES // max(1, init.numel() * init.element_size()))
    total = None
    for a in range(0, count, step):
        part = ordered_sum(read(a, min(a + step, count)), 0)
        total = part if total is None else total + part
    if total is None:
        total = torch.zeros_like(init)
    return (total + (num_clients - count) * init) / num_clients


class ClientStore(Protocol):
    """The contract every client store meets (see the module docstring)."""

    num_clients: int

    def __len__(self) -> int: ...

    def get(self, ids: Tensor) -> State: ...

    def put(self, ids: Tensor, state: State) -> None: ...

    def mean(self, key: str) -> Tensor: ...

    def full(self, key: str) -> Tensor: ...

    def ids(self) -> Tensor: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, sd: dict) -> None: ...


class MemoryStore:
    """Client states in memory, one growing [rows, ...] tensor per key."""

    kind = "memory"

    def __init__(self, init: State, num_clients: int):
        self.init = {k: v.clone() for k, v in init.items()}
        self.num_clients = num_clients
        self.row_of: dict[int, int] = {}
        self.data: State = {k: v.new_empty((0, *v.shape)) for k, v in self.init.items()}

    def __len__(self) -> int:
        return len(self.row_of)

    def _rows(self, ids: Tensor, create: bool) -> Tensor:
        """Row of every id (``create``: materialise new ones; else -1 for untouched clients)."""
        ids_list = ids.tolist()
        new = [i for i in dict.fromkeys(ids_list) if i not in self.row_of] if create else []
        if new:
            used = len(self.row_of)
            for i in new:
                self.row_of[i] = len(self.row_of)
            for k, buf in self.data.items():
                if used + len(new) > buf.shape[0]:  # grow geometrically
                    cap = max(used + len(new), 2 * buf.shape[0], 8)
                    grown = buf.new_empty((cap, *buf.shape[1:]))
                    grown[:used] = buf[:used]
                    self.data[k] = buf = grown
                buf[used : used + len(new)] = self.init[k]
        return torch.tensor([self.row_of.get(i, -1) for i in ids_list], dtype=torch.int64)

    def get(self, ids: Tensor) -> State:
        """States of clients ``ids`` stacked on a leading axis (copies)."""
        if not self.data:
            return {}
        rows = self._rows(ids, create=False)
        if bool((rows >= 0).all()):
            return {k: v.index_select(0, rows.to(v.device)) for k, v in self.data.items()}
        out = {}
        for k, v in self.data.items():
            rows_d = rows.to(v.device)
            block = self.init[k].expand(len(rows), *self.init[k].shape).clone()
            have = rows_d >= 0
            block[have] = v.index_select(0, rows_d[have])
            out[k] = block
        return out

    def put(self, ids: Tensor, state: State) -> None:
        if not self.data:
            return
        rows = self._rows(ids, create=True)
        for k, v in self.data.items():
            v.index_copy_(0, rows.to(v.device), state[k].to(v.dtype))

    def _sorted_rows(self) -> tuple[Tensor, Tensor]:
        """(ids ascending, their rows) of the clients that have taken part."""
        if not self.row_of:
            return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
        ids, rows = zip(*sorted(self.row_of.items()))
        return torch.tensor(ids, dtype=torch.int64), torch.tensor(rows, dtype=torch.int64)

    def mean(self, key: str) -> Tensor:
        """Mean of ``key`` over all N clients, summed in ascending client order."""
        _, rows = self._sorted_rows()
        buf = self.data[key]
        rows = rows.to(buf.device)
        return ordered_mean(lambda a, b: buf.index_select(0, rows[a:b]), rows.numel(), self.init[key], self.num_clients)

    def full(self, key: str) -> Tensor:
        """``key`` of all N clients, [N, ...] (untouched clients hold the initial state). A copy;
        materialises no row (personalised evaluation reads every client's model this way)."""
        out = self.init[key].expand(self.num_clients, *self.init[key].shape).clone()
        ids, rows = self._sorted_rows()
        if len(ids):
            buf = self.data[key]
            out[ids.to(out.device)] = buf.index_select(0, rows.to(buf.device))
        return out

    def ids(self) -> Tensor:
        return self._sorted_rows()[0]

    def state_dict(self) -> dict:
        ids, rows = self._sorted_rows()
        return {"init": self.init, "num_clients": self.num_clients, "ids": ids.tolist(),
                "data": {k: v.index_select(0, rows.to(v.device)).clone() for k, v in self.data.items()}}

    def load_state_dict(self, sd: dict) -> None:
        self.init = {k: v.clone() for k, v in sd["init"].items()}
        self.num_clients = sd["num_clients"]
        self.row_of = {int(i): r for r, i in enumerate(sd["ids"])}
        self.data = {k: v.clone() for k, v in sd["data"].items()}

    @classmethod
    def from_state_dict(cls, sd: dict) -> "MemoryStore":
        store = cls(sd["init"], sd["num_clients"])
        store.load_state_dict(sd)
        return store
