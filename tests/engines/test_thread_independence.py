"""The same config gives the same bits at any thread count and on any engine, on whatever CPU path
the machine takes (docs/architecture.md, "Determinism").

Each execution is a fresh process, so the thread count is in force from the start, while the data
are built too: in process at 1 thread, in process at 2 threads, on loopback nodes at 2 threads.
Every metric of every round of the configs of tests/thread_matrix.py must be identical, float64
and float32 alike. A sum that depends on the thread count may do so only on some CPUs — MKL splits
a product's inner sum over threads on some models and not on others, and ATen's kernels change with
the vector width — so the 1- and 2-thread runs are also compared under the code paths other machines
take: ATen's ``default`` and ``avx2`` kernels, and MKL's AVX2 code path
(``MKL_CBWR``). Results may differ *between* paths (another kind of CPU); within one they may not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import thread_matrix
from helpers import TESTS

#: the code paths, by the environment that selects them
PATHS = {"native": {}, "ATen default": {"ATEN_CPU_CAPABILITY": "default"},
         "ATen avx2": {"ATEN_CPU_CAPABILITY": "avx2"}, "MKL AVX2": {"MKL_CBWR": "AVX2"}}
EXECUTIONS = [("in process, 1 thread", "inprocess", "1"), ("in process, 2 threads", "inprocess", "2")]


def _names() -> list[str]:
    data = os.environ.get("FEDPD_DATA")
    if data and (Path(data) / "mnist").is_dir():
        return list(thread_matrix.CASES)
    return [n for n in thread_matrix.CASES if n not in thread_matrix.NEEDS_DATA]


def _execute(engine: str, threads: str, path: dict, names: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    env.update(path, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    done = subprocess.run([sys.executable, str(TESTS / "thread_matrix.py"), engine, *names], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _differences(expected: list[dict], got: list[dict]) -> list[str]:
    out = [f"round {a['round']}: {({k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)})}"
           for a, b in zip(expected, got) if a != b]
    return out if len(got) == len(expected) else [*out, f"{len(got)} rounds, not {len(expected)}"]


@pytest.mark.slow
def test_every_metric_is_identical_at_1_and_2_threads_on_every_cpu_path_and_on_two_engines():
    names = _names()
    jobs = [(path, label, engine, threads) for path in PATHS for label, engine, threads in EXECUTIONS]
    jobs.append(("native", "loopback nodes, 2 threads", "loopback", "2"))
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda j: _execute(j[2], j[3], PATHS[j[0]], names), jobs))
    runs: dict[str, dict[str, dict]] = {}
    for (path, label, _, _), result in zip(jobs, results):
        runs.setdefault(path, {})[label] = result
    failures = []
    for path, executions in runs.items():
        reference, *others = executions
        for name in names:
            expected = executions[reference][name]
            assert len(expected) == 3 and all("train_loss" in m for m in expected)  # rounds 0, 1, 2 evaluated
            for other in others:
                failures += [f"{name} ({path} kernels): {other} differs from {reference}, {d}"
                             for d in _differences(expected, executions[other][name])]
    assert not failures, "\n".join(failures)
