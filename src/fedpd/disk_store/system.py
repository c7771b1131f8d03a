"""What the disk store asks of the operating system: whole reads and writes at an offset, whole
appends, the memory and disk space available, whether a directory is writable; and the one
error the store raises."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from fedpd.errors import FedpdError

GiB = 1 << 30


class StoreError(FedpdError):
    """The disk store cannot be used or written (one line; the last checkpoint stays intact)."""


def _human(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _pread_full(fd: int, view: memoryview, offset: int, what: str) -> None:
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise StoreError(f"{what}: shorter than the store's index says (the store is damaged)")
        done += n


def _pwrite_full(fd: int, data, offset: int) -> None:
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def close_quietly(fd: int) -> None:
    """Close ``fd`` (-1: none); an error closing it changes nothing the store relies on."""
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while len(view):
        view = view[os.write(fd, view):]


def mem_available() -> int:
    """Bytes of memory available to new work (MemAvailable), or the total where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux/macOS
        return 8 * GiB


def existing_ancestor(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (where a new directory would be created)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def check_writable(base: Path) -> None:
    """One line if no file can be created in ``base``."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".fedpd-probe-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise StoreError(f"run.store_dir: cannot write in {str(base)!r} ({err.strerror or err}); the disk store "
                         f"needs a writable directory") from None
