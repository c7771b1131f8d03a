"""The undo journal of a disk store: ``undo-<e>.log`` holds the pre-images of the committed rows
overwritten since checkpoint epoch e, one record per row (magic, CRC-32 of row and payload, row,
every key's bytes), appended and fdatasync'ed before the row is overwritten. A resume puts back
the complete, intact records; a record cut short by a kill belongs to a row never overwritten."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Iterator

from fedpd.disk_store import system
from fedpd.io import _fsync_dir

RECORD = struct.Struct("<IIq")  # magic, crc32 of (row, payload), row
_MAGIC = 0x55444653  # "SFDU"


def undo_log(directory: Path, epoch: int) -> Path:
    return directory / f"undo-{epoch}.log"


class UndoJournal:
    """The undo logs in ``directory``; the log of one epoch is open for appending at a time."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.fd = -1

    def append(self, epoch: int, rows: list[int], records: list[bytes]) -> None:
        """Append the pre-images ``records`` of ``rows`` to epoch ``epoch``'s log, durably."""
        if self.fd < 0:
            path = undo_log(self.directory, epoch)
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0), 0o666)
            _fsync_dir(self.directory)
        parts = []
        for row, payload in zip(rows, records):
            row_bytes = struct.pack("<q", row)
            parts.append(struct.pack("<II", _MAGIC, zlib.crc32(payload, zlib.crc32(row_bytes))) + row_bytes + payload)
        system._write_all(self.fd, b"".join(parts))
        os.fdatasync(self.fd)

    @staticmethod
    def records(path: Path, size: int) -> Iterator[tuple[int, bytes]]:
        """(row, pre-image of ``size`` bytes) of every complete, intact record of the log ``path``."""
        with open(path, "rb") as f:
            while True:
                head = f.read(RECORD.size)
                if len(head) < RECORD.size:
                    return
                magic, crc, row = RECORD.unpack(head)
                payload = f.read(size)
                if magic != _MAGIC or len(payload) < size or zlib.crc32(payload, zlib.crc32(head[8:])) != crc:
                    return  # a record cut short by the kill: its row was never overwritten
                yield row, payload

    def end_epoch(self, epoch: int) -> None:
        """Epoch ``epoch`` is replaced by a newer checkpoint: its log is closed and deleted."""
        self.close()
        undo_log(self.directory, epoch).unlink(missing_ok=True)

    def remove_all(self) -> None:
        """Delete every undo log (applied, or of epochs a checkpoint never reached)."""
        for p in self.directory.glob("undo-*.log"):
            p.unlink()

    def close(self) -> None:
        system.close_quietly(self.fd)
        self.fd = -1
