"""SCAFFOLD with option II control variates."""

from __future__ import annotations

from pydantic import Field

from fedpd.algorithms.base import Algorithm, expand, sq_dist
from fedpd.algorithms.robust import MeansDefenceOptions, RobustMeans
from fedpd.context import ClientContext, ServerContext
from fedpd.defence import Defence
from fedpd.solvers import LocalObjective


class ScaffoldOptions(MeansDefenceOptions):
    server_lr: float = Field(1.0, gt=0, description="η_g: the server's step on the mean Δx")


class Scaffold(RobustMeans, Algorithm):
    """SCAFFOLD (Karimireddy et al., ICML 2020, Alg. 1, option II).

    Local direction ∇f_i(x) − c_i + c, i.e. the linear term v = c − c_i in the local objective;
    after K_i local steps of size η1:  c_i⁺ = c_i − c + (x0 − x_i)/(K_i η1).
    Uploads Δx_i = x_i − x0 and Δc_i = c_i⁺ − c_i; server x0 ← x0 + η_g · mean Δx,
    c ← c + (|P|/N) · mean Δc. Per participant: 2d floats down and 2d up.
    c_i⁺ is built from the number and size of local steps, so it needs a gradient solver.
    ``defence`` (the config's ``aggregator``, ``aggregator_options``; None: the means) takes the
    place of both means, each of the updates Δx and Δc (:class:`fedpd.algorithms.robust.RobustMeans`).
    """

    name = "scaffold"
    description = "SCAFFOLD (option II): control variates correct the client drift"
    Options = ScaffoldOptions
    needs_gradient_solver = True
    update_uploads = ("dx", "dc")
    #: the server step uses how many clients took part (c ← c + (|P|/N)·mean Δc): fedpd.privacy
    #: refuses it under Poisson sampling, where that count is private
    reads_participant_count = True

    def __init__(self, server_lr: float = 1.0, defence: Defence | None = None):
        self.server_lr = server_lr
        self.use_defence(defence)

    def init_server(self, x0):
        return self.with_counters({"x0": x0.clone(), "c": x0.new_zeros(x0.shape)})

    def init_client(self, x0):
        return {"c": x0.new_zeros(x0.shape)}

    def broadcast(self, server):
        return {"x0": server["x0"], "c": server["c"]}

    def local(self, message, clients, ctx: ClientContext):
        k = ctx.ids.numel()
        x0, c, ci = expand(message["x0"], k), expand(message["c"], k), clients["c"]
        res = ctx.solver.solve(ctx, x0, LocalObjective(linear=c - ci))
        steps = res.steps.to(x0.device, x0.dtype)[:, None]
        ci_new = ci - c + (x0 - res.x) / (steps * res.lr)
        return {"dx": res.x - x0, "dc": ci_new - ci}, {"c": ci_new}

    def mean_terms(self, server, uploads):
        return {"dx": uploads["dx"], "dc": uploads["dc"], "primal_residual": sq_dist(uploads["dx"], 0)}

    def defended(self, server):
        return {"dx": None, "dc": None}  # both are updates: about 0

    def aggregate_means(self, server, means, ctx: ServerContext):
        k = ctx.ids.numel()
        return {
            "x0": server["x0"] + self.server_lr * means["dx"],
            "c": server["c"] + (k / ctx.num_clients) * means["dc"],
            "primal_residual": means["primal_residual"],
        }, {}
