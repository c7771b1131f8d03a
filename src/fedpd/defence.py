"""The defence: one object a run builds once from its config and hands to the algorithm and the attack.

A :class:`Defence` is what the server runs in place of the mean of the uploads, composed as optax's
``chain(...)`` and ByzFL's ``RobustAggregator(aggregator, pre_aggregators)`` compose:

    pre-aggregation steps (in order)  →  a rule            (the Pipeline, fedpd.aggregators)
    + the clients' weights (uniform, or by sample counts they upload)
    + client momentum (each client uploads x0 + m_i: fedpd.algorithms.robust)

read from ``algorithm.aggregator``, ``algorithm.aggregator_options`` (``pre`` and the keys each step
and the rule declare), ``algorithm.weights``, ``algorithm.client_momentum`` and
``client_momentum_start`` by :func:`build_defence`, once per run (the algorithm's options model
keeps the one it built: :mod:`fedpd.algorithms.robust`). So ``aggregator = "trimmed_mean"`` with
``aggregator_options = {pre = ["arc", "nnm"], n_byzantine = 5, trim_ratio = 0.25}`` is
a :class:`Defence` whose pipeline is ARC(n_byzantine = 5) → NNM(n_byzantine = 5) → the rule
trimmed_mean bound to trim_ratio = 0.25 (``Pipeline(rule, steps)``, :mod:`fedpd.aggregators`).

What each part needs is declared by the part, never known by its name: the fewest rows
(:attr:`Defence.min_rows`: the rule's ``min_rows`` through each step's ``rows_needed``), whether
the rule clips about a reference, whether it centres on the last aggregate under client momentum
(:attr:`Defence.keeps_centre`), whether pre-aggregation may go before it. The algorithms whose
server averages uploads take a ``defence`` and call :meth:`Defence.aggregate` where they took the
mean; the optimal attacks are handed it and simulate it (:meth:`Defence.simulate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedpd.aggregators import Pipeline, mean, pipeline
from fedpd.errors import ConfigError
from fedpd.names import what

__all__ = ["ClientMomentum", "Defence", "build_defence", "MEAN"]


@dataclass(frozen=True)
class ClientMomentum:
    """Worker momentum (Karimireddy, He, Jaggi, ICML 2021, §4): β, and where a client's momentum
    starts ("zero", ByzFL's; or "update", its first update). The update rule and the state it keeps
    are :class:`fedpd.algorithms.robust.RobustAveraging`'s."""

    beta: float
    start: str = "zero"


@dataclass(frozen=True)
class Defence:
    """The pre-aggregation chain and rule (``pipeline``), the clients' ``weights`` ("uniform" or
    "samples") and ``momentum`` (None: off)."""

    pipeline: Pipeline
    weights: str = "uniform"
    momentum: ClientMomentum | None = None

    @property
    def rule(self):
        return self.pipeline.rule

    @property
    def name(self) -> str:
        """The rule's name (``algorithm.aggregator``)."""
        return self.pipeline.rule.name

    @property
    def is_mean(self) -> bool:
        """The plain unweighted mean: the algorithms keep their exact ``rows.mean(0)`` path (and a
        round may stream the means)."""
        return self.pipeline.rule.fn is mean and self.weights == "uniform"  # (no step goes before the mean)

    @property
    def min_rows(self) -> int:
        """The fewest uploads it aggregates (Krum's 2f + 3; through bucketing (K − 1)·s + 1 ...)."""
        return self.pipeline.min_rows

    @property
    def keeps_centre(self) -> bool:
        """Whether the server keeps the last aggregate momentum v for the rule to centre on (centered
        clipping under client momentum; the reference is then x0 + v)."""
        return self.momentum is not None and self.pipeline.rule.centres_on_last_aggregate

    def aggregate(self, rows: Tensor, weights: Tensor | None = None, reference: Tensor | None = None,
                  generator: torch.Generator | None = None) -> tuple[Tensor, dict]:
        """(aggregate [d], info) of ``rows`` [K, d]. ``weights``: the senders' sample counts, used
        with weights = "samples"; ``reference``: the server model the round started from, for the
        rules and steps that clip about it; ``generator``: the steps' randomness (the round's
        server stream, purpose "pre_aggregation")."""
        if self.is_mean:
            return rows.mean(0), {"iterations": 0, "converged": True}
        out = self.pipeline(rows, weights=weights if self.weights == "samples" else None, reference=reference,
                            generator=generator)
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Tensor)
                and out[0].shape == rows.shape[1:] and isinstance(out[1], dict)):
            got = (f"an aggregate of shape {tuple(out[0].shape)}" if isinstance(out, tuple) and out
                   and isinstance(out[0], Tensor) else what(out))
            raise ConfigError(f"algorithm.aggregator: {self.name} returned {got} for {rows.shape[0]} rows of "
                              f"{tuple(rows.shape[1:])} (allowed: (aggregate of shape {tuple(rows.shape[1:])}, info "
                              f"dict))")
        return out

    __call__ = aggregate

    def simulate(self, rows: Tensor, generator: torch.Generator | None) -> Tensor:
        """The aggregate of update rows [K, d] about the reference 0, unweighted: the server's rule as
        an omniscient attacker simulates it (:mod:`fedpd.attacks.optimal`)."""
        if self.is_mean:
            return rows.mean(0)
        return self.pipeline(rows, None, reference=torch.zeros_like(rows[0]), generator=generator)[0]

    def describe(self) -> str:
        """The pipeline in words: "ARC → NNM → trimmed_mean"."""
        return " → ".join([*(s.describe() for s in self.pipeline.steps), self.name])


def build_defence(aggregator: str = "mean", aggregator_options: dict | None = None, weights: str = "uniform",
                  client_momentum: float = 0.0, client_momentum_start: str = "zero") -> Defence:
    """The :class:`Defence` the config keys of those names give (``aggregator_options`` read once:
    :func:`fedpd.aggregators.pipeline`). ConfigError, one line naming the option, for what cannot be
    built; pre-aggregation with weights = "samples" is refused (the steps mix the clients)."""
    if weights not in ("uniform", "samples"):
        raise ConfigError(f"weights: {weights!r} (allowed: \"uniform\" or \"samples\")")
    if not 0.0 <= client_momentum < 1.0:
        raise ConfigError(f"client_momentum: β = {client_momentum!r} (allowed: 0 <= β < 1)")
    if client_momentum_start not in ("zero", "update"):
        raise ConfigError(f"client_momentum_start: {client_momentum_start!r} (allowed: \"zero\" or \"update\")")
    chain = pipeline(aggregator, aggregator_options)
    if weights == "samples" and chain.steps:
        raise ConfigError("weights: pre-aggregation mixes the clients' rows, so per-client weights mean nothing "
                          "after it (allowed: uniform)")
    momentum = ClientMomentum(float(client_momentum), client_momentum_start) if client_momentum > 0 else None
    return Defence(chain, weights, momentum)


#: the plain mean: what an algorithm runs without a defence configured
MEAN = build_defence()
