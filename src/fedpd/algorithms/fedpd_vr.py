"""FedPD-VR: FedPD with the variance-reduced local oracle (FedPD, Zhang et al. 2021, Oracle II)."""

from __future__ import annotations

from fedpd.algorithms.base import RoundContext
from fedpd.algorithms.primal_dual import PrimalDual
from fedpd.errors import ConfigError
from fedpd.solvers import GradientSolver, LocalObjective, client_gradients


class FedPDVR(PrimalDual):
    """FedPD with Oracle II (FedPD paper, Alg. 2 with Alg. 4, analysed in App. G).

    FedPD's protocol (every client, every round; warm start; λ_i ← λ_i + (x_i − x0_i)/η;
    x0_i⁺ = x_i + ηλ_i; skip communication with probability p) with a SARAH estimator g_i of
    ∇f_i kept by each client across rounds:

        every I rounds (r mod I = 0):  g_i = ∇f_i(x_i)      (full local gradient at the warm start)
        each of Q steps:               x⁺ = x − η1 (g_i + λ_i + (x − x0_i)/η)
                                       g_i ← g_i + mean_{b∈B} [∇F(x⁺; ξ_b) − ∇F(x; ξ_b)]

    with the same minibatch B (drawn uniformly with replacement) at both points. η1, Q and B
    are the solver's ``lr`` (times ``lr_decay``^r), ``local_steps`` and ``batch_size``
    (``gd``: B = the whole local data); its momentum, weight decay, SAM and stragglers do not
    apply. Paper: B = 1, Q = 8, I = 20.

    Cost per client and round: Q·2B sample gradients, plus n_i on refresh rounds. Client state:
    x_i, x0_i, λ_i, g_i (4d floats). Communication: FedPD's (d up, d down when communicating).
    """

    name = "fedpd_vr"
    description = "FedPD-VR: FedPD with the SARAH variance-reduced local oracle (Oracle II)"

    def __init__(self, eta: float = 1.0, p: float = 0.0, skip: str = "random", refresh_every: int = 20):
        super().__init__(eta=eta, participation="all", dual_mean="participants", start="warm", p=p, skip=skip)
        self.refresh_every = refresh_every

    def setup(self, problem, solver):
        if not isinstance(solver, GradientSolver):
            raise ConfigError("solver.name: FedPD-VR takes its step size, Q and batch size from a gradient "
                              "solver (allowed: sgd, gd)")

    def init_client(self, x0):
        return {**super().init_client(x0), "g": x0.new_zeros(x0.shape)}

    def local_solve(self, ctx: RoundContext, clients, start, objective: LocalObjective):
        problem, ids, solver = ctx.problem, ctx.ids, ctx.solver
        grad_f = client_gradients(problem)
        x, g = start, clients["g"]
        if ctx.round % self.refresh_every == 0:
            g = grad_f(x, *problem.train.padded(ids))
        gap = ((g + objective.grad(x)) ** 2).sum(1)
        lr = solver.lr * solver.lr_decay**ctx.round
        for _ in range(solver.local_steps):
            x_new = x - lr * (g + objective.grad(x))
            if solver.batch_size is None:
                X, Y, W = problem.train.padded(ids)
            else:
                X, Y, W = problem.train.minibatch(ids, solver.batch_size, ctx.generator)
            g = g + grad_f(x_new, X, Y, W) - grad_f(x, X, Y, W)
            x = x_new
        return x, {"g": g}, gap
