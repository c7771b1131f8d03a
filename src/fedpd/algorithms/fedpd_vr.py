"""FedPD-VR: FedPD with the variance-reduced local oracle (the FedPD paper's Oracle II)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fedpd.algorithms.primal_dual import FedPDOptions, PrimalDual, skip_needs_p
from fedpd.algorithms.robust import MeansDefenceOptions
from fedpd.context import ClientContext
from fedpd.defence import Defence
from fedpd.ordered import ordered_sq_norm
from fedpd.solvers import LocalObjective


class FedPDVROptions(MeansDefenceOptions):
    eta: float = FedPDOptions.model_fields["eta"]
    p: float = FedPDOptions.model_fields["p"]
    skip: Literal["random", "periodic"] = FedPDOptions.model_fields["skip"]
    refresh_every: int = Field(20, ge=1, description="I: full local gradient every I rounds")

    @model_validator(mode="after")
    def _skip_used(self):
        skip_needs_p(self)
        return self


class FedPDVR(PrimalDual):
    """FedPD with Oracle II (Zhang, Hong, Dhople, Yin, Liu, "FedPD: a federated learning framework
    with optimal rates and adaptivity to non-IID data", 2021: Alg. 2 with Alg. 4, analysed in
    App. G).

    FedPD's protocol (every client, every round; warm start; λ_i ← λ_i + (x_i − x0_i)/η;
    x0_i⁺ = x_i + ηλ_i; skip communication with probability p) with a SARAH estimator g_i of
    ∇f_i kept by each client across rounds:

        every I rounds (r mod I = 0):  g_i = ∇f_i(x_i)      (full local gradient at the warm start)
        each of Q steps:               x⁺ = x − η1 (g_i + λ_i + (x − x0_i)/η)
                                       g_i ← g_i + mean_{b∈B} [∇F(x⁺; ξ_b) − ∇F(x; ξ_b)]

    with the same minibatch B (drawn uniformly with replacement) at both points. η1, Q and B
    are the solver's ``lr`` (times ``lr_decay``^r), ``local_steps`` and ``batch_size``
    (``gd``: B = the whole local data). The solver's momentum, weight decay, SAM radius and
    stragglers have no place in Oracle II and are refused; FedPD's ``local_tol`` is not an
    option here (the oracle runs its Q steps). Paper: B = 1, Q = 8, I = 20.

    Cost per client and round: Q·2B sample gradients, plus n_i on refresh rounds. Client state:
    x_i, x0_i, λ_i, g_i (4d floats). Communication: FedPD's (d up, d down when communicating).
    """

    name = "fedpd_vr"
    description = "FedPD-VR: FedPD with the SARAH variance-reduced local oracle (Oracle II)"
    Options = FedPDVROptions
    participation = "all"
    needs_gradient_solver = True
    unused_solver_options = (
        "momentum",
        "weight_decay",
        "sam_radius",
        "straggler_fraction",
        "clip_norm",
        "local_epochs",
    )

    def __init__(self, eta: float = 1.0, p: float = 0.0, skip: str = "random", refresh_every: int = 20,
                 defence: Defence | None = None):
        super().__init__(eta=eta, participation="all", dual_mean="participants", start="warm", p=p, skip=skip,
                         defence=defence)
        self.refresh_every = refresh_every

    def init_client(self, x0):
        return {**super().init_client(x0), "g": x0.new_zeros(x0.shape)}

    def local_solve(self, ctx: ClientContext, clients, start, objective: LocalObjective):
        run = ctx.solver.start(ctx)  # η1 of the round, Q (no stragglers: refused), the batches
        x, g = start, clients["g"]
        if ctx.round % self.refresh_every == 0:
            g = ctx.data.gradient(x, *ctx.data.all())
        gap = ordered_sq_norm(g + objective.grad(x), 1)
        for q in range(run.rounds):
            x_new = x - run.lr * (g + objective.grad(x))
            batch = run.batch(q)
            g = g + run.f_grad(x_new, batch, q) - run.f_grad(x, batch, q)
            x = x_new
        return x, {"g": g}, gap, run.steps
