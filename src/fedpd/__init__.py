"""fedpd: federated optimisation on heterogeneous clients.

Primal-dual methods (FedPD, FedDyn, FedADMM, A-FedPD), classic baselines (FedAvg, FedProx,
SCAFFOLD, the FedOpt family) on one vectorised simulator with honest communication accounting.

    >>> import fedpd
    >>> result = fedpd.run("examples/fedpd.toml", overrides=["run.rounds=50"])
    >>> result.history[-1]["grad_norm_sq"]

A new algorithm subclasses :class:`fedpd.Algorithm` (or a built-in of :mod:`fedpd.algorithms`),
its options :class:`fedpd.Options`; a config names it by import path (docs/extending.md).
"""

from fedpd.algorithms.base import Algorithm
from fedpd.config import Config, load_config
from fedpd.errors import ConfigError, DataError, FedpdError
from fedpd.options import Options
from fedpd.runner import RunResult, run
from fedpd.simulation import Simulation

__all__ = ["run", "RunResult", "Simulation", "Config", "load_config", "Algorithm", "Options", "FedpdError",
           "ConfigError", "DataError"]
__version__ = "0.1.0"
