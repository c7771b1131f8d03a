"""The same config gives the same bits at any thread count and on any engine (issue 42, part 1).

Each execution is a fresh process, so the thread count is in force from the start, while the data
are built too: in process at 1 thread, in process at 2 threads, on loopback nodes at 2 threads.
Every metric of every round of the configs of tests/thread_matrix.py must be identical, float64
and float32 alike (the float32 case is the MLP, whose sums fedpd orders itself; a float32 BLAS
product may still split its inner sum over threads — docs/architecture.md, "Determinism")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import thread_matrix

HERE = Path(__file__).resolve().parent
EXECUTIONS = {"in process, 1 thread": ("inprocess", "1"), "in process, 2 threads": ("inprocess", "2"),
              "loopback nodes, 2 threads": ("loopback", "2")}


def _names() -> list[str]:
    data = os.environ.get("FEDPD_DATA")
    if data and (Path(data) / "mnist").is_dir():
        return list(thread_matrix.CASES)
    return [n for n in thread_matrix.CASES if n not in thread_matrix.NEEDS_DATA]


def _execute(engine: str, threads: str, names: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    done = subprocess.run([sys.executable, str(HERE / "thread_matrix.py"), engine, *names], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_metric_is_identical_at_1_and_2_threads_and_on_two_engines():
    names = _names()
    with ThreadPoolExecutor(len(EXECUTIONS)) as pool:
        runs = dict(zip(EXECUTIONS, pool.map(lambda e: _execute(*e, names), EXECUTIONS.values())))
    reference, *others = EXECUTIONS
    for name in names:
        expected = runs[reference][name]
        assert len(expected) == 3 and all("train_loss" in m for m in expected)  # rounds 0, 1, 2 evaluated
        for other in others:
            got = runs[other][name]
            for a, b in zip(expected, got):
                differing = {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)}
                assert not differing, f"{name}, round {a['round']}: {other} differs from {reference}: {differing}"
            assert len(got) == len(expected)

