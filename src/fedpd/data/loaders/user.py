"""A user's loader: the function ``problem.dataset`` names, checked against its options and
called; what it returns is checked by :mod:`fedpd.data.loaders.arrays`."""

from __future__ import annotations

import inspect

from fedpd import names, plugins
from fedpd.data.loaders import ALIASES, DATASETS
from fedpd.data.loaders.arrays import _named, dataset_from_arrays
from fedpd.data.loaders.base import Dataset
from fedpd.errors import ConfigError, reason
from fedpd.options import NoOptions

#: what a loader plug-in is, said when one is refused
PLUGIN = "a loader is a function called with problem.dataset_options as keywords, or with no arguments"


#: what ``problem.dataset`` names (:func:`fedpd.names.resolve`): fedpd's own datasets, or a loader
KIND = names.Kind("dataset", {name: names.Entry(name, spec, NoOptions, "fedpd's own dataset (fedpd data list)")
                              for name, spec in {**DATASETS, **ALIASES}.items()},
                  plugin=PLUGIN, options=False, args=None)  # its call is checked with its options: check_options


def user_loader(name: str):
    """The loader function ``problem.dataset`` names, or None for one of fedpd's datasets;
    :class:`~fedpd.plugins.PluginError` (one line) for a name that is neither."""
    if isinstance(name, str) and name not in KIND.builtins and name.lower() in KIND.builtins:
        return None  # fedpd's own, in other letters (the loader folds the case)
    entry = names.resolve(KIND, name)
    return None if entry.origin == names.BUILT_IN else entry.build


def check_options(loader, path: str, options: dict) -> str | None:
    """Why ``loader`` cannot be called with the keyword ``options`` (``problem.dataset_options``),
    read from its signature alone; None: it can."""
    try:
        signature = inspect.signature(loader)
    except (TypeError, ValueError):
        return f"{path} has no signature to check (got {names.what(loader)}); {PLUGIN}"
    try:
        signature.bind(**options)
    except TypeError as err:
        text = str(signature)
        text = text if len(text) <= 80 else text[:75] + " ...)"
        call = ", ".join(f"{k}=..." for k in options)
        return f"{path}{text} cannot be called as fedpd calls a dataset plug-in, ({call}): {err} ({PLUGIN})"
    return None


def load_user_dataset(path: str, options: dict | None = None) -> Dataset:
    """The dataset the loader ``path`` names returns when called with the keyword ``options``,
    checked (one line on any problem)."""
    options = dict(options or {})
    try:
        loader = user_loader(path)
    except plugins.PluginError as err:
        raise ConfigError(f"problem.dataset: {err}") from None
    wrong = check_options(loader, path, options)
    if wrong:
        raise ConfigError(f"problem.{'dataset_options' if options else 'dataset'}: {wrong}")
    try:
        returned = loader(**options)
    except Exception as err:
        raise ConfigError(f"problem.dataset: {path}() raised {reason(err, 300)}") from None
    return dataset_from_arrays(_named(returned, path), path, f"problem.dataset: {path} returned", path)


