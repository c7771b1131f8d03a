"""SAM presets: FedSAM, A-FedPDSAM, FedSpeed — an algorithm of fedpd with a SAM local gradient.

SAM (sharpness-aware minimisation, Foret et al., ICLR 2021) is a property of the local solver
(:meth:`fedpd.solvers.LocalRun.sam`: the gradient of f_i is taken at x + r·g/‖g‖,
g = ∇f_i(x)), so any algorithm runs with SAM by setting ``solver.sam_radius``. These presets
only give the combinations of the A-FedPD paper's results table (Sun, Shen, Tao, "A-FedPD:
aligning dual-drift is all federated primal-dual learning needs", Table 2) their names: each is
its base algorithm whose local training uses the configured solver with the preset's
``algorithm.sam_radius`` in place of the solver's own radius. Communication and state are the
base algorithm's.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import Field

from fedpd.algorithms.fedavg import FedAvg
from fedpd.algorithms.primal_dual import AFedPD, DualMeanOptions, FedDyn
from fedpd.algorithms.robust import AggregatorOptions
from fedpd.context import ClientContext
from fedpd.defence import Defence


class FedSAMOptions(AggregatorOptions):
    sam_radius: float = Field(0.05, ge=0, description="SAM radius r (replaces solver.sam_radius)")


class PenaltySAMOptions(DualMeanOptions):
    # output as A-FedPD / FedDyn: A-FedPDSAM shares A-FedPD's Alg. 1, so the table evaluates both alike
    sam_radius: float = Field(0.1, ge=0, description="SAM radius r (replaces solver.sam_radius)")


class _SAM:
    """Mixin: run the base algorithm's local rule with a SAM copy of the round's solver."""

    sam_radius: float
    needs_gradient_solver = True

    def local(self, message, clients, ctx: ClientContext):
        return super().local(message, clients, replace(ctx, solver=ctx.solver.with_options(sam_radius=self.sam_radius)))


class FedSAM(_SAM, FedAvg):
    """FedSAM (Qu et al., "Generalized federated learning via sharpness aware minimization",
    ICML 2022), as listed in the A-FedPD paper's Table 2 (CIFAR-10/100 accuracy, row FEDSAM:
    family P, local optimiser SAM): FedAvg whose local steps use the SAM gradient
    ∇f_i(x + r·∇f_i(x)/‖∇f_i(x)‖) (SAM: Foret et al., ICLR 2021). Neither source gives FedSAM's
    equation numbers, so none are cited.

    The server averages models, so FedAvg's robust ``aggregator`` / ``aggregator_options`` /
    ``weights`` apply. Per participant: d floats down, d up."""

    name = "fedsam"
    description = "FedSAM: FedAvg with SAM local steps (radius sam_radius)"
    Options = FedSAMOptions

    def __init__(self, sam_radius: float = 0.05, defence: Defence | None = None):
        super().__init__(defence)
        self.sam_radius = sam_radius


class AFedPDSAM(_SAM, AFedPD):
    """A-FedPDSAM (the A-FedPD paper: Alg. 1 — LocalTrain, D-Update with the virtual dual update
    for absent clients — with a SAM local gradient; Table 2, row A-FEDPDSAM)."""

    name = "afedpdsam"
    description = "A-FedPDSAM: A-FedPD with SAM local steps"
    Options = PenaltySAMOptions

    def __init__(self, eta: float = 10.0, sam_radius: float = 0.1, output: str = "server",
                 defence: Defence | None = None):
        super().__init__(eta=eta, output=output, defence=defence)
        self.sam_radius = sam_radius


class FedSpeed(_SAM, FedDyn):
    """FedSpeed (Sun et al., "FedSpeed: larger local interval, less communication round, and
    higher generalization accuracy", ICLR 2023), as listed in the A-FedPD paper's Table 2 (row
    FEDSPEED: family PD, local optimiser SAM), from the authors' code (neither source gives its
    equation numbers, so none are cited): FedDyn's dual structure (local
    L_i = f_i + ⟨λ_i, x − x0⟩ + ‖x − x0‖²/(2η) from x0, duals of participants only, dual mean over
    all N) with a SAM local gradient; their defaults are penalty 1/η = 0.1, r = 0.1, lr 0.1
    decayed by 0.998 per round (set lr and lr_decay on the solver)."""

    name = "fedspeed"
    description = "FedSpeed: FedDyn-style duals with SAM local steps"
    Options = PenaltySAMOptions

    def __init__(self, eta: float = 10.0, sam_radius: float = 0.1, output: str = "server",
                 defence: Defence | None = None):
        super().__init__(eta=eta, output=output, defence=defence)
        self.sam_radius = sam_radius
