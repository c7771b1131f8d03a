"""The defence on every algorithm whose server averages uploads: its config options and the mixins.

The rules live in :mod:`fedpd.aggregators` (weighted mean, geometric median by smoothed Weiszfeld,
coordinate-wise median, trimmed mean, Krum / multi-Krum, Bulyan, centered clipping, norm bounding,
Fed+'s eq. (25)), the pre-aggregation steps in :mod:`fedpd.preaggregators`, and the one object a
run composes of them, with the weights and client momentum, in :mod:`fedpd.defence`. This module
is the glue an algorithm needs: the config's ``aggregator`` / ``aggregator_options`` / ``weights``
/ ``client_momentum`` (:class:`AggregatorOptions`: read once, when the config is checked, into the
run's :class:`~fedpd.defence.Defence`, which the algorithm's constructor receives as ``defence`` —
:func:`algorithm_keywords`), and the two ways a server step takes it: :class:`RobustAveraging`
for a server that averages models (FedAvg and its family), :class:`RobustMeans` for a
``means_only`` step whose means of the uploads it replaces (the primal-dual family, SCAFFOLD,
FedCM). So RFA (Pillutla et al. 2022) is FedAvg with ``aggregator = "geometric_median"``, and
Yin et al.'s median / trimmed-mean servers are FedAvg with those names.

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

**The means a defence replaces in a** ``means_only`` **step** (:class:`RobustMeans`): such a step
reads the uploads through means of per-client terms; with a robust defence the terms it names are
aggregated by the defence instead (every other mean, a diagnostic's, stays exact) and the step runs
unchanged on the result. FedPD's and FedADMM's x0 = mean z_i (z_i = x_i + ηλ_i, FedPD's anchors)
becomes D(z); FedDyn's and A-FedPD's primal mean x̄ = mean_P x_i becomes x̃ = D(x) everywhere the
step reads it — x0 = x̃ + ηh, the dual mean's increment (|P|/(ηN))(x̃ − x0) and A-FedPD's virtual
dual update (x̃ − x0)/η; SCAFFOLD's two means, of Δx and of Δc; FedCM's mean model and mean drift.
The server's running means (FedDyn's h of the clients' λ_i, SCAFFOLD's c of their c_i) are then
its robust estimates of them, equal to the exact means only under the plain mean: kept exact, h
and c would carry the attackers' rows into every later round. Where a step's invariant needs the
exact mean, the defence is refused in one line that names it (:class:`ExactMeans`): q-FFL, FedNova,
Parallel SAGA and ADMM.
"""


from __future__ import annotations

import warnings
from typing import Annotated, Any, ClassVar, Literal

import torch
from pydantic import AfterValidator, Field, PrivateAttr, model_validator
from torch import Tensor

from fedpd.aggregators import RULES, aggregator_function
from fedpd.algorithms.base import UploadMean
from fedpd.context import ServerContext
from fedpd.defence import MEAN, Defence, build_defence
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
NAMES = tuple(RULES)
WEIGHTS = Literal["uniform", "samples"]
SAMPLES = "n"  # the upload key of a client's sample count


def aggregator_name(name: str, own: tuple[str, ...] = ()) -> str:
    """``name`` checked as ``algorithm.aggregator``: a built-in robust aggregator, a plug-in
    (:func:`fedpd.aggregators.aggregator_function`), or one of the algorithm's ``own`` names."""
    if name in own:
        return name
    try:
        fn = aggregator_function(name)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    chosen = getattr(fn, "chosen_by", "")
    if chosen:  # e.g. Fed+'s eq. (25): a rule, but not one a config picks here
        raise ValueError(f"'{name}' is {chosen} (allowed: {', '.join(NAMES)}, or an import path "
                         f"package.module:function)")
    return name


AggregatorName = Annotated[str, AfterValidator(aggregator_name)]


# --- the options a defence is read from ----------------------------------------------------------
class DefenceOptions(Options):
    """Options of an algorithm that takes a defence: the fields in ``defence_keys`` are read once,
    when the config is checked, into the run's :class:`~fedpd.defence.Defence` (:meth:`defence`),
    and the algorithm's constructor receives that object as ``defence`` in their place
    (:func:`algorithm_keywords`)."""

    #: the fields the defence is read from (the constructor takes ``defence`` instead)
    defence_keys: ClassVar[tuple[str, ...]] = ()
    _defence: Defence | None = PrivateAttr(None)

    def defence(self) -> Defence | None:
        """The defence these options give (None: the algorithm's own default, the plain mean)."""
        return self._defence

    @classmethod
    def constructor_keywords(cls) -> list[str]:
        """The keywords the algorithm is constructed with (what a plug-in's signature is checked for)."""
        return [k for k in cls.model_fields if k not in cls.defence_keys] + ["defence"]

    def _read(self, aggregator: str, options: dict, weights: str = "uniform", client_momentum: float = 0.0,
              client_momentum_start: str = "zero") -> None:
        """Build the defence (inside the options' validator: a ConfigError becomes its one line)."""
        try:
            self._defence = build_defence(aggregator, options, weights, client_momentum, client_momentum_start)
        except ConfigError as err:
            text = str(err)
            if text.startswith("weights:"):
                raise ValueError(text) from None
            text = text.replace("(allowed: ", f"(allowed for aggregator '{aggregator}': ", 1)
            if text.startswith("aggregator_options."):  # names the option: algorithm.aggregator_options.f: …
                raise ValueError(text) from None
            raise refuse("aggregator_options", text) from None


class AggregatorOptions(DefenceOptions):
    """The defence of an algorithm whose server averages models (FedAvg and its family)."""

    defence_keys: ClassVar[tuple[str, ...]] = ("aggregator", "aggregator_options", "weights", "client_momentum",
                                               "client_momentum_start")

    aggregator: AggregatorName = Field("mean", description="server aggregation (fedpd list: aggregators; or an "
                                       "import path package.module:function)")
    aggregator_options: dict[str, Any] = Field(default_factory=dict, description="options of the aggregator")
    weights: WEIGHTS = Field(
        "uniform", description="uniform, or samples: by each client's data size (sent with the upload)"
    )
    client_momentum: float = Field(0.0, ge=0, lt=1, description="β: each client uploads x0 + m_i, m_i = (1 − β)(x_i − "
                                   "x0) + β m_i (Karimireddy et al. 2021); 0: off")
    client_momentum_start: MOMENTUM_STARTS = Field("zero", description="m_i before a client's first upload: zero "
                                                   "(ByzFL's; its first momentum is (1 − β)(x_i − x0)), or update "
                                                   "(m_i = x_i − x0 at its first upload: torch SGD's buffer)")

    @model_validator(mode="after")
    def _aggregator_options(self):
        self._read(self.aggregator, self.aggregator_options, self.weights, self.client_momentum,
                   self.client_momentum_start)
        if self.client_momentum == 0 and self.given("client_momentum_start"):
            raise refuse("client_momentum_start", "where client momentum starts, and client_momentum = 0 keeps none, "
                         "so it would be ignored (allowed: client_momentum > 0, or no client_momentum_start)")
        return self


class MeansDefenceOptions(DefenceOptions):
    """The defence of a ``means_only`` server step (:class:`RobustMeans`): unset, the step is the
    algorithm's own, its means exact — and its resolved config as before the option existed."""

    defence_keys: ClassVar[tuple[str, ...]] = ("aggregator", "aggregator_options")

    aggregator: AggregatorName | None = Field(None, description="a robust rule in place of the server step's means "
                                              "of the uploads (fedpd list: aggregators; unset: the means)")
    aggregator_options: dict[str, Any] | None = Field(None, description="options of the aggregator and its "
                                                      "pre-aggregation")

    @model_validator(mode="after")
    def _aggregator_options(self):
        if self.aggregator is not None or self.aggregator_options is not None:
            self._read(self.aggregator or "mean", self.aggregator_options or {})
        return self


class ExactMeans(Options):
    """Options of an algorithm whose server step needs exact means: ``algorithm.aggregator`` (or its
    options) is refused with the invariant it would break (``exact_means``, one clause)."""

    exact_means: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _no_defence(cls, data):
        given = [k for k in ("aggregator", "aggregator_options") if isinstance(data, dict) and k in data]
        if given:
            raise refuse(given[0], f"{cls.exact_means}, which a robust rule in place of a mean would break "
                         f"(allowed: no {given[0]})")
        return data


def algorithm_keywords(options: Options) -> dict:
    """The keywords an algorithm is constructed with, from its validated options: every option, the
    defence's keys replaced by ``defence``, the one object the options read them into."""
    if not isinstance(options, DefenceOptions):
        return options.model_dump()
    return {**options.model_dump(exclude=set(options.defence_keys)), "defence": options.defence()}


def defence_of(options: Options) -> Defence | None:
    """The defence an algorithm with these options runs (None: it takes none — its server step is no
    mean a rule could replace, or Fed+'s own aggregate): what the optimal attacks are handed."""
    if not isinstance(options, DefenceOptions):
        return None
    defence = options.defence()
    if defence is None and isinstance(options, (AggregatorOptions, MeansDefenceOptions)):
        return MEAN
    return defence


class ServerAggregator:
    """Deprecated: :func:`fedpd.defence.build_defence` (a :class:`~fedpd.defence.Defence`, called
    as this was)."""

    def __new__(cls, name: str = "mean", options: dict | None = None, weights: str = "uniform"):
        warnings.warn("fedpd.algorithms.robust.ServerAggregator is deprecated: use fedpd.defence.build_defence",
                      DeprecationWarning, stacklevel=2)
        return build_defence(name, dict(options or {}), weights)


def check_aggregator_options(name: str, options: dict) -> None:
    """``options`` against aggregator ``name`` (inside an options validator: ValueError, one line)."""
    DefenceOptions()._read(name, options)


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


def _checked_ctx(ctx) -> None:
    if ctx is not None and not callable(getattr(ctx, "rng", None)):
        hint = f"; an upload's name goes in key={ctx!r}" if isinstance(ctx, str) else ""
        raise TypeError(f"average(server, uploads, ctx, key=...): ctx is {what(ctx)}, expected the ServerContext "
                        f"the aggregate hook received{hint}")


class RobustAveraging:
    """Mixin for an algorithm whose server averages models. Its calls, as FedAvg makes them:

    ``self.use_defence(defence)``
        in ``__init__``, with the constructor's ``defence`` (None: the plain mean)
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

    defence: Defence = MEAN

    def use_defence(self, defence: Defence | None) -> None:
        self.defence = MEAN if defence is None else defence

    def use_aggregator(self, aggregator: str = "mean", aggregator_options: dict | None = None,
                       weights: str = "uniform", client_momentum: float = 0.0,
                       client_momentum_start: str = "zero") -> None:
        """Deprecated: ``self.use_defence(defence)`` with the defence the run hands the constructor
        (:func:`fedpd.defence.build_defence` builds one from these keywords)."""
        warnings.warn("RobustAveraging.use_aggregator is deprecated: take `defence` in __init__ and call "
                      "self.use_defence(defence) (fedpd.defence.build_defence builds one)", DeprecationWarning,
                      stacklevel=2)
        self.use_defence(build_defence(aggregator, aggregator_options, weights, client_momentum,
                                       client_momentum_start))

    @property
    def robust(self) -> Defence | None:
        """The defence when it is not the plain unweighted mean (None: the mean)."""
        return None if self.defence.is_mean else self.defence

    @property
    def weights(self) -> str:
        return self.defence.weights

    @property
    def client_momentum(self) -> float:
        """β of client momentum (0: off)."""
        return 0.0 if self.defence.momentum is None else self.defence.momentum.beta

    @property
    def client_momentum_start(self) -> str:
        """m_i before a client's first upload: "zero", or "update" (its first update)."""
        return "zero" if self.defence.momentum is None else self.defence.momentum.start

    @property
    def weighs_by_samples(self) -> bool:  # (Algorithm's capabilities)
        return self.weights == "samples"

    @property
    def robust_aggregate(self) -> bool:
        return self.robust is not None

    def min_uploads(self) -> int:
        """The fewest uploads the defence accepts (checked against the sampler)."""
        return self.defence.min_rows

    def init_server(self, x0: Tensor) -> dict:
        server = super().init_server(x0)
        if self.robust is None:
            return server
        if self.defence.keeps_centre:
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
        _checked_ctx(ctx)
        rows = uploads[key]
        if self.robust is None:
            return rows.mean(0), {}
        x0 = server.get("x0")
        reference = x0 + server[AGGREGATE_MOMENTUM] if AGGREGATE_MOMENTUM in server else x0
        generator = ctx.rng(PRE_STREAM) if ctx is not None else None
        agg, info = self.defence.aggregate(rows, sample_weights(uploads), reference=reference, generator=generator)
        out = counters(server, info)
        if AGGREGATE_MOMENTUM in server:
            out[AGGREGATE_MOMENTUM] = agg - x0
        return agg, out

    def diagnostics(self, server):
        return {**super().diagnostics(server), **counter_metrics(server)}


class RobustMeans:
    """Mixin for a ``means_only`` algorithm whose server step may take a defence in place of some of
    its means (module docstring). The algorithm says which: :meth:`defended` gives the keys of its
    ``mean_terms`` the defence aggregates, each with the reference its rows are taken about (the
    server model for models, None for updates). With the plain mean it is ``means_only`` as before,
    every round streams; with a robust defence it reads every row: ``aggregate`` takes the exact
    means of the terms, puts the defence's aggregates in place of the defended ones and calls the
    algorithm's own ``aggregate_means`` — so a subclass's ``aggregate_means`` is taken either way.
    Its calls: ``self.use_defence(defence)`` in ``__init__``; ``self.with_counters(server)`` on the
    state ``init_server`` returns."""

    defence: Defence = MEAN
    #: ``aggregate`` ends in ``aggregate_means`` whatever ``means_only`` says (fedpd.algorithms.base)
    server_step_is_means: ClassVar[bool] = True

    def use_defence(self, defence: Defence | None) -> None:
        self.defence = MEAN if defence is None else defence

    def defended(self, server: dict) -> dict[str, Tensor | None]:
        """{the ``mean_terms`` key the defence aggregates: the reference of its rows}."""
        raise NotImplementedError

    @property
    def means_only(self) -> bool:
        return self.defence.is_mean  # a robust rule reads every row

    @property
    def robust_aggregate(self) -> bool:  # (Algorithm's capabilities)
        return not self.defence.is_mean

    def min_uploads(self) -> int:
        return self.defence.min_rows

    def with_counters(self, server: dict) -> dict:
        """``server`` plus the aggregation counters, when the defence is robust."""
        return server if self.defence.is_mean else {**server, **initial_counters()}

    def aggregate(self, server, uploads, ctx: ServerContext):
        if self.means_only:
            return super().aggregate(server, uploads, ctx)
        exact = UploadMean(self, server)
        exact.add(uploads)
        means = exact.means()
        terms = self.mean_terms(server, uploads)
        info = {"iterations": 0, "converged": True}
        for key, reference in self.defended(server).items():
            means[key], got = self.defence.aggregate(terms[key], reference=reference, generator=ctx.rng(PRE_STREAM))
            info = {"iterations": info["iterations"] + int(got.get("iterations", 0)),
                    "converged": info["converged"] and bool(got.get("converged", True))}
        new, reply = self.aggregate_means(server, means, ctx)
        return {**new, **counters(server, info)}, reply

    def diagnostics(self, server):
        return {**super().diagnostics(server), **counter_metrics(server)}
