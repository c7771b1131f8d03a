"""fedpd's algorithms, and what a new one is written with (docs/extending.md).

A new algorithm subclasses :class:`Algorithm` (the hooks a rule may define, the contexts each
sees, what each returns: its docstring) or one of the built-ins below, and is named in a config
by its import path (``algorithm.name = "my_algorithms:MyFedAvg"``). The pieces a rule uses:

* :class:`ClientContext` (``local``, ``receive``): the clients' ids, the round, their own data
  (``ctx.data``), their own objective and its gradient at given points (``ctx.loss(x)``,
  ``ctx.gradient(x)``, counted as computation), the local solver
  (``ctx.solver.solve(ctx, x_start, LocalObjective(...))``) and their random streams
  (``ctx.rng(purpose)``); :class:`ServerContext` (``aggregate``): the
  senders' ids, the round, N; :class:`FederationInfo` (``setup``): N, d, the model's layout;
* :class:`LocalObjective`: the terms ⟨v, x⟩ + (μ/2)‖x − c‖² an algorithm adds to f_i;
* :class:`Options` (pydantic, with :func:`refuse` for cross-field rules): the config options;
* :func:`expand`, :func:`sq_dist`, :func:`mean_sq_dist`, :func:`with_metrics`: row helpers on ``[K, d]`` (the
  squared distances summed in a fixed order);
* :func:`ordered_sum`, :func:`ordered_mean`, :func:`ordered_norm`, :func:`ordered_sq_norm`: reductions whose
  order does not depend on the thread count (:mod:`fedpd.ordered`): a rule that sums over a long
  axis uses them, so its numbers are the same at any thread count;
* :class:`RobustAveraging`, :class:`RobustMeans` (a server step that takes the run's defence:
  ``algorithm.aggregator``), their options :class:`AggregatorOptions`, :class:`MeansDefenceOptions`,
  and :class:`ExactMeans`, the options of a step that needs exact means and refuses a defence.

The FedOpt family (FedAvgM, FedAdagrad, FedAdam, FedYogi: :mod:`fedpd.algorithms.fedopt`), q-FFL
(:mod:`fedpd.algorithms.qffl`) and FedNova (:mod:`fedpd.algorithms.fednova`) are written with
these names only, as a user's algorithm is (imported from the modules that define them, so that
this package exports them too). Every registered algorithm is exported here.
"""

from fedpd.algorithms.base import Algorithm, ClientStates, State, expand, mean_sq_dist, sq_dist, with_metrics
from fedpd.algorithms.fedavg import FedAvg, FedProx
from fedpd.algorithms.fedcm import FedCM
from fedpd.algorithms.fednova import FedNova
from fedpd.algorithms.fedopt import FedAdagrad, FedAdam, FedAvgM, FedYogi
from fedpd.algorithms.fedpd_vr import FedPDVR
from fedpd.algorithms.fedplus import (FedAvgPlus, FedCoMedPlus, FedGeoMedPlus, FedPlus, FedPlusCoMed, FedPlusFedAvg,
                                      FedPlusFedProx, FedPlusLocal, FedPlusRFA)
from fedpd.algorithms.personalized import APFL, Ditto, LocalOnly, PerFedAvg, PFedMe
from fedpd.algorithms.primal_dual import AFedPD, FedADMM, FedDyn, FedPD, PrimalDual
from fedpd.algorithms.qffl import QFFL
from fedpd.algorithms.robust import AggregatorOptions, ExactMeans, MeansDefenceOptions, RobustAveraging, RobustMeans
from fedpd.algorithms.sam import AFedPDSAM, FedSAM, FedSpeed
from fedpd.algorithms.scaffold import Scaffold
from fedpd.algorithms.xu import ParallelADMM, ParallelSAGA, StochasticADMM, StochasticSAGA
from fedpd.context import ClientContext, FederationInfo, ServerContext
from fedpd.options import Options, refuse
from fedpd.ordered import ordered_mean, ordered_norm, ordered_sq_norm, ordered_sum
from fedpd.solvers import LocalObjective

__all__ = [
    "Algorithm",
    "State",
    "ClientStates",
    "ClientContext",
    "ServerContext",
    "FederationInfo",
    "LocalObjective",
    "Options",
    "refuse",
    "expand",
    "sq_dist",
    "mean_sq_dist",
    "with_metrics",
    "ordered_sum",
    "ordered_mean",
    "ordered_norm",
    "ordered_sq_norm",
    "AggregatorOptions",
    "MeansDefenceOptions",
    "ExactMeans",
    "RobustAveraging",
    "RobustMeans",
    "FedAvg",
    "FedProx",
    "Scaffold",
    "FedPD",
    "FedDyn",
    "FedADMM",
    "AFedPD",
    "PrimalDual",
    "FedSAM",
    "AFedPDSAM",
    "FedSpeed",
    "FedCM",
    "FedPDVR",
    "ParallelSAGA",
    "StochasticSAGA",
    "ParallelADMM",
    "StochasticADMM",
    "FedPlus",
    "FedAvgPlus",
    "FedGeoMedPlus",
    "FedCoMedPlus",
    "FedPlusLocal",
    "FedPlusFedAvg",
    "FedPlusRFA",
    "FedPlusCoMed",
    "FedPlusFedProx",
    "LocalOnly",
    "Ditto",
    "APFL",
    "PFedMe",
    "PerFedAvg",
    "FedAvgM",
    "FedAdagrad",
    "FedAdam",
    "FedYogi",
    "FedNova",
    "QFFL",
]
