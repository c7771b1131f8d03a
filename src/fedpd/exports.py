"""A package's public names imported on first use (PEP 562), so that importing the package, or
any module inside it, does not import what those names need (torch, above all): ``fedpd --help``,
``fedpd compare`` and ``fedpd flower connection`` start in a fraction of a second."""

from __future__ import annotations

import importlib
from typing import Callable


def lazy(package: str, where: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose public name ``n`` is defined in the module
    ``where[n]``: imported when ``n`` is first looked up, then kept as a plain attribute."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
