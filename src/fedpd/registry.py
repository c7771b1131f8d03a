"""The one registry: every named thing a config can pick, collected from where it is defined.

Each algorithm, problem, solver, sampler, aggregator and attack declares ``name``, ``Options``
(the pydantic model that validates its config section) and ``description`` beside itself; this
module only lists them. ``TABLES`` maps each config section to its built-in entries,
``CATALOG`` everything ``fedpd list`` shows, in its order (the aggregators too, picked by
``algorithm.aggregator``). :func:`lookup` is what :mod:`fedpd.config` validates a name with: a
built-in, or a plug-in (an import path or an installed entry point, :mod:`fedpd.plugins`) made
into an :class:`Entry` like the built-ins.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from pydantic import BaseModel

from fedpd import aggregators, attacks, models, plugins, sampling, solvers
from fedpd.algorithms import (fedavg, fedcm, fednova, fedopt, fedpd_vr, fedplus, personalized, primal_dual, qffl, sam,
                              scaffold, xu)
from fedpd.algorithms.base import Algorithm
from fedpd.options import NoOptions, Options
from fedpd.problems import dataset, fedplus as fedplus_problems, synthetic


@dataclass(frozen=True)
class Entry:
    name: str
    build: Callable
    options: type[Options]
    description: str
    origin: str = plugins.BUILT_IN  # or "import path", "entry point of distribution ..."
    module: str | None = None  # the plug-in's module (None: built-in)


def _table(*things) -> dict[str, Entry]:
    return {t.name: Entry(t.name, t, t.Options, t.description) for t in things}


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
AGGREGATORS = _table(*(fn for name, fn in aggregators.AGGREGATORS.items() if name != "fedplus"))
MODELS = {name: Entry(name, factory, NoOptions, description) for name, (factory, description) in models.MODELS.items()}

TABLES = {"problem": PROBLEMS, "algorithm": ALGORITHMS, "solver": SOLVERS, "sampler": SAMPLERS, "attack": ATTACKS}
DEFAULT_NAMES = {"solver": "gd", "sampler": "all", "attack": "none"}
CATALOG = {"problem": PROBLEMS, "algorithm": ALGORITHMS, "aggregator": AGGREGATORS, "solver": SOLVERS,
           "sampler": SAMPLERS, "attack": ATTACKS, "model": MODELS}


def builtin_datasets() -> dict:
    """The names ``problem.dataset`` takes for fedpd's own datasets (aliases too)."""
    from fedpd.data.loaders import ALIASES, DATASETS

    return {**DATASETS, **ALIASES}


def lookup(kind: str, value: str) -> Entry:
    """The entry ``value`` names for ``kind`` (a key of :data:`CATALOG`, or ``dataset``: a loader
    plug-in): a built-in, or a plug-in checked to be usable as one;
    :class:`~fedpd.plugins.PluginError` (one line) otherwise."""
    found = plugins.resolve(kind, value, builtin_datasets() if kind == "dataset" else CATALOG[kind])
    if kind == "dataset" and found.module is None:
        raise plugins.PluginError(f"{value} is one of fedpd's own datasets (fedpd data list), not a loader plug-in")
    return found.obj if found.module is None else plugin_entry(kind, value, found)


def plugin_entry(kind: str, name: str, found: plugins.Plugin) -> Entry:
    """A plug-in as an :class:`Entry`: an algorithm must subclass :class:`Algorithm`, anything
    else be callable; ``Options`` (default: none) must be a pydantic model."""
    obj = found.obj
    if kind == "algorithm" and not (isinstance(obj, type) and issubclass(obj, Algorithm)):
        raise plugins.PluginError(f"{name} is not an Algorithm subclass (got {_what(obj)}; subclass fedpd.Algorithm "
                                  f"or an algorithm of fedpd.algorithms)")
    if not callable(obj):
        raise plugins.PluginError(f"{name} is not callable (got {_what(obj)}; a {kind} plug-in is a class or a "
                                  f"function)")
    wrong = models.signature_problem(obj, name) if kind == "model" else None
    if wrong:  # what a run would refuse
        raise plugins.PluginError(wrong)
    options = NoOptions if kind == "model" else getattr(obj, "Options", NoOptions)
    if not (isinstance(options, type) and issubclass(options, BaseModel)):
        raise plugins.PluginError(f"{name}.Options must be a pydantic model (subclass fedpd.Options), got "
                                  f"{_what(options)}")
    return Entry(name, obj, options, plugins.describe(obj), found.origin, found.module)


def _what(obj) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__qualname__}"
    if inspect.isroutine(obj):
        return f"the function {obj.__qualname__}"
    return f"a {type(obj).__name__}"
