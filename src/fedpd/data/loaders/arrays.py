"""A user's dataset: what a loader function returns, checked and made a :class:`Dataset`.

``problem.dataset = "module:function"`` (or the name of an installed entry point
``dataset.NAME``, :mod:`fedpd.plugins`) names a function of no arguments that returns the
training and test sets as arrays (NumPy arrays, torch tensors, or anything ``numpy.asarray``
takes): ``(x_train, y_train, x_test, y_test)``, optionally followed by ``client_train`` and
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

from fedpd import names, plugins
from fedpd.data.loaders import ALIASES, DATASETS
from fedpd.data.loaders.base import Dataset
from fedpd.errors import ConfigError, reason
from fedpd.options import NoOptions

ARRAYS = ("x_train", "y_train", "x_test", "y_test")
CLIENTS = ("client_train", "client_test")


#: what ``problem.dataset`` names (:func:`fedpd.names.resolve`): fedpd's own datasets, or a loader
KIND = names.Kind("dataset", {name: names.Entry(name, spec, NoOptions, "fedpd's own dataset (fedpd data list)")
                              for name, spec in {**DATASETS, **ALIASES}.items()},
                  plugin="a loader is a function of no arguments", options=False)


def user_loader(name: str):
    """The loader function ``problem.dataset`` names, or None for one of fedpd's datasets;
    :class:`~fedpd.plugins.PluginError` (one line) for a name that is neither."""
    if isinstance(name, str) and name not in KIND.builtins and name.lower() in KIND.builtins:
        return None  # fedpd's own, in other letters (the loader folds the case)
    entry = names.resolve(KIND, name)
    return None if entry.origin == names.BUILT_IN else entry.build


def load_user_dataset(path: str) -> Dataset:
    """The dataset the loader ``path`` names returns, checked (one line on any problem)."""
    import torch  # here, not at the top: `fedpd data list` starts without torch

    try:
        loader = user_loader(path)
    except plugins.PluginError as err:
        raise ConfigError(f"problem.dataset: {err}") from None
    try:
        returned = loader()
    except Exception as err:
        raise ConfigError(f"problem.dataset: {path}() raised {reason(err, 300)}") from None
    parts = _named(returned, path)
    x_train, x_test = (_samples(parts[k], k, path) for k in ("x_train", "x_test"))
    y_train, y_test = (_labels(parts[k], k, path) for k in ("y_train", "y_test"))
    users = {k: _labels(parts[k], k, path) if parts.get(k) is not None else None for k in CLIENTS}
    for x, y, c, split in ((x_train, y_train, users["client_train"], "train"),
                           (x_test, y_test, users["client_test"], "test")):
        if len(y) != len(x) or (c is not None and len(c) != len(x)):
            lengths = [("x", len(x)), ("y", len(y))] + ([("client", len(c))] if c is not None else [])
            counts = ", ".join(f"{k}_{split} {n}" for k, n in lengths)
            raise ConfigError(f"problem.dataset: {path} returned {split} arrays of different lengths ({counts}; "
                              f"allowed: one label and one client id per sample)")
        if not len(x):
            raise ConfigError(f"problem.dataset: {path} returned no {split} samples (allowed: at least one)")
    if x_test.shape[1:] != x_train.shape[1:]:
        raise ConfigError(f"problem.dataset: {path} returned x_train samples of shape {tuple(x_train.shape[1:])} and "
                          f"x_test samples of shape {tuple(x_test.shape[1:])} (allowed: the same shape)")
    if users["client_test"] is not None and users["client_train"] is None:
        raise ConfigError(f"problem.dataset: {path} returned client_test without client_train (allowed: both, or "
                          f"client_train alone)")
    num_classes = _num_classes(parts.get("num_classes"), y_train, y_test, path)
    return Dataset(path, torch.from_numpy(x_train), torch.from_numpy(y_train), torch.from_numpy(x_test),
                   torch.from_numpy(y_test), num_classes,
                   *(None if c is None else torch.from_numpy(c) for c in users.values()), source=path)


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


def _array(value, key: str, path: str) -> np.ndarray:
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"problem.dataset: {path} returned a {key} that is not an array ({reason(err, 300)})") \
            from None
    if array.dtype.kind not in "biuf":
        raise ConfigError(f"problem.dataset: {path} returned {key} of dtype {array.dtype} (allowed: numbers)")
    return array


def _samples(value, key: str, path: str) -> np.ndarray:
    x = _array(value, key, path)
    if x.ndim < 2:
        raise ConfigError(f"problem.dataset: {path} returned {key} of shape {x.shape} (allowed: [samples, "
                          f"features...])")
    if x.dtype.kind in "iu":
        return np.ascontiguousarray(x, dtype=np.int64)  # token ids, for embedding models
    if x.dtype.kind == "f" and not np.isfinite(x).all():
        raise ConfigError(f"problem.dataset: {path} returned {key} with NaN or infinite values (allowed: finite "
                          f"numbers)")
    return np.ascontiguousarray(x, dtype=np.float32)


def _labels(value, key: str, path: str) -> np.ndarray:
    y = _array(value, key, path)
    what = "labels" if key.startswith("y") else "client ids"
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise ConfigError(f"problem.dataset: {path} returned {key} of shape {y.shape} and dtype {y.dtype} (allowed: "
                          f"[samples] integer {what})")
    return np.ascontiguousarray(y, dtype=np.int64)


def _num_classes(declared, y_train: np.ndarray, y_test: np.ndarray, path: str) -> int:
    low, high = min(y_train.min(), y_test.min()), max(y_train.max(), y_test.max())
    if declared is None:
        declared = int(high) + 1
    elif isinstance(declared, bool) or not isinstance(declared, (int, np.integer)) or declared < 1:
        raise ConfigError(f"problem.dataset: {path} returned num_classes = {declared!r} (allowed: an integer >= 1)")
    if low < 0 or high >= declared:
        bad = int(low) if low < 0 else int(high)
        raise ConfigError(f"problem.dataset: {path} returned label {bad}, out of range (allowed: 0..{declared - 1} for "
                          f"{declared} classes)")
    return int(declared)
