"""SAM presets: FedSAM, A-FedPDSAM, FedSpeed — an algorithm of fedpd with a SAM local gradient.

SAM (sharpness-aware minimisation, Foret et al., ICLR 2021) is a property of the local solver
(:class:`fedpd.solvers.GradientSolver` with ``sam_radius`` r: the gradient of f_i is taken at
x + r·g/‖g‖, g = ∇f_i(x)), so any algorithm runs with SAM by setting ``solver.sam_radius``.
These presets only give the combinations of the A-FedPD paper's results table (Sun, Shen,
Tao 2024, Table 2) their names: each is its base algorithm whose local training uses the configured
solver with the preset's ``algorithm.sam_radius`` in place of the solver's own radius.
Communication and state are the base algorithm's.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from fedpd.algorithms.base import RoundContext
from fedpd.algorithms.fedavg import FedAvg
from fedpd.algorithms.primal_dual import AFedPD, FedDyn
from fedpd.errors import ConfigError
from fedpd.solvers import GradientSolver


def with_sam(solver, radius: float) -> GradientSolver:
    """A copy of a gradient solver with SAM radius ``radius`` (the solver itself is unchanged)."""
    if not isinstance(solver, GradientSolver):
        raise ConfigError(f"solver.name: SAM needs a gradient solver (allowed: gd, sgd; got {type(solver).__name__})")
    sam = copy.copy(solver)
    sam.sam_radius = radius
    return sam


class _SAM:
    """Mixin: run the base algorithm's local rule with a SAM copy of the round's solver."""

    sam_radius: float

    def setup(self, problem, solver):
        with_sam(solver, self.sam_radius)  # fail at build time, not in round 1
        super().setup(problem, solver)

    def local(self, message, clients, ctx: RoundContext):
        return super().local(message, clients, replace(ctx, solver=with_sam(ctx.solver, self.sam_radius)))


class FedSAM(_SAM, FedAvg):
    """FedSAM (Qu et al., "Generalized federated learning via sharpness aware minimization",
    ICML 2022), as listed in A-FedPD's Table 2 (Sun, Shen, Tao 2024; CIFAR-10/100 accuracy, row
    FEDSAM: family P, local optimiser SAM): FedAvg whose local steps use the SAM gradient
    ∇f_i(x + r·∇f_i(x)/‖∇f_i(x)‖) (SAM: Foret et al., ICLR 2021). Neither source gives FedSAM's
    equation numbers, so none are cited.

    The server averages models, so FedAvg's robust ``aggregator`` / ``aggregator_options`` /
    ``weights`` apply. Per participant: d floats down, d up."""

    name = "fedsam"
    description = "FedSAM: FedAvg with SAM local steps (radius sam_radius)"

    def __init__(self, sam_radius: float = 0.05, aggregator: str = "mean", aggregator_options: dict | None = None,
                 weights: str = "uniform"):
        super().__init__(aggregator, aggregator_options, weights)
        self.sam_radius = sam_radius


class AFedPDSAM(_SAM, AFedPD):
    """A-FedPDSAM (Sun, Shen, Tao 2024: A-FedPD's Alg. 1 — LocalTrain, D-Update with the virtual dual update
    for absent clients — with a SAM local gradient; Table 2, row A-FEDPDSAM)."""

    name = "afedpdsam"
    description = "A-FedPDSAM: A-FedPD with SAM local steps"

    def __init__(self, eta: float = 10.0, sam_radius: float = 0.1):
        super().__init__(eta=eta)
        self.sam_radius = sam_radius


class FedSpeed(_SAM, FedDyn):
    """FedSpeed (Sun et al., "FedSpeed: larger local interval, less communication round, and
    higher generalization accuracy", ICLR 2023), as listed in A-FedPD's Table 2 (row FEDSPEED:
    family PD, local optimiser SAM), details from the authors' code
    (neither source gives its equation numbers, so none are cited): FedDyn's dual structure
    (local L_i = f_i + ⟨λ_i, x − x0⟩ + ‖x − x0‖²/(2η) from x0, duals of participants only, dual
    mean over all N) with a SAM local gradient; their defaults are penalty 1/η = 0.1, r = 0.1,
    lr 0.1 decayed by 0.998 per round (set lr and lr_decay on the solver)."""

    name = "fedspeed"
    description = "FedSpeed: FedDyn-style duals with SAM local steps"

    def __init__(self, eta: float = 10.0, sam_radius: float = 0.1):
        super().__init__(eta=eta)
        self.sam_radius = sam_radius
