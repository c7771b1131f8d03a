"""Parallel clients inside one run (``run.workers``): LeNet side by side, and where workers gain.

The LeNet workload (the default) — CIFAR-10 (3x32x32), 100 clients, 10 per round, 10 SGD steps
of batch 50 each, FedAvg, float32, one torch thread per process — four ways:

    fedpd-w1   fedpd's simulation (fedpd.run's), run.workers = 1
    fedpd-w2   the same with run.workers = 2 (two worker processes, one thread each)
    plain      a plain single-process PyTorch loop: one reused nn.Module (fedpd's LeNet),
               torch.optim.SGD, the round's clients one after another, the server averaging
               their weights
    flower     a plain Flower app (flwr.serverapp.strategy.FedAvg, a ClientApp training the same
               nn.Module with torch.optim.SGD: benchmarks/flower_lenet_app.py) on Flower's
               simulation runtime with 2 actors (local Ray, one CPU and one thread per actor);
               left out when flwr is not installed

Time: the first three are held open in this process and stepped round by round in turn, so a
change of the machine's load hits them alike; each repeat then runs Flower's simulation in a
child process for as many rounds (its first round, which pays Ray's start and the actors' data
loading, is dropped). Reported: the median seconds per round over all repeats, and each
variant's ratio to the plain loop. Memory (``--memory``): each variant in a child process of its
own, its whole process tree (workers, Ray) sampled every 0.1 s for resident memory.

``--break-even``: FedAvg with ``run.workers = 1`` and ``2`` held open side by side and stepped
alternately, on workloads from a few milliseconds of local work per round to a LeNet round: the
round's estimated FLOPs (``fedpd.threads.LocalWork.round_flops``, what ``run.workers = "auto"`` decides
by), the median seconds per round of each, their ratio, and the seconds the pool took to start.
This sets ``fedpd.workers.PARALLEL_ROUND_FLOPS``. Needs MNIST (and, for the LeNet workload,
CIFAR-10) in $FEDPD_DATA.

    FEDPD_DATA=/path/to/data python benchmarks/parallel_clients.py --repeats 3 --rounds 6 --memory
    FEDPD_DATA=/path/to/data python benchmarks/parallel_clients.py --break-even
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from flower_overhead import measure  # noqa: E402  (a child process of its own, its process tree's peak memory)
from lenet_workload import CLIENTS, LR, PER_ROUND, client_data, lenet, lenet_config, local_steps  # noqa: E402

VARIANTS = ("fedpd-w1", "fedpd-w2", "plain", "flower")


class Fedpd:
    def __init__(self, workers: int):
        from fedpd.config import load_config
        from fedpd.simulation import Simulation

        self.sim = Simulation(load_config(lenet_config(1000, workers)))

    def round(self) -> None:
        self.sim.step()


class Plain:
    def __init__(self):
        import torch

        self.data = client_data()
        self.net = lenet()
        self.weights = {k: v.clone() for k, v in self.net.state_dict().items()}
        self.opt = torch.optim.SGD(self.net.parameters(), lr=LR)
        self.g = torch.Generator().manual_seed(1)

    def round(self) -> None:
        import torch

        total = {k: torch.zeros_like(v) for k, v in self.weights.items()}
        for i in torch.randperm(CLIENTS, generator=self.g)[:PER_ROUND].tolist():
            self.net.load_state_dict(self.weights)
            local_steps(self.net, self.opt, *self.data[i], self.g)
            for k, v in self.net.state_dict().items():
                total[k] += v
        self.weights = {k: v / PER_ROUND for k, v in total.items()}


RUNNERS = {"fedpd-w1": lambda: Fedpd(1), "fedpd-w2": lambda: Fedpd(2), "plain": Plain}


def child(variant: str, rounds: int) -> list[float]:
    """``rounds`` rounds of one variant in this process (memory measurement, and Flower)."""
    if variant == "flower":
        import flower_lenet_app

        return flower_lenet_app.simulate(clients=CLIENTS, per_round=PER_ROUND, rounds=rounds, actors=2)
    import torch

    torch.set_num_threads(1)
    runner = RUNNERS[variant]()
    stamps = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        runner.round()
        stamps.append(time.perf_counter() - t0)
    return stamps


def side_by_side(repeats: int, rounds: int, variants: list[str]) -> dict[str, list[float]]:
    import torch

    torch.set_num_threads(1)
    runners = {v: RUNNERS[v]() for v in variants if v in RUNNERS}
    for runner in runners.values():
        runner.round()  # warm-up: kernels, the workers' start
    times: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(repeats):
        for _ in range(rounds):
            for v, runner in runners.items():
                t0 = time.perf_counter()
                runner.round()
                times[v].append(time.perf_counter() - t0)
        if "flower" in variants:
            times["flower"] += measure("flower", rounds + 1, __file__)["rounds"][1:]
        print(f"repeat {r + 1}: " + "  ".join(f"{v} {statistics.median(t):.3f}" for v, t in times.items())
              + f"  (load {os.getloadavg()[0]:.1f})", flush=True)
    for runner in runners.values():
        if isinstance(runner, Fedpd):
            runner.sim.close()
    return times


def lenet_table(repeats: int, rounds: int, variants: list[str], memory: bool) -> dict:
    times = side_by_side(repeats, rounds, variants)
    med = {v: statistics.median(t) for v, t in times.items()}
    peak = {v: measure(v, 3, __file__)["peak_mb"] for v in variants} if memory else {}
    print("\nmedian s/round" + (", peak MB of the process tree" if memory else "") + ":")
    for v in variants:
        print(f"  {v:>9}  {med[v]:.3f} s/round  ({med[v] / med['plain']:.2f}x plain)"
              + (f"  {peak[v]:.0f} MB" if memory else ""))
    if "fedpd-w2" in med:
        print(f"fedpd 2 workers / plain loop: {med['fedpd-w2'] / med['plain']:.2f} (target <= 0.6)")
        if "flower" in med:
            print(f"fedpd 2 workers / Flower 2 actors: {med['fedpd-w2'] / med['flower']:.2f} (target <= 1.0)")
    return {"seconds": times, "median": med, "peak_mb": peak}


# --- break-even ------------------------------------------------------------------------------
def break_even_cases() -> dict[str, dict]:
    """Workloads from milliseconds of local work per round up to a LeNet round."""
    def synthetic(dim: int, steps: int, batch: int) -> dict:
        return {"problem": {"name": "synthetic", "clients": 100, "dim": dim, "classes": 10, "max_client_samples": 300},
                "solver": {"name": "sgd", "lr": 0.01, "local_steps": steps, "batch_size": batch}}

    def mnist(model: str, steps: int, batch: int) -> dict:
        return {"problem": {"name": "dataset", "dataset": "mnist", "clients": 100, "partition": "iid",
                            "max_samples": 20_000, "max_test_samples": 100},
                "model": {"name": model}, "solver": {"name": "sgd", "lr": 0.01, "local_steps": steps,
                                                     "batch_size": batch}}

    return {"synthetic d=60, 20x10": synthetic(60, 20, 10),
            "synthetic d=784, 20x10 (logistic)": synthetic(784, 20, 10),
            "synthetic d=784, 50x50": synthetic(784, 50, 50),
            "mnist logistic, 24x50": mnist("logistic", 24, 50),
            "mnist mlp, 20x10": mnist("mlp", 20, 10),
            "mnist mlp, 24x50": mnist("mlp", 24, 50),
            "mnist lenet, 10x10": mnist("lenet", 10, 10),
            "mnist lenet, 10x50": mnist("lenet", 10, 50)}


def break_even(repeats: int, rounds: int, names: list[str] | None) -> None:
    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    for name, case in break_even_cases().items():
        if names and not any(n in name for n in names):
            continue
        cfg = {**case, "algorithm": {"name": "fedavg"}, "sampler": {"name": "uniform", "clients_per_round": 10},
               "run": {"rounds": 1000, "seed": 0, "threads": 1, "dtype": "float32"}}
        try:
            one = Simulation(load_config(cfg, ["run.workers=1"]))
        except Exception as err:  # e.g. no MNIST in $FEDPD_DATA
            print(f"{name:>36}: skipped ({err})")
            continue
        t0 = time.perf_counter()
        two = Simulation(load_config(cfg, ["run.workers=2"]))
        two.step()
        start = time.perf_counter() - t0
        one.step()
        times: dict[str, list[float]] = {"1": [], "2": []}
        for _ in range(repeats * rounds):
            for key, sim in (("1", one), ("2", two)):
                t = time.perf_counter()
                sim.step()
                times[key].append(time.perf_counter() - t)
        s1, s2 = statistics.median(times["1"]), statistics.median(times["2"])
        print(f"{name:>36}: round {one.work.round_flops:8.2e} FLOPs  workers=1 {s1 * 1e3:8.1f} ms  "
              f"workers=2 {s2 * 1e3:8.1f} ms  ratio {s2 / s1:5.2f}  pool start {start:5.1f} s  "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
        two.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--break-even", action="store_true", help="workers 1 against 2 over workloads of every size")
    ap.add_argument("--cases", help="--break-even: only cases whose name contains one of these (comma-separated)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=6, help="rounds of each variant per repeat")
    ap.add_argument("--memory", action="store_true", help="also each variant's peak memory (child processes)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="which of " + ", ".join(VARIANTS))
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        Path(args.out).write_text(json.dumps({"rounds": child(args.child, args.rounds)}))
        return
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) on {os.cpu_count()} cores", flush=True)
    if args.break_even:
        break_even(args.repeats, args.rounds, args.cases.split(",") if args.cases else None)
        return
    variants = args.variants.split(",")
    if "flower" in variants:
        try:
            import flwr  # noqa: F401
        except ImportError:
            print("flwr is not installed: the Flower variant is left out (pip install 'fedpd[flower]')")
            variants.remove("flower")
    results = lenet_table(args.repeats, args.rounds, variants, args.memory)
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
