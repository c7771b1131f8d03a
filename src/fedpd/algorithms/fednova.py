"""FedNova: normalised averaging, so clients that take more local steps do not pull harder.

Wang, Liu, Liang, Joshi, Poor, "Tackling the objective inconsistency problem in heterogeneous
federated optimization", NeurIPS 2020. A client i that takes τ_i local steps from x^{(t,0)} moves by

    Δ_i = x_i − x^{(t,0)} = −η G_i a_i,

G_i = [g_i(x^{(t,0)}), …, g_i(x^{(t,τ_i−1)})] its stochastic gradients and a_i ∈ R^{τ_i} the
weights its local solver gives them (the general update rule of the paper's analysis framework).
FedAvg's x ← x + Σ_i p_i Δ_i then weighs client i by p_i ‖a_i‖₁: with unequal τ_i (plain SGD) it
minimises the surrogate Σ_i p_i τ_i F_i / Σ_j p_j τ_j instead of Σ_i p_i F_i — the objective
inconsistency. FedNova, the paper's method, normalises each update by ‖a_i‖₁ and steps with the
effective number of steps:

    d_i = G_i a_i / ‖a_i‖₁,   τ_eff = Σ_i p_i ‖a_i‖₁,
    x^{(t+1,0)} = x^{(t,0)} − τ_eff Σ_i p_i η d_i = x^{(t,0)} + τ_eff Σ_i p_i Δ_i / ‖a_i‖₁.

The a_i of the local solvers here (the paper's examples of a_i):

* plain (S)GD: a_i = [1, …, 1], ‖a_i‖₁ = τ_i;
* heavy-ball momentum ρ (``solver.momentum``, the buffer reset each round):
  ‖a_i‖₁ = [τ_i − ρ(1 − ρ^{τ_i})/(1 − ρ)] / (1 − ρ);
* the proximal term (μ/2)‖x − x^{(t,0)}‖² of FedProx (``mu``), α = ημ:
  a_i = [(1 − α)^{τ_i−1}, …, 1 − α, 1], ‖a_i‖₁ = [1 − (1 − α)^{τ_i}] / α.

(Momentum and the proximal term together have no a_i of this form: refused. Weight decay is part
of F_i's gradient here, so it leaves a_i alone.) p_i = 1/K over the round's participants — fedpd's
f = (1/N) Σ_i f_i with uniform sampling.

In fedpd every participant takes ``solver.local_steps`` = Q steps unless it is a straggler
(``solver.straggler_fraction``: a uniform count in [1, Q]); so with no stragglers all ‖a_i‖₁ are
equal, τ_eff/‖a_i‖₁ = 1 and FedNova is FedAvg (tested) — nothing extra is sent. With stragglers a
participant also sends its ‖a_i‖₁ (1 float up), which it computes from its own τ_i, η and the
options. Per round: d floats down, d up (+1 with stragglers).

Written with fedpd's public names only, as a user's algorithm is (docs/extending.md).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from fedpd.algorithms.base import Algorithm, expand, sq_dist
from fedpd.algorithms.robust import ExactMeans
from fedpd.solvers import LocalObjective
from fedpd.errors import ConfigError  # fedpd.ConfigError, from where it is defined (fedpd imports the built-ins)


class FedNovaOptions(ExactMeans):
    exact_means: ClassVar[str] = ("FedNova weighs each client's normalised update Δ_i/‖a_i‖₁ by p_i, the weights "
                                  "that make its objective the federation's (objective consistency)")

    mu: float = Field(0.0, ge=0, description="μ of FedProx's proximal term (μ/2)||x - x0||^2 in the local objective "
                      "(0: none); a_i is then the paper's proximal one")


def a_norm(steps: torch.Tensor, lr: float, momentum: float = 0.0, mu: float = 0.0) -> torch.Tensor:
    """‖a_i‖₁ of τ_i = ``steps`` local steps of step size ``lr`` (module docstring; Wang et al.'s
    examples of a_i): τ_i for plain steps, with heavy-ball ``momentum`` ρ or the proximal ``mu`` μ."""
    tau = steps.double()
    if momentum:
        rho = momentum
        return (tau - rho * (1 - rho ** tau) / (1 - rho)) / (1 - rho)
    if mu:
        alpha = lr * mu
        return (1 - (1 - alpha) ** tau) / alpha
    return tau


class FedNova(Algorithm):
    """FedNova (Wang, Liu, Liang, Joshi, Poor, NeurIPS 2020; arXiv:2007.07481):
    x ← x + τ_eff Σ_i p_i Δ_i/‖a_i‖₁, τ_eff = Σ_i p_i ‖a_i‖₁, with a_i of (S)GD, momentum or
    FedProx's proximal step (module docstring)."""

    name = "fednova"
    description = "FedNova: average the local updates normalised by each client's steps, times the mean steps"
    Options = FedNovaOptions
    needs_gradient_solver = True  # a_i are the weights of the gradient steps
    means_only = True  # τ_eff and Σ_i p_i Δ_i/‖a_i‖₁ are means over the participants
    uploads_step_counts = True  # ‖a_i‖₁ when the solver's steps vary

    def __init__(self, mu: float = 0.0):
        self.mu = mu

    def setup(self, info, solver):
        self.local_solver = solver  # whether the participants send ‖a_i‖₁ (stragglers), known from the config
        if self.mu and solver.momentum:
            raise ConfigError(f"algorithm.mu = {self.mu:g} with solver.momentum = {solver.momentum:g}: FedNova's "
                              f"a_i covers momentum or the proximal term, not both (allowed: one of them 0)")

    def local(self, message, clients, ctx):
        x0 = expand(message["x0"], ctx.ids.numel())
        objective = LocalObjective(mu=self.mu, center=x0) if self.mu else LocalObjective()
        res = ctx.solver.solve(ctx, x0, objective)
        upload = {"x": res.x}
        if ctx.solver.varying_steps:  # τ_i differ: the server needs each ‖a_i‖₁
            a = a_norm(res.steps, res.lr, ctx.solver.momentum, self.mu)
            upload["a_norm"] = a.to(res.x.device, res.x.dtype)
        return upload, clients

    def mean_terms(self, server, uploads):
        x, x0 = uploads["x"], server["x0"]
        terms = {"primal_residual": sq_dist(x, x0)}
        if "a_norm" in uploads:
            a = uploads["a_norm"]
            return {**terms, "normalized": (x - x0) / a[:, None], "a_norm": a}
        return {**terms, "x": x}  # every ‖a_i‖₁ the same: τ_eff/‖a_i‖₁ = 1, FedAvg's mean

    def aggregate_means(self, server, means, ctx):
        if "a_norm" in means:
            x0 = server["x0"] + means["a_norm"] * means["normalized"]  # τ_eff · Σ_i p_i Δ_i/‖a_i‖₁
        else:
            x0 = means["x"]
        return {"x0": x0, "primal_residual": means["primal_residual"]}, {}
