"""Where clients' states live between rounds.

A client's state is a small named collection of tensors. The store materialises a row only
when a client first participates (before that its state is the algorithm's initial state), so
memory grows with the clients that have participated, not with N: 10⁵ registered clients cost
nothing until they train. Rows are gathered and scattered with one index op per key.
"""

from __future__ import annotations

import torch
from torch import Tensor

State = dict[str, Tensor]


class ClientStore:
    def __init__(self, init: State, num_clients: int):
        self.init = {k: v.clone() for k, v in init.items()}
        self.num_clients = num_clients
        self.row_of: dict[int, int] = {}
        self.data: State = {k: v.new_empty((0, *v.shape)) for k, v in self.init.items()}

    def __len__(self) -> int:
        return len(self.row_of)

    def _rows(self, ids: Tensor) -> Tensor:
        ids_list = ids.tolist()
        new = [i for i in dict.fromkeys(ids_list) if i not in self.row_of]
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
        return torch.tensor([self.row_of[i] for i in ids_list], dtype=torch.int64)

    def get(self, ids: Tensor) -> State:
        """States of clients ``ids`` stacked on a leading axis (copies)."""
        if not self.data:
            return {}
        rows = self._rows(ids)
        return {k: v.index_select(0, rows) for k, v in self.data.items()}

    def put(self, ids: Tensor, state: State) -> None:
        if not self.data:
            return
        rows = self._rows(ids)
        for k, v in self.data.items():
            v.index_copy_(0, rows, state[k].to(v.dtype))

    def mean(self, key: str) -> Tensor:
        """Mean of ``key`` over all N clients (untouched clients count with their initial state)."""
        n = len(self.row_of)
        total = self.data[key][:n].sum(0) + (self.num_clients - n) * self.init[key]
        return total / self.num_clients

    def full(self, key: str) -> Tensor:
        """``key`` of all N clients, [N, ...] (untouched clients hold the initial state). A copy;
        materialises no row (personalised evaluation reads every client's model this way)."""
        out = self.init[key].expand(self.num_clients, *self.init[key].shape).clone()
        if self.row_of:
            out[torch.tensor(list(self.row_of), dtype=torch.int64)] = self.data[key][: len(self.row_of)]
        return out

    def state_dict(self) -> dict:
        n = len(self.row_of)
        return {"init": self.init, "num_clients": self.num_clients, "ids": list(self.row_of),
                "data": {k: v[:n].clone() for k, v in self.data.items()}}

    @classmethod
    def from_state_dict(cls, sd: dict) -> "ClientStore":
        store = cls(sd["init"], sd["num_clients"])
        store.row_of = {int(i): r for r, i in enumerate(sd["ids"])}
        store.data = {k: v.clone() for k, v in sd["data"].items()}
        return store
