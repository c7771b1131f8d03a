"""What a Flower deployment round costs on loopback: fedpd's against a plain Flower app's, side by
side in one run, and the docs' example against Flower's simulation of it.

``--workload flower`` (the default): fedpd's deployed round against a plain Flower app's, with the
same model, data and local work — W1's (benchmarks/flower_overhead.py) on a deployment of two
SuperNodes of one client each (Flower's way: a node is a client): each round both nodes train
``torch.nn.Linear(784, 10)`` (float32, one thread) for 20 SGD steps of batch 10 on their own
synthetic samples, and the server averages. Modes:

    flower        a plain Flower app (benchmarks/flower_plain_app.py: flwr's FedAvg strategy and a
                  torch ClientApp), as its user writes it (the strategy's grid pulls replies every 3 s)
    flower-pull   the same, its grid pulling every 10 ms (fedpd's deployed server: every 50 ms)
    fedpd         fedpd's FedAvg, the app ``fedpd flower app`` writes, evaluated and checkpointed
                  every round (docs/deployment.md)
    fedpd-feddyn  the same with FedDyn (client state: one exchange a round too, the commit riding
                  with the next message)
    *-cold        any of the above with SuperNodes as Flower starts them by default
                  (``--isolation subprocess``: a fresh ClientApp process for every message)

Without ``-cold`` the SuperNodes are warm: ``--isolation process``, and one process beside each
that serves every message (fedpd's ``fedpd flower clientapp``; for the plain app the same serving
loop, fedpd.flower.warm.serve, running the plain ClientApp), so neither pays a process start per
message. A round is measured on the server: for fedpd the difference of consecutive records'
``wall_s`` in ``metrics.jsonl`` (broadcast, the nodes' work, the replies, aggregation, evaluation,
checkpoint), for the plain app between the strategy's calls of its ``evaluate_fn``.

``--workload docs``: docs/deployment.md's example (examples/feddyn.toml: FedDyn on Synthetic(1, 1),
30 clients, 10 per round, 50 SGD steps) on two SuperNodes of 15 clients: ``simulation`` (``fedpd
run --set run.engine=flower``, Ray), ``cold`` and ``warm`` deployments; their metrics (``wall_s``
aside) are checked equal.

Reported: the mean and the median of rounds 2.. (round 1 pays the nodes' first build) and the end
to end time, each the best of the repeats; fedpd against the plain app by each. A round waits for
a SuperNode's 3-s poll or the next one, so round times are bimodal (about 3.4 s or 6.4 s for the
plain app) and the median lands on either mode from one run to the next: the mean, which is what a
run of many rounds takes, is the figure to compare;
modes alternate, so that load drifts hit them alike. Every process is started in a session of its
own and stopped by its process group id.

    python benchmarks/deployment_rounds.py [--workload flower] [--rounds 20] [--repeats 2] [--modes ...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0",
       "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
WORKLOADS = {"flower": ("flower", "flower-pull", "fedpd", "fedpd-feddyn", "flower-cold", "fedpd-cold",
                        "flower-pull-cold", "fedpd-feddyn-cold"),
             "docs": ("simulation", "cold", "warm")}
DEFAULT = {"flower": "flower,flower-pull,fedpd,fedpd-feddyn", "docs": "simulation,cold,warm"}
STEPS, BATCH, LR = 20, 10, 0.05  # W1's local work


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def round_times(recs: list[dict]) -> list[float]:
    walls = [r["wall_s"] for r in recs]
    return [b - a for a, b in zip(walls, walls[1:])]


def w1_config(algorithm: str, rounds: int) -> dict:
    """W1 on two clients (fedpd's side of the flower workload)."""
    return {"problem": {"name": "synthetic", "clients": 2, "dim": 784, "classes": 10, "max_client_samples": 300},
            "algorithm": {"name": algorithm},
            "solver": {"name": "sgd", "lr": LR, "local_steps": STEPS, "batch_size": BATCH},
            "sampler": {"name": "all"},
            "run": {"rounds": rounds, "eval_every": 1, "checkpoint_every": 1, "seed": 0, "dtype": "float32",
                    "threads": 1}}


def simulation(work: Path, rounds: int, env: dict) -> list[float]:
    run_dir = work / "run"
    subprocess.run([str(BIN / "fedpd"), "run", str(ROOT / "examples" / "feddyn.toml"), "--out", str(run_dir),
                    "--set", f"run.rounds={rounds}", "--set", "run.eval_every=1", "--set", "run.engine=flower",
                    "--set", "run.nodes=2"], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return run_dir


def deployment(work: Path, rounds: int, env: dict, mode: str) -> Path | list[float]:
    """One deployment of ``mode`` on 127.0.0.1: a fedpd run directory, or the plain app's round seconds."""
    procs: list[subprocess.Popen] = []
    warm = not mode.endswith("-cold") and mode != "cold"
    plain = mode.startswith("flower")

    def start(name: str, argv: list[str]) -> None:
        log = open(work / f"{name}.log", "ab")
        procs.append(subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))

    link = free_port()
    (work / "flwr_home").mkdir()
    (work / "flwr_home" / "config.toml").write_text(f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
                                                    f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    run_dir, stamps = work / "run", work / "stamps.json"
    blocks = ("0", "1") if mode not in ("cold", "warm") else ("0-14", "15-29")
    try:
        start("superlink", [str(BIN / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                            "--host", "127.0.0.1", "--port", str(link)])
        for k, hosted in enumerate(blocks):
            port = free_port()
            config = (f"partition-id={k} num-partitions={len(blocks)}" if plain
                      else f"hosted-clients='{hosted}' store-dir='{work / f'node{k}'}'")
            start(f"node{k}", [str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}",
                               "--port", str(port), *(["--isolation", "process"] if warm else []),
                               "--node-config", config])
            if warm and plain:  # the same serving loop as fedpd's, running the plain ClientApp
                start(f"clientapp{k}", [sys.executable, "-c", "from fedpd.flower.warm import serve; "
                                        f"serve('127.0.0.1:{port}', component='flower_plain_app:client_app')"])
            elif warm:
                start(f"clientapp{k}", [str(BIN / "fedpd"), "flower", "clientapp", "--runtime-api-address",
                                        f"127.0.0.1:{port}", "--insecure"])
        if plain:
            sys.path.insert(0, str(HERE))
            import flower_plain_app

            flower_plain_app.write_app(work / "app", nodes=len(blocks), rounds=rounds, steps=STEPS, batch=BATCH,
                                       lr=LR, stamps=stamps, fast_pull="pull" in mode)
        else:
            if mode in ("cold", "warm"):
                config, sets = ROOT / "examples" / "feddyn.toml", ["--set", f"run.rounds={rounds}",
                                                                 "--set", "run.eval_every=1"]
            else:
                import tomli_w

                config, sets = work / "w1.toml", []
                algorithm = "feddyn" if "feddyn" in mode else "fedavg"
                config.write_text(tomli_w.dumps(w1_config(algorithm, rounds)))
            subprocess.run([str(BIN / "fedpd"), "flower", "app", str(config), "--out", str(work / "app"),
                            "--run-dir", str(run_dir), *sets], env=env, check=True, stdout=subprocess.DEVNULL)
        from fedpd.flower.deploy import wait_for_superlink

        wait_for_superlink(f"127.0.0.1:{link}", 120)  # flwr run does not wait for it
        done = subprocess.run([str(BIN / "flwr"), "run", str(work / "app"), "local", "--stream"], env=env,
                              capture_output=True, text=True, timeout=3600)
        said = (done.stdout[-3000:] + done.stderr[-2000:]
                + (work / "superlink.log").read_text(errors="replace")[-3000:])
        if plain:
            if not stamps.exists():
                raise RuntimeError(f"{mode} did not finish:\n{said}")
            return json.loads(stamps.read_text())
        if not (run_dir / "metrics.jsonl").exists() or len(records(run_dir)) != rounds + 1:
            raise RuntimeError(f"{mode} did not finish:\n{said}")
        return run_dir
    finally:
        for proc in reversed(procs):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def measure(mode: str, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, **ENV, "FLWR_HOME": str(work / "flwr_home"),
               "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)}
        t0 = time.perf_counter()
        got = simulation(work, rounds, env) if mode == "simulation" else deployment(work, rounds, env, mode)
        wall = time.perf_counter() - t0
        recs = records(got) if isinstance(got, Path) else []
    times = round_times(recs) if recs else got
    return {"mode": mode, "end_to_end_s": wall, "first_round_s": times[0], "steady_s": statistics.median(times[1:]),
            "mean_s": statistics.fmean(times[1:]), "rounds_s": times,
            "metrics": [{k: v for k, v in r.items() if k != "wall_s"} for r in recs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="flower", choices=sorted(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--modes", help="comma-separated, of the workload's: flower: " + ", ".join(WORKLOADS["flower"])
                    + f" (default {DEFAULT['flower']}); docs: " + ", ".join(WORKLOADS["docs"]))
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    modes = [m for m in (args.modes or DEFAULT[args.workload]).split(",") if m]
    if args.rounds < 3 or any(m not in WORKLOADS[args.workload] for m in modes):
        sys.exit(f"--rounds at least 3; --modes of {', '.join(WORKLOADS[args.workload])}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results = []
    for r in range(args.repeats):  # alternating, so that load drifts hit every mode alike
        for mode in modes:
            res = measure(mode, args.rounds)
            res["repeat"], res["load"] = r, os.getloadavg()[0]
            results.append(res)
            print(f"{mode:>18}  end to end {res['end_to_end_s']:6.1f} s  round 1 {res['first_round_s']:6.2f} s  "
                  f"steady {res['steady_s']:6.2f} s/round (mean {res['mean_s']:.2f})  load {res['load']:.1f}  "
                  f"({', '.join(f'{t:.2f}' for t in res['rounds_s'])})", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    def best_of(key: str) -> dict[str, float]:  # each mode's best repeat
        return {m: min(res[key] for res in results if res["mode"] == m) for m in modes}

    best, best_mean, best_end = best_of("steady_s"), best_of("mean_s"), best_of("end_to_end_s")
    if args.workload == "docs":
        same = all(res["metrics"] == results[0]["metrics"] for res in results)
        print(f"metrics (wall_s aside) equal across modes and repeats: {same}")
        for m in modes:
            if m != "simulation" and "simulation" in best:
                print(f"steady round, {m} deployment / simulation: {best[m] / best['simulation']:.1f}")
    else:
        for ours, theirs in (("fedpd", "flower"), ("fedpd", "flower-pull"), ("fedpd-feddyn", "flower-pull"),
                             ("fedpd-cold", "flower-cold"), ("fedpd-feddyn-cold", "flower-pull-cold")):
            if ours in best and theirs in best:  # a round waits for a SuperNode's 3-s poll or the next one:
                # bimodal round times, whose median lands on either mode; the mean is what a run takes
                print(f"{ours} / {theirs}: {best_mean[ours] / best_mean[theirs]:.3f} by the mean round, "
                      f"{best[ours] / best[theirs]:.3f} by the median, {best_end[ours] / best_end[theirs]:.3f} "
                      "end to end (target <= 1.10)")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "best_steady_s": best, "best_mean_s": best_mean,
                                               "best_end_to_end_s": best_end}, indent=1))


if __name__ == "__main__":
    main()
