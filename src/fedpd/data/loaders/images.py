"""Image folders: ``train/<class>/*.png|jpg`` + ``test/<class>/...``, as a folder or a (gzipped)
tar archive decoded straight from the stream (needs Pillow); an archive's decoded arrays are kept
on disk for its next load (:mod:`fedpd.data.loaders.decoded`)."""

from __future__ import annotations

import io
import os
import tarfile
import zlib
from pathlib import Path, PurePosixPath

import numpy as np

from fedpd.data.loaders.base import Dataset, NotFound, as_labels, u8_images
from fedpd.data.loaders.decoded import decoded
from fedpd.errors import ConfigError, DataError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")


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

    Archives are decoded straight from the tar stream, once: the decoded arrays are kept on disk
    and read back by the next load of the same archive (:mod:`fedpd.data.loaders.decoded`).
    Classes are the sorted class-folder names; samples are ordered by (class, file name). All
    images must have one size; ``mode`` is the Pillow mode ("RGB", "L").
    """
    path = Path(path)
    if path.is_file():
        arrays = decoded(path, f"image-folder {mode}", lambda: _decode_all(path, mode))
    elif path.is_dir():
        arrays = _decode_all(path, mode)
    else:
        raise NotFound(f"{name}: {path} not found, expected a folder or .tar.gz with train/<class>/ and test/<class>/",
                       [path])
    x_train, y_train, x_test, y_test, classes = arrays
    return Dataset(name, u8_images(x_train), as_labels(y_train), u8_images(x_test), as_labels(y_test),
                   num_classes=len(classes), classes=classes, source=str(path), meta={"format": "image-folder"})


def _decode_all(path: Path, mode: str):
    """(x_train, y_train, x_test, y_test, classes) of a folder or archive: uint8 N x C x H x W, labels."""
    Image = _pil_image()
    entries: dict[str, list[tuple[str, str, np.ndarray]]] = {"train": [], "test": []}
    shape = None

    def add(split: str, cls: str, where: str, data: bytes) -> None:
        nonlocal shape
        arr = _decode(Image, data, where, mode)
        if shape is None:
            shape = arr.shape
        elif arr.shape != shape:
            raise DataError(
                f"{where}: image shape {arr.shape}, expected {shape} like the first image (one size for all)"
            )
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
    else:
        try:
            with tarfile.open(path, "r|*") as tf:
                for m in tf:
                    key = _split_key(PurePosixPath(m.name).parts) if m.isfile() else None
                    if key:
                        add(*key, f"{path}:{m.name}", tf.extractfile(m).read())
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise DataError(
                f"{path}: corrupt or truncated archive ({e}); expected a tar(.gz) of train/ and test/"
            ) from None
    for split, items in entries.items():
        if not items:
            raise DataError(f"{path}: no images under {split}/<class>/ (extensions {', '.join(IMAGE_EXTENSIONS)})")
    classes = sorted({cls for items in entries.values() for cls, _, _ in items})
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for split in ("train", "test"):
        items = sorted(entries[split], key=lambda e: (index[e[0]], e[1]))
        x = np.stack([a for _, _, a in items])
        x = x[:, None] if x.ndim == 3 else x.transpose(0, 3, 1, 2)  # N x C x H x W
        out += [np.ascontiguousarray(x), np.array([index[c] for c, _, _ in items], dtype=np.int64)]
    return (*out, classes)


def load_image_folder_option(root: Path, path: str | None = None, mode: str = "RGB") -> Dataset:
    if not path:
        raise ConfigError(
            "image-folder: no path given, expected path=<folder or .tar.gz> (absolute or under the data dir)"
        )
    p = Path(path).expanduser()
    if not p.is_absolute() and not p.exists():
        p = root / p
    return load_image_folder(p, mode=mode)
