"""Personalised baselines of Fed+'s Table 2 (Kundu, Yu, Wynter, Lim, "Robustness and personalization
in federated learning: a unified approach via regularization", 2022, §5.1): Ditto, APFL, pFedMe,
Per-FedAvg (FO), and local training without federation (Table 1's first row, standalone).

Each keeps a personal model per client (client state) besides the server model, and exposes it
through :meth:`personal_models`, so the run reports ``personal_*`` metrics (each client's own
model on its own test split) next to the server model's. All but Ditto and local training take
steps the shared solver has no form for and run their own loop over the run's gradient solver
(:meth:`fedpd.solvers.GradientSolver.start`: its η, step counts, batches, SAM, weight decay; not
its momentum, which is refused).
"""

from __future__ import annotations

import torch
from pydantic import Field, model_validator

from fedpd.algorithms.base import Algorithm, expand, mean_sq_dist
from fedpd.algorithms.fedavg import FedAvg
from fedpd.algorithms.robust import AggregatorOptions, RobustAveraging
from fedpd.context import ClientContext
from fedpd.defence import Defence
from fedpd.options import STEPS_MAX, refuse
from fedpd.solvers import LocalObjective


class DittoOptions(AggregatorOptions):
    lam: float = Field(0.1, ge=0, description="lambda of h_k(v; w) = F_k(v) + lambda/2 ||v - w||^2")


class APFLOptions(AggregatorOptions):
    alpha: float = Field(0.25, ge=0, le=1, description="initial mixing weight")
    adaptive: bool = Field(True, description="adapt alpha by its gradient")
    alpha_lr: float = Field(0.0, ge=0, description="step for alpha; 0: the solver's lr (adaptive only)")

    @model_validator(mode="after")
    def _alpha_lr_used(self):
        if not self.adaptive and self.given("alpha_lr"):
            raise refuse("alpha_lr", "the step of alpha, and adaptive = false keeps alpha fixed, so it would be "
                         "ignored (allowed: adaptive = true, or no alpha_lr)")
        return self


class PFedMeOptions(AggregatorOptions):
    lam: float = Field(15.0, gt=0, description="lambda of the Moreau envelope")
    inner_steps: int = Field(5, ge=1, le=STEPS_MAX, description="K: GD steps on the inner (Moreau) problem")
    personal_lr: float = Field(0.01, gt=0, description="step size of the inner steps")
    beta: float = Field(1.0, gt=0, description="server mixing: w = (1 - beta) w + beta mean")


class PerFedAvgOptions(AggregatorOptions):
    alpha: float = Field(0.01, gt=0, description="inner (adaptation) step size")


class _OwnLoop:
    """Marks an algorithm that runs its own loop over the gradient solver's pieces."""

    needs_gradient_solver = True
    unused_solver_options = ("momentum", "clip_norm")


class LocalOnly(Algorithm):
    """Local training without federation (Fed+ Table 1, row 1): each client runs the local solver
    on f_i from its own last model, every round; nothing is communicated. The server model
    reported is the mean of the personal models."""

    name = "local"
    description = "local training only: every client trains its own model, nothing is communicated"

    def init_client(self, x0):
        return {"x": x0.clone()}

    def communicates(self, server, round, generator):
        return False

    def broadcast(self, server):
        return {}

    def local(self, message, clients, ctx: ClientContext):
        res = ctx.solver.solve(ctx, clients["x"], LocalObjective())
        return {}, {"x": res.x}

    def aggregate(self, server, uploads, ctx):
        return server, {}

    def evaluation_model(self, server, clients):
        return clients.mean("x")

    def personal_models(self, server, clients, problem=None):
        return clients.full("x")


class Ditto(FedAvg):
    """Ditto (Li, Hu, Beirami, Smith, ICML 2021, Alg. 1).

    Global model: FedAvg — each participant runs the local solver on F_k from w^t, the server
    aggregates (mean, or any robust ``aggregator``). Personal model v_k: the local solver on
    h_k(v; w^t) = F_k(v) + λ/2‖v − w^t‖² (eq. (2)) from the client's last v_k, i.e. with GD the
    steps v_k ← v_k − η(∇F_k(v_k) + λ(v_k − w^t)) of Alg. 1. v_k⁰ = w⁰. Per round: d floats
    down, d up per participant (v_k never leaves the client).
    """

    name = "ditto"
    description = "Ditto: FedAvg global model + personal models regularised towards it (lam/2 ||v - w||^2)"
    Options = DittoOptions

    def __init__(self, lam: float = 0.1, defence: Defence | None = None):
        super().__init__(defence)
        self.lam = lam

    def init_client(self, x0):
        return self.client_state(x0, {"v": x0.clone()})

    def local(self, message, clients, ctx: ClientContext):
        k = ctx.ids.numel()
        w_t = expand(message["x0"], k)
        w = ctx.solver.solve(ctx, w_t, LocalObjective()).x
        v = ctx.solver.solve(ctx, clients["v"], LocalObjective(mu=self.lam, center=w_t)).x
        upload, state = self.with_momentum({"x": w}, message, clients, {"v": v})
        return self.upload(upload, ctx), state

    def personal_models(self, server, clients, problem=None):
        return clients.full("v")


class APFL(_OwnLoop, RobustAveraging, Algorithm):
    """APFL (Deng, Kamani, Mahdavi, "Adaptive Personalized Federated Learning", 2020, Alg. 1).

    Each participant keeps v_i and a mixing weight α_i. From the server model w it takes, on the
    same batch ξ per step (eqs. (8)–(10)):

        v̄ = α_i v_i + (1 − α_i) w
        w   ← w − η∇f_i(w; ξ)
        v_i ← v_i − η α_i ∇f_i(v̄; ξ)                      (∇_v f_i(v̄) = α_i ∇f_i(v̄))
        α_i ← clip[0,1](α_i − η_α ⟨v_i − w, ∇f_i(v̄; ξ)⟩)   (only with ``adaptive``)

    (all right-hand sides at the old iterates); the server averages the w's (mean, or any robust
    ``aggregator``). The personal model is v̄_i = α_i v_i + (1 − α_i) w̄ with w̄ the current
    server model. v_i⁰ = w⁰, α_i⁰ = ``alpha``.
    """

    name = "apfl"
    description = "APFL: personal model alpha*v + (1 - alpha)*w, v trained on the mixture, alpha adapted"
    Options = APFLOptions

    def __init__(self, alpha: float = 0.25, adaptive: bool = True, alpha_lr: float = 0.0,
                 defence: Defence | None = None):
        self.alpha, self.adaptive, self.alpha_lr = alpha, adaptive, alpha_lr
        self.use_defence(defence)

    def init_client(self, x0):
        return self.client_state(x0, {"v": x0.clone(), "alpha": torch.full((1,), self.alpha, dtype=x0.dtype)})

    def local(self, message, clients, ctx: ClientContext):
        run = ctx.solver.start(ctx)
        eta = run.lr
        eta_a = self.alpha_lr or eta
        w, v, a = expand(message["x0"], ctx.ids.numel()).clone(), clients["v"], clients["alpha"]
        for q in range(run.rounds):
            batch = run.batch(q)
            v_bar = a * v + (1 - a) * w
            g_w, g_bar = run.grad(w, batch, q), run.grad(v_bar, batch, q)
            v_new = v - eta * a * g_bar
            a_new = (a - eta_a * ((v - w) * g_bar).sum(1, keepdim=True)).clamp(0, 1) if self.adaptive else a
            w_new = w - eta * g_w
            v, a, w = run.advance(q, v, v_new), run.advance(q, a, a_new), run.advance(q, w, w_new)
        upload, state = self.with_momentum({"x": w}, message, clients, {"v": v, "alpha": a})
        return self.upload(upload, ctx), state

    def aggregate(self, server, uploads, ctx):
        x0, counts = self.average(server, uploads, ctx)
        return {"x0": x0, "primal_residual": mean_sq_dist(uploads["x"], server["x0"]), **counts}, {}

    def personal_models(self, server, clients, problem=None):
        a = clients.full("alpha")
        return a * clients.full("v") + (1 - a) * server["x0"]


class PFedMe(_OwnLoop, RobustAveraging, Algorithm):
    """pFedMe (T. Dinh, Tran, Nguyen, NeurIPS 2020, Alg. 1).

    Each participant starts its local model w from the server's w^t and, for each of R local
    steps (the solver's local_steps; one batch D per step), approximately solves the Moreau
    envelope's inner problem (eq. (7)) by K GD steps of size ``personal_lr``

        θ ← θ − personal_lr (∇f_i(θ; D) + λ(θ − w)),

    warm-started from the previous θ (θ = w^t at the round's start, as the authors' code), then
    takes the outer step w ← w − ηλ(w − θ) (eq. (8)). The server: w^{t+1} = (1 − β)w^t + β·mean w
    (eq. (10); any robust ``aggregator`` may replace the mean). The personal model is the
    client's last θ.
    """

    name = "pfedme"
    description = "pFedMe: Moreau-envelope personalisation (inner solve for theta, outer step on w, server beta)"
    Options = PFedMeOptions

    def __init__(self, lam: float = 15.0, inner_steps: int = 5, personal_lr: float = 0.01, beta: float = 1.0,
                 defence: Defence | None = None):
        self.lam, self.inner_steps, self.personal_lr, self.beta = lam, inner_steps, personal_lr, beta
        self.use_defence(defence)

    def init_client(self, x0):
        return self.client_state(x0, {"theta": x0.clone()})

    def local(self, message, clients, ctx: ClientContext):
        run = ctx.solver.start(ctx)
        eta, lam, plr = run.lr, self.lam, self.personal_lr
        w = expand(message["x0"], ctx.ids.numel()).clone()
        theta = w.clone()
        for q in range(run.rounds):
            batch = run.batch(q)
            th = theta
            for _ in range(self.inner_steps):
                th = th - plr * (run.grad(th, batch, q) + lam * (th - w))
            w_new = w - eta * lam * (w - th)
            theta = run.advance(q, theta, th)
            w = run.advance(q, w, w_new)
        upload, state = self.with_momentum({"x": w}, message, clients, {"theta": theta})
        return self.upload(upload, ctx), state

    def aggregate(self, server, uploads, ctx):
        x = uploads["x"]
        avg, counts = self.average(server, uploads, ctx)
        x0 = avg if self.beta == 1 else (1 - self.beta) * server["x0"] + self.beta * avg
        return {"x0": x0, "primal_residual": mean_sq_dist(x, server["x0"]), **counts}, {}

    def personal_models(self, server, clients, problem=None):
        return clients.full("theta")


class PerFedAvg(_OwnLoop, FedAvg):
    """Per-FedAvg, first-order version (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020, Alg. 1 with the
    FO approximation of §5): from the server model, each local step draws two independent batches
    D, D' and takes

        w̃ = w − α∇f_i(w; D),   w ← w − β∇f_i(w̃; D')

    (β = the solver's η; the Hessian term of the MAML gradient dropped); the server averages (or
    any robust ``aggregator``). The personal model is one step of adaptation from the server
    model on the client's own training data: x0 − α∇f_i(x0) (full local batch).
    """

    name = "perfedavg"
    description = "Per-FedAvg (first-order MAML): personal model = one local gradient step from the server model"
    Options = PerFedAvgOptions

    def __init__(self, alpha: float = 0.01, defence: Defence | None = None):
        super().__init__(defence)
        self.alpha = alpha

    def local(self, message, clients, ctx: ClientContext):
        run = ctx.solver.start(ctx)
        w = expand(message["x0"], ctx.ids.numel()).clone()
        for q in range(run.rounds):
            inner, outer = run.batch(q, 0), run.batch(q, 1)
            w_tilde = w - self.alpha * run.grad(w, inner, q)
            w = run.advance(q, w, w - run.lr * run.grad(w_tilde, outer, q))
        upload, clients = self.with_momentum({"x": w}, message, clients, clients)
        return self.upload(upload, ctx), clients

    def personal_models(self, server, clients, problem=None):
        if problem is None:
            return None
        x0, n = server["x0"], problem.num_clients
        grad_f = problem.gradients()  # evaluation, not training work: not counted
        out = torch.empty((n, *x0.shape), dtype=x0.dtype, device=x0.device)
        step = max(1, 4096 // max(1, int(problem.train.sizes.max())))
        for start in range(0, n, step):
            ids = torch.arange(start, min(start + step, n))
            out[ids] = x0 - self.alpha * grad_f(expand(x0, ids.numel()), *problem.train.padded(ids))
        return out
