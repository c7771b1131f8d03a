"""What an algorithm is: explicit state and pure update rules (after FedJAX's init/apply).

One round, as the engine runs it:

    message          = broadcast(server)                  # server → each participant (counted)
    uploads, clients = local(message, clients, ctx)       # on the clients, [K, ...] tensors
    if communicates:                                      # decided by plan(), e.g. FedPD's coin
        server, reply = aggregate(server, uploads, ctx)   # clients → server (counted)
        clients       = receive(clients, reply, ctx)      # server → participants (counted)

Every rule broadcasts over the leading client axis, so the engine may run the K participants
one at a time or all at once. An algorithm never knows which engine runs it.

Diagnostics: upload keys that start with ``metric_`` are per-client scalars ([K]) for the
metrics (e.g. ``metric_primal_residual``), not part of the algorithm's protocol; the engine
hands them to ``aggregate`` but does not count them as communication. ``aggregate`` keeps the
round's values in the server state as 0-d tensors under the names in :data:`DIAGNOSTICS`,
which the default :meth:`Algorithm.diagnostics` reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from fedpd.problems.base import Problem
from fedpd.store import ClientStore, State

EMPTY: State = {}
METRIC_PREFIX = "metric_"
#: server-state keys (0-d tensors) reported as metrics by the default ``diagnostics``:
#: primal_residual = mean over the round's participants of ‖x_i − x0‖² (x0: the model they
#: trained from); dual_drift = mean over participants of ‖∇L_i‖² at the start of local training
#: (docs/algorithms.md defines both).
DIAGNOSTICS = ("primal_residual", "dual_drift")


@dataclass
class RoundContext:
    """What a rule may look at besides its state: the problem, the local solver, who takes part."""

    problem: Problem
    solver: object
    ids: Tensor  # the participating clients, int64 [K]
    round: int  # 0-based index of this round
    generator: torch.Generator  # the solver's stream (minibatches, stragglers)
    num_clients: int


class Algorithm:
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: "sampled": the sampler picks the participants; "all": every client, every round.
    participation: ClassVar[str] = "sampled"
    #: upload keys that are models (update attacks act on their difference to the broadcast x0);
    #: other uploads (SCAFFOLD's Δx, Δc) are updates already. See fedpd.attacks.
    model_uploads: ClassVar[tuple[str, ...]] = ("x", "z", "w")

    def setup(self, problem: Problem, solver: object) -> None:
        """Called once before ``init_server``: check that the solver fits (raise ConfigError if
        not) and read static facts of the problem (e.g. client sizes). Keeps no state."""

    def init_server(self, x0: Tensor) -> State:
        return {"x0": x0.clone()}

    def init_client(self, x0: Tensor) -> State:
        """One client's initial state ([d]-shaped tensors); empty for stateless clients."""
        return {}

    def participants(self, round: int, sampled: Tensor, num_clients: int) -> Tensor:
        """Who takes part in round ``round``: the sampler's draw, unless the algorithm's own
        definition says otherwise (Parallel SAGA's initial pass over every client)."""
        return sampled

    def communicates(self, server: State, round: int, generator: torch.Generator) -> bool:
        return True

    def broadcast(self, server: State) -> State:
        return {"x0": server["x0"]}

    def local(self, message: State, clients: State, ctx: RoundContext) -> tuple[State, State]:
        raise NotImplementedError

    def aggregate(self, server: State, uploads: State, ctx: RoundContext) -> tuple[State, State]:
        raise NotImplementedError

    def receive(self, clients: State, reply: State, ctx: RoundContext) -> State:
        return clients

    def model(self, server: State, store: ClientStore) -> Tensor:
        """The point where metrics are evaluated (the server model)."""
        return server["x0"]

    def diagnostics(self, server: State, store: ClientStore) -> dict[str, float]:
        """Extra metric keys: the :data:`DIAGNOSTICS` the server state holds."""
        return {k: float(server[k]) for k in DIAGNOSTICS if k in server}

    def personal_models(self, server: State, store: ClientStore, problem: Problem | None = None) -> Tensor | None:
        """Every client's own model, [N, d], for personalised evaluation (each client's model on its
        own test split: ``personal_*`` metrics); None (the default) when all use the server model."""
        return None


def with_metrics(server: State, uploads: State) -> State:
    """``server`` plus the round's mean of every ``metric_*`` upload (as 0-d tensors)."""
    metrics = {k[len(METRIC_PREFIX):]: v.mean() for k, v in uploads.items() if k.startswith(METRIC_PREFIX)}
    return {**server, **metrics}


def mean_sq_dist(x: Tensor, x0: Tensor) -> Tensor:
    """mean_k ‖x_k − x0‖² for x [K, d] and x0 [d] or [K, d] (a 0-d tensor)."""
    return ((x - x0) ** 2).sum(1).mean()


def expand(x: Tensor, k: int) -> Tensor:
    """A [d] vector as [K, d] (a view)."""
    return x.unsqueeze(0).expand(k, *x.shape)
