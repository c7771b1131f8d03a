"""FedCM: client-level momentum with the server's last global direction."""

from __future__ import annotations

from pydantic import Field

from fedpd.algorithms.base import Algorithm, expand, sq_dist
from fedpd.algorithms.robust import MeansDefenceOptions, RobustMeans
from fedpd.context import ClientContext, FederationInfo, ServerContext
from fedpd.defence import Defence
from fedpd.solvers import LocalObjective


class FedCMOptions(MeansDefenceOptions):
    alpha: float = Field(0.1, gt=0, le=1, description="weight of the local gradient in the direction")
    server_lr: float = Field(1.0, gt=0, description='server step size on the averaged update')


class FedCM(RobustMeans, Algorithm):
    """FedCM (Xu, Wang, Wang, Chen 2021, Alg. 1; in the results table of Sun, Shen, Tao, A-FedPD,
    Table 2).

    The server sends x0 and Δ, the clients' average local direction of the last round. Each
    participant starts from x0 and steps along the mixed direction

        v = α·∇f_i(x) + (1 − α)·Δ,     x ← x − η1·v          (Q local steps),

    then uploads x_i. The server sets Δ ← mean_P (x0 − x_i)/(Q·η1) (the mean of v over the
    local steps, in gradient units) and x0 ← x0 + η_g·mean_P (x_i − x0). Δ⁰ = 0, so round 0 is
    FedAvg with step α·η1.

    In the solver layer v = α(∇f_i(x) + ⟨((1 − α)/α)Δ, ·⟩'s gradient): the configured gradient
    solver runs with step α·η1 and the linear term ((1 − α)/α)·Δ, so momentum, minibatches, SAM
    and stragglers work unchanged (weight decay counts as part of f_i and is scaled by α too;
    ``solver.clip_norm`` clips v itself, as FL-Simulator's ``client/fedcm.py``).
    Per participant: 2d floats down (x0, Δ), d up. The server's η1 (with its schedule) and Q are
    the run's solver settings, which the server knows from the config: taken once in ``setup``,
    never from a client. With stragglers (``solver.straggler_fraction``) a participant also sends
    its step count Q_i (1 float) and Δ ← mean_P (x0 − x_i)/(Q_i·η1), so a straggler's short walk
    is not mistaken for a small gradient. ``defence`` (the config's ``aggregator``,
    ``aggregator_options``; None: the means) takes the place of both means, of the models x_i
    (about x0) and of the drifts (x0 − x_i)/Q_i (:class:`fedpd.algorithms.robust.RobustMeans`).
    """

    name = "fedcm"
    description = "FedCM: local steps along alpha*grad + (1 - alpha)*(server's last global direction)"
    Options = FedCMOptions
    needs_gradient_solver = True
    uploads_step_counts = True  # Q_i when the solver's steps vary

    def __init__(self, alpha: float = 0.1, server_lr: float = 1.0, defence: Defence | None = None):
        self.alpha, self.server_lr = alpha, server_lr
        self.use_defence(defence)

    def setup(self, info: FederationInfo, solver):
        self.local_solver = solver  # η1 of round t (solver.lr_at) and Q, as the config sets them

    def init_server(self, x0):
        return self.with_counters({"x0": x0.clone(), "delta": x0.new_zeros(x0.shape)})

    def broadcast(self, server):
        return {"x0": server["x0"], "delta": server["delta"]}

    def local(self, message, clients, ctx: ClientContext):
        k, a = ctx.ids.numel(), self.alpha
        # v = α(∇f_i + ((1 − α)/α)Δ), stepped with η1; clipping v to c is clipping v/α to c/α
        solver = ctx.solver.with_options(lr=ctx.solver.lr * a, clip_norm=ctx.solver.clip_norm / a)
        objective = LocalObjective(linear=expand(message["delta"], k) * ((1 - a) / a))
        res = solver.solve(ctx, expand(message["x0"], k), objective)
        upload = {"x": res.x}
        if solver.varying_steps:  # Q_i differs per client: the server needs it for Δ
            upload["steps"] = res.steps.to(res.x.device, res.x.dtype)
        return upload, clients

    def mean_terms(self, server, uploads):
        x, x0 = uploads["x"], server["x0"]
        steps = uploads["steps"][:, None] if "steps" in uploads else self.local_solver.local_steps
        return {"x": x, "drift": (x0 - x) / steps, "primal_residual": sq_dist(x, x0)}

    def defended(self, server):
        return {"x": server["x0"], "drift": None}  # the models about x0; the drifts are directions

    def aggregate_means(self, server, means, ctx: ServerContext):
        x0, lr = server["x0"], self.local_solver.lr_at(ctx.round)  # Δ = mean_i (x0 − x_i)/(Q_i η1)
        return {"x0": x0 + self.server_lr * (means["x"] - x0), "delta": means["drift"] / lr,
                "primal_residual": means["primal_residual"]}, {}
