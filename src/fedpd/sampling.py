"""Who takes part in a round: everyone, K of N uniformly without replacement, or each client
independently with probability q. Round t's draw comes from the server's stream ("sampler", t)
of the run's seed (:func:`fedpd.streams.server_generator`): nothing to carry between rounds."""

from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from fedpd.options import NoOptions, Options


class UniformOptions(Options):
    clients_per_round: int = Field(10, ge=1, description="K: participants per round")


class BernoulliOptions(Options):
    q: float = Field(0.1, gt=0, le=1, description="each client's chance to take part in a round")


class Everyone:
    name = "all"
    description = "every client every round"
    Options = NoOptions

    def __init__(self, num_clients: int):
        self.num_clients = num_clients
        self.per_round: int | None = num_clients  # participants every round (None: it varies)
        self._ids = torch.arange(num_clients)

    def sample(self, round: int, generator: torch.Generator) -> Tensor:
        return self._ids


class UniformK:
    name = "uniform"
    description = "K of the N clients uniformly at random without replacement"
    Options = UniformOptions

    def __init__(self, num_clients: int, clients_per_round: int):
        self.num_clients, self.k = num_clients, clients_per_round
        self.per_round: int | None = clients_per_round

    def sample(self, round: int, generator: torch.Generator) -> Tensor:
        if self.k > 1000 or self.k * 20 > self.num_clients:
            return torch.randperm(self.num_clients, generator=generator)[: self.k].sort().values
        # few out of many: draw with rejection of repeats, O(K) instead of O(N)
        chosen: dict[int, None] = {}
        while len(chosen) < self.k:
            for i in torch.randint(self.num_clients, (self.k,), generator=generator).tolist():
                if len(chosen) < self.k:
                    chosen.setdefault(i)
        return torch.tensor(sorted(chosen), dtype=torch.int64)


class Bernoulli:
    name = "bernoulli"
    description = "each client independently with probability q (rounds may have no participant)"
    Options = BernoulliOptions

    def __init__(self, num_clients: int, q: float):
        self.num_clients, self.q = num_clients, q
        self.per_round: int | None = None
        self.expected_per_round = max(1, round(q * num_clients))  # what the thread and worker rules weigh

    def sample(self, round: int, generator: torch.Generator) -> Tensor:
        return (torch.rand(self.num_clients, generator=generator) < self.q).nonzero().flatten()


SAMPLERS = (Everyone, UniformK, Bernoulli)
