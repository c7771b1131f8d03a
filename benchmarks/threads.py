"""CPU threads: how long runs take with 1 thread, 2 threads, ... on a quiet and on a busy machine.

Each case is one ``fedpd run`` in a fresh process with ``--threads N``; the time is the run's own
``wall_s`` (rounds and evaluations, not the start-up). A busy machine is mimicked by ``--load K``
processes spinning on the CPU beside the run (other users' jobs on a shared machine). Results
are in docs/performance.md ("CPU threads").

    FEDPD_DATA=/path/to/data python benchmarks/threads.py [--cases feddyn fedavg ...]
        [--threads 1 2] [--load 0 1] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MNIST = str(ROOT / "benchmarks/configs/mnist_fedavg_logistic.toml")

#: name: (config, overrides)
CASES = {
    "feddyn": (str(ROOT / "examples/feddyn.toml"), []),
    "fedavg": (str(ROOT / "examples/fedavg.toml"), ["run.rounds=200"]),
    "mnist-logistic": (MNIST, []),
    "mnist-mlp": (MNIST, ["model.name=mlp", "run.rounds=10"]),
    "mnist-lenet": (MNIST, ["model.name=lenet", "run.rounds=4", "run.eval_every=4", "problem.max_samples=6000",
                            "problem.max_test_samples=2000"]),
    "mnist-cnn": (MNIST, ["model.name=femnist_cnn", "run.rounds=4", "run.eval_every=4", "problem.max_samples=6000",
                          "problem.max_test_samples=2000"]),
}


def _spin() -> None:  # pragma: no cover - a competing job
    while True:
        pass


def time_run(config: str, overrides: list[str], threads: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "fedpd", "run", config, "--out", tmp + "/run", "--quiet",
               "--threads", str(threads), *[a for o in overrides for a in ("--set", o)]]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        last = (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()[-1]
        return json.loads(last)["wall_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--load", nargs="+", type=int, default=[0, 1], help="spinning processes beside the run")
    ap.add_argument("--repeats", type=int, default=1, help="best of this many runs per cell")
    args = ap.parse_args()
    env_threads = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    print(f"# {os.cpu_count()} CPUs, {env_threads}, {time.strftime('%Y-%m-%d')}")
    print("| case | load | " + " | ".join(f"{t} thread{'s' * (t > 1)}" for t in args.threads) + " |")
    print("|---|---|" + "---|" * len(args.threads))
    for name in args.cases:
        config, overrides = CASES[name]
        for load in args.load:
            spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(load)]
            for s in spinners:
                s.start()
            try:
                cells = []
                for t in args.threads:
                    cells.append(min(time_run(config, overrides, t) for _ in range(args.repeats)))
            finally:
                for s in spinners:
                    s.terminate()
                    s.join()
            print(f"| {name} | {load} | " + " | ".join(f"{c:.1f} s" for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
