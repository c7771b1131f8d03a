"""Dataset loaders: standard public file formats in a data directory -> torch tensors in memory.

Formats read (nothing is extracted to disk), one module each:

* :mod:`~fedpd.data.loaders.idx` — idx files (LeCun et al.'s MNIST format; also Fashion-MNIST),
  gzipped or not;
* :mod:`~fedpd.data.loaders.cifar` — CIFAR-10 / CIFAR-100 "python version" pickled batches, as the
  extracted folder or the original ``.tar.gz`` (Krizhevsky 2009), and, for ``cifar10``, the JPEG
  copy ``cifar-10-jpeg[.tar.gz]``;
* :mod:`~fedpd.data.loaders.images` — image folders ``train/<class>/*.png|jpg`` +
  ``test/<class>/...`` (folder or ``.tar.gz``; needs Pillow);
* :mod:`~fedpd.data.loaders.leaf` — LEAF JSON (Caldas et al. 2018) for FEMNIST, Shakespeare and
  Sent140, keeping each sample's user; GloVe vectors;
* :mod:`~fedpd.data.loaders.tabular` — a user's table: a CSV file, or a NumPy ``.npz`` archive.

This module is the table of datasets: ``load_dataset(name, data_dir=None, **options)`` is the
entry point, ``DATASETS`` lists the names, ``dataset_status`` finds a dataset's files without
loading them. Every bad input raises ``DataError`` / ``ConfigError`` with a one-line message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fedpd.data import checksums
from fedpd.data.loaders.base import Dataset, NotFound, looked_in, resolve_data_dir
from fedpd.data.loaders.cifar import check_cifar, find_cifar, load_cifar
from fedpd.data.loaders.idx import find_idx, load_idx, read_idx
from fedpd.data.loaders.images import load_image_folder, load_image_folder_option
from fedpd.data.loaders.leaf import LEAF_CHARS, find_leaf, load_glove, load_leaf
from fedpd.errors import ConfigError, DataError

__all__ = ["ALIASES", "DATASETS", "LEAF_CHARS", "Dataset", "NotFound", "Status", "canonical_name", "dataset_options",
           "dataset_status", "load_dataset", "load_glove", "load_image_folder", "read_idx", "resolve_data_dir"]


@dataclass(frozen=True)
class _Spec:
    description: str
    load: Callable[..., Dataset]
    options: tuple[str, ...]
    locate: Callable[[Path], list[Path]] | None  # the files that make up the dataset (raises NotFound)
    check: Callable[[Path, bool], None] | None = None  # (root, verify): deeper check for dataset_status


def _idx_spec(name: str, description: str) -> _Spec:
    return _Spec(description, lambda root, **o: load_idx(root, name, **o), ("verify",),
                 lambda root: list(find_idx(root, name).values()))


def _cifar_spec(name: str, description: str, options: tuple[str, ...]) -> _Spec:
    return _Spec(description, lambda root, **o: load_cifar(root, name, **o), options,
                 lambda root: [find_cifar(root, name)[1]], lambda root, verify: check_cifar(root, name, verify))


def _leaf_spec(name: str, description: str, options: tuple[str, ...] = ()) -> _Spec:
    return _Spec(description, lambda root, **o: load_leaf(root, name, **o), options,
                 lambda root: [p for files in find_leaf(root, name) for p in files])


def _tabular(name: str) -> Callable[..., Dataset]:
    def load(root: Path, **options) -> Dataset:
        from fedpd.data.loaders import tabular  # (it checks arrays as a loader's: fedpd.data.loaders.arrays)

        return getattr(tabular, f"load_{name}")(root, **options)

    return load


_SPECS: dict[str, _Spec] = {
    "mnist": _idx_spec("mnist", "MNIST handwritten digits, 28x28 grey, 10 classes, 60k/10k (idx files)"),
    "fashion-mnist": _idx_spec("fashion-mnist", "Fashion-MNIST clothing, 28x28 grey, 10 classes, 60k/10k (idx files)"),
    "cifar10": _cifar_spec("cifar10", "CIFAR-10, 32x32 RGB, 10 classes, 50k/10k (python batches, or the JPEG copy)",
                           ("verify",)),
    "cifar100": _cifar_spec("cifar100", "CIFAR-100, 32x32 RGB, 100 fine / 20 coarse classes, 50k/10k (python batches)",
                            ("verify", "label_mode")),
    "femnist": _leaf_spec("femnist", "LEAF FEMNIST, 28x28 grey characters by writer, 62 classes (LEAF JSON)"),
    "shakespeare": _leaf_spec("shakespeare", "LEAF Shakespeare, next character after 80, by speaker (LEAF JSON)"),
    "sent140": _leaf_spec("sent140", "LEAF Sent140, tweet sentiment 0/1 by user, word ids (LEAF JSON)",
                          ("vocab_size", "seq_len")),
    "image-folder": _Spec("train/<class>/*.png|jpg + test/<class>/... as a folder or .tar.gz (option path=...)",
                          load_image_folder_option, ("path", "mode"), None),
    "csv": _Spec("your table: a CSV file with a header, a label column and numeric features (option path=...)",
                 _tabular("csv"), ("path", "test_path", "label_column", "client_column", "holdout", "seed"), None),
    "npz": _Spec("your arrays: a NumPy .npz of x and y, or x_train, y_train, x_test, y_test (option path=...)",
                 _tabular("npz"), ("path", "test_path", "holdout", "seed"), None),
}

#: dataset name -> one-line description
DATASETS: dict[str, str] = {name: spec.description for name, spec in _SPECS.items()}
ALIASES = {"fmnist": "fashion-mnist", "fashion_mnist": "fashion-mnist", "cifar-10": "cifar10", "cifar-100": "cifar100"}


def canonical_name(name: str) -> str:
    """The registry name for ``name`` (aliases like ``fmnist`` resolved); ConfigError if unknown."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in _SPECS:
        raise ConfigError(f"unknown dataset {name!r}; expected one of {', '.join(_SPECS)}")
    return key


def dataset_options(name: str) -> tuple[str, ...]:
    """The keyword options ``load_dataset(name, ...)`` accepts."""
    return _SPECS[canonical_name(name)].options


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, **options) -> Dataset:
    """Load dataset ``name`` (see ``DATASETS``) from ``resolve_data_dir(data_dir)``.

    Options: ``verify`` (mnist, fashion-mnist, cifar10, cifar100; default True: canonical file names must have
    the canonical size and hash), ``label_mode`` ("fine" | "coarse", cifar100), ``vocab_size`` / ``seq_len``
    (sent140), ``path`` / ``mode`` (image-folder), ``path`` / ``test_path`` / ``holdout`` / ``seed`` (csv, npz)
    and ``label_column`` / ``client_column`` (csv).
    """
    key = canonical_name(name)
    spec = _SPECS[key]
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        raise ConfigError(
            f"{key}: unknown option(s) {', '.join(unknown)}; expected {', '.join(spec.options) or 'none'}"
        )
    return spec.load(resolve_data_dir(data_dir), **options)


@dataclass
class Status:
    """Whether a dataset's files are present: ``state`` is present | missing | corrupt | n/a."""

    name: str
    state: str
    where: str
    detail: str = ""
    looked: list[Path] = field(default_factory=list)


def dataset_status(name: str, data_dir: str | os.PathLike | None = None, verify: bool = False) -> Status:
    """Find ``name``'s files without loading them; check canonical file sizes (and hashes if ``verify``).

    An extracted CIFAR folder must hold every batch file; with ``verify`` each batch is also unpickled and checked."""
    key = canonical_name(name)
    spec, root = _SPECS[key], resolve_data_dir(data_dir)
    if spec.locate is None:
        return Status(key, "n/a", "", "needs path=")
    try:
        files = spec.locate(root)
    except NotFound as e:
        return Status(key, "missing", "looked in " + looked_in(e.looked), str(e), e.looked)
    where = str(os.path.commonpath([str(p) for p in files])) if files else str(root)
    try:
        for p in files:
            if p.is_file():
                checksums.check_canonical(key, p, hash_it=verify)
        if spec.check is not None:
            spec.check(root, verify)
    except DataError as e:
        return Status(key, "corrupt", where, str(e))
    return Status(key, "present", where)
