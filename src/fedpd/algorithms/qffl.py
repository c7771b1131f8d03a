"""q-FFL solved by q-FedAvg: a fairer server step that weighs clients by their loss.

Li, Sanjabi, Beirami, Smith, "Fair resource allocation in federated learning", ICLR 2020. The
q-FFL objective (their eq. (2)) is

    min_w  f_q(w) = Σ_k p_k/(q + 1) · F_k^{q+1}(w),

which for q = 0 is the usual mean loss and for larger q gives clients with a high loss more
weight. q-FedAvg (their Algorithm 2) runs, in round t, on each selected client k:

    w̄_k   = E local steps of SGD (step η) on F_k from w^t,
    Δw_k  = L (w^t − w̄_k),
    Δ_k   = F_k^q(w^t) Δw_k,
    h_k   = q F_k^{q−1}(w^t) ‖Δw_k‖² + L F_k^q(w^t),

and the server sets w^{t+1} = w^t − Σ_{k∈S_t} Δ_k / Σ_{k∈S_t} h_k. L is the estimate of the local
Lipschitz constant; the paper's experiments take L = 1/η (``lipschitz = 0``, the default, does so
with the round's η of the solver). With q = 0: Δ_k = L(w^t − w̄_k), h_k = L, and the step is the
mean of the w̄_k — FedAvg.

Here p_k is uniform (the sampler draws clients uniformly, fedpd's f = (1/N) Σ_i f_i) and F_k is
the client's mean training loss at the received model, read through the public
``ctx.loss`` (counted as computation: one forward pass over the client's samples). F_k is floored
at 10⁻¹⁰, as the authors' code adds 10⁻¹⁰, so F_k^{q−1} stays finite for q < 1 at a zero loss.
A round sends d floats down and d + 1 up per participant (Δ_k and h_k).

Written with fedpd's public names only, as a user's algorithm is (docs/extending.md).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from fedpd.algorithms.base import Algorithm, expand, sq_dist
from fedpd.algorithms.robust import ExactMeans
from fedpd.ordered import ordered_sq_norm
from fedpd.solvers import LocalObjective

#: the floor of F_k (the authors' code adds 1e-10 to the loss before the powers)
LOSS_FLOOR = 1e-10


class QFFLOptions(ExactMeans):
    exact_means: ClassVar[str] = ("q-FFL's step is w − Σ Δ_k / Σ h_k, a ratio of two sums over the same "
                                  "clients")

    q: float = Field(1.0, ge=0, description="q of the q-FFL objective sum_k F_k^(q+1)/(q+1) (q = 0: FedAvg)")
    lipschitz: float = Field(0.0, ge=0, description="L, the Lipschitz estimate in Δw_k = L(w - w_k) and h_k; "
                             "0: 1/η of the round's local solver (the paper's choice)")


class QFFL(Algorithm):
    """q-FedAvg (Li, Sanjabi, Beirami, Smith, ICLR 2020, Algorithm 2) for the q-FFL objective
    (their eq. (2)): Δ_k = F_k^q(w) L(w − w̄_k), h_k = q F_k^{q−1}(w) ‖L(w − w̄_k)‖² + L F_k^q(w),
    w ← w − Σ_k Δ_k / Σ_k h_k (module docstring)."""

    name = "qffl"
    description = "q-FFL (q-FedAvg): server step -sum_k F_k^q L(w - w_k) / sum_k h_k, fairer for larger q"
    Options = QFFLOptions
    needs_gradient_solver = True  # L = 1/η: the solver's step size
    means_only = True  # Σ Δ_k / Σ h_k = mean Δ_k / mean h_k
    model_uploads = ()
    update_uploads = ("delta",)  # Δ_k is an update (about w^t); h_k a scalar attacks leave alone
    statistic_uploads = ("h",)  # neither a model nor an update: client-level DP cannot clip it (refused)

    def __init__(self, q: float = 1.0, lipschitz: float = 0.0):
        self.q, self.lipschitz = q, lipschitz

    def local(self, message, clients, ctx):
        x0 = expand(message["x0"], ctx.ids.numel())
        loss = ctx.loss(x0).clamp_min(LOSS_FLOOR)  # F_k(w^t) on all own samples, [K]
        res = ctx.solver.solve(ctx, x0, LocalObjective())
        lipschitz = self.lipschitz or 1.0 / res.lr
        step = lipschitz * (x0 - res.x)  # Δw_k
        weight = loss ** self.q  # F_k^q
        h = self.q * loss ** (self.q - 1) * ordered_sq_norm(step, 1) + lipschitz * weight
        return {"delta": weight[:, None] * step, "h": h,
                "metric_primal_residual": sq_dist(res.x, x0)}, clients

    def mean_terms(self, server, uploads):
        return dict(uploads)

    def aggregate_means(self, server, means, ctx):
        return {"x0": server["x0"] - means["delta"] / means["h"],
                "primal_residual": means["metric_primal_residual"]}, {}
