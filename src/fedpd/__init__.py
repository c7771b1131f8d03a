"""fedpd: federated optimisation on heterogeneous clients.

Primal-dual methods (FedPD, FedDyn, FedADMM, A-FedPD), classic baselines (FedAvg, FedProx,
SCAFFOLD, the FedOpt family) on one vectorised simulator with honest communication accounting.

    >>> import fedpd
    >>> result = fedpd.run("examples/fedpd.toml", overrides=["run.rounds=50"])
    >>> result.history[-1]["grad_norm_sq"]

A new algorithm subclasses :class:`fedpd.Algorithm` (or a built-in of :mod:`fedpd.algorithms`),
its options :class:`fedpd.Options`; a config names it by import path (docs/extending.md).
"""

from fedpd.exports import lazy

#: public name -> the module that defines it (imported on first use: fedpd.exports)
_WHERE = {"run": "fedpd.runner", "RunResult": "fedpd.runner", "Simulation": "fedpd.simulation",
          "Config": "fedpd.config", "load_config": "fedpd.config", "Algorithm": "fedpd.algorithms.base",
          "Options": "fedpd.options", "NoOptions": "fedpd.options", "declares": "fedpd.options",
          "FedpdError": "fedpd.errors", "ConfigError": "fedpd.errors",
          "DataError": "fedpd.errors"}
__all__ = list(_WHERE)
__version__ = "0.1.0"
__getattr__, __dir__ = lazy(__name__, _WHERE)
