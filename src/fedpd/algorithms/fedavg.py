"""FedAvg and FedProx."""

from __future__ import annotations

from fedpd.algorithms.base import Algorithm, RoundContext, expand, mean_sq_dist
from fedpd.algorithms.robust import RobustAveraging
from fedpd.solvers import LocalObjective
from fedpd.store import State


class FedAvg(RobustAveraging, Algorithm):
    """FedAvg (McMahan et al., AISTATS 2017; as in FedPD, Zhang et al. 2021, Alg. 1, eqs. (8)–(9)).

    Each participant starts from the server model x0 and runs the local solver on f_i
    (Q steps of GD — Option 2, eq. (9) — or SGD — Option 1, eq. (8)); the server averages:
    x0 ← mean_{i∈P} x_i (unweighted, as in the FedPD paper's baseline).
    Per round: d floats down and d up per participant.

    ``aggregator`` replaces the mean by a robust aggregator of :mod:`fedpd.aggregators`
    (geometric_median: RFA, Pillutla et al. 2022; coordinate_median / trimmed_mean: Yin et al.
    2018; krum: Blanchard et al. 2017); ``weights = "samples"`` weighs clients by data size. The
    metrics then add ``agg_iterations`` and ``agg_unconverged_rounds`` (rounds that hit the
    aggregator's ``max_iter``).
    """

    name = "fedavg"
    description = "FedAvg: local GD/SGD from the server model, server averages the local models"

    def __init__(self, aggregator: str = "mean", aggregator_options: dict | None = None, weights: str = "uniform"):
        self.use_aggregator(aggregator, aggregator_options, weights)

    def objective(self, message: State, clients: State, k: int) -> LocalObjective:
        return LocalObjective()

    def local(self, message, clients, ctx: RoundContext):
        k = ctx.ids.numel()
        start = expand(message["x0"], k)
        res = ctx.solver.solve(ctx.problem, ctx.ids, start, self.objective(message, clients, k), ctx.round, ctx.generator)
        return {"x": res.x}, clients

    def aggregate(self, server, uploads, ctx):
        x0, counts = self.average(server, uploads["x"], ctx)
        return {"x0": x0, "primal_residual": mean_sq_dist(uploads["x"], server["x0"]), **counts}, {}


class FedProx(FedAvg):
    """FedProx (Li et al., MLSys 2020, eq. (2)): FedAvg whose local objective adds the proximal
    term (μ/2)‖x − x0‖², i.e. minimise f_i(x) + (μ/2)‖x − x0‖² inexactly from x0."""

    name = "fedprox"
    description = "FedProx: FedAvg with the proximal term (mu/2)||x - x0||^2 in the local objective"

    def __init__(self, mu: float = 0.1, aggregator: str = "mean", aggregator_options: dict | None = None,
                 weights: str = "uniform"):
        super().__init__(aggregator, aggregator_options, weights)
        self.mu = mu

    def objective(self, message, clients, k):
        return LocalObjective(mu=self.mu, center=expand(message["x0"], k))
