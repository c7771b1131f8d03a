"""Robust server aggregation for every algorithm whose server averages models.

The aggregators themselves live in one place, :mod:`fedpd.aggregators` (weighted mean, geometric
median by smoothed Weiszfeld, coordinate-wise median, trimmed mean, Krum / multi-Krum, Bulyan,
centered clipping, norm bounding, Fed+'s eq. (25)). This module is the glue an algorithm needs: the config's ``aggregator`` /
``aggregator_options`` / ``weights`` (:class:`AggregatorOptions`, checked once with the config),
and K rows aggregated with uniform or sample-size weights. So RFA (Pillutla et al. 2022) is
FedAvg with ``aggregator = "geometric_median"``, and Yin et al.'s median / trimmed-mean servers
are FedAvg with those names.

With ``weights = "samples"`` each participant sends its number of training samples n_i with its
upload (key ``n``, one float, counted as communication, as Flower's clients send
``num-examples``): the server never reads the clients' data sizes from anywhere else.

:class:`RobustAveraging` is the mixin for algorithms whose server takes a mean of models (FedAvg,
FedProx, FedSAM, Ditto, APFL, pFedMe, Per-FedAvg): ``self.average(server, uploads, key)`` is the
plain mean or the configured aggregate, and the server state then keeps two counters, reported
as metrics: ``agg_iterations`` (the aggregator's iterations this round) and
``agg_unconverged_rounds`` (rounds so far whose iterative aggregator stopped at its cap
``max_iter``, so a capped geometric median shows up). Fed+ keeps the same counters.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
from pydantic import AfterValidator, Field, model_validator
from torch import Tensor

from fedpd.aggregators import AGGREGATORS, aggregator_function, make_aggregator, min_rows
from fedpd.errors import ConfigError
from fedpd.names import what
from fedpd.options import Options, refuse

#: built-in aggregator names a config may give (Fed+'s own eq. (25) is chosen by Fed+'s Ψ, not here)
NAMES = tuple(n for n in AGGREGATORS if n != "fedplus")
WEIGHTS = Literal["uniform", "samples"]
SAMPLES = "n"  # the upload key of a client's sample count


def aggregator_name(name: str, own: tuple[str, ...] = ()) -> str:
    """``name`` checked as ``algorithm.aggregator``: a built-in robust aggregator, a plug-in
    (:func:`fedpd.aggregators.aggregator_function`), or one of the algorithm's ``own`` names."""
    if name in own:
        return name
    if name == "fedplus":
        raise ValueError(f"'fedplus' is Fed+'s own aggregate, chosen by Fed+'s psi (allowed: {', '.join(NAMES)}, or "
                         f"an import path package.module:function)")
    try:
        aggregator_function(name)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return name


AggregatorName = Annotated[str, AfterValidator(aggregator_name)]


class AggregatorOptions(Options):
    aggregator: AggregatorName = Field("mean", description="server aggregation (fedpd list: aggregators; or an "
                                       "import path package.module:function)")
    aggregator_options: dict[str, Any] = Field(default_factory=dict, description="options of the aggregator")
    weights: WEIGHTS = Field("uniform", description="uniform, or samples: by each client's data size (sent with the upload)")

    @model_validator(mode="after")
    def _aggregator_options(self):
        check_aggregator_options(self.aggregator, self.aggregator_options)
        return self


def check_aggregator_options(name: str, options: dict) -> None:
    """``options`` against aggregator ``name``'s own options model (inside an options validator)."""
    try:
        make_aggregator(name, **options)
    except ConfigError as err:
        text = str(err).replace("(allowed: ", f"(allowed for aggregator '{name}': ", 1)
        if text.startswith("aggregator_options."):  # names the option: algorithm.aggregator_options.f: …
            raise ValueError(text) from None
        raise refuse("aggregator_options", text) from None


class ServerAggregator:
    """``agg(rows [K, d], weights [K] or None) -> (aggregate [d], info)`` for a named aggregator.

    ``weights`` (the senders' sample counts with ``weights="samples"``): aggregators without
    weights (trimmed mean, Krum) ignore them, as their papers do."""

    def __init__(self, name: str = "mean", options: dict | None = None, weights: str = "uniform"):
        self.fn = make_aggregator(name, **dict(options or {}))
        self.name, self.weights, self.options = name, weights, dict(options or {})
        #: the plain unweighted mean: callers keep their exact ``rows.mean(0)`` path
        self.is_mean = name == "mean" and weights == "uniform"

    def __call__(self, rows: Tensor, weights: Tensor | None = None,
                 reference: Tensor | None = None) -> tuple[Tensor, dict]:
        """``reference``: the server model the round started from, for the aggregators that clip
        about it (centered_clipping, norm_bounding); the others ignore it."""
        if self.is_mean:
            return rows.mean(0), {"iterations": 0, "converged": True}
        out = self.fn(rows, weights=weights if self.weights == "samples" else None, reference=reference)
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Tensor)
                and out[0].shape == rows.shape[1:] and isinstance(out[1], dict)):
            got = (f"an aggregate of shape {tuple(out[0].shape)}" if isinstance(out, tuple) and out
                   and isinstance(out[0], Tensor) else what(out))
            raise ConfigError(f"algorithm.aggregator: {self.name} returned {got} for {rows.shape[0]} rows of "
                              f"{tuple(rows.shape[1:])} (allowed: (aggregate of shape {tuple(rows.shape[1:])}, info "
                              f"dict))")
        return out


def sample_weights(uploads: dict) -> Tensor | None:
    """The senders' sample counts, if they sent them."""
    return uploads.get(SAMPLES)


def with_sizes(upload: dict, ctx, weights: str) -> dict:
    """``upload`` plus the clients' sample counts when the server weighs by them."""
    if weights != "samples":
        return upload
    return {**upload, SAMPLES: ctx.data.sizes.to(next(iter(upload.values())).dtype)}


# --- the aggregation counters in the server state ----------------------------------------------
def initial_counters() -> dict[str, Tensor]:
    zero = torch.zeros((), dtype=torch.int64)
    return {"agg_iterations": zero, "agg_unconverged": zero.clone()}


def counters(server: dict, info: dict) -> dict[str, Tensor]:
    """The counters after a round whose aggregator returned ``info`` (a plug-in's may leave out
    ``iterations``, 0, and ``converged``, true)."""
    return {"agg_iterations": torch.tensor(int(info.get("iterations", 0)), dtype=torch.int64),
            "agg_unconverged": server["agg_unconverged"] + int(not info.get("converged", True))}


def counter_metrics(server: dict) -> dict[str, int]:
    """The counters as metrics (none when the server keeps none)."""
    if "agg_unconverged" not in server:
        return {}
    return {"agg_iterations": int(server["agg_iterations"]), "agg_unconverged_rounds": int(server["agg_unconverged"])}


class RobustAveraging:
    """Mixin for an algorithm whose server averages models: call :meth:`use_aggregator` in
    ``__init__``, :meth:`upload` on the client side and :meth:`average` in ``aggregate`` (which
    must keep the returned counters in the new server state)."""

    robust: ServerAggregator | None = None  # None: the plain mean
    weights: str = "uniform"

    def use_aggregator(self, aggregator: str = "mean", aggregator_options: dict | None = None,
                       weights: str = "uniform") -> None:
        robust = ServerAggregator(aggregator, aggregator_options, weights)
        self.robust = None if robust.is_mean else robust
        self.weights = weights

    def min_uploads(self) -> int:
        """The fewest uploads the configured aggregator accepts (checked against the sampler)."""
        return 1 if self.robust is None else min_rows(self.robust.name, self.robust.options)

    def init_server(self, x0: Tensor) -> dict:
        server = super().init_server(x0)
        return server if self.robust is None else {**server, **initial_counters()}

    def upload(self, upload: dict, ctx) -> dict:
        """What a client sends: ``upload`` plus its sample count n_i with weights = "samples"."""
        return with_sizes(upload, ctx, self.weights)

    def average(self, server: dict, uploads: dict, key: str = "x") -> tuple[Tensor, dict]:
        """(the aggregate of ``uploads[key]`` [K, d], the counters to store in the server state).
        The server model ``server["x0"]`` (the previous aggregate for FedAvg) is the reference the
        clipping defences clip about."""
        rows = uploads[key]
        if self.robust is None:
            return rows.mean(0), {}
        agg, info = self.robust(rows, sample_weights(uploads), reference=server.get("x0"))
        return agg, counters(server, info)

    def diagnostics(self, server):
        return {**super().diagnostics(server), **counter_metrics(server)}
