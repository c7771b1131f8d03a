"""fedpd.allocator: a training process keeps freed memory for the next step (glibc malloc's
thresholds fixed), unless the user chose malloc's behaviour. Measured by page faults in a fresh
process that makes, writes and frees a 40 MB block again and again: a block above glibc's default
mapping threshold is mapped and faulted anew every time by default; with the thresholds set, the
heap serves it and takes it back, and once the process has run a while no block faults at all.

Counted after a warm-up: in a fresh process the first few blocks are placed anew each time (our
reading of glibc: each aligned block — torch asks for 64-byte alignment — leaves a small fragment
after it, kept unmerged in the per-thread cache until that cache is full, so a freed block cannot
merge with the top of the heap). How soon the cache fills depends on what the process allocated
before — counting from the first block made this test pass or fail with the imports before it (a
lazier ``import fedpd``)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="malloc's thresholds are glibc's (elsewhere keep_freed_memory does nothing)")

CHILD = """
import json, resource, sys, torch
from fedpd.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
faults = 0
for i in range(24):  # a client's flat vector (40 MB) made, written and freed, as each client's round does
    if i == 16:  # counted from here: the steady state of a process that has trained a while (below)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = torch.ones(10 * 2**20)
    del block
print(json.dumps({"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}))
"""


def child(mode: str, **env) -> dict:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "FEDPD_MALLOC")
    }
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env={**clean, **env}, capture_output=True, text=True,
                         check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_blocks_are_reused_instead_of_faulted_again():
    pages = 40 * 2**20 // 4096
    default, kept = child("default"), child("keep")
    assert kept["kept"] is True
    assert default["faults"] >= 7 * pages  # each of the eight blocks mapped and faulted anew
    assert kept["faults"] <= pages, (default, kept)  # reused (measured: none faults)


@pytest.mark.parametrize("env", [{"FEDPD_MALLOC": "default"}, {"MALLOC_TRIM_THRESHOLD_": "131072"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}])
def test_a_users_choice_is_left_alone(env):
    got = child("keep", **env)
    assert got["kept"] is False and got["faults"] >= 7 * 40 * 2**20 // 4096
