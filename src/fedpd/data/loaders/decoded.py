"""Decoded image archives kept on disk: decoding CIFAR-10's 60 000 JPEGs from their tar.gz takes
tens of seconds of CPU, reading the decoded arrays back a fraction of a second. The first load of
an archive writes its arrays (uint8 pixels and the labels: 184 MB for CIFAR-10) to the cache
folder; later loads of an archive with the same content read them instead. A changed archive gets
a new entry (delete the folder to reclaim the old ones' space); a damaged entry is decoded again
and replaced.

The folder is ``$FEDPD_CACHE`` if set, else ``$XDG_CACHE_HOME/fedpd/decoded`` (``~/.cache/fedpd/
decoded``); ``FEDPD_CACHE=off`` turns the cache off. Entries are written atomically. An archive is
decoded by one process at a time (a lock file beside its entry): processes that load it at once —
``fedpd reproduce --jobs N``, a sweep's workers, SuperNodes on one machine — wait for the first
decode and read its entry instead of each paying for their own. A cache that cannot be written
(read-only, full) costs the next load its decode, never the load."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import numpy as np

from fedpd.io import atomic_write

try:
    import fcntl
except ImportError:  # not a POSIX system: concurrent loads each decode
    fcntl = None

#: bump when the arrays an entry holds change meaning (the entries of other versions are ignored)
VERSION = 1
OFF = ("off", "0", "no", "false")

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list]  # x_train, y_train, x_test, y_test, classes


def cache_dir() -> Path | None:
    """Where decoded archives are kept, or None when ``FEDPD_CACHE`` turns the cache off."""
    env = os.environ.get("FEDPD_CACHE", "").strip()
    if env.lower() in OFF:
        return None
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "fedpd" / "decoded"


def entry(source: Path, how: str) -> Path | None:
    """The cache file of ``source`` decoded ``how`` (e.g. the Pillow mode), or None (no cache).
    Keyed by the archive's content (hashing CIFAR-10's 19 MB takes ~0.05 s): an archive changed in
    place within one tick of the file system's clock is not mistaken for the old one."""
    folder = cache_dir()
    if folder is None:
        return None
    digest = hashlib.blake2b(f"{how}\0{VERSION}\0".encode(), digest_size=16)
    with open(source, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return folder / f"{source.name}.{digest.hexdigest()}.npz"


def _read(path: Path | None) -> Arrays | None:
    """The entry's arrays, or None when it is missing or damaged (a disk error, a foreign file)."""
    if path is None or not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return z["x_train"], z["y_train"], z["x_test"], z["y_test"], json.loads(str(z["classes"]))
    except Exception:
        return None


@contextlib.contextmanager
def _decoding(path: Path | None):
    """Held while this process decodes ``path``'s archive: an exclusive lock on ``<entry>.lock``
    (released by the system if the process dies); nothing where the folder cannot be written."""
    if path is None or fcntl is None:
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(".lock"), "a")
    except OSError:
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def decoded(source: Path, how: str, decode: Callable[[], Arrays]) -> Arrays:
    """``decode()``'s arrays for the archive ``source``, from the cache when it holds them."""
    path = entry(source, how)
    if (arrays := _read(path)) is not None:
        return arrays
    with _decoding(path):
        if (arrays := _read(path)) is not None:  # another process decoded it while this one waited
            return arrays
        arrays = decode()
        if path is not None:
            x_train, y_train, x_test, y_test, classes = arrays
            try:
                atomic_write(path, lambda f: np.savez(f, x_train=x_train, y_train=y_train, x_test=x_test,
                                                      y_test=y_test, classes=np.array(json.dumps(classes))))
            except OSError:
                pass
    return arrays
