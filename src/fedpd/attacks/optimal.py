"""Optimal attacks (Allouah et al. 2023): ALIE's and IPM's vectors with their strength searched
each round against the defence in use, simulated (:meth:`OptimalAttack.against`)."""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
import torch
from pydantic import Field
from torch import Tensor

from fedpd.attacks.base import Attack, OmniscientAttack, RoundAttackOptions
from fedpd.attacks.update import ALIE
from fedpd.errors import ConfigError
from fedpd.options import EVALS_MAX
from fedpd.ordered import ordered_norm
from fedpd.streams import ClientStreams


class OptimalOptions(RoundAttackOptions):
    evals: int = Field(20, ge=1, le=EVALS_MAX, description="evaluations of the simulated defence per round (the line "
                       f"search); at most {EVALS_MAX}")
    start: float = Field(0.0, ge=0, description="the search's first strength")
    step: float = Field(10.0, gt=0, description="the search's first step")
    ratio: float = Field(0.8, gt=0.5, lt=1, description="each failed step shrinks the step by this factor")


def line_search(objective, start: float, step: float, ratio: float, evals: int) -> float:
    """The strength t >= ``start`` that maximises ``objective(t)`` within ``evals`` evaluations, by
    the search Allouah et al.'s optimal attacks use (as ByzFL's): expansion — from t = start, try
    t + δ; on a gain take it and double δ, else shrink δ by ``ratio`` and stop expanding;
    contraction — with what is left, try t + δ, take it on a gain, and shrink δ by ``ratio``
    after every try. (Only larger strengths are tried; ties keep the smaller.)"""
    best, value = start, objective(start)
    delta, left = step, evals - 1
    while left > 0:  # expansion
        t = best + delta
        v, left = objective(t), left - 1
        if v > value:
            best, value, delta = t, v, delta * 2
        else:
            delta *= ratio
            break
    while left > 0:  # contraction
        t = best + delta
        v, left = objective(t), left - 1
        if v > value:
            best, value = t, v
        delta *= ratio
    return best


class OptimalAttack(OmniscientAttack):
    """An omniscient attack whose strength t is searched each round (:func:`line_search`) to
    maximise ‖F(honest ∪ f copies of the forged update) − mean(honest)‖, the distance the
    defence F's output is pushed from the honest mean — knowing F: the run's defence (its
    pre-aggregation and rule, :class:`fedpd.defence.Defence`), handed to :meth:`against` by the run
    and simulated on the updates about 0. The simulated rows are
    the honest updates then the f forged ones (as ByzFL's); bucketing's permutation in the
    simulation is drawn from the round's first participant's attack stream, the same for every
    strength tried."""

    Options = OptimalOptions
    simulate = None

    def against(self, defence) -> "Attack":
        if not hasattr(defence, "simulate") and hasattr(getattr(defence, "defence", None), "simulate"):
            warnings.warn("Attack.against(algorithm) is deprecated: hand it the run's defence (fedpd.defence.Defence; "
                          "fedpd.algorithms.robust.defence_of(options))", DeprecationWarning, stacklevel=2)
            defence = defence.defence
        if defence is None:
            raise ConfigError(f"attack.name: {self.name} picks its strength against the defence in use, and the "
                              f"algorithm's server step takes no defence to simulate (allowed: an algorithm with "
                              f"algorithm.aggregator, e.g. fedavg, fedprox, ditto, feddyn, scaffold)")
        if not callable(getattr(defence, "simulate", None)):
            raise ConfigError(f"attack.name: {self.name} is handed {type(defence).__name__}, not the run's defence "
                              f"(a fedpd.defence.Defence, with simulate(rows, generator))")
        self.simulate = defence.simulate
        return self

    def forgery(self, honest: Tensor) -> Callable[[float], Tensor]:
        """t -> the forged vector of strength t, the honest statistics it needs computed once (the
        search tries ``evals`` strengths on the same honest rows)."""
        raise NotImplementedError

    def strength(self, honest: Tensor, f: int, rng: ClientStreams | None) -> float:
        if self.simulate is None:
            raise ConfigError(f"attack.name: {self.name} has not been told the defence (Attack.against)")
        mean, vector = honest.mean(0), self.forgery(honest)
        seed = int(rng.bits(1)[0, 0] >> np.uint64(1)) if rng is not None else 0

        def pushed(t: float) -> float:
            forged = vector(t)
            rows = torch.cat([honest, forged.expand(f, -1)])
            out = self.simulate(rows, torch.Generator().manual_seed(seed))
            return float(ordered_norm(out - mean))

        s = self.settings
        return line_search(pushed, s["start"], s["step"], s["ratio"], s["evals"])

    def forged(self, honest, n, f, rng=None):
        flat = honest.reshape(honest.shape[0], -1)
        return self.forgery(flat)(self.strength(flat, f, rng)).reshape(honest.shape[1:])


class OptimalALIE(OptimalAttack):
    """ALIE with z searched against the defence (Allouah et al., "Fixing by mixing", AISTATS 2023,
    §6: the "optimal" version of Baruch et al.'s attack; ByzFL's ``Optimal_ALittleIsEnough``):
    every Byzantine participant sends μ − z·σ (:class:`ALIE`'s vector) with z the
    :class:`OptimalAttack` search's (from 0, steps 10, 20 evaluations by default). ByzFL sends
    μ + τ·σ with the sample standard deviation (n − 1); since the search scales with its steps,
    fedpd's search with step δ equals ByzFL's with delta = −δ·√((h − 1)/h), h the honest count."""

    name = "optimal_alie"
    description = "uploads: ALIE with z searched each round against the defence in use (Allouah et al. 2023)"

    def forgery(self, honest):
        return ALIE.line(honest)


class OptimalIPM(OptimalAttack):
    """IPM with ε searched against the defence (Allouah et al. 2023, §6; ByzFL's
    ``Optimal_InnerProductManipulation``): every Byzantine participant sends −ε · μ with ε the
    :class:`OptimalAttack` search's (from 0, steps 10, 20 evaluations by default)."""

    name = "optimal_ipm"
    description = "uploads: IPM with epsilon searched each round against the defence in use (Allouah et al. 2023)"

    def forgery(self, honest):
        mean = honest.mean(0)
        return lambda t: -t * mean
