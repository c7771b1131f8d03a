"""Local solvers: one layer shared by every algorithm.

An algorithm contributes the extra terms of its local objective,

    minimise_x  f_i(x) + ⟨v_i, x⟩ + (μ/2)‖x − c_i‖²        (:class:`LocalObjective`),

and a solver minimises it for the K clients of a call at once (leading client axis [K, d]): a
few steps of full-batch GD, minibatch SGD (momentum, weight decay, per-round lr decay, SAM,
stragglers), or — for quadratic f_i — exactly. FedProx is (v = 0, μ, c = x0); SCAFFOLD
(v = c − c_i, μ = 0); FedPD / FedDyn (v = λ_i, μ = 1/η, c = x0).

Local-step logic exists once: :meth:`GradientSolver.start` gives a :class:`LocalRun` — this
round's step size, each client's step count, its batches, the gradient of f_i (with SAM and
weight decay) and the straggler-aware update — and :meth:`GradientSolver.solve` is one loop over
it. Algorithms whose local step the objective form cannot express (Fed+'s implicit step, APFL,
pFedMe, Per-FedAvg, FedPD-VR's SARAH oracle) write their own loop over the same LocalRun. An
objective may hold some coordinates fixed (``LocalObjective.free``): a personalised method trains
a head with the body fixed, or the other way round, through the same solvers (gd, sgd, exact).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

import torch
from pydantic import Field, model_validator
from torch import Tensor

from fedpd.errors import ConfigError
from fedpd.options import EPOCHS_MAX, STEPS_MAX, NoOptions, Options, refuse
from fedpd.ordered import ordered_norm, ordered_sq_norm
from fedpd.problems.base import ClientData
from fedpd.streams import ClientStreams

if TYPE_CHECKING:
    from fedpd.context import ClientContext


class GDOptions(Options):
    lr: float = Field(0.01, gt=0, description="local step size η1")
    local_steps: int = Field(8, ge=1, le=STEPS_MAX, description="Q: local steps per round")
    momentum: float = Field(
        0.0, ge=0, lt=1, description="heavy-ball momentum (torch.optim.SGD's), buffer reset each round"
    )
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay added to the gradient")
    lr_decay: float = Field(1.0, gt=0, le=1, description="step size of round t: lr · lr_decay^t")
    straggler_fraction: float = Field(
        0.0, ge=0, le=1, description="chance a participant takes a uniform number of steps in [1, Q]"
    )
    sam_radius: float = Field(0.0, ge=0, description="SAM perturbation radius r; 0: plain gradients")
    clip_norm: float = Field(0.0, ge=0, description="clip each step's ∇f_i + v_i − μc_i (all but the μx and weight "
                             "decay terms) to this norm, per client, as FL-Simulator (10); 0: no clipping")


class SGDOptions(GDOptions):
    batch_size: int = Field(32, ge=1, description="samples per client and step, drawn with replacement")
    local_epochs: int = Field(0, ge=0, le=EPOCHS_MAX, description="E > 0: client k takes E·⌈n_k / batch_size⌉ steps "
                              "a round (E passes' worth of its n_k samples, FedAvg's and FedProx's E) instead of "
                              f"local_steps (which is then refused); at most {EPOCHS_MAX}, and at most "
                              f"{STEPS_MAX} steps for the largest client")

    @model_validator(mode="after")
    def _steps_or_epochs(self):
        if self.local_epochs and self.given("local_steps"):
            raise refuse(
                "local_steps",
                f"local_epochs = {self.local_epochs} sets each client's steps "
                f"(E·⌈n_k / batch_size⌉), so it would be ignored (allowed: no local_steps, or local_epochs = 0)",
            )
        return self


@dataclass
class LocalObjective:
    """The algorithm's terms ⟨v, x⟩ + (μ/2)‖x − c‖² added to f_i; v, c are [K, d] or None.

    ``free``: the coordinates the solver moves, a bool [d] (or [K, d]) tensor; the others keep
    their start values, bit for bit (None: all move). The objective is then minimised over the
    free coordinates alone: every gradient, norm and step (SAM's ascent, clipping, weight decay,
    momentum, the start gap) is the free part's. A head with the body fixed, or the body with the
    head fixed: ``free=info.model.mask("head")`` (:meth:`fedpd.flat.FlatModel.mask`)."""

    linear: Tensor | None = None
    mu: float = 0.0
    center: Tensor | None = None
    free: Tensor | None = None

    def restrict(self, g: Tensor) -> Tensor:
        """g with the entries of the fixed coordinates 0 (g itself when every coordinate is free)."""
        if self.free is None:
            return g
        return torch.where(self.free.to(g.device), g, torch.zeros((), dtype=g.dtype, device=g.device))

    def grad(self, x: Tensor) -> Tensor | float:
        g: Tensor | float = 0.0
        if self.linear is not None:
            g = g + self.linear
        if self.mu:
            g = g + self.mu * (x - self.center)
        return self.restrict(g) if isinstance(g, Tensor) else g

    def add_grad(self, g: Tensor, x: Tensor) -> Tensor:
        """g plus the gradient of the terms at x (no work when there are none), over the free
        coordinates."""
        if self.linear is not None:
            g = g + self.linear
        if self.mu:
            g = g + self.mu * (x - self.center)
        return self.restrict(g)

    def add_grad_clipped(self, g: Tensor, x: Tensor, max_norm: float) -> Tensor:
        """As :meth:`add_grad`, with g + v − μc (the gradient of f_i + ⟨v − μc, x⟩) clipped to
        ``max_norm`` per client before μx is added. This is what the A-FedPD authors' simulator
        clips (FL-Simulator, ``client/feddyn.py``, ``client/fedspeed.py``: ``clip_grad_norm_(…, 10)``
        on the gradient of loss + ρ⟨θ, h_i − θ^t⟩; the SGD's weight decay adds (wd + ρ)θ after it;
        ``client/client.py``, FedAvg: the loss gradient alone; ``client/scaffold.py``: with its
        correction). Rows are scaled by min(1, max_norm / (‖·‖ + 1e-6)), as torch's clip_grad_norm_."""
        v = g if self.linear is None else g + self.linear
        if self.mu:
            v = v - self.mu * self.center
        v = self.restrict(v)
        v = v * (max_norm / (ordered_norm(v, dim=1, keepdim=True) + 1e-6)).clamp(max=1.0)
        return v + self.mu * self.restrict(x) if self.mu else v


@dataclass
class LocalResult:
    x: Tensor  # [K, d] the local solutions
    steps: Tensor  # [K] local steps each client took (1 for the exact solver)
    lr: float  # the step size used this round
    #: [K] ‖∇(local objective)‖² at the start point, on the first step's batch: how far from
    #: stationary each local problem starts (the primal-dual family reports it as ``dual_drift``)
    start_grad_sq: Tensor | None = None


#: bytes of minibatches a local run gathers at once (the next steps' batches 0, in one gather)
GATHER_BYTES = 16 * 2**20


@dataclass
class LocalRun:
    """One call's local steps for the K clients of a context: the pieces of every local loop."""

    data: ClientData
    lr: float  # η1 of this round (lr decay applied)
    steps: Tensor  # [K] steps each client takes
    batch_size: int | None  # None: full batch
    weight_decay: float
    sam_radius: float
    rng: ClientStreams  # the call's batch streams; batch j of step q draws from rng.child(q, j)
    #: [K, Q, n] every step's draws of batch 0, drawn at the first batch in one stream call
    _draws: Tensor | None = field(default=None, init=False, repr=False)
    #: (first step, X, Y, W) of the steps whose batches 0 are gathered, and how many steps a
    #: gather takes (GATHER_BYTES / one step's batch)
    _gathered: tuple | None = field(default=None, init=False, repr=False)
    _span: int = field(default=1, init=False, repr=False)

    def __setattr__(self, name, value):
        if name == "steps":  # the step counts changed (a criterion met): recount the bounds
            self.__dict__.pop("rounds", None)
            self.__dict__.pop("_fewest", None)
        super().__setattr__(name, value)

    @cached_property
    def rounds(self) -> int:
        """Iterations of the loop: the most steps any client of the call takes."""
        return int(self.steps.max()) if self.steps.numel() else 0

    @cached_property
    def _fewest(self) -> int:
        return int(self.steps.min()) if self.steps.numel() else 0

    def active(self, q: int) -> Tensor | None:
        """[K] bool of the clients that take step q (None: all of them)."""
        return None if self._fewest > q else self.steps > q

    def batch(self, q: int, j: int = 0) -> tuple[Tensor, Tensor, Tensor]:
        """Batch j of step q: every own sample (gd) or ``batch_size`` draws per client (sgd). The
        draws of batch 0 of every step come from one stream call, at the first (the same numbers
        as step by step: each step's stream is addressed by q, not by what came before), and
        their samples are gathered for many steps at once (views of one gather per step); their
        weights are None (every sample weighs 1)."""
        if self.batch_size is None:
            return self.data.all()
        if j or q >= self.rounds:
            return self.data.minibatch(self.batch_size, self.rng.child(q, j))
        if self._draws is None:
            self._draws = self.data.batch_uniforms(self.batch_size, self.rng.children(range(self.rounds)).child(0))
        gathered = self._gathered
        if gathered is None or not gathered[0] <= q < gathered[0] + gathered[1].shape[1]:
            # the first step alone (its size sets the span), then up to GATHER_BYTES of steps per gather
            X, Y, W = self.data.batches_from(self._draws[:, q:q + self._span])
            if self._span == 1:
                self._span = max(1, GATHER_BYTES // max(1, X.nbytes + Y.nbytes))
            # a minibatch weighs every sample 1: W None says so once, not checked every step
            gathered = self._gathered = (q, X, Y, None if bool(W.eq(1).all()) else W)
        s = q - gathered[0]
        W = gathered[3]
        return gathered[1][:, s], gathered[2][:, s], None if W is None else W[:, s]

    def f_grad(self, x: Tensor, batch, q: int, out: Tensor | None = None) -> Tensor:
        """∇f_i at x [K, d] on ``batch``, counted for the clients active at step q (``out``: a
        buffer it may be written into, see :meth:`ClientData.gradient`)."""
        return self.data.gradient(x, *batch, active=self.active(q), out=out)

    def descend(self, x: Tensor, batch, q: int, grad_sq: bool = False) -> Tensor | None:
        """Step q as plain SGD on f_i, x ← x − lr·∇f_i(x) in place, for a step every client takes
        (counted; fused per client: :meth:`ClientData.descend`); ``grad_sq``: returns the [K]
        ‖∇f_i(x)‖² at the iterate before the step."""
        return self.data.descend(x, *batch, self.lr, grad_sq)

    def sam(self, x: Tensor, g: Tensor, batch, q: int) -> Tensor:
        """SAM (Foret et al., ICLR 2021): with radius r > 0, ∇f_i at the ascent point
        x + r·g/‖g‖ (g = ∇f_i(x) on the same batch), per client; else g."""
        if not self.sam_radius:
            return g
        return self.f_grad(x + self.sam_radius * g / ordered_norm(g, dim=1, keepdim=True).clamp_min(1e-12), batch, q)

    def grad(self, x: Tensor, batch, q: int) -> Tensor:
        """The solver's gradient of f_i at step q: SAM if configured, plus weight decay."""
        g = self.sam(x, self.f_grad(x, batch, q), batch, q)
        return g + self.weight_decay * x if self.weight_decay else g

    def advance(self, q: int, x: Tensor, x_new: Tensor) -> Tensor:
        """x_new for the clients that take step q, x for those already done (stragglers)."""
        active = self.active(q)
        return x_new if active is None else torch.where(active.to(x.device)[:, None], x_new, x)


@dataclass(frozen=True)
class GradientSolver:
    """Q steps of gradient descent on the local objective (full batch: FedPD's Oracle I, GD).

    Momentum and weight decay follow ``torch.optim.SGD`` (momentum buffer reset every round).
    ``clip_norm``: see :meth:`LocalObjective.add_grad_clipped` (algorithms with their own local loop
    refuse it). The
    step size of round t is ``lr · lr_decay^t``. Stragglers: each participant is, with probability
    ``straggler_fraction``, a straggler that takes a uniform number of steps in [1, Q] (drawn
    from its own stream). SAM (FedSAM, FedSpeed, A-FedPDSAM): see :meth:`LocalRun.sam`; only f_i
    is perturbed, not the algorithm's terms, and each step costs two gradient evaluations.
    """

    name = "gd"
    description = (
        "full-batch gradient descent, local_steps steps per round (momentum, weight decay, lr decay, SAM, clipping)"
    )
    Options = GDOptions

    lr: float = 0.01
    local_steps: int = 8
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_decay: float = 1.0
    straggler_fraction: float = 0.0
    sam_radius: float = 0.0
    clip_norm: float = 0.0
    batch_size: int | None = None
    local_epochs: int = 0  # sgd only (SGDOptions)

    def lr_at(self, round: int) -> float:
        """The step size of round ``round`` (the one place the schedule is computed)."""
        return self.lr * self.lr_decay**round

    def with_options(self, **changes) -> "GradientSolver":
        """A copy with some settings changed (e.g. a SAM radius, a scaled step)."""
        return replace(self, **changes)

    @property
    def varying_steps(self) -> bool:
        """Whether participants may take different numbers of local steps (stragglers, or epochs over
        data sets of different sizes): then an algorithm whose server step needs them has them sent."""
        return self.straggler_fraction > 0 or self.local_epochs > 0

    def step_counts(self, rng: ClientStreams, sizes: Tensor | None = None) -> Tensor:
        """[K] local steps: Q — or, with ``local_epochs`` E, E·⌈n_k / B⌉ for the clients' training
        set sizes ``sizes`` (McMahan et al.'s u = E·n_k/B, FedAvg's and FedProx's local work) —, and
        for stragglers a uniform count in [1, that]."""
        if self.local_epochs:
            steps = self.local_epochs * torch.div(sizes.to("cpu", torch.int64) + self.batch_size - 1, self.batch_size,
                                                  rounding_mode="floor").clamp(min=1)
        else:
            steps = torch.full((len(rng),), self.local_steps, dtype=torch.int64)
        if self.straggler_fraction > 0:
            u = rng.uniform(2)
            steps = torch.where(u[:, 0] < self.straggler_fraction, 1 + (u[:, 1] * steps).long(), steps)
        return steps

    def start(self, ctx: "ClientContext", steps: Tensor | None = None) -> LocalRun:
        """The local steps of this call; ``steps`` overrides the step counts (Fed+'s E_k)."""
        if steps is None:
            steps = self.step_counts(ctx.rng("stragglers"), ctx.data.sizes)
        return LocalRun(ctx.data, self.lr_at(ctx.round), steps, self.batch_size, self.weight_decay,
                        self.sam_radius, ctx.rng("batches"))

    def solve(self, ctx: "ClientContext", x: Tensor, objective: LocalObjective, tol: float = 0.0) -> LocalResult:
        """Minimise f_i + the objective's terms from x [K, d]. ``tol`` > 0: a client stops once
        ‖∇(local objective)‖² <= tol at its iterate on the step's batch (FedPD's criterion (12));
        its step count is then the steps it took."""
        run = self.start(ctx)
        buf, start_gap = None, None
        x = x.clone()  # the iterate is updated in place: a fresh [K, d] per step costs more than the step
        g_out = torch.empty_like(x)  # where each step's ∇f_i may be written (per-client execution)
        # a step that is x − lr·∇f_i(x) alone (FedAvg's) needs no flat gradient: LocalRun.descend
        plain = (objective.linear is None and not objective.mu and not tol and objective.free is None
                 and not (self.weight_decay or self.momentum or self.sam_radius or self.clip_norm))
        for q in range(run.rounds):
            if q >= run.rounds:  # every client met its criterion
                break
            batch = run.batch(q)
            if plain and run.active(q) is None:
                norms = run.descend(x, batch, q, grad_sq=q == 0)
                if q == 0:
                    start_gap = norms
                continue
            g_f = objective.restrict(run.f_grad(x, batch, q, out=g_out))  # free coordinates: SAM ascends along them
            if q == 0 or tol:  # ‖∇(local objective)‖² at the iterate
                g_L = objective.add_grad(g_f + self.weight_decay * x if self.weight_decay else g_f, x)
                gap = ordered_sq_norm(g_L, 1)
                if q == 0:
                    start_gap = gap
                if tol:
                    run.steps = torch.where((gap <= tol).cpu() & (run.steps > q), q, run.steps)
            g = run.sam(x, g_f, batch, q)
            g = objective.add_grad_clipped(g, x, self.clip_norm) if self.clip_norm else objective.add_grad(g, x)
            if self.weight_decay:
                g = g + self.weight_decay * objective.restrict(x)
            if self.momentum:
                buf = g.clone() if buf is None else buf.mul_(self.momentum).add_(g)  # g may be g_out
                g = buf
            active = run.active(q)
            if active is None:
                x.add_(g, alpha=-run.lr)
            else:  # stragglers that are done keep their iterate
                torch.where(active.to(x.device)[:, None], torch.add(x, g, alpha=-run.lr), x, out=x)
        return LocalResult(x, run.steps, run.lr, start_gap)


@dataclass(frozen=True)
class SGDSolver(GradientSolver):
    """:class:`GradientSolver` on minibatches of ``batch_size`` samples per client and step, drawn
    uniformly with replacement from each client's own stream (FedPD's Oracle I, SGD)."""

    name = "sgd"
    description = "minibatch SGD (momentum, weight decay, per-round lr decay, SAM, clipping, stragglers)"
    Options = SGDOptions

    batch_size: int | None = 32


@dataclass(frozen=True)
class ExactSolver:
    """Exact minimiser of the local objective for quadratic f_i = ½xᵀH_i x − g_iᵀx:
    (H_i + μI) x = g_i − v_i + μ c_i. Used to check the algorithms against closed forms."""

    name = "exact"
    description = "exact minimiser of the local objective (quadratic problems)"
    Options = NoOptions

    def solve(self, ctx: "ClientContext", x: Tensor, objective: LocalObjective, tol: float = 0.0) -> LocalResult:
        H, g = ctx.data.quadratic
        H, g = H.to(x.dtype), g.to(x.dtype)
        g0 = objective.restrict((H @ x.unsqueeze(-1)).squeeze(-1) - g + objective.grad(x))
        rhs = g
        if objective.linear is not None:
            rhs = rhs - objective.linear
        if objective.mu:
            H = H + objective.mu * torch.eye(H.shape[-1], dtype=H.dtype, device=H.device)
            rhs = rhs + objective.mu * objective.center
        eye = torch.eye(H.shape[-1], dtype=H.dtype, device=H.device)
        if objective.free is not None:  # the free coordinates' rows; a fixed one's row says x_j = its start value
            free = objective.free.to(x.device)
            both = free[..., :, None] & free[..., None, :]
            spectrum = torch.linalg.eigvalsh(torch.where(both, H, eye))  # the free block's, and ones
            H, rhs = torch.where(free[..., :, None], H, eye), torch.where(free, rhs, x)
        else:
            spectrum = torch.linalg.eigvalsh(H)  # ascending; H_i + μI is symmetric positive semi-definite
        singular = spectrum[:, 0] <= spectrum[:, -1].abs() * H.shape[-1] * torch.finfo(H.dtype).eps
        if bool(singular.any()):  # no unique minimiser (numerically: a solve would give noise)
            bad = ctx.ids[singular.cpu()].tolist()
            who = f"client {bad[0]}" + (" and others" if len(bad) > 1 else "")
            raise ConfigError(f"solver.name: the exact local problem of {who} has no unique minimiser (its H_i + μI is "
                              f"singular: fewer samples than features, no ridge, no proximal term) (allowed: "
                              f"problem.ridge > 0, more samples per client, or solver gd or sgd)")
        sol = torch.linalg.solve(H, rhs.unsqueeze(-1)).squeeze(-1)
        if objective.free is not None:
            sol = torch.where(free, sol, x)  # the fixed coordinates bit for bit
        steps = torch.ones(ctx.ids.numel(), dtype=torch.int64)
        return LocalResult(sol, steps, 1.0, ordered_sq_norm(g0, 1))


SOLVERS = (GradientSolver, SGDSolver, ExactSolver)
