"""What an algorithm's hooks return, checked where fedpd takes it.

A plug-in algorithm's hook that returns a state of the wrong shape would otherwise fail wherever
the state is next used — a store's row copy, the flat model's views, another hook — with a
traceback that names neither. Here it is one line (:class:`~fedpd.errors.ConfigError` naming
``algorithm.name``, the hook and the key): a client state keeps the shape ``init_client`` gave
it, for each of the hook's K clients; an upload holds one row per client; a server state keeps
its model ``x0`` [d]; the evaluation model is [d] (personal models [N, d]). The checks read
shapes only: they cost nothing next to a round.
"""

from __future__ import annotations

from typing import Any, Mapping

from torch import Tensor

from fedpd.errors import ConfigError
from fedpd.names import what


def _shape(value: Any) -> str:
    return str(tuple(value.shape)) if isinstance(value, Tensor) else what(value)


def _refuse(algorithm, hook: str, text: str) -> ConfigError:
    return ConfigError(f"algorithm.name: {type(algorithm).__qualname__}.{hook} {text}")


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
    new = algorithm.receive(clients, reply, ctx)
    check_clients(algorithm, "receive", new, shapes, ctx.ids.numel())
    return new


def check_uploads(algorithm, uploads: Any, rows: int) -> None:
    """``uploads`` from ``local``: a dict of tensors, one row per client (what each row holds is
    the algorithm's; a rule may upload part of the model)."""
    check_tensors(algorithm, "local", uploads, "upload")
    for key, value in uploads.items():
        if value.dim() == 0 or value.shape[0] != rows:
            raise _refuse(algorithm, "local", f"returned upload {key!r} of shape {_shape(value)} for {rows} clients "
                                              f"(allowed: one row per client, ({rows}, ...))")


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


def check_model(algorithm, hook: str, model: Any, dim: int, rows: int | None = None) -> None:
    """``model`` is the flat model [dim] (with ``rows``: one per client, [rows, dim])."""
    want = (dim,) if rows is None else (rows, dim)
    if not isinstance(model, Tensor) or tuple(model.shape) != want:
        raise _refuse(algorithm, hook, f"returned a model of shape {_shape(model)} (allowed: {want}: the model has "
                                       f"{dim} parameters)")
