"""The one registry: every named thing a config can pick, collected from where it is defined.

Each algorithm, problem, solver, sampler, aggregator and attack declares ``name``, ``Options``
(the pydantic model that validates its config section) and ``description`` beside itself; this
module only lists them. ``TABLES`` maps each config section to its built-in entries,
``CATALOG`` everything ``fedpd list`` shows, in its order (the aggregators too, picked by
``algorithm.aggregator``), and ``KINDS`` the :class:`~fedpd.names.Kind` of every config key
that names something, which :func:`fedpd.names.resolve` resolves a name with (a built-in, an
import path or an installed entry point).
"""

from __future__ import annotations

from fedpd import aggregators, attacks, models, sampling, solvers
from fedpd.algorithms import (fedavg, fedcm, fednova, fedopt, fedpd_vr, fedplus, personalized, primal_dual, qffl, sam,
                              scaffold, xu)
from fedpd.algorithms.base import Algorithm
from fedpd.data.loaders import user
from fedpd.names import Kind, table as _table, what
from fedpd.problems import dataset, fedplus as fedplus_problems, synthetic


ALGORITHMS = _table(
    fedavg.FedAvg, fedavg.FedProx, fedopt.FedAvgM, fedopt.FedAdagrad, fedopt.FedAdam, fedopt.FedYogi, scaffold.Scaffold,
    primal_dual.FedPD, primal_dual.FedDyn, primal_dual.FedADMM, primal_dual.AFedPD, primal_dual.PrimalDual,
    sam.FedSAM, sam.AFedPDSAM, sam.FedSpeed, fedcm.FedCM, fedpd_vr.FedPDVR, fednova.FedNova, qffl.QFFL,
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
AGGREGATORS = _table(*aggregators.RULES.values())  # the rules a config picks (Fed+'s own is its psi's)
MODELS = models.KIND.builtins

TABLES = {"problem": PROBLEMS, "algorithm": ALGORITHMS, "solver": SOLVERS, "sampler": SAMPLERS, "attack": ATTACKS}
DEFAULT_NAMES = {"solver": "gd", "sampler": "all", "attack": "none"}
CATALOG = {"problem": PROBLEMS, "algorithm": ALGORITHMS, "aggregator": AGGREGATORS, "solver": SOLVERS,
           "sampler": SAMPLERS, "attack": ATTACKS, "model": MODELS}


def _an_algorithm(obj, name: str) -> str | None:
    if isinstance(obj, type) and issubclass(obj, Algorithm):
        return None
    return (f"{name} is not an Algorithm subclass (got {what(obj)}; subclass fedpd.Algorithm or an algorithm of "
            f"fedpd.algorithms)")


def _an_attack(obj, name: str) -> str | None:
    if isinstance(obj, type) and issubclass(obj, attacks.Attack):
        return None
    return (f"{name} is not an Attack subclass (got {what(obj)}; subclass fedpd.attacks.Attack or an attack of "
            f"fedpd.attacks)")


#: what a plug-in of each kind is (fedpd.names checks it before calling it: docs/extending.md)
KINDS = {"problem": Kind("problem", PROBLEMS, declared=True,
                         plugin="a problem plug-in is a class or function taking its options as keywords (and model= "
                         "if it names that parameter) and returning a fedpd Problem"),
         "algorithm": Kind("algorithm", ALGORITHMS, check=_an_algorithm,
                           plugin="an algorithm plug-in is an Algorithm subclass constructed with its options as "
                           "keywords (a defence's keys as one, defence)"),
         "solver": Kind("solver", SOLVERS, declared=True,
                        plugin="a solver plug-in is a class taking its options as keywords, whose solve(ctx, x, "
                        "objective, tol) minimises the local objective"),
         "sampler": Kind("sampler", SAMPLERS, declared=True, args=("num_clients",),
                         plugin="a sampler plug-in is a class taking (num_clients, **options), with sample(round, "
                         "generator) and per_round"),
         "attack": Kind("attack", ATTACKS, check=_an_attack,
                        plugin="an attack plug-in is an Attack subclass constructed with its options as keywords"),
         "aggregator": aggregators.KIND, "model": models.KIND, "dataset": user.KIND}
