"""Does a round cost what its participants cost, not what the population costs? (issue 14)

A-FedPD and FedDyn, 10 participants per round, on FedProx's Synthetic(1, 1) (60 features, 10
classes: d = 610, power-law client sizes up to 1000 samples), 20 local SGD steps of batch 10, at
N = 10² and N = 10⁶ clients, with the client states in memory and on disk — eight simulations
built up front and timed side by side in this process, one round at a time, each cycle in a new
random order (so load from other jobs on the shared machine falls on all of them alike, and no
simulation always runs right after the same other one); each
simulation's median seconds per round over ``--rounds`` rounds is reported, and the ratio of the
medians. Evaluation is excluded (``Simulation.step`` only). The disk stores keep undo logs
as in a run with a run directory, and every ``--checkpoint-every`` rounds the benchmark takes a
checkpoint (``state_dict`` + ``checkpoint_saved``, not timed; reported separately), so the undo
writes that follow a checkpoint are in the timed rounds.

At N = 10² the problem is built eagerly (the default for its size); at N = 10⁶ lazily (its
samples would take ~90 GB), so a participant's samples are generated when it is first read —
work that grows with the participants, reported as ``gen s/round``.

    python benchmarks/scale_store.py [--rounds 200] [--warmup 5] [--threads 0]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from fedpd.config import load_config
from fedpd.problems.lazy import is_lazy
from fedpd.problems.synthetic import fedprox_synthetic
from fedpd.simulation import Simulation

ALGORITHMS = {"afedpd": {"name": "afedpd", "eta": 10.0}, "feddyn": {"name": "feddyn", "eta": 10.0}}
SIZES = (10**2, 10**6)
STORES = ("memory", "disk")


def config(algorithm: str, clients: int, store: str) -> dict:
    return {"problem": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "clients": clients, "seed": 0},
            "algorithm": ALGORITHMS[algorithm],
            "solver": {"name": "sgd", "lr": 0.05, "local_steps": 20, "batch_size": 10},
            "sampler": {"name": "uniform", "clients_per_round": 10},
            "run": {"rounds": 100_000, "eval_every": 1000, "seed": 0, "store": store, "dtype": "float64"}}


class Timed:
    """One simulation and its timings."""

    def __init__(self, algorithm: str, clients: int, store: str, root: Path):
        self.name = (algorithm, clients, store)
        t0 = time.perf_counter()
        self.sim = Simulation(load_config(config(algorithm, clients, store)))
        self.build_s = time.perf_counter() - t0
        if store == "disk":
            self.sim.attach_store(root / f"{algorithm}-{clients}", resume=False)
        self.gen_s = 0.0
        split = self.sim.problem.train
        if is_lazy(split):
            source = split.x.source
            generate = source.generate

            def timed(i):
                t = time.perf_counter()
                out = generate(i)
                self.gen_s += time.perf_counter() - t
                return out

            source.generate = timed
        self.per_round: list[float] = []
        self.gen_per_round: list[float] = []
        self.checkpoint_s: list[float] = []

    def round(self, checkpoint_every: int, timed: bool = True) -> None:
        gen0 = self.gen_s
        t0 = time.perf_counter()
        self.sim.step()
        spent = time.perf_counter() - t0
        if timed:
            self.per_round.append(spent)
            self.gen_per_round.append(self.gen_s - gen0)
        if self.sim.round % checkpoint_every == 0:
            t0 = time.perf_counter()
            self.sim.state_dict()
            self.sim.checkpoint_saved()
            if timed:
                self.checkpoint_s.append(time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200, help="timed rounds of each simulation")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--dir", default=None, help="where the disk stores live (default: a temporary directory)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    root = Path(tempfile.mkdtemp(prefix="fedpd-scale-", dir=args.dir))
    load0 = f"{os.getloadavg()[0]:.2f}"
    try:
        t0 = time.perf_counter()
        problem = fedprox_synthetic(alpha=1.0, beta=1.0, clients=10**6, seed=0)
        build = time.perf_counter() - t0
        print(f"Synthetic(1, 1) with 10^6 clients: built in {build:.3f} s ({problem.train.x.shape[0]:,} training "
              f"samples, lazy={is_lazy(problem.train)})")
        del problem
        runs = [Timed(a, n, s, root) for a in ALGORITHMS for n in SIZES for s in STORES]
        for _ in range(args.warmup):
            for r in runs:
                r.round(args.checkpoint_every, timed=False)
        order = random.Random(0)
        for _ in range(args.rounds):
            for r in order.sample(runs, len(runs)):  # a new order every cycle: no simulation always follows another
                r.round(args.checkpoint_every)
        med = {r.name: statistics.median(r.per_round) for r in runs}
        print(
            f"\n{platform.node()}: torch {torch.__version__}, {torch.get_num_threads()} threads; {args.rounds} rounds "
            f"of each, interleaved in a random order per cycle, after {args.warmup} warm-up rounds; "
            f"load average before: {load0}, after: {os.getloadavg()[0]:.2f}\n"
        )
        print(
            "| algorithm | store | N | build s | s/round (median) | s/round (mean) | s/round (min) | "
            "gen s/round (mean) | checkpoint s (median) | clients stored | ratio of medians N=10⁶ / N=10² |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in runs:
            a, n, s = r.name
            ratio = med[r.name] / med[(a, SIZES[0], s)]
            print(f"| {a} | {s} | {n:.0e} | {r.build_s:.2f} | {med[r.name]:.4f} | {statistics.mean(r.per_round):.4f} | "
                  f"{min(r.per_round):.4f} | {statistics.mean(r.gen_per_round):.4f} | "
                  f"{statistics.median(r.checkpoint_s):.4f} | {len(r.sim.store)} | "
                  f"{'' if n == SIZES[0] else f'**{ratio:.2f}**'} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
