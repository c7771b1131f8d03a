"""Parallel clients inside one run (``run.workers``): where they gain, and LeNet side by side.

``--break-even``: FedAvg rounds with ``run.workers = 1`` (one thread) and ``2`` (one thread
each), both runs held open in this process and stepped alternately, on workloads from a few
milliseconds of local work per round to a LeNet round. Per workload: the round's estimated
FLOPs (``fedpd.threads.round_flops``, what ``run.workers = "auto"`` decides by), the median
seconds per round of each, their ratio, and the seconds the pool took to start (its workers
import torch and build the problem). This sets ``fedpd.workers.PARALLEL_ROUND_FLOPS``.

``--lenet`` (the default): the LeNet workload — CIFAR-10 (3x32x32), 100 clients, 10 per round,
10 SGD steps of batch 50, FedAvg, float32 — four ways, each in a child process of its own whose
whole process tree (workers, Ray actors) is sampled every 0.1 s for resident memory:

    fedpd-w1   fedpd.run's simulation, run.workers = 1, one torch thread
    fedpd-w2   the same with run.workers = 2 (one thread each)
    plain      a plain single-process PyTorch loop: one reused nn.Module (fedpd's LeNet), torch.optim.SGD,
               the round's clients one after another, the server averaging their weights; one thread
    flower     a plain Flower app (flwr.serverapp.strategy.FedAvg, a ClientApp training the same
               nn.Module with torch.optim.SGD) on Flower's simulation runtime with 2 actors
               (local Ray, num_cpus 2, one CPU and one torch thread per actor); only if flwr is installed

Steady seconds per round: median of rounds 2..R of a child (round 1 pays imports, Ray's start,
the workers' start and the actors' data loading); the table gives the median over --repeats of
those medians, the variants alternating within each repeat. Needs CIFAR-10 in $FEDPD_DATA.

    FEDPD_DATA=/path/to/data python benchmarks/parallel_clients.py --repeats 3 --rounds 8
    python benchmarks/parallel_clients.py --break-even
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

CLIENTS, PER_ROUND, STEPS, BATCH, LR, SAMPLES = 100, 10, 10, 50, 0.01, 10_000
VARIANTS = ("fedpd-w1", "fedpd-w2", "plain", "flower")


def lenet_config(rounds: int, workers: int) -> dict:
    return {"problem": {"name": "dataset", "dataset": "cifar10", "clients": CLIENTS, "partition": "iid",
                        "max_samples": SAMPLES, "max_test_samples": 100, "test": "pooled"},
            "model": {"name": "lenet"}, "algorithm": {"name": "fedavg"},
            "solver": {"name": "sgd", "lr": LR, "local_steps": STEPS, "batch_size": BATCH},
            "sampler": {"name": "uniform", "clients_per_round": PER_ROUND},
            "run": {"rounds": rounds, "eval_every": rounds, "seed": 0, "threads": 1, "workers": workers}}


def client_data():
    """Every client's CIFAR-10 samples, as fedpd's problem splits them (so all variants train on the same data)."""
    from fedpd.build import build_problem
    from fedpd.config import load_config

    problem = build_problem(load_config(lenet_config(1, 1)))
    split = problem.train
    return [(split.x[split.offsets[i]:split.offsets[i + 1]], split.y[split.offsets[i]:split.offsets[i + 1]])
            for i in range(CLIENTS)]


def lenet():
    import torch

    from fedpd.models import build_model

    torch.manual_seed(0)
    return build_model("lenet", input_shape=(3, 32, 32), num_classes=10)


def local_steps(net, opt, x, y, generator) -> None:
    import torch
    import torch.nn.functional as F

    for _ in range(STEPS):
        idx = torch.randint(len(y), (BATCH,), generator=generator)
        opt.zero_grad()
        F.cross_entropy(net(x[idx]), y[idx]).backward()
        opt.step()


# --- the children ----------------------------------------------------------------------------
def child_fedpd(workers: int, rounds: int) -> list[float]:
    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    sim = Simulation(load_config(lenet_config(rounds, workers)))
    stamps = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        sim.step()
        stamps.append(time.perf_counter() - t0)
    sim.close()
    return stamps


def child_plain(rounds: int) -> list[float]:
    import torch

    torch.set_num_threads(1)
    data = client_data()
    net = lenet()
    weights = {k: v.clone() for k, v in net.state_dict().items()}
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    g = torch.Generator().manual_seed(1)
    stamps = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        total = {k: torch.zeros_like(v) for k, v in weights.items()}
        for i in torch.randperm(CLIENTS, generator=g)[:PER_ROUND].tolist():
            net.load_state_dict(weights)
            local_steps(net, opt, *data[i], g)
            for k, v in net.state_dict().items():
                total[k] += v
        weights = {k: v / PER_ROUND for k, v in total.items()}
        stamps.append(time.perf_counter() - t0)
    return stamps


def child_flower(rounds: int) -> list[float]:
    import flower_lenet_app

    return flower_lenet_app.simulate(clients=CLIENTS, per_round=PER_ROUND, rounds=rounds, actors=2)


def lenet_table(repeats: int, rounds: int, variants: list[str]) -> list[dict]:
    results = []
    for r in range(repeats):  # alternating, so that load drifts hit every variant alike
        for variant in variants:
            res = measure(variant, rounds, __file__)
            res["repeat"] = r
            results.append(res)
            print(f"{variant:>9}  steady {res['steady_s_per_round']:.3f} s/round  first round "
                  f"{res['first_round_s']:6.2f} s  end to end {res['end_to_end_s']:6.1f} s  peak {res['peak_mb']:6.0f} MB",
                  flush=True)
    med = {v: statistics.median(r["steady_s_per_round"] for r in results if r["variant"] == v) for v in variants}
    mem = {v: statistics.median(r["peak_mb"] for r in results if r["variant"] == v) for v in variants}
    print("\nmedian steady s/round and peak MB (process tree):")
    for v in variants:
        print(f"  {v:>9}  {med[v]:.3f} s/round  ({med[v] / med['plain']:.2f}x plain)  {mem[v]:.0f} MB")
    if "fedpd-w2" in med:
        print(f"fedpd 2 workers / plain loop: {med['fedpd-w2'] / med['plain']:.2f} (target <= 0.6)")
        if "flower" in med:
            print(f"fedpd 2 workers / Flower 2 actors: {med['fedpd-w2'] / med['flower']:.2f} (target <= 1.0)")
    return results


# --- break-even ------------------------------------------------------------------------------
def break_even_cases() -> dict[str, dict]:
    """Workloads from milliseconds of local work per round up to a LeNet round (dataset ones need $FEDPD_DATA)."""
    def synthetic(dim: int, steps: int, batch: int) -> dict:
        return {"problem": {"name": "synthetic", "clients": 100, "dim": dim, "classes": 10, "max_client_samples": 300},
                "solver": {"name": "sgd", "lr": 0.01, "local_steps": steps, "batch_size": batch}}

    def mnist(model: str, steps: int, batch: int, max_samples: int = 20_000) -> dict:
        return {"problem": {"name": "dataset", "dataset": "mnist", "clients": 100, "partition": "iid",
                            "max_samples": max_samples, "max_test_samples": 100},
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
    from fedpd.threads import round_flops

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
        for _ in range(repeats):
            for key, sim in (("1", one), ("2", two)):
                for _ in range(rounds):
                    t = time.perf_counter()
                    sim.step()
                    times[key].append(time.perf_counter() - t)
        s1, s2 = statistics.median(times["1"]), statistics.median(times["2"])
        print(f"{name:>36}: round {round_flops(one.cfg, one.problem):8.2e} FLOPs  workers=1 {s1 * 1e3:8.1f} ms  "
              f"workers=2 {s2 * 1e3:8.1f} ms  ratio {s2 / s1:5.2f}  pool start {start:5.1f} s", flush=True)
        two.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--break-even", action="store_true", help="workers 1 against 2 over workloads of every size")
    ap.add_argument("--cases", help="--break-even: only cases whose name contains one of these (comma-separated)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=8, help="rounds per child (--lenet) or per repeat (--break-even)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="--lenet: which of " + ", ".join(VARIANTS))
    ap.add_argument("--json", help="--lenet: also write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        run = {"fedpd-w1": lambda: child_fedpd(1, args.rounds), "fedpd-w2": lambda: child_fedpd(2, args.rounds),
               "plain": lambda: child_plain(args.rounds), "flower": lambda: child_flower(args.rounds)}[args.child]
        Path(args.out).write_text(json.dumps({"rounds": run()}))
        return
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min) on "
          f"{os.cpu_count()} cores", flush=True)
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
    results = lenet_table(args.repeats, args.rounds, variants)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
