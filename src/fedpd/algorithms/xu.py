"""Xu, "Possible algorithms for federated learning" (2020): Parallel SAGA and Parallel ADMM, each
with its stochastic (minibatch) version.

None of them runs a local solver: a client evaluates one (full or minibatch) gradient per round,
so they take no ``[solver]`` settings (a changed one is refused). Their step size is
``algorithm.eta``, as in the text.

The text minimises f = Σ_i f_i with f_i a *sum* over the client's samples; fedpd's f_i is the
client's *mean* loss (plus the regulariser), as everywhere in the package. Both methods are
written for that f_i; what changes is only the scale of η (η_text = η / n_i for equal sizes).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field

from fedpd.algorithms.base import Algorithm, expand, sq_dist
from fedpd.algorithms.robust import ExactMeans
from fedpd.context import ClientContext, FederationInfo


class SAGAOptions(ExactMeans):
    exact_means: ClassVar[str] = ("its server keeps y = Σ_j y_j, the sum of every client's last gradient, "
                                  "through the exact sum of their changes")

    eta: float = Field(0.01, gt=0, description="step size (on the sum of the f_i)")
    init: Literal["gradients", "zero"] = Field("gradients", description="y_j at the start: ∇f_j(w⁰) (round 0 "
                                               "takes every client, as the text) or 0")


class StochasticSAGAOptions(SAGAOptions):
    batch_size: int = Field(1, ge=1, description="samples per client and round, without replacement")


class ADMMOptions(ExactMeans):
    exact_means: ClassVar[str] = "its dual steps keep Σ_i y_i = 0 through the exact mean w_av of the w_i"

    eta: float = Field(0.1, gt=0, description="step size")


class StochasticADMMOptions(ADMMOptions):
    batch_size: int = Field(1, ge=1, description="samples per client and round, with replacement")


class ParallelSAGA(Algorithm):
    """Parallel "SAGA" (Xu 2020, Alg. 1), adapted from Push-Pull / SAGA.

    The server keeps w (= x0) and y, an estimate of Σ_i ∇f_i(w) — the gradient of the *sum*
    f = Σ_i f_i, not of fedpd's mean objective (1/N)Σ_i f_i: the server step is on the sum, so
    η here is N times smaller than a GD step on the mean. Each client j keeps y_j, its last
    gradient. A participant returns Δg_j = ∇f_j(w) − y_j and sets y_j = ∇f_j(w); the server
    sets y ← y + Σ_P Δg_j, then w ← w − η·y. The invariant y = Σ_j y_j holds every round, so
    with every client participating every round this is exactly gradient descent on Σ_i f_i.

    Initialisation (``init``): "gradients", the text's y_j⁰ = ∇f_j(w⁰) for all N clients and
    y⁰ = Σ_j y_j⁰, is run as round 0 with every client taking part, whoever the sampler drew: from
    y = 0 each client returns ∇f_j(w⁰) and keeps it, so y = y⁰ and w¹ = w⁰ − η·y⁰, which is the
    text's first step (a participant's Δg_j at w⁰ is 0 after the initial pass). Its cost is
    counted as what it is, one round of N·d floats each way. "zero" starts from y_j⁰ = 0,
    y⁰ = 0 (the invariant holds) so that every round's work and memory stay O(|P|·d); the early
    steps then see only the clients sampled so far. With full participation the two coincide.
    Per participant: d floats down (w), d up (Δg_j); client state y_j (d); server state w, y (2d).
    """

    name = "parallel_saga"
    description = "Parallel SAGA (Xu 2020, Alg. 1): server steps on a table of the clients' last full gradients"
    Options = SAGAOptions
    uses_solver = False
    update_uploads = ("dg",)

    def __init__(self, eta: float = 0.01, init: str = "gradients"):
        self.eta, self.init = eta, init

    def participants(self, round, sampled, num_clients):
        if round == 0 and self.init == "gradients":  # the text's pass over every client
            return torch.arange(num_clients)
        return sampled

    def init_server(self, x0):
        return {"x0": x0.clone(), "y": torch.zeros_like(x0)}

    def init_client(self, x0):
        return {"y": torch.zeros_like(x0)}

    def fresh_gradients(self, message, clients, ctx: ClientContext):
        """(Δg [K, d], new client state)."""
        g = ctx.data.gradient(expand(message["x0"], ctx.ids.numel()), *ctx.data.all())
        return g - clients["y"], {"y": g}

    def local(self, message, clients, ctx: ClientContext):
        dg, new = self.fresh_gradients(message, clients, ctx)
        return {"dg": dg}, new

    def aggregate(self, server, uploads, ctx):
        y = server["y"] + uploads["dg"].sum(0)
        return {"x0": server["x0"] - self.eta * y, "y": y}, {}


class StochasticSAGA(ParallelSAGA):
    """Stochastic / batch Parallel "SAGA" (Xu 2020, Alg. 2).

    Each client keeps a table of per-sample gradients y_{i,j}, one row per local sample, of
    ∇(l_j + r)(w)/n_i so that Σ_j y_{i,j} estimates ∇f_i (fedpd's f_i is the mean loss plus
    the regulariser r). A participant draws B of its samples uniformly *without* replacement
    (all of them if B ≥ n_i; with replacement a repeated sample would be counted twice but
    refreshed once, breaking y = Σ_{i,j} y_{i,j}), returns Σ_{j∈B}(∇l_j(w)/n_i − y_{i,j}) and
    refreshes those rows. The server step is Parallel SAGA's. With B ≥ n_i for every client and
    full participation it is again exactly gradient descent on Σ_i f_i.

    Memory: each client that has taken part holds an [n_max, d] table (n_max = the largest
    client, a static fact of the federation), i.e. n_max·d floats per materialised client —
    fine for small problems, the price of a per-sample SAGA table. ``init = "gradients"`` is
    the text's y_{i,j}⁰ = ∇l_j(w⁰)/n_i for every sample: round 0 takes every client and
    refreshes every row of its table (as :class:`ParallelSAGA`'s initial pass); ``"zero"``
    starts from empty tables.
    """

    name = "stochastic_saga"
    description = "Stochastic Parallel SAGA (Xu 2020, Alg. 2): per-sample gradient tables on the clients"
    Options = StochasticSAGAOptions

    def __init__(self, eta: float = 0.01, batch_size: int = 1, init: str = "gradients"):
        super().__init__(eta, init)
        self.batch_size = batch_size
        self.table_rows = 0

    def setup(self, info: FederationInfo, solver):
        self.table_rows = info.max_client_samples  # a static fact of the federation, not state

    def init_client(self, x0):
        return {"table": x0.new_zeros((self.table_rows, *x0.shape))}

    def fresh_gradients(self, message, clients, ctx: ClientContext):
        table = clients["table"]
        k, rows, d = table.shape
        sizes = ctx.data.sizes.cpu()
        # the text's initial pass (init = "gradients", round 0: every client) fills the whole table
        b = rows if ctx.round == 0 and self.init == "gradients" else min(self.batch_size, rows)
        # B distinct samples per client: rank uniform keys from its own stream, padding rows last
        keys = ctx.rng("batches").uniform(rows)
        keys = torch.where(torch.arange(rows)[None, :] < sizes[:, None], keys, 2.0)
        pick = keys.argsort(1)[:, :b]  # [K, b] local sample indices
        valid = torch.arange(b)[None, :] < sizes[:, None]  # only min(B, n_i) of them are real
        X, Y = ctx.data.samples(torch.where(valid, pick, 0))  # [K, b, ...]
        real = valid.reshape(-1)  # one gradient per real sample (none for the padding of small clients)
        m = int(real.sum())
        real_dev = real.to(table.device)
        per_sample = table.new_zeros(k * b, d)
        per_sample[real_dev] = ctx.data.gradient(
            expand(message["x0"], m), X.reshape(k * b, 1, *X.shape[2:])[real_dev], Y.reshape(k * b, 1)[real_dev],
            torch.ones(m, 1, dtype=table.dtype, device=table.device))
        new_rows = per_sample.view(k, b, d) / sizes[:, None, None].to(table.device, table.dtype)
        pick, valid = pick.to(table.device), valid.to(table.device)
        index = pick[..., None].expand(k, b, d)
        old_rows = table.gather(1, index) * valid[..., None]
        return (new_rows - old_rows).sum(1), {"table": table.scatter(1, index, new_rows)}


class ParallelADMM(Algorithm):
    """Parallel "ADMM" (Xu 2020, Alg. 3; ID-FBBS of Xu et al. 2018 with W = 11ᵀ/K).

    Every client, every round. The server averages w_av = mean_i w_i (= x0); each client keeps
    w_i and y_i (y_i⁰ = 0) and updates

        w_i ← w_av − η∇f_i(w_i) − y_i,        y_i ← y_i + w_i − w_av⁺,

    where w_av⁺ is the *new* average, as in the stochastic version (Alg. 4). Alg. 3 writes the
    old average w_av in the dual step; with it the iteration keeps w_av + η·mean_i ∇f_i(w_i)
    constant from round 1 on and stops at the proximal point w_av = w⁰ − η·mean_i ∇f_i(w_av),
    not at a stationary point (for one client: w ← w − η∇f(w) − y with y = −η∇f(w_prev)
    makes no progress once the gradients settle). With the new average Σ_i y_i = 0 is kept and
    every fixed point has w_i = w_av and Σ_i ∇f_i(w_av) = 0.

    The dual step needs w_av⁺, which the client receives at the start of the next round, so it
    is applied then (y_i ← y_i + w_i − w_av before the primal step): the same iterates with no
    extra message. Per client: d floats down (w_av), d up (w_i); client state w_i, y_i (2d).
    """

    name = "parallel_admm"
    description = "Parallel ADMM (Xu 2020, Alg. 3): consensus ADMM with one gradient step per round, all clients"
    Options = ADMMOptions
    participation = "all"
    means_only = True  # the server step reads means only (mean_terms, aggregate_means)
    uses_solver = False

    def __init__(self, eta: float = 0.1):
        self.eta = eta

    def init_client(self, x0):
        return {"w": x0.clone(), "y": torch.zeros_like(x0)}

    def gradients(self, w, ctx: ClientContext):
        return ctx.data.gradient(w, *ctx.data.all())

    def local(self, message, clients, ctx: ClientContext):
        w_av = expand(message["x0"], ctx.ids.numel())
        w = clients["w"]
        y = clients["y"] + w - w_av  # the dual step of the previous round, with its new average
        w_new = w_av - self.eta * self.gradients(w, ctx) - y
        return {"w": w_new}, {"w": w_new, "y": y}

    def mean_terms(self, server, uploads):
        return {"w": uploads["w"], "primal_residual": sq_dist(uploads["w"], server["x0"])}

    def aggregate_means(self, server, means, ctx):
        return {"x0": means["w"], "primal_residual": means["primal_residual"]}, {}


class StochasticADMM(ParallelADMM):
    """Stochastic / batch Parallel "ADMM" (Xu 2020, Alg. 4): Parallel ADMM with ∇f_i(w_i)
    replaced by the mean gradient over B samples drawn uniformly with replacement (the text's
    Σ_{j∈B} is a sum; the mean keeps it an unbiased estimate of fedpd's mean-loss ∇f_i). The
    dual step uses the new average w_av⁺, as Alg. 4 writes it."""

    name = "stochastic_admm"
    description = "Stochastic Parallel ADMM (Xu 2020, Alg. 4): minibatch gradient, new average in the dual step"
    Options = StochasticADMMOptions

    def __init__(self, eta: float = 0.1, batch_size: int = 1):
        super().__init__(eta)
        self.batch_size = batch_size

    def gradients(self, w, ctx: ClientContext):
        return ctx.data.gradient(w, *ctx.data.minibatch(self.batch_size, ctx.rng("batches")))
