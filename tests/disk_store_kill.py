"""Run ``fedpd`` and SIGKILL it at a chosen point inside the disk store's write path.

    python tests/disk_store_kill.py POINT N -- ARGS...

runs ``fedpd ARGS...`` and kills the process (SIGKILL, as ``kill -9``) at the N-th time it
reaches POINT — deterministic places that a kill at a random moment would hit only by luck:

    undo         the pre-images are in the undo log, the rows not yet overwritten
    write        after one key's rows are written (a client's state half new, half old)
    new-row      before a key's rows are written (new rows in the index, none in the data)
    state-dict   the files are fsynced for a checkpoint, checkpoint.pt not yet written
    ckpt-write   checkpoint.pt written to its temporary file, not yet renamed
    saved        checkpoint.pt renamed, the old epoch's undo log not yet dropped
    drop         the old undo log dropped, store.json not yet updated
    rollback     on resume, part of the undo log put back
"""

from __future__ import annotations

import os
import signal
import sys

import fedpd.io
from fedpd.cli import main
from fedpd.disk_store import DiskStore

point, nth, args = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
count = 0


def hit() -> None:
    global count
    count += 1
    if count == nth:
        os.kill(os.getpid(), signal.SIGKILL)


def after(owner, name: str) -> None:
    original = getattr(owner, name)

    def wrapped(*a, **k):
        out = original(*a, **k)
        hit()
        return out

    setattr(owner, name, wrapped)


def before(owner, name: str) -> None:
    original = getattr(owner, name)

    def wrapped(*a, **k):
        hit()
        return original(*a, **k)

    setattr(owner, name, wrapped)


def checkpoint_rename() -> None:
    replace = os.replace

    def wrapped(src, dst, *a, **k):
        if str(dst).endswith("checkpoint.pt"):
            hit()
        return replace(src, dst, *a, **k)

    fedpd.io.os.replace = wrapped


{
    "undo": lambda: after(DiskStore, "_append_undo"),
    "write": lambda: after(DiskStore, "_write_rows"),
    "new-row": lambda: before(DiskStore, "_write_rows"),
    "state-dict": lambda: after(DiskStore, "state_dict"),
    "ckpt-write": checkpoint_rename,
    "saved": lambda: before(DiskStore, "checkpoint_saved"),
    "drop": lambda: after(DiskStore, "_drop_undo"),
    "rollback": lambda: after(DiskStore, "_restore_pre_image"),
}[point]()
sys.exit(main(args))
