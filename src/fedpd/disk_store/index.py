"""Which row of a disk store holds which client: ``index.i64``, the client id of every row
(append-only, a row is allocated when its client first takes part), and its inverse in memory,
``row_of`` (int64 [N], −1 for a client that never took part): 8 bytes per client."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fedpd.disk_store import system
from fedpd.disk_store.system import StoreError

INDEX = "index.i64"


class RowIndex:
    """The row of every client of ``num_clients``; ``rows``: rows allocated so far."""

    def __init__(self, num_clients: int):
        self.num_clients = num_clients
        self.row_of = np.full(num_clients, -1, dtype=np.int64)
        self.rows = 0
        self.fd = -1

    def open(self, directory: Path, create: bool) -> None:
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0) | getattr(os, "O_BINARY", 0)
        self.path = directory / INDEX
        self.fd = os.open(self.path, flags, 0o666)

    def allocate(self, ids: np.ndarray) -> np.ndarray:
        """New rows for clients ``ids`` (none of them has one), written to the index file first."""
        fresh = np.arange(self.rows, self.rows + ids.size, dtype=np.int64)
        system._pwrite_full(self.fd, ids, self.rows * 8)
        self.row_of[ids] = fresh
        self.rows += fresh.size
        return fresh

    def load(self, rows: int) -> None:
        """The first ``rows`` rows of the index file (a checkpoint's), checked; later rows are dropped."""
        index = np.empty(rows, dtype=np.int64)
        if rows:
            system._pread_full(self.fd, memoryview(index).cast("B"), 0, str(self.path))
        if index.size and (int(index.min()) < 0 or int(index.max()) >= self.num_clients
                           or np.unique(index).size != index.size):
            raise StoreError(f"{self.path}: damaged (client ids out of range or repeated)")
        self.row_of[:] = -1
        self.row_of[index] = np.arange(rows, dtype=np.int64)
        self.rows = rows

    def ascending(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids ascending, their rows) of the clients that have taken part."""
        ids = np.flatnonzero(self.row_of >= 0)
        return ids, self.row_of[ids]

    def truncate(self) -> None:
        """Cut the file to the rows the index holds, durably."""
        os.ftruncate(self.fd, self.rows * 8)
        os.fsync(self.fd)

    def fsync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        system.close_quietly(self.fd)
        self.fd = -1
