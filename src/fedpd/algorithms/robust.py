"""Robust server aggregation for every algorithm whose server averages models.

The aggregators themselves live in one place, :mod:`fedpd.aggregators` (weighted mean, geometric
median by smoothed Weiszfeld, coordinate-wise median, trimmed mean, Krum / multi-Krum, Fed+'s
eq. (25)). This module is the glue an algorithm needs: it checks the config's ``aggregator`` /
``aggregator_options`` / ``weights`` once (one-line :class:`ConfigError` naming the key), and
aggregates K rows with uniform or sample-size weights. So RFA (Pillutla et al. 2022) is FedAvg
with ``aggregator = "geometric_median"``, and Yin et al.'s median / trimmed-mean servers are
FedAvg with those names.
"""

from __future__ import annotations

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
