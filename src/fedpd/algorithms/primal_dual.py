"""The primal-dual family as one parametrised rule: FedPD, FedADMM, FedDyn, A-FedPD.

All four minimise the same local augmented Lagrangian (the FedPD paper, Zhang et al. 2021, eq. (11))

    L_i(x) = f_i(x) + ⟨λ_i, x − x0⟩ + ‖x − x0‖²/(2η),

take the same dual step λ_i ← λ_i + (x_i − x0)/η, and set the server model to

    x0 ← mean_{S1} x_i + η · mean_{S2} λ_i.

They differ only in the sets (the A-FedPD paper, Sun, Shen, Tao, Table 1):

    preset    participation   S1 (consensus)  S2 (dual mean)               local start
    fedpd     all N           all N           all N                        warm (x_i)
    fedadmm   sampled P       P               P                            server x0
    feddyn    sampled P       P               all N                        server x0
    afedpd    sampled P       P               all N, virtual for absent    server x0

With S2 = P the clients upload z_i = x_i + ηλ_i (x0 = mean z_i); with S2 = all N they upload
x_i and the server keeps mean_N λ_i in O(d), adding (1/N)Σ_P (x_i − x0)/η each round.

Where the metrics are taken (``output``): "server" is x0, the model the next round trains from;
"average" is x̄ = mean_P x_i of the last communicating round — A-FedPD's "global average model"
(Alg. 1 line 14; Theorem 1 bounds ‖∇f(x̄)‖²) and what FedDyn's authors report. The
two differ by η·mean_N λ_i; "average" needs the x_i uploads, i.e. dual_mean = "all".

A-FedPD's virtual update gives every absent client λ_i += (x̄ − x0)/η (x̄ = mean of the
participants' x_i, A-FedPD Alg. 1). It is the same vector for all absent clients, so it is
applied lazily: the server keeps the running sum D of these increments, each client the value
D_i of D after its last participation, and a returning client adds D − D_i before training.
Work and memory per round are O(|P|·d), never O(N·d). Cost: D is sent with x0 and again after
aggregation (2d extra floats down per participant), which the metrics count.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

import torch
from pydantic import Field, model_validator

from fedpd.algorithms.base import Algorithm, expand, metric_terms, sq_dist, with_metric_means
from fedpd.algorithms.robust import MeansDefenceOptions, RobustMeans
from fedpd.context import ClientContext, ServerContext
from fedpd.defence import Defence
from fedpd.options import refuse
from fedpd.solvers import LocalObjective


def skip_needs_p(options) -> None:
    """``skip`` says how rounds are skipped at rate ``p``: with p = 0 none is, and a skip set would be ignored."""
    if options.p == 0 and options.given("skip"):
        raise refuse("skip", f'"{options.skip}" says how rounds are skipped, and p = 0 skips none, so it would be '
                     f'ignored (allowed: p > 0, or no skip)')


class PrimalDualOptions(MeansDefenceOptions):
    eta: float = Field(1.0, gt=0, description="η, the penalty parameter (ρ = α = 1/η elsewhere)")
    participation: Literal["all", "sampled"] = Field("sampled", description="all: every client every round (FedPD)")
    dual_mean: Literal["participants", "all"] = Field("all", description="S2, the set the dual mean averages over")
    virtual_dual: bool = Field(False, description="A-FedPD's virtual dual update of absent clients")
    start: Literal["warm", "server"] = Field("server", description="local training from x_i (warm) or from x0")
    p: float = Field(0.0, ge=0, lt=1, description="probability of skipping communication in a round (FedPD)")
    skip: Literal["random", "periodic"] = Field("random", description="random: a seeded coin; periodic: a fixed "
                                                "schedule with exactly the rate 1 - p")
    output: Literal["server", "average"] = Field("server", description="metrics at x0 or at the participants' mean x̄")
    local_tol: float = Field(0.0, ge=0, description="ε₁ of FedPD's criterion (12): a client stops its local steps once "
                             "‖∇L_i‖² <= ε₁ on its batch; 0: always the solver's Q steps")

    @model_validator(mode="after")
    def _sets(self):
        skip_needs_p(self)
        if self.virtual_dual and self.dual_mean != "all":
            raise refuse("virtual_dual", "needs dual_mean = 'all' (A-FedPD averages the duals over all clients)")
        if self.p > 0 and self.participation != "all":
            raise refuse("p", "communication skipping needs participation = 'all' (FedPD)")
        if self.p > 0 and self.dual_mean == "all":
            # the server's O(d) dual mean would miss the dual steps of the skipped rounds; with
            # everyone taking part both sets are all N, so 'participants' is the same rule
            raise refuse("dual_mean", "communication skipping (p > 0) needs dual_mean = 'participants' "
                         "(with participation = 'all' both sets are all clients)")
        if self.output == "average" and (self.dual_mean != "all" or self.participation == "all"):
            raise refuse("output", "'average' needs the participants' x_i at the server "
                         "(dual_mean = 'all', participation = 'sampled'; allowed here: server)")
        return self


class FedPDOptions(MeansDefenceOptions):
    eta: float = Field(1.0, gt=0, description="η, the penalty parameter")
    p: float = Field(0.0, ge=0, lt=1, description="probability of skipping communication in a round")
    skip: Literal["random", "periodic"] = Field("random", description="random: a seeded coin (the paper); periodic: "
                                                "a fixed schedule with exactly the rate 1 - p (the authors' code)")
    local_tol: float = Field(0.0, ge=0, description="ε₁ of criterion (12): a client stops its local steps once "
                             "‖∇L_i‖² <= ε₁ on its batch; 0: always the solver's Q steps")

    @model_validator(mode="after")
    def _skip_used(self):
        skip_needs_p(self)
        return self


class PenaltyOptions(MeansDefenceOptions):
    eta: float = Field(10.0, gt=0, description="η = 1/ρ (ρ = α of FedDyn, A-FedPD)")


class DualMeanOptions(PenaltyOptions):
    output: Literal["server", "average"] = Field("server", description="metrics at x0 or at the participants' mean x̄")


def communicates_periodically(round: int, p: float) -> bool:
    """Whether round ``round`` (0-based) communicates on the periodic schedule of skip rate p:
    round t communicates iff ⌊(t + 1)(1 − p)⌋ > ⌊t(1 − p)⌋, so the first T rounds communicate
    exactly ⌊T(1 − p)⌋ times for every p (exact rational arithmetic on p as written)."""
    rate = 1 - Fraction(repr(p))
    return (round + 1) * rate // 1 > round * rate // 1


class PrimalDual(RobustMeans, Algorithm):
    """The parametrised primal-dual rule (see the module docstring for the table).

    Args:
        eta: η, the penalty parameter (ρ = α = 1/η in FedADMM / FedDyn / A-FedPD).
        participation: "all" (every client every round, FedPD) or "sampled".
        dual_mean: "participants" or "all" — the set S2 the dual mean averages over.
        virtual_dual: A-FedPD's virtual dual update of absent clients (needs dual_mean="all").
        start: "warm" (from the client's last x_i, FedPD) or "server" (from x0).
        p: FedPD's probability of skipping communication in a round (participation="all").
        skip: "random" (the server's seeded coin, the paper) or "periodic" (a fixed schedule that
            communicates in exactly ⌊T(1 − p)⌋ of the first T rounds; the authors' Python code
            communicates every round(1/(1 − p)) rounds, which misses that rate for most p).
        output: "server" (x0) or "average" (x̄ = mean_P x_i) — the model the metrics evaluate.
        local_tol: ε₁ of FedPD's local criterion (12): each client stops once ‖∇L_i‖² <= ε₁ on
            its batch (its steps are then fewer than Q; reported as ``local_steps``).
        defence: None (the means) or the :class:`~fedpd.defence.Defence` the config's
            ``aggregator`` and ``aggregator_options`` name, in place of the mean of the uploads x_i
            (dual_mean = "all": x̄ wherever the step reads it, so the dual mean's increment too) or
            z_i (dual_mean = "participants": x0 itself) — :class:`fedpd.algorithms.robust.RobustMeans`.
    """

    name = "primal_dual"
    description = "the parametrised primal-dual rule (choose the sets yourself)"
    Options = PrimalDualOptions

    def __init__(self, eta: float = 1.0, participation: str = "sampled", dual_mean: str = "all",
                 virtual_dual: bool = False, start: str = "server", p: float = 0.0, skip: str = "random",
                 output: str = "server", local_tol: float = 0.0, defence: Defence | None = None):
        self.use_defence(defence)  # None: the server step's means are exact (the papers')
        self.eta, self.participation, self.dual_mean = eta, participation, dual_mean
        self.virtual_dual, self.start, self.p, self.skip = virtual_dual, start, p, skip
        self.output, self.local_tol = output, local_tol
        # dual_mean = "all" weighs the round by |P|/N (fedpd.privacy: private under Poisson sampling)
        self.reads_participant_count = dual_mean == "all"
        # FedPD's clients keep their own anchor x0_i between communications.
        self.own_anchor = participation == "all"

    # --- state ----------------------------------------------------------------------------
    def init_server(self, x0):
        server = {"x0": x0.clone(), "lam_mean": torch.zeros_like(x0)}
        if self.virtual_dual:
            server["D"] = torch.zeros_like(x0)
        if self.output == "average":
            server["x_bar"] = x0.clone()
        return self.with_counters(server)

    def init_client(self, x0):
        client = {"lam": torch.zeros_like(x0)}
        if self.start == "warm":
            client["x"] = x0.clone()
        if self.own_anchor:
            client["x0"] = x0.clone()
        if self.virtual_dual:
            client["D_last"] = torch.zeros_like(x0)
        return client

    # --- one round ------------------------------------------------------------------------
    def communicates(self, server, round, generator):
        if self.p == 0:
            return True
        if self.skip == "periodic":
            return communicates_periodically(round, self.p)
        return bool(torch.rand((), generator=generator, dtype=torch.float64) >= self.p)

    def broadcast(self, server):
        # FedPD (own_anchor): the anchors x0_i are already on the clients. D is sent even then: under
        # full participation a client that dropped out or was rejected is absent and catches up
        message = {} if self.own_anchor else {"x0": server["x0"]}
        if self.virtual_dual:
            message["D"] = server["D"]
        return message

    def local(self, message, clients, ctx: ClientContext):
        k = ctx.ids.numel()
        anchor = clients["x0"] if self.own_anchor else expand(message["x0"], k)
        lam = clients["lam"]
        if self.virtual_dual:  # catch up on the virtual updates missed while absent
            lam = lam + (message["D"] - clients["D_last"])
        start = clients["x"] if self.start == "warm" else anchor
        x, extra, gap, steps = self.local_solve(
            ctx, clients, start, LocalObjective(linear=lam, mu=1 / self.eta, center=anchor)
        )
        metrics = {"metric_primal_residual": sq_dist(x, anchor)}
        if gap is not None:
            metrics["metric_dual_drift"] = gap
        if self.local_tol:
            metrics["metric_local_steps"] = steps.to(x.device, x.dtype)
        lam = lam + (x - anchor) / self.eta
        new = dict(clients, lam=lam, **extra)
        if self.start == "warm":
            new["x"] = x
        z = x + self.eta * lam  # FedPD's x0_i⁺, computed with the NEW λ_i
        if self.own_anchor:
            new["x0"] = z  # kept if this round does not communicate
        upload = {"z": z} if self.dual_mean == "participants" else {"x": x}
        return {**upload, **metrics}, new

    def local_solve(self, ctx: ClientContext, clients, start, objective: LocalObjective):
        """Minimise L_i from ``start``: (x [K, d], extra client-state entries, ‖∇L_i(start)‖² [K]
        or None, steps taken [K]). FedPD-VR replaces this with its SARAH oracle."""
        res = ctx.solver.solve(ctx, start, objective, tol=self.local_tol)
        return res.x, {}, res.start_grad_sq, res.steps

    def mean_terms(self, server, uploads):
        key = "z" if self.dual_mean == "participants" else "x"
        return {key: uploads[key], **metric_terms(uploads)}

    def defended(self, server):
        # the one mean of the uploads the step reads: of the models x_i or the anchors z_i, both about x0
        return {"z" if self.dual_mean == "participants" else "x": server["x0"]}

    def aggregate_means(self, server, means, ctx: ServerContext):
        server = with_metric_means(server, means)
        if self.dual_mean == "participants":
            x0 = means["z"]
            new = dict(server, x0=x0)
            return new, ({"x0": x0} if self.own_anchor else {})
        x_bar, x0_old, n, k = means["x"], server["x0"], ctx.num_clients, ctx.ids.numel()
        lam_mean = server["lam_mean"] + (x_bar - x0_old) * (k / (self.eta * n))  # Σ_i (x_i − x0)/(ηN)
        new = dict(server)
        if self.virtual_dual:
            absent = n - k
            increment = (x_bar - x0_old) / self.eta
            lam_mean = lam_mean + absent / n * increment
            new["D"] = server["D"] + increment
        new["lam_mean"] = lam_mean
        new["x0"] = x_bar + self.eta * lam_mean
        if self.output == "average":
            new["x_bar"] = x_bar
        reply = {"D": new["D"]} if self.virtual_dual else {}
        if self.own_anchor:
            reply["x0"] = new["x0"]
        return new, reply

    def receive(self, clients, reply, ctx):
        new = dict(clients)
        if "x0" in reply:
            new["x0"] = expand(reply["x0"], ctx.ids.numel()).clone()
        if "D" in reply:
            new["D_last"] = expand(reply["D"], ctx.ids.numel()).clone()
        return new

    def evaluation_model(self, server, clients):
        if self.own_anchor:  # between communications the server model is the mean of the x0_i
            return clients.mean("x0")
        return server["x_bar"] if self.output == "average" else server["x0"]

    def diagnostics(self, server):
        out = super().diagnostics(server)
        if "local_steps" in server:
            out["local_steps"] = float(server["local_steps"])
        return out


class FedPD(PrimalDual):
    """FedPD (Zhang, Hong, Dhople, Yin, Liu, "FedPD: a federated learning framework with optimal
    rates and adaptivity to non-IID data", 2021; Alg. 2 with Oracle I, Alg. 3).

    Every client, every round: Q steps of GD/SGD on L_i warm-started from x_i (eq. (12); with
    ``local_tol`` > 0 a client stops early once its criterion ‖∇L_i‖² <= ε₁ holds);
    λ_i ← λ_i + (x_i − x0_i)/η (Alg. 2 line 5); x0_i⁺ = x_i + ηλ_i with the new λ_i (line 6).
    With probability 1 − p the server averages x0 = mean_i x0_i⁺ over all N and sends it back;
    otherwise nobody communicates and each client keeps x0_i = x0_i⁺ (line 7–8).
    """

    name = "fedpd"
    description = "FedPD: all clients solve the augmented Lagrangian; communication skipped with prob. p"
    Options = FedPDOptions
    participation = "all"

    def __init__(self, eta: float = 1.0, p: float = 0.0, skip: str = "random", local_tol: float = 0.0,
                 defence: Defence | None = None):
        super().__init__(eta=eta, participation="all", dual_mean="participants", start="warm", p=p, skip=skip,
                         local_tol=local_tol, defence=defence)


class FedDyn(PrimalDual):
    """FedDyn (Acar et al., ICLR 2021) in the notation of Zhang & Hong, "On the connection between
    FedDyn and FedPD" (2021), Alg. 2.

    Participants minimise f_i(x) + ⟨g_i, x − x0⟩ + ‖x − x0‖²/(2η) from x0 and update
    g_i ← g_i + (x_i − x0)/η; the server keeps h = mean_N g_i:
    h ← h + (1/(ηN)) Σ_P (x_i − x0), x0 ← mean_P x_i + ηh. (The original paper's α is 1/η and
    its signs are flipped: the same algorithm.)
    """

    name = "feddyn"
    description = "FedDyn: dynamic regulariser; dual mean over all clients, consensus over participants"
    Options = DualMeanOptions

    def __init__(self, eta: float = 10.0, output: str = "server", defence: Defence | None = None):
        super().__init__(eta=eta, participation="sampled", dual_mean="all", start="server", output=output,
                         defence=defence)


class FedADMM(PrimalDual):
    """FedADMM as the A-FedPD paper's Table 1 defines it (Sun, Shen, Tao, "A-FedPD: aligning
    dual-drift is all federated primal-dual learning needs", row "FedADMM"):
    participants solve L_i from x0, λ_i ← λ_i + (x_i − x0)/η, upload x_i + ηλ_i, and the server
    sets x0 = mean_P (x_i + ηλ_i) — consensus and dual mean over the participants only. (Wang et
    al. 2022 and Gong et al. 2022 publish variants of FedADMM; this is the table's rule.)"""

    name = "fedadmm"
    description = "FedADMM: consensus and dual mean over the participants only"
    Options = PenaltyOptions

    def __init__(self, eta: float = 10.0, defence: Defence | None = None):
        super().__init__(eta=eta, participation="sampled", dual_mean="participants", start="server", defence=defence)


class AFedPD(PrimalDual):
    """A-FedPD (Sun, Shen, Tao, "A-FedPD: aligning dual-drift is all federated primal-dual
    learning needs", 2024; Alg. 1): FedDyn's sets plus the virtual dual update
    λ_i ← λ_i + (x̄ − x0)/η for every absent client, applied lazily (module docstring)."""

    name = "afedpd"
    description = "A-FedPD: FedDyn plus virtual dual updates for absent clients (lazy, O(|P| d) per round)"
    Options = DualMeanOptions

    def __init__(self, eta: float = 10.0, output: str = "server", defence: Defence | None = None):
        super().__init__(eta=eta, participation="sampled", dual_mean="all", virtual_dual=True, start="server",
                         output=output, defence=defence)
