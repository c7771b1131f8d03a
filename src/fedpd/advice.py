"""How a refusal tells the user to continue or replace a run: in the words of the tool they ran.

``fedpd run`` (and :func:`fedpd.run`) takes ``--resume DIR`` and ``--overwrite``; the Flower app
of a deployment takes ``flwr run APP CONNECTION --run-config "resume=true"`` and ``"overwrite=true"``.
The same checks refuse both, so their messages name the flags through :func:`resume` and
:func:`overwrite`, and the ServerApp runs under :func:`flower_app`.
"""

from __future__ import annotations

import contextvars
import shlex
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

_FLOWER_APP = contextvars.ContextVar("fedpd_flower_app", default=False)
#: a deployment's flags (the Flower app's run config)
RESUME_FLOWER, OVERWRITE_FLOWER = '--run-config "resume=true"', '--run-config "overwrite=true"'


@contextmanager
def flower_app() -> Iterator[None]:
    """Messages raised inside name the Flower app's run config, not ``fedpd run``'s flags."""
    token = _FLOWER_APP.set(True)
    try:
        yield
    finally:
        _FLOWER_APP.reset(token)


def in_flower_app() -> bool:
    return _FLOWER_APP.get()


def resume(out: str | Path, python: bool = False) -> str:
    """How to continue the run in ``out`` (``python``: with the Python API's argument too)."""
    if in_flower_app():
        return RESUME_FLOWER
    text = f"--resume {shlex.quote(str(out))}"
    return f"{text} (Python: resume={str(out)!r})" if python else text


def overwrite(python: bool = False) -> str:
    """How to start the run over, replacing what its directory holds."""
    if in_flower_app():
        return OVERWRITE_FLOWER
    return "--overwrite (Python: overwrite=True)" if python else "--overwrite"



def resume_command(out: str | Path) -> str:
    """The whole command that continues the run in ``out``."""
    if in_flower_app():
        return f"flwr run APP CONNECTION {RESUME_FLOWER}"
    return f"fedpd run --resume {shlex.quote(str(out))}"
