"""What an algorithm is: explicit state and pure update rules (after FedJAX's init/apply).

One round, as every engine runs it (:mod:`fedpd.protocol`):

    message          = broadcast(server)                  # server → each participant (counted)
    uploads, clients = local(message, clients, ctx)       # on the clients, [K, ...] tensors
    if communicates:                                      # e.g. FedPD's coin
        server, reply = aggregate(server, uploads, sctx)  # clients → server (counted)
        clients       = receive(clients, reply, ctx)      # server → participants (counted)

Every rule broadcasts over the leading client axis, so an engine may run the K participants one
at a time or all at once, in any order, anywhere. An algorithm never knows which engine runs it.
The rules see only what messages give them (:mod:`fedpd.context`): ``local`` and ``receive`` a
:class:`~fedpd.context.ClientContext` (own data, ids, round, streams), ``aggregate`` a
:class:`~fedpd.context.ServerContext` (the senders' ids, the round, N). ``setup`` gets the
static :class:`~fedpd.context.FederationInfo` and the solver once, before the first round.

Evaluation is a separate path, outside the protocol and never counted: ``evaluation_model``
(the point where the metrics are taken) and ``personal_models`` (each client's own model) read
the client states through a :class:`ClientStates` view and, where they must, the problem.

Diagnostics: upload keys that start with ``metric_`` are per-client scalars ([K]) for the
metrics (e.g. ``metric_primal_residual``), not part of the algorithm's protocol; engines hand
them to ``aggregate`` but do not count them as communication. ``aggregate`` keeps the round's
values in the server state as 0-d tensors under the names in :data:`DIAGNOSTICS`, which the
default :meth:`Algorithm.diagnostics` reports.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import torch
from torch import Tensor

from fedpd.context import ClientContext, FederationInfo, ServerContext
from fedpd.options import NoOptions, Options
from fedpd.ordered import ordered_mean, ordered_sq_norm

State = dict[str, Tensor]
EMPTY: State = {}
METRIC_PREFIX = "metric_"
#: server-state keys (0-d tensors) reported as metrics by the default ``diagnostics``:
#: primal_residual = mean over the round's participants of ‖x_i − x0‖² (x0: the model they
#: trained from); dual_drift = mean over participants of ‖∇L_i‖² at the start of local training
#: (docs/algorithms.md defines both).
DIAGNOSTICS = ("primal_residual", "dual_drift")


class ClientStates(Protocol):
    """Read access to every client's state, for the evaluation path only (a client store)."""

    num_clients: int

    def mean(self, key: str) -> Tensor: ...

    def full(self, key: str) -> Tensor: ...


class Algorithm:
    """The base of every algorithm, fedpd's and a user's (``fedpd.Algorithm``; docs/extending.md).

    A subclass is constructed with its config options as keywords (``Options``, a pydantic model
    of :class:`fedpd.Options`, validates ``[algorithm]``; ``name`` and ``description`` are what
    ``fedpd list`` shows) and defines the rules of one round (module docstring). Each hook as fedpd
    calls it (the methods below have these signatures), what it sees and what it returns:

    ``setup(info, solver)``
        :class:`FederationInfo` and the local solver, once → nothing (check options, keep static facts)
    ``init_server(x0)``
        x0 [d], the model's initial point → the server state: a dict of tensors
    ``init_client(x0)``
        x0 [d] → one client's initial state ({}: stateless)
    ``participants(round, sampled, num_clients)``
        the sampler's draw → who takes part (default: the draw)
    ``communicates(server, round, generator)``
        the server state, a seeded generator → whether this round uploads (default True)
    ``broadcast(server)``
        the server state → the message to each participant (counted)
    ``local(message, clients, ctx)``
        the message, the clients' states [K, ...], a :class:`ClientContext` (``loss(x)``,
        ``gradient(x)``: their own f_i, ∇f_i) → (uploads [K, ...], new client states); uploads counted
    ``aggregate(server, uploads, ctx)``
        the server state, the accepted uploads, a :class:`ServerContext` → (new server state,
        reply to the senders); reply counted
    ``receive(clients, reply, ctx)``
        the senders' states, the reply, a ClientContext → the client states after the reply
    ``min_uploads()``
        → the fewest accepted uploads ``aggregate`` can work with (default 1)

    Optional, for memory: a rule whose server step reads the uploads only through their means sets
    ``means_only`` and defines ``mean_terms(server, uploads)`` (each client's terms [k, ...]) and
    ``aggregate_means(server, means, ctx)`` (the step from their means); the in-process engine
    then adds each client in as it finishes instead of holding all K uploads; every other round
    calls ``aggregate``, whose default for such a rule is ``aggregate_means`` of the rows' means,
    so both give the same step. A subclass that overrides
    ``aggregate`` below the class that defines ``aggregate_means`` gets the stacked uploads
    (:func:`streams_means`), so its step is never skipped; one that overrides ``aggregate_means``
    while it is not ``means_only`` would be skipped, and is refused (:func:`unused_server_step`).

    What the rule declares of its uploads and server step (typed class attributes, defaults below;
    one whose answer follows the options is a property, as FedAvg's ``means_only``), which attacks
    and ``[privacy]`` read instead of guessing: ``model_uploads``, ``update_uploads`` and
    ``statistic_uploads`` (what each upload key is), ``means_only``, ``weighs_by_samples``,
    ``robust_aggregate``, ``reads_participant_count``, ``own_anchor`` and ``uploads_step_counts``.
    ``[privacy]`` wraps the server step of a rule whose declarations allow it and refuses the others
    in one line (:mod:`fedpd.privacy`).

    The evaluation path (never counted, not part of a round): ``evaluation_model(server, clients)``
    (the point the metrics are taken at; default x0), ``personal_models(server, clients,
    problem=None)`` (each client's own model [N, d], or None) and ``diagnostics(server)`` (extra
    metric keys).

    What makes a rule give the same numbers on every engine, chunking and order: client rules work
    row by row on the leading client axis (no sums over clients in ``local`` or ``receive``), draw
    randomness only from ``ctx.rng(purpose)`` (``communicates`` from its generator), and keep
    state only in the returned dicts of tensors (checkpointed, moved between processes); ``aggregate``
    gets the uploads in ascending client id order. Anything the server needs from the clients is
    an upload (counted); keys ``metric_*`` are per-client diagnostics, not counted.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Options: ClassVar[type[Options]] = NoOptions
    #: "sampled": the sampler picks the participants; "all": every client, every round.
    participation: ClassVar[str] = "sampled"
    #: upload keys that are models (update attacks act on their difference to the broadcast x0)
    #: and keys that are updates already (SCAFFOLD's Δx, Δc; attacks act on them directly).
    #: Other uploads (a sample count, a step count) are left alone by attacks. See fedpd.attacks.
    model_uploads: ClassVar[tuple[str, ...]] = ("x", "z", "w")
    update_uploads: ClassVar[tuple[str, ...]] = ()
    #: upload keys that are per-client statistics, neither a model nor an update (q-FFL's h_k):
    #: attacks leave them alone, and ``[privacy]`` refuses the rule, as it cannot clip them
    statistic_uploads: ClassVar[tuple[str, ...]] = ()
    #: the local rule runs the ``[solver]`` (False: Xu's methods; a changed solver option is refused)
    uses_solver: ClassVar[bool] = True
    #: the local rule takes gradient steps (solver gd or sgd; not the exact solver)
    needs_gradient_solver: ClassVar[bool] = False
    #: options of the gradient solver this algorithm's own local loop does not apply: refused
    #: (one line, before anything runs) when set to anything but their default
    unused_solver_options: ClassVar[tuple[str, ...]] = ()

    def setup(self, info: FederationInfo, solver: object) -> None:
        """Called once before ``init_server`` with the federation's static facts and the local
        solver: check what the registry's generic checks cannot (raise ConfigError) and keep
        static facts the rules need. Keeps no run state."""

    def min_uploads(self) -> int:
        """The fewest accepted uploads ``aggregate`` can work with (Krum needs 2f + 3)."""
        return 1

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
        """Whether the clients upload this round (the server's own seeded coin, e.g. FedPD's)."""
        return True

    def broadcast(self, server: State) -> State:
        return {"x0": server["x0"]}

    def local(self, message: State, clients: State, ctx: ClientContext) -> tuple[State, State]:
        """(uploads, new client states) of the clients of ``ctx`` ([K, ...] each)."""
        raise NotImplementedError

    #: the server step reads the uploads only through the means of :meth:`mean_terms` over the
    #: accepted clients (the step itself: :meth:`aggregate_means`), so a round may add each
    #: client's terms in as it arrives instead of holding all K uploads (:mod:`fedpd.protocol`)
    means_only: bool = False
    #: ``aggregate`` ends in :meth:`aggregate_means` in every round, whatever ``means_only`` says (a
    #: robust defence standing in for some of the means: fedpd.algorithms.robust.RobustMeans), so an
    #: ``aggregate_means`` overridden below it is always taken
    server_step_is_means: ClassVar[bool] = False

    #: What the server step is, as ``[privacy]`` (:mod:`fedpd.privacy`) reads it to decide whether
    #: its guarantee holds; a rule whose answer follows its options overrides one with a property.
    #: the server weighs the clients by their sample counts, which they upload (``weights = "samples"``)
    weighs_by_samples: bool = False
    #: the server step is a robust aggregate of every upload (a robust aggregator, Fed+'s), not their mean
    robust_aggregate: bool = False
    #: the server step uses how many clients took part (SCAFFOLD's |P|/N; the primal-dual rules'
    #: ``dual_mean = "all"``), a number Poisson sampling keeps private
    reads_participant_count: bool = False
    #: the clients train from anchors x0_i of their own, kept on the clients, not from a model the
    #: server broadcasts (FedPD)
    own_anchor: bool = False
    #: each client uploads its number of local steps when the solver's vary (stragglers, local
    #: epochs): FedNova's ‖a_i‖₁, FedCM's Q_i
    uploads_step_counts: ClassVar[bool] = False

    def aggregate(self, server: State, uploads: State, ctx: ServerContext) -> tuple[State, State]:
        """(new server state, reply to the senders) from the accepted uploads (rows by ascending id).
        For a ``means_only`` rule: :meth:`aggregate_means` of the :class:`UploadMean` of the rows."""
        if not self.means_only:
            raise NotImplementedError
        mean = UploadMean(self, server)
        mean.add(uploads)
        return self.aggregate_means(server, mean.means(), ctx)

    def mean_terms(self, server: State, uploads: State) -> State:
        """(``means_only`` rules) the per-client terms [k, ...] of uploads [k, ...] whose means
        over the accepted clients are all the server step reads."""
        raise NotImplementedError

    def aggregate_means(self, server: State, means: State, ctx: ServerContext) -> tuple[State, State]:
        """(``means_only`` rules) ``aggregate`` from the means of :meth:`mean_terms` ([...] each)."""
        raise NotImplementedError

    def receive(self, clients: State, reply: State, ctx: ClientContext) -> State:
        return clients

    # --- the evaluation path (not part of the protocol, never counted) ---------------------
    def evaluation_model(self, server: State, clients: ClientStates) -> Tensor:
        """The point where the metrics are evaluated (the server model)."""
        return server["x0"]

    def diagnostics(self, server: State) -> dict[str, float]:
        """Extra metric keys: the :data:`DIAGNOSTICS` the server state holds."""
        return {k: float(server[k]) for k in DIAGNOSTICS if k in server}

    def personal_models(self, server: State, clients: ClientStates, problem=None) -> Tensor | None:
        """Every client's own model, [N, d], for personalised evaluation (each client's model on its
        own test split: ``personal_*`` metrics); None (the default) when all use the server model.
        ``problem`` is the evaluation path's access to every client's data (Per-FedAvg adapts)."""
        return None


class UploadMean:
    """The mean over clients of a ``means_only`` algorithm's :meth:`~Algorithm.mean_terms`, added
    one client at a time in the order given — ascending id — so the sum is the same number
    whether the clients came as one [K, ...] block (the stacked round) or group by group as they
    finished training (the streamed round): no reduction kernel chooses a summation order."""

    def __init__(self, algorithm: Algorithm, server: State):
        self.algorithm, self.server = algorithm, server
        self.total: State = {}
        self.count = 0

    def add(self, uploads: State) -> None:
        """Add the rows of ``uploads`` [k, ...], first to last."""
        rows = next(iter(uploads.values())).shape[0] if uploads else 0
        for i in range(rows):
            terms = self.algorithm.mean_terms(self.server, {k: v[i:i + 1] for k, v in uploads.items()})
            for key, t in terms.items():
                if key in self.total:
                    self.total[key] += t[0]
                else:
                    self.total[key] = t[0].clone()
            self.count += 1

    def means(self) -> State:
        return {k: v / self.count for k, v in self.total.items()}


def _defining(algorithm: Algorithm, name: str) -> int:
    """The place in ``algorithm``'s MRO of the class that defines method ``name`` (0: its own)."""
    return next(i for i, c in enumerate(type(algorithm).__mro__) if name in vars(c))


def streams_means(algorithm: Algorithm) -> bool:
    """Whether a round may give ``algorithm`` the means of its uploads (``aggregate_means``) instead
    of the uploads (``aggregate``): it is ``means_only`` and no subclass overrides ``aggregate``
    below the class that defines ``aggregate_means`` (such an ``aggregate`` may do more than the
    means: a user's FedAvg subclass with its own server step)."""
    if not algorithm.means_only:
        return False
    return _defining(algorithm, "aggregate") >= _defining(algorithm, "aggregate_means")


def unused_server_step(algorithm: Algorithm) -> str:
    """Why ``algorithm``'s own ``aggregate_means`` would never run ("" when it would): a rule that is
    not ``means_only`` gets every round's uploads through ``aggregate``, and an ``aggregate_means``
    overridden below the class whose ``aggregate`` that is would be skipped without a word."""
    if algorithm.means_only or algorithm.server_step_is_means:
        return ""
    step, means = _defining(algorithm, "aggregate"), _defining(algorithm, "aggregate_means")
    if means >= step:
        return ""
    mro = type(algorithm).__mro__
    return (f"{mro[means].__name__} overrides aggregate_means, which no round calls: its means_only is False (e.g. a "
            f"robust aggregator reads every upload), so every round calls {mro[step].__name__}.aggregate (allowed: "
            f"override aggregate too, or run it with means_only true)")


def with_metrics(server: State, uploads: State) -> State:
    """``server`` plus the round's mean of every ``metric_*`` upload (as 0-d tensors)."""
    metrics = {k[len(METRIC_PREFIX):]: v.mean() for k, v in uploads.items() if k.startswith(METRIC_PREFIX)}
    return {**server, **metrics}


def metric_terms(uploads: State) -> State:
    """The ``metric_*`` uploads as mean terms (their means become the round's diagnostics)."""
    return {k: v for k, v in uploads.items() if k.startswith(METRIC_PREFIX)}


def with_metric_means(server: State, means: State) -> State:
    """``server`` plus the round's means of the ``metric_*`` terms (as 0-d tensors)."""
    return {**server, **{k[len(METRIC_PREFIX):]: v for k, v in means.items() if k.startswith(METRIC_PREFIX)}}


def sq_dist(x: Tensor, x0: Tensor) -> Tensor:
    """‖x_k − x0‖² per row of x [K, d] (x0 [d] or [K, d]): [K]."""
    return ordered_sq_norm(x - x0, 1)


def mean_sq_dist(x: Tensor, x0: Tensor) -> Tensor:
    """mean_k ‖x_k − x0‖² for x [K, d] and x0 [d] or [K, d] (a 0-d tensor)."""
    return ordered_mean(ordered_sq_norm(x - x0, 1))


def expand(x: Tensor, k: int) -> Tensor:
    """A [d] vector as [K, d] (a view)."""
    return x.unsqueeze(0).expand(k, *x.shape)
