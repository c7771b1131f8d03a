"""IDX files (LeCun et al.'s MNIST format; also Fashion-MNIST), gzipped or not, in the data
directory's ``mnist/``, ``mnist/raw/`` or torchvision's ``MNIST/raw/``."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np

from fedpd.data import checksums
from fedpd.data.loaders.base import Dataset, NotFound, as_labels, looked_in, u8_images
from fedpd.errors import DataError

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


def find_idx(root: Path, name: str) -> dict[str, Path]:
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
    raise NotFound(f"{name}: idx files (train-images-idx3-ubyte[.gz] and 3 more) not found in {looked_in(dirs)}", dirs)


def load_idx(root: Path, name: str, verify: bool = True) -> Dataset:
    files = find_idx(root, name)
    if verify:
        for p in files.values():
            checksums.check_canonical(name, p)
    x_tr = read_idx(files["train_images"], IDX_IMAGES_MAGIC)
    y_tr = read_idx(files["train_labels"], IDX_LABELS_MAGIC)
    x_te = read_idx(files["test_images"], IDX_IMAGES_MAGIC)
    y_te = read_idx(files["test_labels"], IDX_LABELS_MAGIC)
    for x, y, kx, ky in ((x_tr, y_tr, "train_images", "train_labels"), (x_te, y_te, "test_images", "test_labels")):
        if len(x) != len(y):
            raise DataError(
                f"{files[kx]}: {len(x)} images but {files[ky].name} has {len(y)} labels; expected equal counts"
            )
        if len(y) and int(y.max()) > 9:
            raise DataError(f"{files[ky]}: label {int(y.max())} out of range, expected 0-9")
    return Dataset(name=name, x_train=u8_images(x_tr[:, None]), y_train=as_labels(y_tr),
                   x_test=u8_images(x_te[:, None]), y_test=as_labels(y_te), num_classes=10,
                   source=str(files["train_images"].parent))

