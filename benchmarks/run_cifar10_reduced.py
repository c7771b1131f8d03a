"""Reduced-budget CIFAR-10 Dir-0.1 LeNet run of FedAvg, FedDyn and A-FedPD (docs/benchmarks.md).

    python benchmarks/run_cifar10_reduced.py DATA_DIR OUT_DIR [--rounds 50] [--jobs 2]
        [--methods feddyn afedpd] [--set algorithm.output=average]

DATA_DIR holds cifar-10-batches-py/ (convert the JPEG copy first with
cifar10_jpeg_to_py.py). Each method starts from its A-FedPD Table 2 config
(benchmarks/configs/afedpd_cifar10/<method>_dir0.1.toml) with the overrides in REDUCED, which
cost about 25 s per round on one CPU core. Each run uses one thread; ``--jobs`` runs that many
methods at once (one per core).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent
METHODS = ("fedavg", "feddyn", "afedpd")
#: the paper budget is 50 local steps on all 50 000 images, 10 000 test images, 800 rounds (assumed)
REDUCED = {
    "problem.max_samples": "10000",       # 100 images per client on average (paper: 500)
    "problem.max_test_samples": "2000",
    "solver.local_steps": "10",           # paper: 50
    "run.eval_every": "5",
    "run.threads": "1",
}


def command(method: str, data_dir: str, out: Path, rounds: int, extra: list[str]) -> list[str]:
    cfg = ROOT / "configs" / "afedpd_cifar10" / f"{method}_dir0.1.toml"
    sets = [f"problem.data_dir={data_dir}", f"run.rounds={rounds}", *(f"{k}={v}" for k, v in REDUCED.items()), *extra]
    return [sys.executable, "-m", "fedpd", "run", str(cfg), "--out", str(out / method), "--overwrite", "--quiet",
            *(a for s in sets for a in ("--set", s))]


def run_one(method: str, args) -> None:
    cmd = command(method, args.data_dir, args.out, args.rounds, args.set)
    print(" ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"{method}: {time.perf_counter() - t0:.0f} s wall", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", help="folder holding cifar-10-batches-py/")
    parser.add_argument("out", type=Path, help="folder for the run directories (one per method)")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=1, help="methods run at once")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="one more override")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda m: run_one(m, args), args.methods))


if __name__ == "__main__":
    main()
