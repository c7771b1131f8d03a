"""A federated problem: every client's data, a model and a loss.

Samples of all clients are stored concatenated with offsets (client ``i`` owns rows
``offsets[i]:offsets[i+1]``), so clients of very different sizes cost nothing extra and a
minibatch for K clients is one gather. The objective is the paper's

    f(x) = (1/N) Σ_i f_i(x),   f_i(x) = mean_{j ∈ client i} loss(model(x, a_j), b_j) + r(x),

uniform over clients (FedPD, FedDyn and the primal-dual family minimise this f).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import torch
from torch import Tensor

from fedpd.flat import FlatModel


@dataclass
class ClientSplit:
    """All clients' samples of one split (train or test), concatenated."""

    x: Tensor
    y: Tensor
    offsets: Tensor  # int64 [N + 1]

    @property
    def num_clients(self) -> int:
        return self.offsets.numel() - 1

    @property
    def sizes(self) -> Tensor:
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def owner(self) -> Tensor:
        """The client of every sample, int64 [n]."""
        return torch.repeat_interleave(torch.arange(self.num_clients), self.sizes)

    @classmethod
    def from_parts(cls, xs: list[Tensor], ys: list[Tensor]) -> "ClientSplit":
        sizes = torch.tensor([len(y) for y in ys], dtype=torch.int64)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
        return cls(torch.cat(xs), torch.cat(ys), offsets)

    def padded(self, ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Every sample of clients ``ids``, padded to the largest: X [K, m, ...], Y [K, m], W [K, m]
        with W = 1 on real samples and 0 on padding."""
        sizes = self.sizes[ids]
        m = int(sizes.max()) if ids.numel() else 0
        j = torch.arange(m)
        mask = j[None, :] < sizes[:, None]
        index = torch.where(mask, self.offsets[ids][:, None] + j[None, :], self.offsets[ids][:, None])
        return self.x[index], self.y[index], mask.to(self.x.dtype if self.x.is_floating_point() else torch.float32)

    def minibatch(self, ids: Tensor, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """``batch_size`` samples per client drawn uniformly with replacement: X [K, B, ...], Y [K, B], W."""
        u = torch.rand(ids.numel(), batch_size, generator=generator, dtype=torch.float64)
        index = self.offsets[ids][:, None] + (u * self.sizes[ids][:, None]).long()
        dtype = self.x.dtype if self.x.is_floating_point() else torch.float32
        return self.x[index], self.y[index], torch.ones(index.shape, dtype=dtype)


@dataclass
class Problem:
    """Federated data + model + per-sample loss (+ an optional regulariser r on the flat vector).

    ``quadratic``, when set, maps (train split, client ids) to (H [K, d, d], g [K, d]) with
    f_i(x) = ½xᵀH_i x − g_iᵀx + c_i; it enables the exact local solver.
    """

    name: str
    train: ClientSplit
    test: ClientSplit
    model: FlatModel
    loss: Callable[[Tensor, Tensor], Tensor]  # (outputs [B, ...], targets [B]) -> per-sample [B]
    x_init: Tensor
    classifies: bool = False
    regularizer: Callable[[Tensor], Tensor] | None = None
    quadratic: Callable[[ClientSplit, Tensor], tuple[Tensor, Tensor]] | None = None
    predict: Callable[[Tensor], Tensor] | None = None  # outputs -> predicted labels
    info: dict = field(default_factory=dict)
    #: per-sample gradients the clients have computed so far (fedpd.solvers.client_gradients)
    sample_grads: int | Tensor = 0

    @property
    def num_clients(self) -> int:
        return self.train.num_clients

    @property
    def dim(self) -> int:
        return self.model.dim

    def client_loss(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor) -> Tensor:
        """f_i at x on a (weighted) batch of one client; vmap over clients for [K, d]."""
        per_sample = self.loss(self.model(x, X), Y)
        value = (per_sample * W).sum() / W.sum()
        if self.regularizer is not None:
            value = value + self.regularizer(x)
        return value

    def to(self, dtype: torch.dtype) -> "Problem":
        """The same problem with float data, parameters and x_init in ``dtype``."""

        def cast(split: ClientSplit) -> ClientSplit:
            x = split.x.to(dtype) if split.x.is_floating_point() else split.x
            y = split.y.to(dtype) if split.y.is_floating_point() else split.y
            return replace(split, x=x, y=y)  # keeps subclasses (e.g. augmented minibatches)

        self.train, self.test = cast(self.train), cast(self.test)
        self.x_init = self.x_init.to(dtype)
        return self
