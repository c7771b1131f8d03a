"""Files that survive crashes: every write goes to a temporary file first, then is renamed."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

import torch


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once: os.umask is process-wide, so reading it per write would race


def _atomic(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """``write`` into a temporary file beside ``path``, fsync it, rename it over ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the mode open() would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make a rename durable; not every OS can open a directory (Windows cannot)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    _atomic(path, lambda f: f.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_torch_save(obj, path: Path) -> None:
    _atomic(path, lambda f: torch.save(obj, f))


def clean_json(record: dict) -> dict:
    """NaN and ±Inf are not JSON: written as null (a diverged run still writes valid lines)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(clean_json(record)) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[dict]:
    """Complete lines only: a line cut short by a crash is dropped."""
    out = []
    if not Path(path).exists():
        return out
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out
