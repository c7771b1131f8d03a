"""Local solvers: one layer shared by every algorithm.

An algorithm contributes the extra terms of its local objective,

    minimise_x  f_i(x) + ⟨v_i, x⟩ + (μ/2)‖x − c_i‖²        (:class:`LocalObjective`),

and a solver minimises it for K clients at once (leading client axis [K, d]): a few steps of
full-batch GD, minibatch SGD (momentum, weight decay, per-round lr decay, SAM), or — for quadratic
f_i — exactly. FedProx is (v = 0, μ, c = x0); SCAFFOLD (v = c − c_i, μ = 0); FedPD / FedDyn
(v = λ_i, μ = 1/η, c = x0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.func import grad, vmap

from fedpd.errors import ConfigError
from fedpd.problems.base import Problem


@dataclass
class LocalObjective:
    """The algorithm's terms ⟨v, x⟩ + (μ/2)‖x − c‖² added to f_i; v, c are [K, d] or None."""

    linear: Tensor | None = None
    mu: float = 0.0
    center: Tensor | None = None

    def grad(self, x: Tensor) -> Tensor | float:
        g: Tensor | float = 0.0
        if self.linear is not None:
            g = g + self.linear
        if self.mu:
            g = g + self.mu * (x - self.center)
        return g


@dataclass
class LocalResult:
    x: Tensor  # [K, d] the local solutions
    steps: Tensor  # [K] local steps each client took (1 for the exact solver)
    lr: float  # the step size used this round
    #: [K] ‖∇(local objective)‖² at the start point, on the first step's batch: how far from
    #: stationary each local problem starts (the primal-dual family reports it as ``dual_drift``)
    start_grad_sq: Tensor | None = None


def client_gradients(problem: Problem, counted: bool = True):
    """∇f_i at x for K clients: vmap over (x [K, d], X [K, B, ...], Y [K, B], W [K, B]).

    Computation is counted where it is spent, as communication is: every call adds the batch's
    real samples (W ≠ 0) to ``problem.sample_grads`` — the clients' per-sample gradient
    evaluations, the budget FedPD-VR is compared by. ``counted=False`` for evaluation work."""
    key = "_counted_grad" if counted else "_vmapped_grad"
    fn = problem.__dict__.get(key)
    if fn is None:
        vmapped = problem.__dict__.setdefault("_vmapped_grad", vmap(grad(problem.client_loss)))
        if counted:
            def fn(x: Tensor, X: Tensor, Y: Tensor, W: Tensor) -> Tensor:
                problem.sample_grads = problem.sample_grads + W.count_nonzero()
                return vmapped(x, X, Y, W)
        else:
            fn = vmapped
        problem.__dict__[key] = fn
    return fn


class GradientSolver:
    """Q steps of (stochastic) gradient descent on the local objective.

    ``batch_size=None`` is full-batch GD (FedPD Oracle I, GD option); otherwise each step draws
    ``batch_size`` samples per client uniformly with replacement. Momentum and weight decay
    follow ``torch.optim.SGD`` (momentum buffer reset every round). The step size of round t is
    ``lr · lr_decay^t``. Stragglers: each participant is, with probability
    ``straggler_fraction``, a straggler that takes a uniform number of steps in [1, Q].

    SAM (Foret et al., ICLR 2021; FedSAM, FedSpeed, A-FedPDSAM): with ``sam_radius`` r > 0 the
    gradient of f_i is taken at the ascent point x + r·g/‖g‖, g = ∇f_i(x) on the same batch,
    per client. Only f_i is perturbed; the algorithm's linear and proximal terms are not. Each
    step then costs two gradient evaluations.
    """

    def __init__(self, lr: float, local_steps: int, batch_size: int | None = None, momentum: float = 0.0,
                 weight_decay: float = 0.0, lr_decay: float = 1.0, straggler_fraction: float = 0.0,
                 sam_radius: float = 0.0):
        self.lr, self.local_steps, self.batch_size = lr, local_steps, batch_size
        self.momentum, self.weight_decay, self.lr_decay = momentum, weight_decay, lr_decay
        self.straggler_fraction = straggler_fraction
        self.sam_radius = sam_radius

    def step_counts(self, k: int, generator: torch.Generator) -> Tensor:
        steps = torch.full((k,), self.local_steps, dtype=torch.int64)
        if self.straggler_fraction > 0:
            slow = torch.rand(k, generator=generator) < self.straggler_fraction
            fewer = torch.randint(1, self.local_steps + 1, (k,), generator=generator)
            steps = torch.where(slow, fewer, steps)
        return steps

    def solve(self, problem: Problem, ids: Tensor, x: Tensor, objective: LocalObjective, round: int,
              generator: torch.Generator) -> LocalResult:
        grad_f = client_gradients(problem)
        steps = self.step_counts(ids.numel(), generator)
        lr = self.lr * self.lr_decay**round
        full = problem.train.padded(ids) if self.batch_size is None else None
        x, buf, start_gap = x.clone(), None, None
        for q in range(int(steps.max()) if steps.numel() else 0):
            X, Y, W = full if full is not None else problem.train.minibatch(ids, self.batch_size, generator)
            g_f = grad_f(x, X, Y, W)
            if q == 0:
                g0 = g_f + objective.grad(x) + (self.weight_decay * x if self.weight_decay else 0.0)
                start_gap = (g0 * g0).sum(1)
            if self.sam_radius:
                norm = g_f.norm(dim=1, keepdim=True).clamp_min(1e-12)
                g_f = grad_f(x + self.sam_radius * g_f / norm, X, Y, W)
            g = g_f + objective.grad(x)
            if self.weight_decay:
                g = g + self.weight_decay * x
            if self.momentum:
                buf = g if buf is None else self.momentum * buf + g
                g = buf
            if int(steps.min()) > q:
                x = x - lr * g
            else:  # stragglers that are done keep their iterate
                x = torch.where((steps > q)[:, None], x - lr * g, x)
        return LocalResult(x, steps, lr, start_gap)


class ExactSolver:
    """Exact minimiser of the local objective for quadratic f_i = ½xᵀH_i x − g_iᵀx:
    (H_i + μI) x = g_i − v_i + μ c_i. Used to check the algorithms against closed forms."""

    def solve(self, problem: Problem, ids: Tensor, x: Tensor, objective: LocalObjective, round: int,
              generator: torch.Generator) -> LocalResult:
        if problem.quadratic is None:
            raise ConfigError(f"solver.name: 'exact' needs a quadratic problem (least_squares); problem '{problem.name}' is not")
        H, g = problem.quadratic(problem.train, ids)
        H, g = H.to(x.dtype), g.to(x.dtype)
        g0 = (H @ x.unsqueeze(-1)).squeeze(-1) - g + objective.grad(x)
        rhs = g
        if objective.linear is not None:
            rhs = rhs - objective.linear
        if objective.mu:
            H = H + objective.mu * torch.eye(H.shape[-1], dtype=H.dtype)
            rhs = rhs + objective.mu * objective.center
        sol = torch.linalg.solve(H, rhs.unsqueeze(-1)).squeeze(-1)
        steps = torch.ones(ids.numel(), dtype=torch.int64)
        return LocalResult(sol, steps, 1.0, (g0 * g0).sum(1))
