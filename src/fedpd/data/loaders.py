"""Dataset loaders: standard public file formats in a data directory -> torch tensors in memory.

Formats read (nothing is extracted to disk):

* idx files (LeCun et al.'s MNIST format; also Fashion-MNIST), gzipped or not;
* CIFAR-10 / CIFAR-100 "python version" pickled batches, as the extracted folder or the original
  ``.tar.gz`` (Krizhevsky 2009), and, for ``cifar10``, the JPEG copy ``cifar-10-jpeg[.tar.gz]``;
* image folders ``train/<class>/*.png|jpg`` + ``test/<class>/...`` (folder or ``.tar.gz``; needs Pillow);
* LEAF JSON (Caldas et al. 2018) for FEMNIST, Shakespeare and Sent140, keeping each sample's user.

``load_dataset(name, data_dir=None, **options)`` is the entry point; ``DATASETS`` lists the names.
Every bad input raises ``DataError`` / ``ConfigError`` with a one-line message.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import struct
import tarfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Callable

import numpy as np
import torch

from fedpd.data import checksums
from fedpd.errors import ConfigError, DataError

# LEAF's Shakespeare alphabet (80 characters); index 80 is reserved for characters outside it.
LEAF_CHARS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
assert len(LEAF_CHARS) == 80 and len(set(LEAF_CHARS)) == 80
SHAKESPEARE_UNKNOWN = len(LEAF_CHARS)

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")


@dataclass(repr=False)
class Dataset:
    """A dataset in memory.

    Images are float32 ``N x C x H x W`` in [0, 1]; token sequences are int64 ``N x L``; labels are int64.
    For LEAF data ``train_users`` / ``test_users`` give each sample's user index into ``users`` (the
    natural partition); they are None for the other datasets.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    train_users: torch.Tensor | None = None
    test_users: torch.Tensor | None = None
    users: list[str] | None = None
    classes: list[str] | None = None
    source: str = ""
    meta: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        users = f", users={len(self.users)}" if self.users is not None else ""
        return (f"Dataset({self.name!r}, train={tuple(self.x_train.shape)}, test={tuple(self.x_test.shape)}, "
                f"num_classes={self.num_classes}{users}, source={self.source!r})")


class NotFound(DataError):
    """The dataset's files are not in any of the places looked at (``looked`` lists them)."""

    def __init__(self, message: str, looked: list[Path]):
        super().__init__(message)
        self.looked = looked


# ---------------------------------------------------------------------------------------------- data dir

def resolve_data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The data directory: ``explicit`` if given, else ``$FEDPD_DATA``, else ``$XDG_CACHE_HOME/fedpd/data``
    (``~/.cache/fedpd/data`` when XDG_CACHE_HOME is unset or not absolute)."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("FEDPD_DATA")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    cache = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return cache / "fedpd" / "data"


def _looked(paths: list[Path]) -> str:
    return ", ".join(str(p) for p in paths)


def _u8_images(x: np.ndarray) -> torch.Tensor:
    """uint8 N x C x H x W -> float32 in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).div_(255.0)


def _labels(y) -> torch.Tensor:
    return torch.from_numpy(np.asarray(y, dtype=np.int64).copy())


# ---------------------------------------------------------------------------------------------- idx

_IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_TORCHVISION_DIRS = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}
IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC = 2051, 2049


def _read_bytes(path: Path) -> bytes:
    """A file's content, gunzipped when it starts with the gzip magic bytes."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: corrupt or truncated gzip data ({e}); expected a complete .gz file") from None
    return data


def read_idx(path: Path, magic: int) -> np.ndarray:
    """Read one idx file (gzipped or not) holding uint8 data; check its magic number and length."""
    path = Path(path)
    data = _read_bytes(path)
    kind = {IDX_IMAGES_MAGIC: "images", IDX_LABELS_MAGIC: "labels"}.get(magic, "data")
    if len(data) < 4:
        raise DataError(f"{path}: truncated, {len(data)} bytes, expected an idx header (magic {magic})")
    got = int.from_bytes(data[:4], "big")
    if got != magic:
        raise DataError(f"{path}: bad idx magic number {got}, expected {magic} (idx {kind} file)")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path}: truncated, {len(data)} bytes, expected a {header}-byte idx header")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    n = int(np.prod(dims))
    if len(data) - header != n:
        what = "truncated" if len(data) - header < n else "trailing bytes"
        raise DataError(f"{path}: {what}, {len(data) - header} data bytes, expected {n} for shape {dims}")
    return np.frombuffer(data, np.uint8, count=n, offset=header).reshape(dims)


def _idx_dirs(root: Path, name: str) -> list[Path]:
    return [root / name, root / name / "raw", root / _TORCHVISION_DIRS[name] / "raw"]


def _find_idx(root: Path, name: str) -> dict[str, Path]:
    dirs = _idx_dirs(root, name)
    for d in dirs:
        found = {}
        for key, stem in _IDX_FILES.items():
            variants = (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz")
            for v in variants:
                if (d / v).is_file():
                    found[key] = d / v
                    break
        if len(found) == len(_IDX_FILES):
            return found
        if found:
            lacking = [_IDX_FILES[k] + "[.gz]" for k in _IDX_FILES if k not in found]
            raise NotFound(f"{name}: {d} lacks {', '.join(lacking)}", dirs)
    raise NotFound(f"{name}: idx files (train-images-idx3-ubyte[.gz] and 3 more) not found in {_looked(dirs)}", dirs)


def _load_idx(root: Path, name: str, verify: bool = True) -> Dataset:
    files = _find_idx(root, name)
    if verify:
        for p in files.values():
            checksums.check_canonical(name, p)
    x_tr = read_idx(files["train_images"], IDX_IMAGES_MAGIC)
    y_tr = read_idx(files["train_labels"], IDX_LABELS_MAGIC)
    x_te = read_idx(files["test_images"], IDX_IMAGES_MAGIC)
    y_te = read_idx(files["test_labels"], IDX_LABELS_MAGIC)
    for x, y, kx, ky in ((x_tr, y_tr, "train_images", "train_labels"), (x_te, y_te, "test_images", "test_labels")):
        if len(x) != len(y):
            raise DataError(f"{files[kx]}: {len(x)} images but {files[ky].name} has {len(y)} labels; expected equal counts")
        if len(y) and int(y.max()) > 9:
            raise DataError(f"{files[ky]}: label {int(y.max())} out of range, expected 0-9")
    return Dataset(name=name, x_train=_u8_images(x_tr[:, None]), y_train=_labels(y_tr),
                   x_test=_u8_images(x_te[:, None]), y_test=_labels(y_te), num_classes=10,
                   source=str(files["train_images"].parent))


# ---------------------------------------------------------------------------------------------- CIFAR pickles

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


def _find_cifar(root: Path, name: str) -> tuple[str, Path]:
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
    raise NotFound(f"{name}: {expected} not found in {_looked(dirs)}", dirs)


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
            raise DataError(f"{path}: {split} label {bad} out of range, expected 0-{num_classes - 1} ({lay.meta} names {num_classes})")
    return splits, classes


def _load_cifar(root: Path, name: str, verify: bool = True, label_mode: str = "fine") -> Dataset:
    if label_mode not in ("fine", "coarse"):
        raise ConfigError(f"{name}: label_mode={label_mode!r}, expected 'fine' or 'coarse'")
    kind, path = _find_cifar(root, name)
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
    return Dataset(name=name, x_train=_u8_images(x_tr.reshape(-1, 3, 32, 32)), y_train=_labels(y_tr),
                   x_test=_u8_images(x_te.reshape(-1, 3, 32, 32)), y_test=_labels(y_te), num_classes=len(classes),
                   classes=classes, source=str(path), meta={"format": "python", "label_mode": label_mode})


# ---------------------------------------------------------------------------------------------- image folders

def _pil_image():
    try:
        from PIL import Image
    except ImportError:
        raise DataError("reading image files needs Pillow, which is not installed: pip install pillow "
                        "(or pip install 'fedpd[data]')") from None
    return Image


def _decode(Image, data: bytes, where: str, mode: str) -> np.ndarray:
    ext = where.rsplit(".", 1)[-1].lower()
    formats = {"jpg": ["JPEG"], "jpeg": ["JPEG"], "png": ["PNG"]}.get(ext)
    try:
        try:
            im = Image.open(io.BytesIO(data), formats=formats)
        except Exception:
            if formats is None:
                raise
            im = Image.open(io.BytesIO(data))  # wrong extension: let Pillow detect the format
        if im.mode != mode:
            im = im.convert(mode)
        return np.asarray(im)
    except Exception as e:
        raise DataError(f"{where}: cannot decode image ({type(e).__name__}: {e})") from None


def _split_key(parts: tuple[str, ...]) -> tuple[str, str] | None:
    """(split, class) for paths ``split/class/file`` or ``top/split/class/file``, else None."""
    if parts and parts[0] == ".":
        parts = parts[1:]
    if len(parts) == 4:
        parts = parts[1:]
    if len(parts) == 3 and parts[0] in ("train", "test") and parts[2].lower().endswith(IMAGE_EXTENSIONS):
        return parts[0], parts[1]
    return None


def _image_root(path: Path) -> Path:
    if (path / "train").is_dir():
        return path
    subdirs = [d for d in path.iterdir() if d.is_dir()]
    if len(subdirs) == 1 and (subdirs[0] / "train").is_dir():
        return subdirs[0]
    raise DataError(f"{path}: no train/ folder, expected train/<class>/*.png|jpg and test/<class>/... "
                    f"(optionally inside one top-level folder)")


def load_image_folder(path: str | os.PathLike, name: str = "image-folder", mode: str = "RGB") -> Dataset:
    """Read ``train/<class>/*`` and ``test/<class>/*`` images from a folder or a (gzipped) tar archive.

    Archives are decoded straight from the tar stream. Classes are the sorted class-folder names; samples are
    ordered by (class, file name). All images must have one size; ``mode`` is the Pillow mode ("RGB", "L").
    """
    Image = _pil_image()
    path = Path(path)
    entries: dict[str, list[tuple[str, str, np.ndarray]]] = {"train": [], "test": []}
    shape = None

    def add(split: str, cls: str, where: str, data: bytes) -> None:
        nonlocal shape
        arr = _decode(Image, data, where, mode)
        if shape is None:
            shape = arr.shape
        elif arr.shape != shape:
            raise DataError(f"{where}: image shape {arr.shape}, expected {shape} like the first image (one size for all)")
        entries[split].append((cls, where, arr))

    if path.is_dir():
        base = _image_root(path)
        for split in ("train", "test"):
            if not (base / split).is_dir():
                raise DataError(f"{base}: no {split}/ folder, expected train/<class>/... and test/<class>/...")
            for cls_dir in sorted(d for d in (base / split).iterdir() if d.is_dir()):
                for f in sorted(cls_dir.iterdir()):
                    if f.is_file() and f.name.lower().endswith(IMAGE_EXTENSIONS):
                        add(split, cls_dir.name, str(f), f.read_bytes())
    elif path.is_file():
        try:
            with tarfile.open(path, "r|*") as tf:
                for m in tf:
                    key = _split_key(PurePosixPath(m.name).parts) if m.isfile() else None
                    if key:
                        add(*key, f"{path}:{m.name}", tf.extractfile(m).read())
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: corrupt or truncated archive ({e}); expected a tar(.gz) of train/ and test/") from None
    else:
        raise NotFound(f"{name}: {path} not found, expected a folder or .tar.gz with train/<class>/ and test/<class>/",
                       [path])
    for split, items in entries.items():
        if not items:
            raise DataError(f"{path}: no images under {split}/<class>/ (extensions {', '.join(IMAGE_EXTENSIONS)})")
    classes = sorted({cls for items in entries.values() for cls, _, _ in items})
    index = {c: i for i, c in enumerate(classes)}
    tensors = []
    for split in ("train", "test"):
        items = sorted(entries[split], key=lambda e: (index[e[0]], e[1]))
        x = np.stack([a for _, _, a in items])
        x = x[:, None] if x.ndim == 3 else x.transpose(0, 3, 1, 2)  # N x C x H x W
        tensors += [_u8_images(x), _labels([index[c] for c, _, _ in items])]
    return Dataset(name, *tensors, num_classes=len(classes), classes=classes, source=str(path),
                   meta={"format": "image-folder"})


def _load_image_folder_option(root: Path, path: str | None = None, mode: str = "RGB") -> Dataset:
    if not path:
        raise ConfigError("image-folder: no path given, expected path=<folder or .tar.gz> (absolute or under the data dir)")
    p = Path(path).expanduser()
    if not p.is_absolute() and not p.exists():
        p = root / p
    return load_image_folder(p, mode=mode)


# ---------------------------------------------------------------------------------------------- LEAF JSON

def _leaf_dirs(root: Path, name: str) -> list[Path]:
    return [root / "leaf" / name, root / "leaf" / name / "data", root / name, root / name / "data",
            root / "leaf" / "data" / name / "data"]


def _find_leaf(root: Path, name: str) -> tuple[list[Path], list[Path]]:
    dirs = _leaf_dirs(root, name)
    for d in dirs:
        train, test = sorted((d / "train").glob("*.json")), sorted((d / "test").glob("*.json"))
        if train and test:
            return train, test
        if train or test:
            raise NotFound(f"{name}: {d} has {'train' if train else 'test'}/*.json but no "
                           f"{'test' if train else 'train'}/*.json", dirs)
    raise NotFound(f"{name}: LEAF train/*.json and test/*.json not found in {_looked(dirs)}", dirs)


def _read_leaf(files: list[Path]) -> list[tuple[str, list, list, Path]]:
    """(user, xs, ys, file) per user, files in name order, users in each file's ``users`` order.

    ``num_samples`` is ignored: LEAF's Shakespeare test files overstate it (the lengths of x and y count)."""
    out = []
    for f in files:
        try:
            with open(f, "rb") as fh:
                obj = json.load(fh)
        except json.JSONDecodeError as e:
            raise DataError(f"{f}: invalid JSON at line {e.lineno} column {e.colno} ({e.msg}); expected a LEAF file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{f}: cannot read ({e}); expected a LEAF JSON file") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("user_data"), dict):
            raise DataError(f"{f}: no 'user_data' object, expected LEAF JSON "
                            "{'users': [...], 'num_samples': [...], 'user_data': {user: {'x': [...], 'y': [...]}}}")
        users = obj.get("users", list(obj["user_data"]))
        for u in users:
            ud = obj["user_data"].get(u)
            if not isinstance(ud, dict) or not isinstance(ud.get("x"), list) or not isinstance(ud.get("y"), list):
                raise DataError(f"{f}: user {u!r} has no user_data entry with 'x' and 'y' lists")
            if len(ud["x"]) != len(ud["y"]):
                raise DataError(f"{f}: user {u!r} has {len(ud['x'])} x but {len(ud['y'])} y, expected equal counts")
            out.append((str(u), ud["x"], ud["y"], f))
    return out


def _encode_chars(strings: list[str], length: int, where: str) -> np.ndarray:
    """Strings of one length -> int64 indices into LEAF_CHARS (unknown characters -> SHAKESPEARE_UNKNOWN)."""
    if not strings:
        return np.zeros((0, length), np.int64)
    if any(not isinstance(s, str) or len(s) != length for s in strings):
        bad = next(s for s in strings if not isinstance(s, str) or len(s) != length)
        raise DataError(f"{where}: sample {bad!r:.40} is not a string of {length} characters")
    codes = np.frombuffer("".join(strings).encode("utf-32-le"), dtype=np.uint32)
    table = np.full(max(int(codes.max()), 127) + 1, SHAKESPEARE_UNKNOWN, dtype=np.int64)
    table[[ord(c) for c in LEAF_CHARS]] = np.arange(len(LEAF_CHARS))
    return table[codes].reshape(len(strings), length)


def _sent140_text(x, where: str) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, list) and len(x) >= 5 and isinstance(x[4], str):
        return x[4]
    raise DataError(f"{where}: sample {x!r:.60} is not [id, date, query, user, text], expected a 5-item list")


def _binary_label(y, where: str) -> int:
    try:
        v = int(float(y))
    except (TypeError, ValueError):
        v = -1
    if v not in (0, 1):
        raise DataError(f"{where}: label {y!r}, expected 0 or 1")
    return v


def _load_leaf(root: Path, name: str, vocab_size: int = 10000, seq_len: int = 25) -> Dataset:
    train_files, test_files = _find_leaf(root, name)
    splits = {"train": _read_leaf(train_files), "test": _read_leaf(test_files)}
    users: list[str] = []
    user_index: dict[str, int] = {}
    for split in ("train", "test"):
        for u, *_ in splits[split]:
            if u not in user_index:
                user_index[u] = len(users)
                users.append(u)
    meta: dict = {"format": "leaf"}
    if name == "sent140":
        if vocab_size < 3 or seq_len < 1:
            raise ConfigError(f"sent140: vocab_size={vocab_size}, seq_len={seq_len}; expected vocab_size >= 3, seq_len >= 1")
        counts = Counter(tok for _, xs, _, f in splits["train"] for x in xs for tok in _sent140_text(x, str(f)).lower().split())
        words = sorted(counts, key=lambda t: (-counts[t], t))[: vocab_size - 2]
        vocab = {w: i + 2 for i, w in enumerate(words)}
        meta.update(vocab=["<pad>", "<unk>", *words], vocab_size=len(words) + 2, seq_len=seq_len)
    elif name == "shakespeare":
        meta["vocab_size"] = len(LEAF_CHARS) + 1  # token ids 0..80, 80 = outside LEAF's alphabet
    out = []
    for split in ("train", "test"):
        xs_all, ys_all, owners = [], [], []
        for u, xs, ys, f in splits[split]:
            xs_all += xs
            ys_all += ys
            owners += [user_index[u]] * len(xs)
        where = f"{name} {split}/*.json"
        if name == "femnist":
            try:
                x = np.asarray(xs_all, dtype=np.float32).reshape(-1, 784) if xs_all else np.zeros((0, 784), np.float32)
                y = np.asarray(ys_all, dtype=np.int64)
            except (ValueError, TypeError) as e:
                raise DataError(f"{where}: samples are not 784 floats with integer labels ({e})") from None
            if x.shape[0] != len(xs_all):
                raise DataError(f"{where}: samples have {x.size // max(len(xs_all), 1)} values, expected 784 (28x28)")
            if len(y) and (y.min() < 0 or y.max() > 61):
                raise DataError(f"{where}: label {int(y.max())} out of range, expected 0-61")
            x_t = torch.from_numpy(x.reshape(-1, 1, 28, 28))
        elif name == "shakespeare":
            x_t = torch.from_numpy(_encode_chars(xs_all, 80, where))
            y = _encode_chars(ys_all, 1, where)[:, 0]
        else:  # sent140
            x = np.zeros((len(xs_all), seq_len), np.int64)
            for i, s in enumerate(xs_all):  # padded at the front: the last step is the last word
                ids = [vocab.get(t, 1) for t in _sent140_text(s, where).lower().split()[:seq_len]]
                x[i, seq_len - len(ids):] = ids
            x_t = torch.from_numpy(x)
            y = np.array([_binary_label(v, where) for v in ys_all], dtype=np.int64)
        out += [x_t, _labels(y), _labels(owners)]
    num_classes = {"femnist": 62, "shakespeare": len(LEAF_CHARS) + 1, "sent140": 2}[name]
    return Dataset(name=name, x_train=out[0], y_train=out[1], x_test=out[3], y_test=out[4], num_classes=num_classes,
                   train_users=out[2], test_users=out[5], users=users, source=str(train_files[0].parent.parent),
                   meta=meta)


def load_glove(path: str | os.PathLike, vocab: list[str], seed: int = 0) -> torch.Tensor:
    """An embedding matrix [len(vocab), D] from a GloVe text file (``word v1 ... vD`` per line, D from the
    first line): a word's row is its GloVe vector; words the file lacks get seeded N(0, s^2) rows, s the std of
    the vectors found; row 0 (padding) is zero. Only the vocabulary's lines are parsed."""
    path = Path(path)
    index = {w: i for i, w in enumerate(vocab)}
    found: dict[int, np.ndarray] = {}
    dim = None
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                parts = line.rstrip("\r\n ").split(" ")
                if parts == [""]:
                    continue
                dim = len(parts) - 1 if dim is None else dim
                if dim < 1 or len(parts) < dim + 1:  # a word may hold spaces (GloVe 840B): the vector is the last dim
                    raise DataError(f"{path}:{lineno}: {len(parts) - 1} values after the word, expected "
                                    f"{dim if dim >= 1 else 'at least 1'}; a GloVe file has 'word v1 ... vD' per line")
                i = index.get(" ".join(parts[:-dim]))
                if i is not None:
                    try:
                        found[i] = np.array(parts[-dim:], dtype=np.float32)
                    except ValueError:
                        raise DataError(f"{path}:{lineno}: non-numeric vector for {vocab[i]!r}; expected {dim} numbers") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read the GloVe file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); expected a GloVe text file") from None
    if dim is None:
        raise DataError(f"{path}: empty; expected a GloVe text file ('word v1 ... vD' per line)")
    if not found:
        raise DataError(f"{path}: none of the {len(vocab)} vocabulary words has a vector; expected a GloVe file "
                        f"covering the dataset's (lower-cased) words")
    vectors = np.stack(list(found.values()))
    scale = float(vectors.std()) or 1.0
    weights = np.random.default_rng(seed).normal(0.0, scale, (len(vocab), dim)).astype(np.float32)
    weights[list(found)] = vectors
    weights[0] = 0.0
    return torch.from_numpy(weights)


# ---------------------------------------------------------------------------------------------- registry

@dataclass(frozen=True)
class _Spec:
    description: str
    load: Callable[..., Dataset]
    options: tuple[str, ...]
    locate: Callable[[Path], list[Path]] | None  # the files that make up the dataset (raises NotFound)
    check: Callable[[Path, bool], None] | None = None  # (root, verify): deeper check for dataset_status


def _idx_spec(name: str, description: str) -> _Spec:
    return _Spec(description, lambda root, **o: _load_idx(root, name, **o), ("verify",),
                 lambda root: list(_find_idx(root, name).values()))


def _check_cifar(root: Path, name: str, verify: bool) -> None:
    """An extracted folder: every batch present with its canonical size; with ``verify`` also hashed,
    unpickled and checked (shape, labels), so a corrupt folder is not reported present."""
    kind, path = _find_cifar(root, name)
    if kind == "folder":
        _check_cifar_folder(name, path, hash_it=verify)
        if verify:
            _read_cifar(kind, path, name, "fine")


def _cifar_spec(name: str, description: str, options: tuple[str, ...]) -> _Spec:
    return _Spec(description, lambda root, **o: _load_cifar(root, name, **o), options,
                 lambda root: [_find_cifar(root, name)[1]], lambda root, verify: _check_cifar(root, name, verify))


def _leaf_spec(name: str, description: str, options: tuple[str, ...] = ()) -> _Spec:
    return _Spec(description, lambda root, **o: _load_leaf(root, name, **o), options,
                 lambda root: [p for files in _find_leaf(root, name) for p in files])


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
                          _load_image_folder_option, ("path", "mode"), None),
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
    (sent140), ``path`` / ``mode`` (image-folder).
    """
    key = canonical_name(name)
    spec = _SPECS[key]
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        raise ConfigError(f"{key}: unknown option(s) {', '.join(unknown)}; expected {', '.join(spec.options) or 'none'}")
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
        return Status(key, "missing", "looked in " + _looked(e.looked), str(e), e.looked)
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
