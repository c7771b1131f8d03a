"""glibc malloc settings for a process that trains clients: keep freed memory for the next step.

A neural local step allocates and frees the same blocks every step (activations, the parameters'
gradients), and a client allocates and frees flat [d] vectors (its iterate, upload, residual).
glibc's defaults return freed memory to the system: blocks above a threshold (128 KB, raised
as blocks up to 32 MB are freed) are mapped and unmapped one by one, and free memory at the top
of the heap beyond twice that threshold is trimmed. Each later allocation of that memory then
pays a page fault per 4 KB page it touches (about 1.6 µs each on a 2-core development machine).
Measured on ResNet-18-GN (FedAvg, 10 clients × 20 steps; ``benchmarks/side_by_side.py --faults``,
docs/performance.md): a round faulted 1.45 M pages (5.7 GB, some 3 % of its time) with glibc's
defaults and 11 000 with these settings.

:func:`keep_freed_memory` sets fixed thresholds once per process: blocks up to
:data:`MMAP_THRESHOLD` come from the heap and are reused when freed, and the heap keeps up to
:data:`TRIM_THRESHOLD` of free memory at its top. Memory is reused, not added: the peak resident
memory stays about the same (ResNet-18-GN's working memory 474 MB against 451 MB), but the
resident memory after a peak stays near it until the process ends, as with PyTorch's own caching
allocator on a GPU. Nothing is changed where the user chose: when
glibc's own variables (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``,
``GLIBC_TUNABLES``) are set, when ``FEDPD_MALLOC=default``, or off glibc (macOS, musl), where
this does nothing.
"""

from __future__ import annotations

import ctypes
import os
import platform

#: blocks up to this size come from the heap (a flat vector of 64 M float32 parameters)
MMAP_THRESHOLD = 256 * 2**20
#: free memory the heap keeps at its top (glibc's own rule: twice the threshold)
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
#: environment variables by which a user has chosen malloc's behaviour already
USER_CHOICES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set the thresholds above, once per process; True when they are set (now or before)."""
    global _done
    if _done is None:
        _done = _set()
    return _done


def _set() -> bool:
    if os.environ.get("FEDPD_MALLOC") == "default" or any(v in os.environ for v in USER_CHOICES):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # pragma: no cover - a libc without mallopt
        return False
    # the threshold first: setting either turns glibc's moving thresholds off
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
