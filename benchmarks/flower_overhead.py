"""What running on Flower costs: one workload three ways, side by side in one run.

W1: FedAvg, 100 clients, 10 per round, 20 SGD steps of batch 10, multinomial logistic regression
784 -> 10, 30 rounds, one torch thread per process.

    inprocess     fedpd's in-process engine
    fedpd-flower  fedpd on Flower's simulation runtime (100 virtual SuperNodes, Ray, 2 workers)
    flower        a plain Flower app doing the same work: flwr.serverapp.strategy.FedAvg and a
                  ClientApp training torch.nn.Linear with torch.optim.SGD (benchmarks/flower_plain_app.py)

Each variant runs in its own child process (so its memory is its own), sampled every 0.1 s for
the resident memory of its whole process tree (Ray workers included). Reported: end-to-end wall
time of the child, steady seconds per round (median of rounds 2-30: round 1 pays Ray's start and
the workers' imports) and peak memory summed over processes. Target: fedpd-flower within 1.1x of
flower per steady round.

    python benchmarks/flower_overhead.py [--repeats 2] [--rounds 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0",
       "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1",
       "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
CLIENTS, PER_ROUND, STEPS, BATCH, LR = 100, 10, 20, 10, 0.05


def fedpd_config(rounds: int, engine: str) -> dict:
    return {"problem": {"name": "synthetic", "clients": CLIENTS, "dim": 784, "classes": 10, "max_client_samples": 300},
            "algorithm": {"name": "fedavg"},
            "solver": {"name": "sgd", "lr": LR, "local_steps": STEPS, "batch_size": BATCH},
            "sampler": {"name": "uniform", "clients_per_round": PER_ROUND},
            "run": {"rounds": rounds, "eval_every": rounds, "seed": 0, "dtype": "float32", "threads": 1,
                    "engine": engine, "nodes": CLIENTS}}


def child_fedpd(engine: str, rounds: int, out: Path) -> None:
    """One fedpd run, timing each round (evaluation excluded)."""
    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    cfg = load_config(fedpd_config(rounds, engine))
    stamps = []
    start = time.perf_counter()
    if engine == "flower":
        from fedpd.flower.simulation import FlowerSession, backend_config

        with FlowerSession(CLIENTS, backend_config(cfg)) as session:
            sim = Simulation(cfg, workdir=Path(tempfile.mkdtemp()), transport=session.transport)
            for _ in range(rounds):
                t0 = time.perf_counter()
                sim.step()
                stamps.append(time.perf_counter() - t0)
    else:
        sim = Simulation(cfg)
        for _ in range(rounds):
            t0 = time.perf_counter()
            sim.step()
            stamps.append(time.perf_counter() - t0)
    out.write_text(json.dumps({"rounds": stamps, "inside_s": time.perf_counter() - start}))


def child_flower(rounds: int, out: Path) -> None:
    sys.path.insert(0, str(HERE))
    import flower_plain_app

    stamps = flower_plain_app.simulate(clients=CLIENTS, per_round=PER_ROUND, steps=STEPS, batch=BATCH, lr=LR,
                                       rounds=rounds, cpus=2)
    out.write_text(json.dumps({"rounds": stamps}))


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            with open(f"/proc/{entry}/statm") as f:
                rss[int(entry)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def measure(variant: str, rounds: int, script: str = __file__) -> dict:
    """``script --child variant`` in a process of its own (it writes {"rounds": seconds of each})."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        env = {**os.environ, **ENV, "FLWR_HOME": str(Path(tmp) / "flwr_home")}
        argv = [sys.executable, script, "--child", variant, "--rounds", str(rounds), "--out", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        peak = [0]

        def sample():
            while proc.poll() is None:
                peak[0] = max(peak[0], tree_rss(proc.pid))
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, err = proc.communicate()
        wall = time.perf_counter() - t0
        sampler.join()
        if proc.returncode != 0:
            raise RuntimeError(f"{variant} failed:\n{err[-3000:]}")
        stamps = json.loads(out.read_text())["rounds"]
    return {"variant": variant, "end_to_end_s": wall, "first_round_s": stamps[0],
            "steady_s_per_round": statistics.median(stamps[1:]), "peak_mb": peak[0] / 2**20, "rounds": stamps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.child == "flower":
            child_flower(args.rounds, Path(args.out))
        else:
            child_fedpd("flower" if args.child == "fedpd-flower" else "inprocess", args.rounds, Path(args.out))
        return
    results = []
    for r in range(args.repeats):  # alternating, so that load drifts hit every variant alike
        for variant in ("inprocess", "fedpd-flower", "flower"):
            res = measure(variant, args.rounds)
            res["repeat"] = r
            results.append(res)
            print(f"{variant:>13}  end to end {res['end_to_end_s']:6.1f} s  first round {res['first_round_s']:6.2f} s  "
                  f"steady {res['steady_s_per_round']:.3f} s/round  peak {res['peak_mb']:6.0f} MB", flush=True)
    best = {v: min((r for r in results if r["variant"] == v), key=lambda r: r["steady_s_per_round"])
            for v in ("inprocess", "fedpd-flower", "flower")}
    ratio = best["fedpd-flower"]["steady_s_per_round"] / best["flower"]["steady_s_per_round"]
    print(f"steady s/round, fedpd on Flower / plain Flower: {ratio:.2f} (target <= 1.1)")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "ratio": ratio}, indent=1))


if __name__ == "__main__":
    main()
