"""A user's dataset: what a loader function returns, checked and made a :class:`Dataset`
(:mod:`fedpd.data.loaders.user` finds and calls the loader).

``problem.dataset = "module:function"`` (or the name of an installed entry point
``dataset.NAME``, :mod:`fedpd.plugins`) names a function that returns the training and test sets
as arrays (NumPy arrays, torch tensors, or anything ``numpy.asarray`` takes); the keyword options
``problem.dataset_options`` are passed to it (none: it is called with no arguments), checked
against its signature before it is called (:func:`check_options`). It returns
``(x_train, y_train, x_test, y_test)``, optionally followed by ``client_train`` and
``client_test``, or a mapping with those keys (and optionally ``num_classes``). ``x`` is
``[n, ...]`` numbers (floats become float32; integers stay int64, e.g. token ids), ``y`` is
``[n]`` integer labels in 0 .. num_classes − 1 (num_classes: the mapping's, else the largest
label + 1), ``client_*`` are ``[n]`` integer ids of each sample's owner (the ``natural``
partition: one client per id; ``client_test`` gives each client its own test samples).
Everything else is a one-line :class:`~fedpd.errors.ConfigError` naming the array.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedpd.data.loaders.base import Dataset
from fedpd.errors import ConfigError, reason

ARRAYS = ("x_train", "y_train", "x_test", "y_test")
CLIENTS = ("client_train", "client_test")
def dataset_from_arrays(parts: dict, name: str, said: str, source: str) -> Dataset:
    """A :class:`Dataset` of the arrays ``parts`` (keys :data:`ARRAYS`, optionally :data:`CLIENTS`
    and ``num_classes``), each checked; a message starts ``said`` ("problem.dataset: m:load
    returned", "data.npz holds") and names the array."""
    import torch  # here, not at the top: `fedpd data list` starts without torch

    x_train, x_test = (sample_array(parts[k], k, said) for k in ("x_train", "x_test"))
    y_train, y_test = (label_array(parts[k], k, said) for k in ("y_train", "y_test"))
    users = {k: label_array(parts[k], k, said) if parts.get(k) is not None else None for k in CLIENTS}
    for x, y, c, split in ((x_train, y_train, users["client_train"], "train"),
                           (x_test, y_test, users["client_test"], "test")):
        if len(y) != len(x) or (c is not None and len(c) != len(x)):
            lengths = [("x", len(x)), ("y", len(y))] + ([("client", len(c))] if c is not None else [])
            counts = ", ".join(f"{k}_{split} {n}" for k, n in lengths)
            raise ConfigError(f"{said} {split} arrays of different lengths ({counts}; "
                              f"allowed: one label and one client id per sample)")
        if not len(x):
            raise ConfigError(f"{said} no {split} samples (allowed: at least one)")
    if x_test.shape[1:] != x_train.shape[1:]:
        raise ConfigError(f"{said} x_train samples of shape {tuple(x_train.shape[1:])} and "
                          f"x_test samples of shape {tuple(x_test.shape[1:])} (allowed: the same shape)")
    if users["client_test"] is not None and users["client_train"] is None:
        raise ConfigError(f"{said} client_test without client_train (allowed: both, or client_train alone)")
    num_classes = _num_classes(parts.get("num_classes"), y_train, y_test, said)
    return Dataset(name, torch.from_numpy(x_train), torch.from_numpy(y_train), torch.from_numpy(x_test),
                   torch.from_numpy(y_test), num_classes,
                   *(None if c is None else torch.from_numpy(c) for c in users.values()), source=source)


def _named(returned, path: str) -> dict:
    if isinstance(returned, Mapping):
        missing = [k for k in ARRAYS if k not in returned]
        unknown = [k for k in returned if k not in (*ARRAYS, *CLIENTS, "num_classes")]
        if missing or unknown:
            what = f"no {missing[0]!r}" if missing else f"an unknown key {unknown[0]!r}"
            raise ConfigError(f"problem.dataset: {path} returned a mapping with {what} (allowed: "
                              f"{', '.join((*ARRAYS, *CLIENTS))}, num_classes)")
        return dict(returned)
    if isinstance(returned, Sequence) and not isinstance(returned, (str, bytes)) and len(returned) in (4, 5, 6):
        return dict(zip((*ARRAYS, *CLIENTS), returned))
    raise ConfigError(f"problem.dataset: {path} returned {type(returned).__name__} (allowed: (x_train, y_train, "
                      f"x_test, y_test[, client_train[, client_test]]) or a mapping with those keys)")


def _array(value, key: str, said: str) -> np.ndarray:
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{said} a {key} that is not an array ({reason(err, 300)})") from None
    if array.dtype.kind not in "biuf":
        raise ConfigError(f"{said} {key} of dtype {array.dtype} (allowed: numbers)")
    return array


def sample_array(value, key: str, said: str) -> np.ndarray:
    x = _array(value, key, said)
    if x.ndim < 2:
        raise ConfigError(f"{said} {key} of shape {x.shape} (allowed: [samples, features...])")
    if x.dtype.kind in "iu":
        return np.ascontiguousarray(x, dtype=np.int64)  # token ids, for embedding models
    if x.dtype.kind == "f" and not np.isfinite(x).all():
        raise ConfigError(f"{said} {key} with NaN or infinite values (allowed: finite numbers; fedpd does not "
                          f"impute missing values)")
    return np.ascontiguousarray(x, dtype=np.float32)


def label_array(value, key: str, said: str) -> np.ndarray:
    y = _array(value, key, said)
    what = "labels" if key.startswith("y") else "client ids"
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise ConfigError(f"{said} {key} of shape {y.shape} and dtype {y.dtype} (allowed: [samples] integer {what})")
    return np.ascontiguousarray(y, dtype=np.int64)


def _num_classes(declared, y_train: np.ndarray, y_test: np.ndarray, said: str) -> int:
    low, high = min(y_train.min(), y_test.min()), max(y_train.max(), y_test.max())
    if declared is None:
        declared = int(high) + 1
    elif isinstance(declared, bool) or not isinstance(declared, (int, np.integer)) or declared < 1:
        raise ConfigError(f"{said} num_classes = {declared!r} (allowed: an integer >= 1)")
    if low < 0 or high >= declared:
        bad = int(low) if low < 0 else int(high)
        raise ConfigError(f"{said} label {bad}, out of range (allowed: 0..{declared - 1} for {declared} classes)")
    return int(declared)
