"""Fed+ (Kundu, Yu, Wynter, Lim — "Robustness and personalization in federated learning: a
unified approach via regularization", 2022) as one rule parametrised by Ψ, σ, δ, λ and the
aggregation 𝒜, with every row of the paper's Table 1 as a preset.

Alg. 1, for each participating party k (all tensors [K, d]):

    θ_k  = prox_Ψ^{1/σ}(w_k − w̃)                                  line 17, eq. (11)
    w_k ← (1 − λ) w_k + λ w̃                                        line 18
    E_k times:  w_k ← κ(w_k − η∇f_k(w_k)) + (1 − κ)(w̃ + θ_k),     eq. (14), κ = 1/(1 + ησ)

and the server sets w̃ = 𝒜(W) over all N parties' latest models (absent parties keep their last
upload, which the server holds: an [N, d] table, as Alg. 1 lines 10–13 say) or over the
participants only. 𝒜 is eq. (7), computed by the fixed-point iteration of eq. (25) (``tol`` /
``max_iter``; the iterations used are in the metrics), or any named robust aggregator.

The local step is an implicit proximal step: κ(w − ηg) + (1 − κ)c = argmin_u ‖u − (w − ηg)‖²/(2η)
+ σ/2‖u − c‖², i.e. gradient descent on f_k + σ/2‖· − c‖² (Prop. 1, eq. (12)) with the
penalty taken implicitly. ``local_step = "explicit"`` takes it as a gradient, w − η(∇f_k(w) +
σ(w − c)), which is FedProx's local SGD. With the exact solver each party solves eq. (12) exactly.

Table 1 (presets; Ψ's prox is in :mod:`fedpd.prox`, σ cancels so only δ appears):

    preset            Ψ                 𝒜                       λ   σ
    fedplus_local     0                 none (no communication) 0   0
    fedplus_fedavg    —                 mean                    1   0
    fedplus_rfa       —                 geometric median        1   0
    fedplus_comed     —                 coordinate-wise median  1   0
    fedplus_fedprox   indicator of {0}  mean                    1   > 0
    fedavg_plus       σδ/2‖·‖²          mean (eq. (25))         0   > 0
    fedgeomed_plus    σδ‖·‖₂            δ-geometric median      0   > 0
    fedcomed_plus     σδ‖·‖₁            δ-coordinate median     0   > 0

Hybrid (Alg. 1, "layer-specific Ψ"): ``groups`` gives parameter-name patterns (fnmatch, e.g.
``"fc2.*"``) their own Ψ and δ; each group is one block (one ℓ2 norm per party and group) and the
remaining coordinates form one block with the default Ψ, δ. The same blocks are used in θ_k and
in eq. (25).
"""

from __future__ import annotations

from fnmatch import fnmatch
from typing import Annotated, Any, ClassVar, Literal

import torch
from pydantic import AfterValidator, Field, model_validator
from torch import Tensor

from fedpd.aggregators import fedplus_aggregate
from fedpd.algorithms import fedplus_delta
from fedpd.algorithms.base import Algorithm, expand
from fedpd.algorithms.robust import (PRE_STREAM, SAMPLES, WEIGHTS, DefenceOptions, aggregator_name, counter_metrics,
                                     counters, initial_counters, sample_weights, with_sizes)
from fedpd.context import ClientContext, FederationInfo, ServerContext
from fedpd.defence import Defence, build_defence
from fedpd.errors import ConfigError
from fedpd.options import STEPS_MAX, Options, refuse
from fedpd.prox import prox, prox_grouped
from fedpd.solvers import GradientSolver, LocalObjective

ProxKind = Literal["zero", "sq_l2", "l2", "l1", "indicator"]
PartySteps = list[Annotated[int, Field(ge=0, le=STEPS_MAX)]]
#: ``algorithm.aggregator``'s value for Fed+'s own aggregate, eq. (25) with Ψ (not a defence)
OWN = "fedplus"
FedPlusAggregator = Annotated[str, AfterValidator(lambda name: aggregator_name(name, own=(OWN,)))]


class FedPlusGroup(Options):
    pattern: str = Field(description="fnmatch pattern on parameter names, e.g. 'linear.*'")
    psi: ProxKind = "l2"
    delta: float = Field(0.1, ge=0)


class _FedPlusCommon(Options):
    aggregate_over: Literal["all", "participants"] = Field("all", description="all: every party's latest model "
                                                           "(Alg. 1); participants: this round's uploads")
    weights: WEIGHTS = Field("uniform", description="uniform (the paper's 1/N) or samples (each party sends n_k)")
    party_steps: PartySteps = Field(
        default_factory=list, description="E_k per party (length N); []: the solver's steps"
    )
    local_step: Literal["implicit", "explicit"] = Field("implicit", description="eq. (14)'s implicit step or a "
                                                        "gradient step on the σ-term")


class _Eq25Options(Options):
    tol: float = Field(1e-7, gt=0, description="eq. (25): stop when the aggregate moves less")
    max_iter: int = Field(1000, ge=1, le=STEPS_MAX, description="eq. (25): iteration cap")
    init: Literal["mean", "median", "previous"] = Field("mean", description="eq. (25)'s start")


class FedPlusVariantOptions(_FedPlusCommon, _Eq25Options):
    sigma: float = Field(1.0, gt=0, description="σ, the penalty of eq. (3)")
    delta: float = Field(0.1, ge=0, description="δ, the smoothing of Ψ")
    lam: float = Field(0.0, ge=0, le=1, description="λ, line 18's mix of w̃ into the local start")


# --- delta_rule: δ on the scale of the uploads, fedplus_delta.py ------------------------
class MedianVariantOptions(FedPlusVariantOptions):
    delta_rule: Literal["fixed", "spread"] = Field("fixed", description="fixed: δ = delta (the paper); spread: δ = "
                                                   "delta x the uploads' robust spread each round (fedplus_delta.py)")


class FedPlusOptions(MedianVariantOptions, DefenceOptions):
    defence_keys: ClassVar[tuple[str, ...]] = ("aggregator", "aggregator_options")

    psi: ProxKind = Field("l2", description="Ψ: zero, sq_l2 (FedAvg+), l2 (FedGeoMed+), l1 (FedCoMed+), indicator")
    sigma: float = Field(1.0, ge=0, description="σ, the penalty of eq. (3)")
    groups: list[FedPlusGroup] = Field(default_factory=list, description="hybrid: per-parameter-group psi and delta")
    aggregator: FedPlusAggregator = Field("fedplus", description="fedplus (eq. (25) with Ψ) or a robust aggregator")
    aggregator_options: dict[str, Any] = Field(default_factory=dict, description="options of a robust aggregator")

    @model_validator(mode="after")
    def _aggregator_options(self):
        if self.aggregator != OWN:
            self._read(self.aggregator, self.aggregator_options, self.weights)
        elif self.aggregator_options:
            raise refuse("aggregator_options", "not used by aggregator 'fedplus' (its options are algorithm.tol, "
                         "max_iter, init)")
        if self.delta_rule == "spread" and (self.psi not in ("l1", "l2") or self.aggregator != OWN or self.groups):
            raise refuse("delta_rule", "'spread' needs psi = 'l1' or 'l2', aggregator = 'fedplus' and no groups "
                         "(allowed otherwise: 'fixed')")
        return self


class FedPlusLocalOptions(Options):
    party_steps: PartySteps = Field(
        default_factory=list, description="E_k per party (length N); []: the solver's steps"
    )


class _PresetParties(Options):
    """The parties' options of the server presets (FedAvg-, RFA-, CoMed-, FedProx-style Fed+ baselines)."""

    aggregate_over: Literal["all", "participants"] = Field(
        "participants", description="all: every party's latest model (Fed+ Alg. 1); participants: this round's"
    )
    weights: WEIGHTS = Field(
        "uniform", description="uniform: every participant weighs the same; samples: by data size (each sends n_k)"
    )
    party_steps: PartySteps = Field(
        default_factory=list, description="E_k per party (length N); []: the solver's steps"
    )


class FedPlusServerOptions(_PresetParties, DefenceOptions):
    #: the preset's rule (Table 1's 𝒜); ``aggregator_options`` are its options
    rule: ClassVar[str] = "mean"
    defence_keys: ClassVar[tuple[str, ...]] = ("aggregator_options",)

    aggregator_options: dict[str, Any] = Field(default_factory=dict, description="options of the preset's aggregator")

    @model_validator(mode="after")
    def _aggregator_options(self):
        self._read(self.rule, self.aggregator_options, self.weights)
        return self


class FedPlusRFAOptions(FedPlusServerOptions):
    rule: ClassVar[str] = "geometric_median"


class FedPlusCoMedOptions(FedPlusServerOptions):
    rule: ClassVar[str] = "coordinate_median"


class FedPlusFedProxOptions(_PresetParties):
    sigma: float = Field(0.1, gt=0, description="FedProx's mu")
    local_step: Literal["implicit", "explicit"] = Field(
        "implicit", description="implicit: proximal step of eq. (14); explicit: gradient step on the σ-term"
    )


class FedPlus(Algorithm):
    """Fed+ (Kundu, Yu, Wynter, Lim, "Robustness and personalization in federated learning: a
    unified approach via regularization", 2022; Alg. 1): see the module docstring.

    Args:
        psi: Ψ — "zero", "sq_l2" (FedAvg+), "l2" (FedGeoMed+), "l1" (FedCoMed+), "indicator" (FedProx).
        sigma: σ >= 0, the penalty of eq. (3); κ = 1/(1 + ησ). σ = 0 with λ = 0 is local training only
            (nothing is communicated).
        delta: δ >= 0, the smoothing of Ψ (Ψ = σδ/2‖·‖², σδ‖·‖₂, σδ‖·‖₁).
        lam: λ ∈ [0, 1], the local initialisation mix of line 18 (0: keep the own model).
        groups: hybrid Ψ, a list of {"pattern": ..., "psi": ..., "delta": ...} (first match wins).
        defence: None (eq. (25) with Ψ; the config's ``aggregator = "fedplus"``) or the
            :class:`~fedpd.defence.Defence` the config's ``aggregator`` and ``aggregator_options``
            name (a robust aggregator of :mod:`fedpd.aggregators`, with any pre-aggregation).
        aggregate_over: "all" (Alg. 1: every party's latest model) or "participants".
        weights: "uniform" (the paper's 1/N) or "samples" (by local data size: each party sends its
            n_k with its upload; with aggregate_over = "all" the server keeps the last n_k it
            heard, and a party it never heard from weighs 0).
        party_steps: E_k per party (length N); empty: the solver's local_steps (and stragglers).
        local_step: "implicit" (eq. (14)) or "explicit" (a gradient step on the σ-term).
        tol, max_iter, init: eq. (25)'s tolerance, iteration cap and start ("mean" as the paper,
            "median", or "previous": last round's w̃).
        delta_rule: "fixed" (δ = delta, the paper) or "spread" (psi l1 / l2 only: each aggregation
            sets δ = delta · the robust spread of the rows, sent with the next model; see
            :mod:`fedpd.algorithms.fedplus_delta`).
    """

    name = "fedplus"
    description = "Fed+: personalised w_k pulled to w~ + prox(w_k - w~); robust aggregation (choose psi yourself)"
    Options = FedPlusOptions
    unused_solver_options = ("momentum", "clip_norm")  # eq. (14) has no momentum; its own loop

    @property
    def weighs_by_samples(self) -> bool:  # (Algorithm's capabilities)
        return self.weights == "samples"

    @property
    def robust_aggregate(self) -> bool:
        return self.robust is not None

    def __init__(self, psi: str = "l2", sigma: float = 1.0, delta: float = 0.1, lam: float = 0.0,
                 groups: list | tuple = (), defence: Defence | None = None, aggregate_over: str = "all",
                 weights: str = "uniform", party_steps: list | tuple = (),
                 local_step: str = "implicit", tol: float = 1e-7, max_iter: int = 1000, init: str = "mean",
                 delta_rule: str = "fixed"):
        self.psi, self.sigma, self.delta, self.lam = psi, float(sigma), float(delta), float(lam)
        self.delta_rule = delta_rule  # "spread": δ_t = delta · spread of the uploads (fedplus_delta.py)
        self.groups = [(g["pattern"], g.get("psi", "l2"), float(g.get("delta", 0.1))) for g in groups]
        self.aggregate_over, self.weights, self.local_step = aggregate_over, weights, local_step
        self.party_steps = torch.tensor(list(party_steps), dtype=torch.int64)
        self.tol, self.max_iter, self.init = tol, max_iter, init
        self.defence = self.robust = defence  # None: eq. (25)
        # σ = λ = 0: w~ never reaches a party, so nothing is sent (Table 1, "local SGD without FL")
        self.federated = self.sigma > 0 or self.lam > 0
        self._plan: list[tuple[Tensor, str, float]] | None = None

    def min_uploads(self) -> int:
        if self.robust is None or self.aggregate_over == "all":  # eq. (25), or the table of all N
            return 1
        return self.robust.min_rows

    # --- hybrid Ψ: parameter-name patterns -> blocks of the flat vector ---------------------
    def _make_plan(self, info: FederationInfo) -> list[tuple[Tensor, str, float]] | None:
        """``[(coordinates, Ψ, δ), ...]`` for the hybrid, or None without groups."""
        if not self.groups:
            return None
        slices = info.model.slices()
        owned: dict[int, list[slice]] = {}
        for name, sl in slices.items():
            for gi, (pattern, _, _) in enumerate(self.groups):
                if fnmatch(name, pattern):
                    owned.setdefault(gi, []).append(sl)
                    break
        plan = []
        for gi, (pattern, kind, delta) in enumerate(self.groups):
            if gi not in owned:
                raise ConfigError(f"algorithm.groups[{gi}].pattern: {pattern!r} matches no parameter "
                                  f"(parameters: {', '.join(slices)})")
            index = torch.cat([torch.arange(s.start, s.stop) for s in owned[gi]]).to(info.device)
            plan.append((index, kind, delta))
        return plan

    def theta(self, v: Tensor, delta: float | None = None) -> Tensor:
        """θ = prox_Ψ^{1/σ}(v), row-wise (eq. (11)); ``delta``: this round's δ (delta_rule "spread")."""
        if self._plan is None:
            return prox(self.psi, v, self.delta if delta is None else delta)
        return prox_grouped(v, self._plan, default=(self.psi, self.delta))

    def setup(self, info: FederationInfo, solver):
        self._plan = self._make_plan(info)  # unmatched group patterns fail here, before anything runs
        if self.party_steps.numel():
            if self.party_steps.numel() != info.num_clients:
                raise ConfigError(f"algorithm.party_steps: needs one E_k per party ({info.num_clients}), "
                                  f"got {self.party_steps.numel()}")
            if not isinstance(solver, GradientSolver):
                raise ConfigError("algorithm.party_steps: needs solver gd or sgd (allowed: [] otherwise)")

    # --- state ----------------------------------------------------------------------------
    def init_server(self, x0):
        server = {"x0": x0.clone(), **initial_counters()}
        if self.delta_rule == "spread":  # δ before the first aggregation (every w_k = w̃⁰: θ_k = 0 anyway)
            server["delta"] = fedplus_delta.as_tensor(0.0, x0)
        if self.aggregate_over == "all":
            server["W"] = x0.new_empty((0, *x0.shape))  # the [N, d] table, filled at the first aggregation
            if self.weights == "samples":
                server["sizes"] = x0.new_empty((0,))  # the last n_k each party sent (0: never heard)
        return server

    def init_client(self, x0):
        return {"w": x0.clone()}  # Alg. 1 line 2: w_k⁰ = w̃⁰

    # --- one round ------------------------------------------------------------------------
    def communicates(self, server, round, generator):
        return self.federated

    def broadcast(self, server):
        if not self.federated:
            return {}
        if self.delta_rule == "spread":  # the round's δ travels with the model (one float, counted)
            return {"x0": server["x0"], "delta": server["delta"]}
        return {"x0": server["x0"]}

    def local(self, message, clients, ctx: ClientContext):
        k = ctx.ids.numel()
        w = clients["w"]
        center = None
        if self.federated:
            wt = expand(message["x0"], k)
            if self.sigma > 0:
                delta = float(message["delta"]) if "delta" in message else None
                center = wt + self.theta(w - wt, delta)  # w̃ + θ_k, fixed for the round
            if self.lam == 1:
                w = wt.clone()
            elif self.lam > 0:
                w = (1 - self.lam) * w + self.lam * wt
        w = self._local_solve(ctx, w, center)
        return with_sizes({"w": w}, ctx, self.weights), {"w": w}

    def _local_solve(self, ctx: ClientContext, w: Tensor, center: Tensor | None) -> Tensor:
        if not isinstance(ctx.solver, GradientSolver):
            # exact (eq. (12) solved exactly) or another solver: hand it Prop. 1's sub-problem
            objective = LocalObjective(mu=self.sigma, center=center) if center is not None else LocalObjective()
            return ctx.solver.solve(ctx, w, objective).x
        steps = self.party_steps[ctx.ids] if self.party_steps.numel() else None
        run = ctx.solver.start(ctx, steps)
        eta, sigma = run.lr, self.sigma
        kappa = 1.0 / (1.0 + eta * sigma)
        for q in range(run.rounds):
            g = run.grad(w, run.batch(q), q)
            if center is None:
                w_new = w - eta * g
            elif self.local_step == "implicit":
                w_new = kappa * (w - eta * g) + (1 - kappa) * center  # eq. (14)
            else:
                w_new = w - eta * (g + sigma * (w - center))
            w = run.advance(q, w, w_new)
        return w

    def aggregate(self, server, uploads, ctx: ServerContext):
        rows, new = uploads["w"], dict(server)
        weights = sample_weights(uploads) if self.weights == "samples" else None
        if self.aggregate_over == "all":
            n = ctx.num_clients
            table = server["W"]
            if table.shape[0] != n:  # first aggregation: every party still holds w̃⁰
                table = expand(server["x0"], n)
            table = table.clone()
            table[ctx.ids] = rows
            new["W"], rows = table, table
            if weights is not None:
                sizes = server["sizes"] if server["sizes"].shape[0] == n else rows.new_zeros(n)
                sizes = sizes.clone()
                sizes[ctx.ids] = uploads[SAMPLES]
                new["sizes"] = weights = sizes
        if self.robust is not None:
            x0, info = self.robust(rows, weights, reference=server["x0"], generator=ctx.rng(PRE_STREAM))
        else:
            init = server["x0"] if self.init == "previous" else self.init
            delta = self.delta
            if self.delta_rule == "spread":  # δ_t from the rows aggregated now, sent with the next model
                delta = fedplus_delta.rule_delta(rows, self.psi, self.delta)
                new["delta"] = fedplus_delta.as_tensor(delta, server["x0"])
            x0, info = fedplus_aggregate(rows, self.psi, delta, tol=self.tol, max_iter=self.max_iter,
                                         groups=self._plan, weights=weights, init=init)
        return {**new, "x0": x0, **counters(server, info)}, {}

    # --- evaluation -----------------------------------------------------------------------
    def evaluation_model(self, server, clients):
        return server["x0"] if self.federated else clients.mean("w")

    def personal_models(self, server, clients, problem=None):
        return clients.full("w")

    def diagnostics(self, server):
        return counter_metrics(server) if self.federated else {}


# --- Table 1 presets ---------------------------------------------------------------------------
class FedAvgPlus(FedPlus):
    """FedAvg+ (the Fed+ paper §4.4.1): Ψ = σδ/2‖·‖², θ_k = (w_k − w̃)/(1 + δ), 𝒜 = mean."""

    name = "fedavg_plus"
    description = "FedAvg+: Fed+ with psi = sigma*delta/2 ||.||^2 (mean aggregation, personalised)"
    Options = FedPlusVariantOptions

    def __init__(self, **options):
        super().__init__(psi="sq_l2", **options)


class FedGeoMedPlus(FedPlus):
    """FedGeoMed+ (the Fed+ paper §4.4.1, eq. (16)): Ψ = σδ‖·‖₂, θ_k = block soft-threshold of
    w_k − w̃, 𝒜 = δ-approximate geometric median."""

    name = "fedgeomed_plus"
    description = "FedGeoMed+: Fed+ with psi = sigma*delta ||.||_2 (delta-geometric median, personalised)"
    Options = MedianVariantOptions

    def __init__(self, **options):
        super().__init__(psi="l2", **options)


class FedCoMedPlus(FedPlus):
    """FedCoMed+ (the Fed+ paper §4.4.1, eqs. (19), (22)): Ψ = σδ‖·‖₁, θ_k = soft-threshold of
    w_k − w̃, 𝒜 = δ-approximate coordinate-wise median."""

    name = "fedcomed_plus"
    description = "FedCoMed+: Fed+ with psi = sigma*delta ||.||_1 (delta-coordinate-wise median, personalised)"
    Options = MedianVariantOptions

    def __init__(self, **options):
        super().__init__(psi="l1", **options)


class FedPlusLocal(FedPlus):
    """Table 1, "Local SGD without FL": Ψ ≡ 0, σ = 0, λ = 0 — every party trains alone and
    nothing is communicated."""

    name = "fedplus_local"
    description = "Fed+ preset, Table 1 row 1: local training without federation (sigma = lam = 0)"
    Options = FedPlusLocalOptions

    def __init__(self, **options):
        super().__init__(psi="zero", sigma=0.0, lam=0.0, **options)


class FedPlusFedAvg(FedPlus):
    """Table 1, FedAvg: λ = 1, σ = 0, 𝒜 = mean over the participants (or ``aggregator``: RFA's
    geometric median, the coordinate-wise median, ...)."""

    name = "fedplus_fedavg"
    description = "Fed+ preset, Table 1: FedAvg (lam = 1, sigma = 0, mean)"
    Options = FedPlusServerOptions

    def __init__(self, **options):
        if options.get("defence") is None:  # constructed without a config: the preset's rule
            options["defence"] = build_defence(self.Options.rule, weights=options.get("weights", "uniform"))
        options.setdefault("aggregate_over", "participants")
        super().__init__(psi="zero", sigma=0.0, lam=1.0, **options)


class FedPlusRFA(FedPlusFedAvg):
    """Table 1, RFA (Pillutla et al. 2022): λ = 1, σ = 0, 𝒜 = geometric median (smoothed Weiszfeld)."""

    name = "fedplus_rfa"
    description = "Fed+ preset, Table 1: RFA (lam = 1, sigma = 0, geometric median)"
    Options = FedPlusRFAOptions


class FedPlusCoMed(FedPlusFedAvg):
    """Table 1, coordinate-wise median (Yin et al. 2018): λ = 1, σ = 0, 𝒜 = coordinate-wise median."""

    name = "fedplus_comed"
    description = "Fed+ preset, Table 1: coordinate-wise median (lam = 1, sigma = 0)"
    Options = FedPlusCoMedOptions


class FedPlusFedProx(FedPlus):
    """Table 1, FedProx: Ψ = indicator of {0} (θ_k = 0), λ = 1, σ = μ > 0, 𝒜 = mean over the
    participants. Fed+'s step is implicit; ``local_step = "explicit"`` gives FedProx's own."""

    name = "fedplus_fedprox"
    description = "Fed+ preset, Table 1: FedProx (theta = 0, lam = 1, sigma = mu)"
    Options = FedPlusFedProxOptions

    def __init__(self, **options):
        options.setdefault("aggregate_over", "participants")
        super().__init__(psi="indicator", lam=1.0, **options)
