"""The pieces of a hand-written local loop, taken from the run's gradient solver.

Most algorithms hand their local objective to the shared solver (:mod:`fedpd.solvers`). A few
take steps the solver has no form for — Fed+'s implicit proximal step (eq. (14)), APFL's two
coupled iterates, pFedMe's nested solve, Per-FedAvg's two-point step — and run their own loop.
They still follow the run's ``[solver]`` section: its step size η of this round (with lr decay),
each participant's step count (local_steps, stragglers), its batches (full batch for ``gd``,
``batch_size`` draws for ``sgd``) and weight decay, drawn from the same seeded stream in the same
order as :class:`fedpd.solvers.GradientSolver`, so a loop that takes plain gradient steps
reproduces the solver's iterates exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedpd.algorithms.base import RoundContext
from fedpd.errors import ConfigError
from fedpd.solvers import GradientSolver, client_gradients


def is_plain_gradient_solver(solver) -> bool:
    """The stock gd / sgd solver (subclasses may change the gradient, e.g. SAM)."""
    return type(solver) is GradientSolver


@dataclass
class LocalLoop:
    """One round of local steps for the K participants of ``ctx``."""

    ctx: RoundContext
    lr: float  # η of this round
    steps: Tensor  # [K] steps each participant takes
    batch_size: int | None
    weight_decay: float
    sam_radius: float = 0.0

    @classmethod
    def of(cls, ctx: RoundContext, who: str, steps: Tensor | None = None) -> "LocalLoop":
        solver = ctx.solver
        if not isinstance(solver, GradientSolver):
            raise ConfigError(f"solver.name: algorithm '{who}' runs its own local steps and needs a gradient "
                              f"solver (allowed: gd, sgd)")
        if solver.momentum:
            raise ConfigError(f"solver.momentum: algorithm '{who}' runs its own local steps, which have no "
                              f"momentum (allowed: 0)")
        k = ctx.ids.numel()
        drawn = solver.step_counts(k, ctx.generator)  # drawn even when overridden: same stream use
        return cls(ctx, solver.lr * solver.lr_decay**ctx.round, drawn if steps is None else steps,
                   solver.batch_size, solver.weight_decay, getattr(solver, "sam_radius", 0.0))

    @property
    def rounds(self) -> int:
        return int(self.steps.max()) if self.steps.numel() else 0

    def batch(self):
        """A batch for this step: every sample (gd) or ``batch_size`` draws per client (sgd)."""
        split = self.ctx.problem.train
        if self.batch_size is None:
            full = self.__dict__.get("_full")
            if full is None:
                full = self.__dict__["_full"] = split.padded(self.ctx.ids)
            return full
        return split.minibatch(self.ctx.ids, self.batch_size, self.ctx.generator)

    def grad(self, x: Tensor, batch) -> Tensor:
        """∇f_i at x [K, d] on ``batch`` (plus weight decay); with the solver's SAM radius r, taken
        at the ascent point x + r·g/‖g‖ as :class:`GradientSolver` does."""
        grad_f = client_gradients(self.ctx.problem)
        g = grad_f(x, *batch)
        if self.sam_radius:
            g = grad_f(x + self.sam_radius * g / g.norm(dim=1, keepdim=True).clamp_min(1e-12), *batch)
        if self.weight_decay:
            g = g + self.weight_decay * x
        return g

    def advance(self, q: int, x: Tensor, x_new: Tensor) -> Tensor:
        """x_new for clients that take step q, x for those already done (stragglers)."""
        if int(self.steps.min()) > q:
            return x_new
        return torch.where((self.steps > q)[:, None], x_new, x)
