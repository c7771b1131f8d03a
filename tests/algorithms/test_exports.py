"""Every registered algorithm is importable from fedpd.algorithms, under its class's name."""

from __future__ import annotations

import fedpd.algorithms
from fedpd import registry


def test_every_registered_algorithm_is_exported():
    for name, entry in registry.ALGORITHMS.items():
        cls = entry.build
        assert getattr(fedpd.algorithms, cls.__name__, None) is cls, name
        assert cls.__name__ in fedpd.algorithms.__all__, name


def test_the_fedopt_family_imports_from_the_package():
    from fedpd.algorithms import FedAdagrad, FedAdam, FedAvgM, FedNova, FedYogi, QFFL  # noqa: F401
