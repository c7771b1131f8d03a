"""What an algorithm's hooks return, checked where fedpd takes it.

A plug-in algorithm's hook that returns a state of the wrong shape would otherwise fail wherever
the state is next used — a store's row copy, the flat model's views, another hook — with a
traceback that names neither. Here it is one line (:class:`~fedpd.errors.ConfigError` naming
``algorithm.name``, the hook and the key): a client state keeps the shape ``init_client`` gave
it, for each of the hook's K clients; an upload holds one row per client; a server state keeps
its model ``x0`` [d]; the evaluation model is [d] (personal models [N, d]); a model or update
upload (``model_uploads``, ``update_uploads``) is one model per client. The checks read shapes
only: they cost nothing next to a round.

A plug-in's hook that raises (:func:`call`) is one line too, naming the plug-in, the hook, its
line and the error (in Python the error keeps the plug-in's exception as its cause). Every
engine checks the same way — a node runs these checks and answers a failed one as a refusal, which
its server raises as this line (:mod:`fedpd.remote.node`) rather than counting rejected uploads.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any, Mapping

from torch import Tensor

from fedpd.errors import ConfigError, FedpdError, reason
from fedpd.names import what


class HookError(ConfigError):
    """An algorithm's hook returned what fedpd cannot take, or a plug-in's hook raised: the same
    one line, and exit status 2, on every engine."""


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else what(value)


def _refuse(algorithm, hook: str, text: str) -> HookError:
    return HookError(f"algorithm.name: {type(algorithm).__qualname__}.{hook} {text}")


def is_plugin(algorithm) -> bool:
    """Whether ``algorithm``'s class is a user's (not fedpd's own)."""
    module = type(algorithm).__module__
    return module != "fedpd" and not module.startswith("fedpd.")


def call(algorithm, hook: str, *args):
    """``algorithm.<hook>(*args)``; a plug-in's hook that raises (anything but fedpd's own one-line
    errors) is a :class:`HookError` naming the plug-in, the hook and the error. fedpd's own
    algorithms raise as they are (a traceback is what fixes fedpd's bug)."""
    try:
        return getattr(algorithm, hook)(*args)
    except FedpdError:
        raise
    except Exception as err:
        if not is_plugin(algorithm):
            raise
        cls = type(algorithm)
        raise HookError(f"algorithm.name: the plug-in {cls.__module__}:{cls.__qualname__} failed in its {hook} hook"
                        f"{_where(err, cls)}: {reason(err, 300)}") from err  # (the cause: the traceback, in Python)


def _where(err: Exception, cls: type) -> str:
    """Where the error left the plug-in's own module (its last line there): " (at file.py:line)"."""
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    frames = [f for f in traceback.extract_tb(err.__traceback__) if file and f.filename == file]
    return f" (at {Path(file).name}:{frames[-1].lineno})" if frames else ""


def check_tensors(algorithm, hook: str, state: Any, what_it_is: str = "state") -> None:
    """``state`` is a dict of tensors (keyed by strings)."""
    if not isinstance(state, Mapping):
        raise _refuse(algorithm, hook, f"returned {what(state)} as its {what_it_is} (allowed: a dict of tensors)")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, Tensor):
            raise _refuse(algorithm, hook, f"returned {what_it_is} {key!r} as {what(value)} (allowed: a dict of "
                                           f"tensors keyed by name)")


def check_clients(algorithm, hook: str, state: Any, shapes: Mapping[str, tuple], rows: int) -> None:
    """``state``, the client states ``hook`` returned for ``rows`` clients, holds every key of
    ``shapes`` (the shapes of their states as the hook got them, [rows, ...]) in that shape."""
    check_tensors(algorithm, hook, state, "client state")
    for key, shape in shapes.items():
        if key not in state:
            raise _refuse(algorithm, hook, f"returned no client state {key!r} (init_client gives it; allowed: every "
                                           f"key of init_client's state)")
        if state[key].shape != shape:
            raise _refuse(algorithm, hook, f"returned client state {key!r} of shape {_shape(state[key])} for {rows} "
                                           f"clients (allowed: {tuple(shape)}, init_client's {tuple(shape[1:])} for "
                                           f"each)")


def check_receive(algorithm, clients: Mapping[str, Tensor], reply, ctx) -> Mapping[str, Tensor]:
    """``receive``'s new states of the clients ``clients`` [K, ...], checked to keep their shapes."""
    shapes = {k: v.shape for k, v in clients.items()}  # taken first: receive may change them in place
    new = call(algorithm, "receive", clients, reply, ctx)
    check_clients(algorithm, "receive", new, shapes, ctx.ids.numel())
    return new


def check_local(algorithm, out: Any) -> tuple:
    """``local``'s result: (uploads, new client states)."""
    if not (isinstance(out, tuple) and len(out) == 2):
        raise _refuse(algorithm, "local", f"returned {what(out)} (allowed: (uploads, new client states), two dicts "
                                          f"of tensors)")
    return out


def check_uploads(algorithm, uploads: Any, rows: int) -> None:
    """``uploads`` from ``local``: a dict of tensors, one row per client (what each row holds is
    the algorithm's; a rule may upload part of the model)."""
    check_tensors(algorithm, "local", uploads, "upload")
    for key, value in uploads.items():
        if value.dim() == 0 or value.shape[0] != rows:
            raise _refuse(algorithm, "local", f"returned upload {key!r} of shape {_shape(value)} for {rows} clients "
                                              f"(allowed: one row per client, ({rows}, ...))")


def check_upload_models(algorithm, shapes: Mapping[str, tuple], message: Mapping[str, Tensor]) -> None:
    """The uploads the round's screen kept (``shapes``: each key's shape per client, the one most
    clients sent; a client that sent another is rejected there, as a faulty one): a model or an
    update (the keys ``model_uploads`` and ``update_uploads`` name, taken relative to the broadcast
    model by attacks and privacy) is of the shape of the ``message``'s model ``x0``. Otherwise every
    client's ``local`` made the same wrong upload, and the server step would fail on it instead."""
    x0 = message.get("x0")
    if not isinstance(x0, Tensor):
        return
    for key in (*algorithm.model_uploads, *algorithm.update_uploads):  # (what fedpd.Algorithm declares)
        if key in shapes and tuple(shapes[key]) != tuple(x0.shape):
            raise _refuse(algorithm, "local", f"returned upload {key!r} of shape {tuple(shapes[key])} per client "
                                              f"(allowed: {tuple(x0.shape)}, the broadcast model x0's: {key!r} is "
                                              f"one of its model or update uploads)")


def check_server(algorithm, hook: str, state: Any, x0_shape: tuple | None, since: str = "its shape before") -> None:
    """``state``, the server state ``hook`` returned, is a dict of tensors that keeps the server
    model ``x0`` in its shape (``x0_shape``; None: the state had none). Its other keys are the
    rule's own (a table may grow: Fed+'s every party's latest model)."""
    check_tensors(algorithm, hook, state, "server state")
    if x0_shape is None:
        return
    if "x0" not in state:
        raise _refuse(algorithm, hook, "returned a server state without 'x0' (the server model it had)")
    if state["x0"].shape != x0_shape:
        raise _refuse(algorithm, hook, f"returned server state 'x0' of shape {_shape(state['x0'])} (allowed: "
                                       f"{tuple(x0_shape)}, {since})")


def check_init_server(algorithm, state: Any, x0_shape: tuple) -> None:
    """``init_server``'s state: a dict of tensors whose model ``x0``, if it has one, is the model's."""
    check_tensors(algorithm, "init_server", state, "server state")
    check_server(algorithm, "init_server", state, x0_shape if "x0" in state else None, "the model's")


def check_model(algorithm, hook: str, model: Any, dim: int, rows: int | None = None) -> None:
    """``model`` is the flat model [dim] (with ``rows``: one per client, [rows, dim])."""
    want = (dim,) if rows is None else (rows, dim)
    if not isinstance(model, Tensor) or tuple(model.shape) != want:
        raise _refuse(algorithm, hook, f"returned a model of shape {_shape(model)} (allowed: {want}: the model has "
                                       f"{dim} parameters)")
