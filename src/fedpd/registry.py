"""The one registry: every named thing a config can pick, collected from where it is defined.

Each algorithm, problem, solver, sampler, aggregator and attack declares ``name``, ``Options``
(the pydantic model that validates its config section) and ``description`` beside itself; this
module only lists them. ``TABLES`` maps each config section to its entries (what
:mod:`fedpd.config` validates against), ``CATALOG`` everything ``fedpd list`` shows, in its
order (the aggregators too, picked by ``algorithm.aggregator``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fedpd import aggregators, attacks, sampling, solvers
from fedpd.algorithms import fedavg, fedcm, fedpd_vr, fedplus, personalized, primal_dual, sam, scaffold, xu
from fedpd.options import Options
from fedpd.problems import dataset, fedplus as fedplus_problems, synthetic


@dataclass(frozen=True)
class Entry:
    name: str
    build: Callable
    options: type[Options]
    description: str


def _table(*things) -> dict[str, Entry]:
    return {t.name: Entry(t.name, t, t.Options, t.description) for t in things}


ALGORITHMS = _table(
    fedavg.FedAvg, fedavg.FedProx, scaffold.Scaffold,
    primal_dual.FedPD, primal_dual.FedDyn, primal_dual.FedADMM, primal_dual.AFedPD, primal_dual.PrimalDual,
    sam.FedSAM, sam.AFedPDSAM, sam.FedSpeed, fedcm.FedCM, fedpd_vr.FedPDVR,
    xu.ParallelSAGA, xu.StochasticSAGA, xu.ParallelADMM, xu.StochasticADMM,
    fedplus.FedPlus, fedplus.FedAvgPlus, fedplus.FedGeoMedPlus, fedplus.FedCoMedPlus, fedplus.FedPlusLocal,
    fedplus.FedPlusFedAvg, fedplus.FedPlusRFA, fedplus.FedPlusCoMed, fedplus.FedPlusFedProx,
    personalized.LocalOnly, personalized.Ditto, personalized.APFL, personalized.PFedMe, personalized.PerFedAvg,
)
PROBLEMS = _table(dataset.dataset_problem, synthetic.fedpd_logreg, synthetic.fedprox_synthetic, synthetic.least_squares,
                  fedplus_problems.fedplus_regression, fedplus_problems.fedplus_mnist)
SOLVERS = _table(*solvers.SOLVERS)
SAMPLERS = _table(*sampling.SAMPLERS)
ATTACKS = _table(*attacks.ATTACKS)
AGGREGATORS = _table(*(fn for name, fn in aggregators.AGGREGATORS.items() if name != "fedplus"))

TABLES = {"problem": PROBLEMS, "algorithm": ALGORITHMS, "solver": SOLVERS, "sampler": SAMPLERS, "attack": ATTACKS}
DEFAULT_NAMES = {"solver": "gd", "sampler": "all", "attack": "none"}
CATALOG = {"problem": PROBLEMS, "algorithm": ALGORITHMS, "aggregator": AGGREGATORS, "solver": SOLVERS,
           "sampler": SAMPLERS, "attack": ATTACKS}
