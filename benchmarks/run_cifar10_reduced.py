"""Reduced-budget CIFAR-10 Dir-0.1 LeNet run of FedAvg, FedDyn and A-FedPD (docs/benchmarks.md).

    python benchmarks/run_cifar10_reduced.py DATA_DIR OUT_DIR

DATA_DIR holds cifar-10-batches-py/ (convert the JPEG copy first with
cifar10_jpeg_to_py.py). Each method starts from its A-FedPD Table 2 config
(benchmarks/configs/afedpd_cifar10/<method>_dir0.1.toml) with the overrides in REDUCED, which
make one method fit in about ten minutes on one CPU core. Runs are sequential, one thread each.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
METHODS = ("fedavg", "feddyn", "afedpd")
#: the paper budget is 50 local steps on all 50 000 images, 10 000 test images, 800 rounds (assumed)
REDUCED = {
    "problem.max_samples": "10000",       # 100 images per client on average (paper: 500)
    "problem.max_test_samples": "2000",
    "solver.local_steps": "10",           # paper: 50
    "run.rounds": "20",
    "run.eval_every": "5",
    "run.threads": "1",
}


def command(method: str, data_dir: str, out: Path) -> list[str]:
    cfg = ROOT / "configs" / "afedpd_cifar10" / f"{method}_dir0.1.toml"
    sets = [f"problem.data_dir={data_dir}", *(f"{k}={v}" for k, v in REDUCED.items())]
    return ["fedpd", "run", str(cfg), "--out", str(out / method), "--overwrite", "--quiet",
            *(a for s in sets for a in ("--set", s))]


def main(argv: list[str]) -> None:
    data_dir, out = argv[0], Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for method in METHODS:
        cmd = command(method, data_dir, out)
        print(" ".join(cmd), flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        print(f"{method}: {time.perf_counter() - t0:.0f} s wall", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
