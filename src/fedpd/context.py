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
from fedpd.streams import ClientStreams, server_generator


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
    training data and the local solver. ``rng(purpose)`` gives each client its own stream;
    ``loss(x)`` and ``gradient(x)`` each client's objective f_i and its gradient at given points
    (counted as computation, as the solver's steps are)."""

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

    def loss(self, x: Tensor, batch: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
        """f_i at x of every client of the call, [K]: row k is client ``ids[k]``'s mean loss (plus
        the regulariser) at x[k] ([K, d]; a [d] point is every client's). On all its own training
        samples, or on ``batch`` = (X, Y, W) drawn from its own data (``data.minibatch(B, rng)``).
        Computed the way the solver's gradients are (``run.execution``) and counted like them: every
        real sample adds one to ``sample_grads``."""
        x = self._rows(x)
        return self.data.loss(x, *(self.data.all() if batch is None else batch))

    def gradient(self, x: Tensor, batch: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
        """∇f_i at x of every client of the call, [K, d], on the samples :meth:`loss` reads: the
        solver's own gradient call (``run.execution``), counted in ``sample_grads`` as its steps are."""
        x = self._rows(x)
        return self.data.gradient(x, *(self.data.all() if batch is None else batch))

    def _rows(self, x: Tensor) -> Tensor:
        """x as [K, d]: a [d] point repeated for every client (a view)."""
        k = self.ids.numel()
        if x.dim() == 1:
            return x.unsqueeze(0).expand(k, *x.shape)
        if x.dim() != 2 or x.shape[0] != k:
            raise ValueError(f"a point for the clients of the call must be [d] or [K, d] with K = {k}, got "
                             f"{list(x.shape)}")
        return x

    def select(self, rows: Tensor) -> "ClientContext":
        """The context of some of the clients (``rows``: a bool mask or indices into ``ids``)."""
        positions = torch.arange(self.ids.numel(), device=self.ids.device)[rows]
        ids = self.ids[positions]
        return ClientContext(ids, self.round, ClientData(self.data._problem, ids, (self.data, positions)), self.solver,
                             self.seed)


@dataclass(frozen=True)
class ServerContext:
    """A server rule's view of one round: the senders of the accepted uploads (ascending ids, one
    row of every upload each), the round and N; ``rng(purpose)`` the server's own stream for the
    round (the run's seed, the purpose, the round: the same on every engine and after a resume)."""

    ids: Tensor  # int64 [K]
    round: int
    num_clients: int
    seed: int = 0

    def rng(self, purpose: str) -> torch.Generator:
        """A generator for the server's draws of ``purpose`` this round (e.g. bucketing's permutation)."""
        return server_generator(self.seed, purpose, self.round)
