"""A client store on disk for 10⁵–10⁶ clients or large states, with exact resume.

:class:`DiskStore` (:mod:`~fedpd.disk_store.store`) meets the :class:`fedpd.store.ClientStore`
contract with the same numbers as :class:`fedpd.store.MemoryStore` (a state is copied byte for
byte; the mean is summed in the same ascending-client chunks), but keeps the rows in files. It
composes:

* :mod:`~fedpd.disk_store.blocks` — ``data-<key>.bin``, one file per state key, row r of every
  key at offset r·(row bytes). A row is allocated (appended) when its client first takes part,
  so the files grow with the clients that have taken part, never with N.
* :mod:`~fedpd.disk_store.index` — ``index.i64``, the client id of every row, append-only; in
  memory its inverse ``row_of`` (int64 [N], −1 for untouched clients).
* :mod:`~fedpd.disk_store.journal` — ``undo-<e>.log``, the undo log of checkpoint epoch e (below).
* ``store.json`` — the store's identity: a random token, the run directory it belongs to, N,
  the state keys with their shapes and dtypes, and the last committed checkpoint epoch.

:mod:`~fedpd.disk_store.budget` chooses the store (``run.store``) and sizes what a run may
write; :mod:`~fedpd.disk_store.system` holds the calls into the operating system.

**Exact resume.** A checkpoint (``state_dict``) does not copy the rows: it fsyncs the files and
records (token, epoch e+1, committed rows R). Afterwards, before a row r < R is overwritten for
the first time, its pre-image (every key's bytes, with a CRC) is appended to ``undo-<e+1>.log``
and the log is fsynced; rows ≥ R are new and need no undo (they are cut off). Once the run loop
has written ``checkpoint.pt`` it calls :meth:`DiskStore.checkpoint_saved`, which deletes the
previous epoch's undo log. Resuming from a checkpoint of epoch c applies ``undo-<c>.log`` (the
pre-images put back the rows of checkpoint c), truncates the files to the committed R rows,
fsyncs, and deletes every undo log. A kill at any point leaves either the checkpoint of epoch c
with its complete undo log, or (between writing ``checkpoint.pt`` and deleting the old log) the
checkpoint of epoch c+1 with no overwrite after it; both resume to the checkpoint's state.
``tests/store/test_disk_store.py`` kills runs at each of these points.

A checkpoint of the in-memory store holds the rows themselves; this one holds a few numbers and
the initial state, so ``checkpoint.pt`` stays small whatever the state's size.
"""

from fedpd.disk_store.budget import choose_store, default_store_dir, log, state_bytes, store_budget
from fedpd.disk_store.store import DiskStore
from fedpd.disk_store.system import StoreError, mem_available

__all__ = ["DiskStore", "StoreError", "choose_store", "default_store_dir", "log", "mem_available", "state_bytes",
           "store_budget"]
