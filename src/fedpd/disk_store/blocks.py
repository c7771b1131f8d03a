"""The rows of a disk store: one file per state key, ``data-<key>.bin``, row r of every key at
offset r·(row bytes). Rows are read and written with ``pread``/``pwrite`` in runs of consecutive
rows, not memory-mapped: mapped pages that were touched count in the process's resident memory
until the kernel reclaims them, and a run over 40 GB of state must stay far below that."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedpd.disk_store import system
from fedpd.disk_store.system import StoreError
from fedpd.store import State


def key_file(key: str) -> str:
    return f"data-{key}.bin" if re.fullmatch(r"[A-Za-z0-9_]+", key) else f"data-{key.encode().hex()}.bin"


def bytes_of(t: Tensor) -> int:
    return t.numel() * t.element_size()


def as_bytes(t: Tensor) -> np.ndarray:
    """A contiguous CPU tensor [K, ...] as a uint8 numpy array [K, row bytes] sharing its memory."""
    return t.reshape(t.shape[0], -1).view(torch.uint8).numpy()


def _runs(rows: np.ndarray) -> list[tuple[int, int, int]]:
    """(position in ``rows``, first row, length) of the runs of consecutive rows of a sorted array."""
    if rows.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [rows.size]])
    return [(int(a), int(rows[a]), int(b - a)) for a, b in zip(starts, ends)]


class RowFiles:
    """The open ``data-<key>.bin`` files of the keys of ``init`` (CPU tensors: one row each)."""

    def __init__(self, directory: Path, init: State, create: bool):
        self.directory, self.init = directory, init
        self.keys = sorted(init)
        self.row_bytes = {k: bytes_of(v) for k, v in init.items()}
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0) | getattr(os, "O_BINARY", 0)
        self.fds: dict[str, int] = {}
        try:
            for k in self.keys:
                self.fds[k] = os.open(directory / key_file(k), flags, 0o666)
        except OSError:
            self.close()
            raise

    def path(self, key: str) -> Path:
        return self.directory / key_file(key)

    def read(self, key: str, rows: np.ndarray) -> Tensor:
        """Rows ``rows`` (all allocated) of ``key``: a CPU tensor [len(rows), ...]."""
        init = self.init[key]
        out = torch.empty((rows.size, *init.shape), dtype=init.dtype)
        if rows.size == 0:
            return out
        n = self.row_bytes[key]
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        buf = out if bool((order == np.arange(rows.size)).all()) else torch.empty_like(out)
        raw = as_bytes(buf)
        for pos, first, length in _runs(sorted_rows):
            view = memoryview(raw[pos:pos + length]).cast("B")
            system._pread_full(self.fds[key], view, first * n, str(self.path(key)))
        if buf is not out:
            out[torch.from_numpy(order)] = buf
        return out

    def write(self, key: str, rows: np.ndarray, raw: np.ndarray) -> None:
        """Write rows ``rows`` (sorted) of ``key`` from ``raw`` [len(rows), row bytes]."""
        n = self.row_bytes[key]
        for pos, first, length in _runs(rows):
            system._pwrite_full(self.fds[key], raw[pos:pos + length], first * n)

    def record(self, rows: np.ndarray) -> list[bytes]:
        """Every key's bytes of each of ``rows``, one record per row (an undo log's pre-images)."""
        pre = {k: as_bytes(self.read(k, rows)) for k in self.keys}
        return [b"".join(pre[k][j].tobytes() for k in self.keys) for j in range(rows.size)]

    def put_back(self, row: int, record: bytes) -> None:
        """Write a record of :meth:`record` back into ``row``."""
        at = 0
        for k in self.keys:
            n = self.row_bytes[k]
            system._pwrite_full(self.fds[k], record[at:at + n], row * n)
            at += n

    def check_rows(self, rows: int) -> None:
        """One line if a file is shorter than ``rows`` rows (a damaged store)."""
        for k in self.keys:
            if os.fstat(self.fds[k]).st_size < rows * self.row_bytes[k]:
                raise StoreError(f"{self.path(k)}: shorter than the checkpoint's {rows} rows (the store is damaged)")

    def truncate(self, rows: int) -> None:
        """Cut every file to ``rows`` rows, durably."""
        for k in self.keys:
            os.ftruncate(self.fds[k], rows * self.row_bytes[k])
            os.fsync(self.fds[k])

    def fsync(self) -> None:
        for fd in self.fds.values():
            os.fsync(fd)

    def close(self) -> None:
        for fd in self.fds.values():
            system.close_quietly(fd)
        self.fds = {}
