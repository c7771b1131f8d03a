"""Simulator overhead: fedpd's FedAvg against a plain PyTorch loop doing the same SGD steps.

30 rounds of FedAvg (100 clients, 10 per round, 20 SGD steps of batch 10 each, multinomial
logistic regression 784 -> 10) make 6 000 SGD steps; the baseline is a plain ``torch.optim.SGD``
loop taking 6 000 steps of batch 10 on one ``nn.Linear(784, 10)``. Both are timed side by side in
this process, alternating, best of ``--repeats``; the ratio fedpd / plain is what matters (the
machines are shared and noisy). Evaluation is excluded from both.

    python benchmarks/overhead.py [--repeats 3] [--dtype float32] [--threads 0]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from fedpd.config import load_config
from fedpd.simulation import Simulation

ROUNDS, CLIENTS, PER_ROUND, STEPS, BATCH, LR = 30, 100, 10, 20, 10, 0.05


def fedpd_config(dtype: str) -> dict:
    return {
        "problem": {"name": "synthetic", "clients": CLIENTS, "dim": 784, "classes": 10, "max_client_samples": 300},
        "algorithm": {"name": "fedavg"},
        "solver": {"name": "sgd", "lr": LR, "local_steps": STEPS, "batch_size": BATCH},
        "sampler": {"name": "uniform", "clients_per_round": PER_ROUND},
        "run": {"rounds": ROUNDS, "eval_every": ROUNDS, "seed": 0, "dtype": dtype},
    }


def time_fedpd(dtype: str) -> float:
    cfg = fedpd_config(dtype)
    cfg["run"]["threads"] = torch.get_num_threads()  # what the plain loop gets too (run.threads = 0 is automatic)
    sim = Simulation(load_config(cfg))
    t0 = time.perf_counter()
    for _ in range(ROUNDS):
        sim.step()
    return time.perf_counter() - t0


def time_plain(x: torch.Tensor, y: torch.Tensor) -> float:
    model = torch.nn.Linear(784, 10).to(x.dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    for _ in range(ROUNDS * PER_ROUND * STEPS):
        idx = torch.randint(len(y), (BATCH,), generator=g)
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    problem = Simulation(load_config(fedpd_config(args.dtype))).problem
    x, y = problem.train.x, problem.train.y.long()
    fed, plain = [], []
    for _ in range(args.repeats):  # alternate so both see the same machine load
        fed.append(time_fedpd(args.dtype))
        plain.append(time_plain(x, y))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.dtype}")
    print(
        f"fedpd FedAvg, 30 rounds x 10 clients x 20 steps: best {min(fed):.3f} s  "
        f"(all: {', '.join(f'{t:.2f}' for t in fed)})"
    )
    print(
        f"plain PyTorch loop, 6000 steps:                 best {min(plain):.3f} s  "
        f"(all: {', '.join(f'{t:.2f}' for t in plain)})"
    )
    print(f"ratio fedpd / plain: {min(fed) / min(plain):.2f}")


if __name__ == "__main__":
    main()
