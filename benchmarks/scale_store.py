"""Does a round cost what its participants cost, not what the population costs? (issue 14)

A-FedPD and FedDyn, 10 participants per round, on FedProx's Synthetic(1, 1) (60 features, 10
classes: d = 610, power-law client sizes up to 1000 samples), 20 local SGD steps of batch 10, at
N = 10² and N = 10⁶ clients, with the client states in memory and on disk — eight simulations
built up front and timed side by side in this process: each repeat runs ``--rounds`` rounds of
every simulation in turn, and each simulation's best repeat is reported (the machine is shared
and noisy). Evaluation is excluded (``Simulation.step`` only). The disk stores keep undo logs
as in a run with a run directory, and every ``--checkpoint-every`` rounds the benchmark takes a
checkpoint (``state_dict`` + ``checkpoint_saved``, not timed; reported separately), so the undo
writes that follow a checkpoint are in the timed rounds.

At N = 10² the problem is built eagerly (the default for its size); at N = 10⁶ lazily (its
samples would take ~90 GB), so a participant's samples are generated when it is first read —
work that grows with the participants, reported as ``gen s/round``.

    python benchmarks/scale_store.py [--rounds 20] [--repeats 5] [--threads 0]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from fedpd.config import load_config
from fedpd.problems.lazy import is_lazy
from fedpd.problems.synthetic import fedprox_synthetic
from fedpd.runner import Simulation

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

    def rounds(self, n: int, checkpoint_every: int) -> None:
        spent, gen0 = 0.0, self.gen_s
        for _ in range(n):
            t0 = time.perf_counter()
            self.sim.step()
            spent += time.perf_counter() - t0
            if self.sim.round % checkpoint_every == 0:
                t0 = time.perf_counter()
                self.sim.state_dict()
                self.sim.checkpoint_saved()
                self.checkpoint_s.append(time.perf_counter() - t0)
        self.per_round.append(spent / n)
        self.gen_per_round.append((self.gen_s - gen0) / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20, help="rounds per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--dir", default=None, help="where the disk stores live (default: a temporary directory)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    root = Path(tempfile.mkdtemp(prefix="fedpd-scale-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        problem = fedprox_synthetic(alpha=1.0, beta=1.0, clients=10**6, seed=0)
        build = time.perf_counter() - t0
        print(f"Synthetic(1, 1) with 10^6 clients: built in {build:.3f} s ({problem.train.x.shape[0]:,} training "
              f"samples, lazy={is_lazy(problem.train)})")
        del problem
        runs = [Timed(a, n, s, root) for a in ALGORITHMS for n in SIZES for s in STORES]
        for r in runs:
            r.rounds(args.warmup, args.checkpoint_every)
            r.per_round.clear()
            r.gen_per_round.clear()
        for _ in range(args.repeats):
            for r in runs:
                r.rounds(args.rounds, args.checkpoint_every)
        best = {r.name: min(r.per_round) for r in runs}
        print(f"\n{platform.node()}: torch {torch.__version__}, {torch.get_num_threads()} threads; {args.repeats} repeats "
              f"x {args.rounds} rounds after {args.warmup} warm-up rounds; best repeat\n")
        print("| algorithm | store | N | build s | s/round (best) | s/round (median) | gen s/round | checkpoint s (median) "
              "| clients stored | ratio N=10⁶ / N=10² |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in runs:
            a, n, s = r.name
            ratio = best[r.name] / best[(a, SIZES[0], s)]
            gen = statistics.median(r.gen_per_round) if r.gen_per_round else 0.0
            print(f"| {a} | {s} | {n:.0e} | {r.build_s:.2f} | {best[r.name]:.4f} | {statistics.median(r.per_round):.4f} | "
                  f"{gen:.4f} | {statistics.median(r.checkpoint_s):.4f} | {len(r.sim.store)} | "
                  f"{'' if n == SIZES[0] else f'**{ratio:.2f}**'} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
