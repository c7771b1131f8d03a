"""What the simulated clock and the asynchronous server cost (docs/performance.md, "Simulated time").

1. **Overhead at equal work** on W1 (FedAvg's clients, 100 clients, 20 SGD steps of batch 10,
   multinomial logistic regression 784 → 10): a synchronous round of 10 clients without
   ``[system]``, the same round with a fleet (lognormal speeds, Markov availability) and a FedBuff
   server update with 10 clients in flight and a buffer of 10 — each trains 10 clients. Timed side
   by side in this process, alternating, best of ``--repeats``; the ratios to the plain round are
   what matters (the machines are shared and noisy).
2. **Scale**: FedBuff with Markov availability and 100 clients in flight on 10³ and on 10⁵
   registered clients (Synthetic(1, 1), generated on demand), seconds per server update applied.

    python benchmarks/clock.py [--repeats 3] [--updates 20]
"""

from __future__ import annotations

import argparse
import time

from fedpd.config import load_config
from fedpd.simulation import Simulation

W1 = {"problem": {"name": "synthetic", "clients": 100, "dim": 784, "classes": 10, "max_client_samples": 300},
      "algorithm": {"name": "fedavg"}, "solver": {"name": "sgd", "lr": 0.05, "local_steps": 20, "batch_size": 10},
      "run": {"rounds": 10 ** 6, "eval_every": 10 ** 6, "seed": 0, "threads": 1, "workers": 1}}
FLEET = {"speed": {"dist": "lognormal", "median": 1e9, "sigma": 1.0}, "availability": "markov",
         "mean_on_s": 600.0, "mean_off_s": 300.0}
VARIANTS = {
    "synchronous, no [system]": {"sampler": {"name": "uniform", "clients_per_round": 10}},
    "synchronous with a fleet": {"sampler": {"name": "uniform", "clients_per_round": 10}, "system": FLEET},
    "FedBuff, C = 10, K = 10": {"system": FLEET, "asynchronous": {"concurrency": 10, "buffer": 10}},
}


def per_step(sim: Simulation, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        sim.step()
    return (time.perf_counter() - t0) / steps


def overhead(repeats: int, steps: int) -> dict[str, float]:
    sims = {name: Simulation(load_config({**W1, **extra})) for name, extra in VARIANTS.items()}
    for sim in sims.values():
        per_step(sim, 2)  # warm-up: allocations, the first gathers
    best = {name: float("inf") for name in sims}
    for _ in range(repeats):
        for name, sim in sims.items():
            best[name] = min(best[name], per_step(sim, steps))
    return best


def scale(clients: int, updates: int) -> float:
    cfg = {
        "problem": {"name": "synthetic", "clients": clients, "max_client_samples": 50},
        "algorithm": {"name": "fedavg"},
        "solver": {"name": "sgd", "lr": 0.05, "local_steps": 20, "batch_size": 10},
        "system": {**FLEET, "speed": {"dist": "lognormal", "median": 1e7, "sigma": 1.0}},
        "asynchronous": {"concurrency": 100, "buffer": 10},
        "run": {"rounds": 10**6, "eval_every": 10**6, "seed": 0, "threads": 1, "workers": 1},
    }
    sim = Simulation(load_config(cfg))
    per_step(sim, 5)
    return per_step(sim, updates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=20, help="rounds or server updates timed per repeat")
    args = parser.parse_args()
    best = overhead(args.repeats, args.updates)
    plain = best["synchronous, no [system]"]
    print("| W1, 10 clients trained per step | ms per round or update | ratio |")
    print("|---|---|---|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds * 1e3:.1f} | {seconds / plain:.2f} |")
    small, large = scale(1_000, args.updates), scale(100_000, args.updates)
    print()
    print("| FedBuff, 100 in flight, K = 10, Markov availability | ms per update applied |")
    print("|---|---|")
    print(f"| 10³ clients | {small * 1e3:.1f} |")
    print(f"| 10⁵ clients | {large * 1e3:.1f} ({large / small:.2f}×) |")


if __name__ == "__main__":
    main()
