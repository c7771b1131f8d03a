"""fedpd: federated optimisation on heterogeneous clients.

Primal-dual methods (FedPD, FedDyn, FedADMM, A-FedPD), classic baselines (FedAvg, FedProx,
SCAFFOLD) on one vectorised simulator with honest communication accounting.

    >>> import fedpd
    >>> result = fedpd.run("examples/fedpd.toml", overrides=["run.rounds=50"])
    >>> result.history[-1]["grad_norm_sq"]
"""

from fedpd.config import Config, load_config
from fedpd.errors import ConfigError, DataError, FedpdError
from fedpd.runner import RunResult, run
from fedpd.simulation import Simulation

__all__ = ["run", "RunResult", "Simulation", "Config", "load_config", "FedpdError", "ConfigError", "DataError"]
__version__ = "0.1.0"
