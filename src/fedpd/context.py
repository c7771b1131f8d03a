"""What a rule may look at, as a message-passing system would give it.

A client rule sees its own data, its id, the round, its random streams and the message it
received (:class:`ClientContext`); a server rule sees the uploads, the ids of their senders and
the round (:class:`ServerContext`). Static facts of the federation that a deployment's server
knows from its config — the number of clients, the model's layout — are in
:class:`FederationInfo`, given once to ``Algorithm.setup``. Anything else a server needs from the
clients travels in the upload and is counted as communication.

Evaluation over every client (the server model's loss on all training data, personalised
metrics) is not part of this protocol: it goes through ``Algorithm.evaluation_model`` and
``Algorithm.personal_models``, which :mod:`fedpd.evaluation` calls with the client states and
the problem, and is never counted as communication.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from fedpd.flat import FlatModel
from fedpd.problems.base import ClientData
from fedpd.streams import ClientStreams


@dataclass(frozen=True)
class FederationInfo:
    """What the server knows before any round: N, the model's layout, dtype and device, and the
    size of the largest client (for per-sample state tables padded to one shape)."""

    num_clients: int
    dim: int
    model: FlatModel  # the layout of the flat vector (parameter names and slices), not data
    dtype: torch.dtype
    device: torch.device
    max_client_samples: int


@dataclass
class ClientContext:
    """A client rule's view of one call: the clients ``ids`` (one row each), the round, their own
    training data and the local solver. ``rng(purpose)`` gives each client its own stream."""

    ids: Tensor  # int64 [K]
    round: int
    data: ClientData
    solver: object
    seed: int
    _calls: dict[str, int] = field(default_factory=dict, repr=False)

    def rng(self, purpose: str) -> ClientStreams:
        """Per-client streams for ``purpose`` in this round; each call gives fresh streams (the
        n-th call of a purpose is the same for every client, however clients are grouped)."""
        n = self._calls.get(purpose, 0)
        self._calls[purpose] = n + 1
        return ClientStreams.of(self.seed, purpose, self.round, self.ids).child(n)

    def select(self, rows: Tensor) -> "ClientContext":
        """The context of some of the clients (``rows``: a bool mask or indices into ``ids``)."""
        ids = self.ids[rows]
        return ClientContext(ids, self.round, ClientData(self.data._problem, ids), self.solver, self.seed)


@dataclass(frozen=True)
class ServerContext:
    """A server rule's view of one round: the senders of the accepted uploads (ascending ids, one
    row of every upload each), the round and N."""

    ids: Tensor  # int64 [K]
    round: int
    num_clients: int
