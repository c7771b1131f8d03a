"""Robust server aggregation for every algorithm whose server averages models.

The aggregators themselves live in one place, :mod:`fedpd.aggregators` (weighted mean, geometric
median by smoothed Weiszfeld, coordinate-wise median, trimmed mean, Krum / multi-Krum, Bulyan,
centered clipping, norm bounding, Fed+'s eq. (25)). This module is the glue an algorithm needs: the config's ``aggregator`` /
``aggregator_options`` / ``weights`` (:class:`AggregatorOptions`, checked once with the config),
and K rows aggregated with uniform or sample-size weights. So RFA (Pillutla et al. 2022) is
FedAvg with ``aggregator = "geometric_median"``, and Yin et al.'s median / trimmed-mean servers
are FedAvg with those names.

With ``weights = "samples"`` each participant sends its number of training samples n_i with its
upload (key ``n``, one float, counted as communication, as Flower's clients send
``num-examples``): the server never reads the clients' data sizes from anywhere else.

:class:`RobustAveraging` is the mixin for algorithms whose server takes a mean of models (FedAvg,
FedProx, FedSAM, Ditto, APFL, pFedMe, Per-FedAvg): in ``aggregate(server, uploads, ctx)``,
``self.average(server, uploads, ctx, key="x")`` — the hook's own three arguments, and the upload to
aggregate by keyword — is the plain mean or the configured aggregate of ``uploads[key]``, and the
server state then keeps two counters, reported as metrics: ``agg_iterations`` (the aggregator's
iterations this round) and ``agg_unconverged_rounds`` (rounds so far whose iterative aggregator
stopped at its cap ``max_iter``, so a capped geometric median shows up). Fed+ keeps the same counters.

``aggregator_options`` may also name a pre-aggregation chain run on the rows before the rule
(``pre = ["nnm"]``, bucketing, ARC: :mod:`fedpd.preaggregators`); bucketing draws its permutation
from the server's stream for the round (:meth:`fedpd.context.ServerContext.rng`, purpose
"pre_aggregation"), so every engine and a resumed run agree.

**Client momentum** (``client_momentum`` = β > 0; Karimireddy, He, Jaggi, "Learning from history
for Byzantine robust optimization", ICML 2021, §4, worker momentum): the uploads of these
algorithms are models x_i trained from the broadcast x0, so Δ_i = x_i − x0 is the client's update
(a pseudo-gradient); with momentum each client keeps m_i in its client state and uploads

    m_i ← (1 − β) Δ_i + β m_i,      upload x0 + m_i,

so the server's rule (mean or robust, with any pre-aggregation) aggregates the momenta about x0
and every attack acts on the momentum the client sends. m_i starts at 0 and, as every client
state, lives in the client store (checkpointed): under partial participation a client's momentum
waits, unchanged, for its next round (it is stale by the rounds it missed; fedpd neither resets
nor decays it — the paper's analysis has every worker every round), and a client whose upload is
rejected or that drops out keeps the m_i of before. Centered clipping then starts, as the paper's
does, from the previous round's aggregate momentum v (the server keeps it as ``v``: the reference
the rule and its chain see is x0 + v). The algorithms whose uploads are not models trained from
x0 (FedPD, FedDyn and the primal-dual family, SCAFFOLD's corrections, Fed+'s) have no
``client_momentum`` option: a momentum of their uploads would not be a momentum of updates, so
the key is refused there as any unknown key is, in one line.

**Where the momentum starts** (``client_momentum_start``). ``"zero"`` (the default, ByzFL's
client): m_i = 0 before a client's first upload, so with constant updates its t-th momentum is
(1 − β^t) Δ_i — 10 times smaller than the update at first for β = 0.9. That is Karimireddy et
al.'s worker momentum in other units: their workers keep a heavy-ball buffer m ← β m + g started at
the first gradient (their released code), 1/(1 − β) times this m at every step. ``"update"``:
m_i = Δ_i at a client's first upload, then the same recursion — torch.optim.SGD's buffer with
dampening β; for constant updates it equals Adam's bias-corrected m_i / (1 − β^t) (Kingma and Ba,
"Adam: a method for stochastic optimization", ICLR 2015, §3). The momenta then have the updates'
scale from the first round.

Why it matters: centered clipping's τ is a fixed radius, and each row farther than τ from the
centre moves the aggregate by τ/n, whatever the rows' scale. Against f rows of IPM with a large ε,
one iteration gives v + (1/n) Σ_honest (m_i − v) − (f/n) τ u (the honest rows within τ; u the
direction of the honest mean). Zero-started momenta make the honest part (1 − β^t) times smaller;
in the first rounds it is below fτ/n and the aggregate momentum points away from the honest mean.
This happens from round 0 on, where v = 0 and the centre is x0 with or without momentum, so the
centre is not the cause (the tests work it by hand). ``"update"`` removes the (1 − β^t) factor;
a τ on the momenta's own scale (τ(1 − β): Karimireddy et al.'s fixed τ on their heavy-ball
momenta) shrinks the attacker's pull with it. The rules without a radius (median, trimmed mean,
Krum, NNM) scale with their rows (rule(s·w) = s·rule(w)), so for them zero-started momentum only
makes the first steps smaller. With
``"update"`` a client's state also holds ``m_started`` (0, then 1 once it has uploaded), kept and
checkpointed with m_i.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
from pydantic import AfterValidator, Field, model_validator
from torch import Tensor

from fedpd.aggregators import AGGREGATORS, aggregator_function, make_aggregator, min_rows
from fedpd.context import ServerContext
from fedpd.errors import ConfigError
from fedpd.names import what
from fedpd.options import Options, refuse

#: the client state key of a client's momentum, and the server state key of the aggregate momentum
MOMENTUM, AGGREGATE_MOMENTUM = "m", "v"
#: the client state key, with client_momentum_start = "update", of whether the momentum has begun (1) or not (0)
STARTED = "m_started"
#: where a client's momentum starts: 0, or its first update (module docstring)
MOMENTUM_STARTS = Literal["zero", "update"]
#: the server stream's purpose for pre-aggregation's randomness (bucketing's permutation)
PRE_STREAM = "pre_aggregation"

#: built-in aggregator names a config may give (Fed+'s own eq. (25) is chosen by Fed+'s Ψ, not here)
NAMES = tuple(n for n in AGGREGATORS if n != "fedplus")
WEIGHTS = Literal["uniform", "samples"]
SAMPLES = "n"  # the upload key of a client's sample count


def aggregator_name(name: str, own: tuple[str, ...] = ()) -> str:
    """``name`` checked as ``algorithm.aggregator``: a built-in robust aggregator, a plug-in
    (:func:`fedpd.aggregators.aggregator_function`), or one of the algorithm's ``own`` names."""
    if name in own:
        return name
    if name == "fedplus":
        raise ValueError(f"'fedplus' is Fed+'s own aggregate, chosen by Fed+'s psi (allowed: {', '.join(NAMES)}, or "
                         f"an import path package.module:function)")
    try:
        aggregator_function(name)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return name


AggregatorName = Annotated[str, AfterValidator(aggregator_name)]


class AggregatorOptions(Options):
    aggregator: AggregatorName = Field("mean", description="server aggregation (fedpd list: aggregators; or an "
                                       "import path package.module:function)")
    aggregator_options: dict[str, Any] = Field(default_factory=dict, description="options of the aggregator")
    weights: WEIGHTS = Field("uniform", description="uniform, or samples: by each client's data size (sent with the upload)")
    client_momentum: float = Field(0.0, ge=0, lt=1, description="β: each client uploads x0 + m_i, m_i = (1 − β)(x_i − "
                                   "x0) + β m_i (Karimireddy et al. 2021); 0: off")
    client_momentum_start: MOMENTUM_STARTS = Field("zero", description="m_i before a client's first upload: zero "
                                                   "(ByzFL's; its first momentum is (1 − β)(x_i − x0)), or update "
                                                   "(m_i = x_i − x0 at its first upload: torch SGD's buffer)")

    @model_validator(mode="after")
    def _aggregator_options(self):
        check_aggregator_options(self.aggregator, self.aggregator_options)
        if self.client_momentum == 0 and self.given("client_momentum_start"):
            raise refuse("client_momentum_start", "where client momentum starts, and client_momentum = 0 keeps none, "
                         "so it would be ignored (allowed: client_momentum > 0, or no client_momentum_start)")
        if self.weights == "samples" and self.aggregator_options.get("pre"):
            raise refuse("weights", "pre-aggregation mixes the clients' rows, so per-client weights mean nothing "
                         "after it (allowed: uniform)")
        return self


def check_aggregator_options(name: str, options: dict) -> None:
    """``options`` against aggregator ``name``'s own options model (inside an options validator)."""
    try:
        make_aggregator(name, **options)
    except ConfigError as err:
        text = str(err).replace("(allowed: ", f"(allowed for aggregator '{name}': ", 1)
        if text.startswith("aggregator_options."):  # names the option: algorithm.aggregator_options.f: …
            raise ValueError(text) from None
        raise refuse("aggregator_options", text) from None


def algorithm_keywords(options: Options) -> dict:
    """The keywords an algorithm is constructed with, from its validated options."""
    return options.model_dump()


class ServerAggregator:
    """``agg(rows [K, d], weights [K] or None) -> (aggregate [d], info)`` for a named aggregator.

    ``weights`` (the senders' sample counts with ``weights="samples"``): aggregators without
    weights (trimmed mean, Krum) ignore them, as their papers do."""

    def __init__(self, name: str = "mean", options: dict | None = None, weights: str = "uniform"):
        self.fn = make_aggregator(name, **dict(options or {}))
        self.name, self.weights, self.options = name, weights, dict(options or {})
        #: the plain unweighted mean: callers keep their exact ``rows.mean(0)`` path
        self.is_mean = name == "mean" and weights == "uniform"

    def __call__(self, rows: Tensor, weights: Tensor | None = None, reference: Tensor | None = None,
                 generator: torch.Generator | None = None) -> tuple[Tensor, dict]:
        """``reference``: the server model the round started from, for the aggregators that clip
        about it (centered_clipping, norm_bounding) and ARC; the others ignore it. ``generator``:
        the pre-aggregation's randomness (bucketing)."""
        if self.is_mean:
            return rows.mean(0), {"iterations": 0, "converged": True}
        out = self.fn(rows, weights=weights if self.weights == "samples" else None, reference=reference,
                      generator=generator)
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Tensor)
                and out[0].shape == rows.shape[1:] and isinstance(out[1], dict)):
            got = (f"an aggregate of shape {tuple(out[0].shape)}" if isinstance(out, tuple) and out
                   and isinstance(out[0], Tensor) else what(out))
            raise ConfigError(f"algorithm.aggregator: {self.name} returned {got} for {rows.shape[0]} rows of "
                              f"{tuple(rows.shape[1:])} (allowed: (aggregate of shape {tuple(rows.shape[1:])}, info "
                              f"dict))")
        return out


def sample_weights(uploads: dict) -> Tensor | None:
    """The senders' sample counts, if they sent them."""
    return uploads.get(SAMPLES)


def with_sizes(upload: dict, ctx, weights: str) -> dict:
    """``upload`` plus the clients' sample counts when the server weighs by them."""
    if weights != "samples":
        return upload
    return {**upload, SAMPLES: ctx.data.sizes.to(next(iter(upload.values())).dtype)}


# --- the aggregation counters in the server state ----------------------------------------------
def initial_counters() -> dict[str, Tensor]:
    zero = torch.zeros((), dtype=torch.int64)
    return {"agg_iterations": zero, "agg_unconverged": zero.clone()}


def counters(server: dict, info: dict) -> dict[str, Tensor]:
    """The counters after a round whose aggregator returned ``info`` (a plug-in's may leave out
    ``iterations``, 0, and ``converged``, true)."""
    return {"agg_iterations": torch.tensor(int(info.get("iterations", 0)), dtype=torch.int64),
            "agg_unconverged": server["agg_unconverged"] + int(not info.get("converged", True))}


def counter_metrics(server: dict) -> dict[str, int]:
    """The counters as metrics (none when the server keeps none)."""
    if "agg_unconverged" not in server:
        return {}
    return {"agg_iterations": int(server["agg_iterations"]), "agg_unconverged_rounds": int(server["agg_unconverged"])}


class RobustAveraging:
    """Mixin for an algorithm whose server averages models. Its calls, as FedAvg makes them:

    ``self.use_aggregator(aggregator, aggregator_options, weights, client_momentum, client_momentum_start)``
        in ``__init__``, with the :class:`AggregatorOptions` fields
    ``self.client_state(x0, state)``
        in ``init_client``: the client's ``state`` plus its momentum (when client momentum is on)
    ``self.with_momentum(upload, message, before, after)``
        in ``local``: the upload and the clients' new states, with the states ``before`` and ``after``
        the local work
    ``self.upload(upload, ctx)``
        in ``local``: what the clients send (their sample counts added with weights = "samples")
    ``self.average(server, uploads, ctx, key="x")``
        in ``aggregate(server, uploads, ctx)``: (the aggregate of ``uploads[key]``, the counters
        and state to keep in the new server state) — pass the hook's ``ctx``, and ``key`` by keyword
    """

    robust: ServerAggregator | None = None  # None: the plain mean
    weights: str = "uniform"
    client_momentum: float = 0.0  # β of client momentum (0: off)
    client_momentum_start: str = "zero"  # m_i before a client's first upload: 0, or its first update

    @property
    def weighs_by_samples(self) -> bool:  # (Algorithm's capabilities)
        return self.weights == "samples"

    @property
    def robust_aggregate(self) -> bool:
        return self.robust is not None

    def use_aggregator(self, aggregator: str = "mean", aggregator_options: dict | None = None,
                       weights: str = "uniform", client_momentum: float = 0.0,
                       client_momentum_start: str = "zero") -> None:
        robust = ServerAggregator(aggregator, aggregator_options, weights)
        self.robust = None if robust.is_mean else robust
        self.weights = weights
        self.client_momentum = client_momentum
        self.client_momentum_start = client_momentum_start

    def min_uploads(self) -> int:
        """The fewest uploads the configured aggregator accepts (checked against the sampler)."""
        return 1 if self.robust is None else min_rows(self.robust.name, self.robust.options)

    def init_server(self, x0: Tensor) -> dict:
        server = super().init_server(x0)
        if self.robust is None:
            return server
        if self.client_momentum > 0 and self.robust.name == "centered_clipping":
            server = {**server, AGGREGATE_MOMENTUM: torch.zeros_like(x0)}
        return {**server, **initial_counters()}

    def client_state(self, x0: Tensor, state: dict) -> dict:
        """A client's initial ``state`` plus its momentum m_i = 0 when client momentum is on (and,
        when it starts at the first update, the flag ``m_started`` = 0)."""
        if self.client_momentum == 0:
            return state
        if self.client_momentum_start == "update":
            return {**state, MOMENTUM: torch.zeros_like(x0), STARTED: x0.new_zeros(1)}
        return {**state, MOMENTUM: torch.zeros_like(x0)}

    def init_client(self, x0: Tensor) -> dict:
        return self.client_state(x0, super().init_client(x0))

    def upload(self, upload: dict, ctx) -> dict:
        """What a client sends: ``upload`` plus its sample count n_i with weights = "samples"."""
        return with_sizes(upload, ctx, self.weights)

    def with_momentum(self, upload: dict, message: dict, before: dict, after: dict) -> tuple[dict, dict]:
        """(the upload, the clients' new states) from the model ``upload["x"]`` trained from the
        broadcast ``message["x0"]`` and the states ``before`` and ``after`` the local work: with
        client momentum x becomes x0 + m_i and the new m_i joins the state (module docstring);
        without, both pass unchanged."""
        if self.client_momentum == 0:
            return upload, after
        x0 = message["x0"]
        beta = self.client_momentum
        delta = upload["x"] - x0
        m = (1 - beta) * delta + beta * before[MOMENTUM]
        if self.client_momentum_start == "zero":
            return {**upload, "x": x0 + m}, {**after, MOMENTUM: m}
        started = before[STARTED]  # [K, 1]: 0 until a client's first upload
        m = torch.where(started > 0, m, delta)
        return {**upload, "x": x0 + m}, {**after, MOMENTUM: m, STARTED: torch.ones_like(started)}

    def average(self, server: dict, uploads: dict, ctx: ServerContext | None = None, *,
                key: str = "x") -> tuple[Tensor, dict]:
        """(the aggregate of ``uploads[key]`` [K, d], the counters and state to store in the server
        state). The server model ``server["x0"]`` (the previous aggregate for FedAvg) is the
        reference the clipping defences clip about — with client momentum, centered clipping's is
        x0 + v, the last aggregate momentum; ``ctx``, the ``aggregate`` hook's, gives
        pre-aggregation its stream. ``key`` is keyword-only: an upload name where ``ctx`` goes is
        a TypeError, not a silent mean of ``x``."""
        if ctx is not None and not callable(getattr(ctx, "rng", None)):
            hint = f"; an upload's name goes in key={ctx!r}" if isinstance(ctx, str) else ""
            raise TypeError(f"average(server, uploads, ctx, key=...): ctx is {what(ctx)}, expected the ServerContext "
                            f"the aggregate hook received{hint}")
        rows = uploads[key]
        if self.robust is None:
            return rows.mean(0), {}
        x0 = server.get("x0")
        reference = x0 + server[AGGREGATE_MOMENTUM] if AGGREGATE_MOMENTUM in server else x0
        generator = ctx.rng(PRE_STREAM) if ctx is not None else None
        agg, info = self.robust(rows, sample_weights(uploads), reference=reference, generator=generator)
        out = counters(server, info)
        if AGGREGATE_MOMENTUM in server:
            out[AGGREGATE_MOMENTUM] = agg - x0
        return agg, out

    def defence(self):
        """The server's rule as an omniscient attacker simulates it (:mod:`fedpd.attacks`):
        ``f(updates [K, d], generator) -> aggregate update [d]``, about the reference 0."""
        robust = self.robust

        def simulate(rows: Tensor, generator: torch.Generator | None) -> Tensor:
            if robust is None:
                return rows.mean(0)
            return robust(rows, None, reference=torch.zeros_like(rows[0]), generator=generator)[0]

        return simulate

    def diagnostics(self, server):
        return {**super().diagnostics(server), **counter_metrics(server)}
