"""Robust server aggregation for every algorithm whose server averages models.

The aggregators themselves live in one place, :mod:`fedpd.aggregators` (weighted mean, geometric
median by smoothed Weiszfeld, coordinate-wise median, trimmed mean, Krum / multi-Krum, Fed+'s
eq. (25)). This module is the glue an algorithm needs: it checks the config's ``aggregator`` /
``aggregator_options`` / ``weights`` once (one-line :class:`ConfigError` naming the key), and
aggregates K rows with uniform or sample-size weights. So RFA (Pillutla et al. 2022) is FedAvg
with ``aggregator = "geometric_median"``, and Yin et al.'s median / trimmed-mean servers are
FedAvg with those names.

:class:`RobustAveraging` is the mixin for algorithms whose server takes a mean of models (FedAvg,
FedProx, FedSAM, Ditto, APFL, pFedMe, Per-FedAvg): ``self.average(server, rows, ctx)`` is the
plain mean or the configured aggregate, and the server state then keeps two counters, reported
as metrics: ``agg_iterations`` (the aggregator's iterations this round) and
``agg_unconverged_rounds`` (rounds so far whose iterative aggregator stopped at its cap
``max_iter``, so a capped geometric median shows up). Fed+ keeps the same counters.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedpd.aggregators import AGGREGATORS, make_aggregator
from fedpd.errors import ConfigError
from fedpd.problems.base import Problem

#: aggregator names a config may give (Fed+'s own eq. (25) is chosen by Fed+'s Ψ, not here)
NAMES = tuple(n for n in AGGREGATORS if n != "fedplus")
WEIGHTS = ("uniform", "samples")


class ServerAggregator:
    """``agg(rows [K, d], problem, ids) -> (aggregate [d], info)`` for a named aggregator.

    ``weights="samples"`` weighs client i by its number of training samples (FedAvg's n_i / n);
    aggregators without weights (trimmed mean, Krum) then ignore them, as their papers do.
    """

    def __init__(self, name: str = "mean", options: dict | None = None, weights: str = "uniform",
                 key: str = "algorithm"):
        if name not in NAMES:
            raise ConfigError(f"{key}.aggregator: unknown aggregator {name!r} (allowed: {', '.join(NAMES)})")
        if weights not in WEIGHTS:
            raise ConfigError(f"{key}.weights: {weights!r} (allowed: {', '.join(WEIGHTS)})")
        try:
            self.fn = make_aggregator(name, **dict(options or {}))
        except ConfigError as err:
            raise ConfigError(f"{key}.aggregator_options: {err}") from None
        self.name, self.weights = name, weights
        #: the plain unweighted mean: callers keep their exact ``rows.mean(0)`` path
        self.is_mean = name == "mean" and weights == "uniform"

    def __call__(self, rows: Tensor, problem: Problem, ids: Tensor) -> tuple[Tensor, dict]:
        if self.is_mean:
            return rows.mean(0), {"iterations": 0, "converged": True}
        w = problem.train.sizes[ids].to(rows.dtype) if self.weights == "samples" else None
        return self.fn(rows, weights=w)


# --- the aggregation counters in the server state ----------------------------------------------
def initial_counters() -> dict[str, Tensor]:
    zero = torch.zeros((), dtype=torch.int64)
    return {"agg_iterations": zero, "agg_unconverged": zero.clone()}


def counters(server: dict, info: dict) -> dict[str, Tensor]:
    """The counters after a round whose aggregator returned ``info``."""
    return {"agg_iterations": torch.tensor(info["iterations"], dtype=torch.int64),
            "agg_unconverged": server["agg_unconverged"] + int(not info["converged"])}


def counter_metrics(server: dict) -> dict[str, int]:
    """The counters as metrics (none when the server keeps none)."""
    if "agg_unconverged" not in server:
        return {}
    return {"agg_iterations": int(server["agg_iterations"]), "agg_unconverged_rounds": int(server["agg_unconverged"])}


class RobustAveraging:
    """Mixin for an algorithm whose server averages models: call :meth:`use_aggregator` in
    ``__init__`` and :meth:`average` in ``aggregate`` (which must keep the returned counters in
    the new server state)."""

    robust: ServerAggregator | None = None  # None: the plain mean

    def use_aggregator(self, aggregator: str = "mean", aggregator_options: dict | None = None,
                       weights: str = "uniform") -> None:
        robust = ServerAggregator(aggregator, aggregator_options, weights)
        self.robust = None if robust.is_mean else robust

    def init_server(self, x0: Tensor) -> dict:
        server = super().init_server(x0)
        return server if self.robust is None else {**server, **initial_counters()}

    def average(self, server: dict, rows: Tensor, ctx) -> tuple[Tensor, dict]:
        """(the aggregate of ``rows`` [K, d], the counters to store in the server state)."""
        if self.robust is None:
            return rows.mean(0), {}
        agg, info = self.robust(rows, ctx.problem, ctx.ids)
        return agg, counters(server, info)

    def diagnostics(self, server, store):
        return {**super().diagnostics(server, store), **counter_metrics(server)}
