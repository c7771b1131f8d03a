"""CIFAR-10 / CIFAR-100 "python version" pickled batches (Krizhevsky 2009), as the extracted folder
or straight from the original ``.tar.gz``, and, for ``cifar10``, the JPEG copy
``cifar-10-jpeg[.tar.gz]`` (an image folder). Batches are unpickled with an allow-list of globals,
so a file cannot run code."""

from __future__ import annotations

import io
import pickle
import tarfile
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

import numpy as np

from fedpd.data import checksums
from fedpd.data.loaders.base import Dataset, NotFound, as_labels, looked_in, u8_images
from fedpd.data.loaders.images import load_image_folder
from fedpd.errors import ConfigError, DataError

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@lru_cache(maxsize=None)
def _pickle_globals() -> dict[tuple[str, str], object]:
    """The only globals a CIFAR batch may reference: numpy's array reconstruction helpers, and
    ``_codecs.encode``, which Python 3 writes for bytes in protocol-2 pickles."""
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy < 2
        from numpy.core import multiarray, numeric
    import _codecs

    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype, ("_codecs", "encode"): _codecs.encode}
    for mod in ("numpy.core", "numpy._core"):
        allowed[(f"{mod}.multiarray", "_reconstruct")] = multiarray._reconstruct
        if hasattr(numeric, "_frombuffer"):
            allowed[(f"{mod}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


class _CifarUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        obj = _pickle_globals().get((module, name))
        if obj is None:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR batch")
        return obj


def _unpickle(data: bytes, where: str) -> dict:
    try:
        obj = _CifarUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as e:  # pickle raises many types on bad input
        raise DataError(f"{where}: not a readable CIFAR python pickle ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{where}: pickle holds a {type(obj).__name__}, expected a dict")
    return obj


@dataclass(frozen=True)
class _CifarLayout:
    folder: str
    archive: str
    train: tuple[str, ...]
    test: tuple[str, ...]
    meta: str
    dirs: tuple[str, ...]


_CIFAR = {
    "cifar10": _CifarLayout("cifar-10-batches-py", "cifar-10-python.tar.gz",
                            tuple(f"data_batch_{i}" for i in range(1, 6)), ("test_batch",), "batches.meta",
                            ("", "cifar10", "cifar-10")),
    "cifar100": _CifarLayout("cifar-100-python", "cifar-100-python.tar.gz", ("train",), ("test",), "meta",
                             ("", "cifar100", "cifar-100")),
}
_JPEG_NAME = "cifar-10-jpeg"


def find_cifar(root: Path, name: str) -> tuple[str, Path]:
    """("folder" | "tar" | "jpeg", path) of the first CIFAR copy found."""
    lay = _CIFAR[name]
    dirs = [root / d if d else root for d in lay.dirs]
    for d in dirs:
        if (d / lay.folder).is_dir():
            return "folder", d / lay.folder
        if (d / lay.archive).is_file():
            return "tar", d / lay.archive
    expected = f"{lay.folder}/ or {lay.archive}"
    if name == "cifar10":
        for d in dirs:
            if (d / f"{_JPEG_NAME}.tar.gz").is_file():
                return "jpeg", d / f"{_JPEG_NAME}.tar.gz"
            if (d / _JPEG_NAME).is_dir():
                return "jpeg", d / _JPEG_NAME
        expected += f" (or {_JPEG_NAME}.tar.gz / {_JPEG_NAME}/)"
    raise NotFound(f"{name}: {expected} not found in {looked_in(dirs)}", dirs)


def _cifar_members(kind: str, path: Path, wanted: list[str]) -> dict[str, bytes]:
    """Raw bytes of the wanted batch files from the extracted folder or straight from the .tar.gz."""
    out: dict[str, bytes] = {}
    if kind == "folder":
        for w in wanted:
            f = path / w
            if not f.is_file():
                raise DataError(f"{path}: missing {w}; expected {', '.join(wanted)}")
            out[w] = f.read_bytes()
        return out
    folder = None
    try:
        with tarfile.open(path, "r:*") as tf:
            for m in tf:
                parts = PurePosixPath(m.name).parts
                parts = parts[1:] if parts and parts[0] == "." else parts
                if m.isfile() and len(parts) == 2 and parts[1] in wanted:
                    folder = parts[0]
                    out[parts[1]] = tf.extractfile(m).read()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: corrupt or truncated archive ({e}); expected a complete tar.gz") from None
    lacking = [w for w in wanted if w not in out]
    if lacking:
        raise DataError(f"{path}: archive lacks {', '.join(lacking)} (found {folder or 'no batch files'})")
    return out


def _cifar_batch(d: dict, where: str, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    data, labels = d.get(b"data"), d.get(label_key)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{where}: b'data' is {got}, expected a uint8 array N x 3072")
    if labels is None:
        raise DataError(f"{where}: no {label_key!r} entry, expected one label per row")
    try:
        labels = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError):
        raise DataError(f"{where}: {label_key!r} is not a list of integers, expected one label per row") from None
    if labels.shape != (len(data),):
        raise DataError(f"{where}: {labels.size} labels for {len(data)} images, expected equal counts")
    return data, labels


def _cifar_files(name: str) -> list[str]:
    lay = _CIFAR[name]
    return [*lay.train, *lay.test, lay.meta]


def _check_cifar_folder(name: str, path: Path, hash_it: bool) -> None:
    """Every batch file of an extracted folder is there; canonical ones have their size (and hash)."""
    for f in _cifar_files(name):
        if not (path / f).is_file():
            raise DataError(f"{path}: missing {f}; expected {', '.join(_cifar_files(name))}")
        checksums.check_canonical(name, path / f, hash_it=hash_it)


def _read_cifar(kind: str, path: Path, name: str, label_mode: str):
    """((x_train, y_train), (x_test, y_test)) as uint8 rows N x 3072 and labels, and the class names;
    every batch is unpickled and checked (DataError names the file)."""
    lay = _CIFAR[name]
    raw = _cifar_members(kind, path, _cifar_files(name))
    if name == "cifar10":
        label_key, names_key = b"labels", b"label_names"
    else:
        label_key, names_key = (b"fine_labels", b"fine_label_names") if label_mode == "fine" else \
                               (b"coarse_labels", b"coarse_label_names")
    splits = []
    for files in (lay.train, lay.test):
        xs, ys = zip(*(_cifar_batch(_unpickle(raw[f], f"{path}/{f}"), f"{path}/{f}", label_key) for f in files))
        splits.append((np.concatenate(xs), np.concatenate(ys)))
    meta = _unpickle(raw[lay.meta], f"{path}/{lay.meta}")
    names = meta.get(names_key)
    if not isinstance(names, list):
        raise DataError(f"{path}/{lay.meta}: no {names_key!r} list, expected the class names")
    classes = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    num_classes = len(classes)
    for (x, y), split in zip(splits, ("train", "test")):
        if len(y) and (y.min() < 0 or y.max() >= num_classes):
            bad = int(y.min()) if y.min() < 0 else int(y.max())
            raise DataError(
                f"{path}: {split} label {bad} out of range, expected 0-{num_classes - 1} "
                f"({lay.meta} names {num_classes})"
            )
    return splits, classes


def load_cifar(root: Path, name: str, verify: bool = True, label_mode: str = "fine") -> Dataset:
    if label_mode not in ("fine", "coarse"):
        raise ConfigError(f"{name}: label_mode={label_mode!r}, expected 'fine' or 'coarse'")
    kind, path = find_cifar(root, name)
    if verify and kind == "folder":
        _check_cifar_folder(name, path, hash_it=True)
    elif verify:
        checksums.check_canonical(name, path)
    if kind == "jpeg":
        ds = load_image_folder(path, name=name)
        if ds.classes != CIFAR10_CLASSES:
            raise DataError(f"{path}: class folders {ds.classes}, expected the CIFAR-10 classes {CIFAR10_CLASSES}")
        ds.meta["format"] = "jpeg"
        return ds
    ((x_tr, y_tr), (x_te, y_te)), classes = _read_cifar(kind, path, name, label_mode)
    return Dataset(name=name, x_train=u8_images(x_tr.reshape(-1, 3, 32, 32)), y_train=as_labels(y_tr),
                   x_test=u8_images(x_te.reshape(-1, 3, 32, 32)), y_test=as_labels(y_te), num_classes=len(classes),
                   classes=classes, source=str(path), meta={"format": "python", "label_mode": label_mode})



def check_cifar(root: Path, name: str, verify: bool) -> None:
    """An extracted folder: every batch present with its canonical size; with ``verify`` also hashed,
    unpickled and checked (shape, labels), so a corrupt folder is not reported present."""
    kind, path = find_cifar(root, name)
    if kind == "folder":
        _check_cifar_folder(name, path, hash_it=verify)
        if verify:
            _read_cifar(kind, path, name, "fine")
