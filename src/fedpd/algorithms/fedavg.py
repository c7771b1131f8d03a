"""FedAvg and FedProx."""

from __future__ import annotations

from pydantic import Field

from fedpd.algorithms.base import Algorithm, expand, mean_sq_dist, sq_dist
from fedpd.algorithms.robust import AggregatorOptions, RobustAveraging
from fedpd.context import ClientContext, ServerContext
from fedpd.defence import Defence
from fedpd.solvers import LocalObjective


class FedAvg(RobustAveraging, Algorithm):
    """FedAvg (McMahan et al., AISTATS 2017; in the FedPD paper — Zhang, Hong, Dhople, Yin, Liu,
    "FedPD: a federated learning framework with adaptivity to non-IID data", 2021 — Alg. 1,
    eqs. (8)–(9)).

    Each participant starts from the server model x0 and runs the local solver on f_i
    (Q steps of GD — Option 2, eq. (9) — or SGD — Option 1, eq. (8)); the server averages:
    x0 ← mean_{i∈P} x_i (unweighted, as in the FedPD paper's baseline).
    Per round: d floats down and d up per participant.

    ``defence`` (:class:`fedpd.defence.Defence`, which the run reads from the config's
    ``aggregator``, ``aggregator_options``, ``weights``, ``client_momentum`` and
    ``client_momentum_start``; None: the plain
    mean) replaces the mean by a robust aggregator of :mod:`fedpd.aggregators` (geometric_median:
    RFA, Pillutla et al. 2022; coordinate_median / trimmed_mean: Yin et al. 2018; krum: Blanchard
    et al. 2017; bulyan: El Mhamdi et al. 2018; centered_clipping: Karimireddy et al. 2021 and
    norm_bounding: Sun et al. 2019, both about the server model x0); ``weights = "samples"`` weighs
    clients by data size (each sends n_i: one float more up). The metrics then add ``agg_iterations`` and
    ``agg_unconverged_rounds`` (rounds that hit the aggregator's ``max_iter``).
    ``aggregator_options.pre`` puts NNM, bucketing or ARC before the rule
    (:mod:`fedpd.preaggregators`); ``client_momentum`` = β makes each client upload x0 + m_i with
    m_i = (1 − β)(x_i − x0) + β m_i (Karimireddy et al. 2021; :mod:`fedpd.algorithms.robust`).
    """

    name = "fedavg"
    description = "FedAvg: local GD/SGD from the server model, server averages the local models"
    Options = AggregatorOptions

    def __init__(self, defence: Defence | None = None):
        self.use_defence(defence)

    def objective(self, message, clients, k: int) -> LocalObjective:
        return LocalObjective()

    def local(self, message, clients, ctx: ClientContext):
        k = ctx.ids.numel()
        res = ctx.solver.solve(ctx, expand(message["x0"], k), self.objective(message, clients, k))
        upload, clients = self.with_momentum({"x": res.x}, message, clients, clients)
        return self.upload(upload, ctx), clients

    @property
    def means_only(self) -> bool:
        return self.robust is None  # the plain mean; a robust aggregator reads every row

    def aggregate(self, server, uploads, ctx: ServerContext):
        if self.means_only:
            return super().aggregate(server, uploads, ctx)
        x0, counts = self.average(server, uploads, ctx)
        return {"x0": x0, "primal_residual": mean_sq_dist(uploads["x"], server["x0"]), **counts}, {}

    def mean_terms(self, server, uploads):
        return {"x": uploads["x"], "primal_residual": sq_dist(uploads["x"], server["x0"])}

    def aggregate_means(self, server, means, ctx: ServerContext):
        return {"x0": means["x"], "primal_residual": means["primal_residual"]}, {}


class FedProxOptions(AggregatorOptions):
    mu: float = Field(0.1, ge=0, description="μ of the proximal term (μ/2)‖x − x0‖²")


class FedProx(FedAvg):
    """FedProx (Li et al., MLSys 2020, eq. (2)): FedAvg whose local objective adds the proximal
    term (μ/2)‖x − x0‖², i.e. minimise f_i(x) + (μ/2)‖x − x0‖² inexactly from x0."""

    name = "fedprox"
    description = "FedProx: FedAvg with the proximal term (mu/2)||x - x0||^2 in the local objective"
    Options = FedProxOptions

    def __init__(self, mu: float = 0.1, defence: Defence | None = None):
        super().__init__(defence)
        self.mu = mu

    def objective(self, message, clients, k):
        return LocalObjective(mu=self.mu, center=expand(message["x0"], k))
