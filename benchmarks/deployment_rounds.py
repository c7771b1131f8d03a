"""What a Flower deployment round costs on loopback, against Flower's simulation of the same run.

One config (examples/feddyn.toml: FedDyn on Synthetic(1, 1), 30 clients, 10 per round, 50 SGD
steps; ``--rounds`` rounds, evaluated every round), run three ways, alternating, on 127.0.0.1:

    simulation  fedpd run --set run.engine=flower --set run.nodes=2 (Flower's simulation, Ray)
    cold        a SuperLink and two SuperNodes as Flower starts them by default
                (``--isolation subprocess``: a fresh ClientApp process for every message)
    warm        the same, the SuperNodes started with ``--isolation process`` and one
                ``fedpd flower clientapp`` process beside each (docs/deployment.md): it serves
                every message of every run, and builds a run's problem once

A round's time is the difference of consecutive records' ``wall_s`` in ``metrics.jsonl`` (the
server's round: broadcast, the nodes' work, the replies, aggregation and evaluation); reported:
the median of rounds 2.. (round 1 pays the nodes' first build), best of the repeats. Every
process is started in a session of its own and stopped by its process group id. The metrics
(``wall_s`` aside) of the three are checked equal.

    python benchmarks/deployment_rounds.py [--rounds 6] [--repeats 2] [--modes simulation,cold,warm]
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
BIN = Path(sys.executable).parent
ENV = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0",
       "PYTHONUNBUFFERED": "1"}
MODES = ("simulation", "cold", "warm")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def round_times(recs: list[dict]) -> list[float]:
    walls = [r["wall_s"] for r in recs]
    return [b - a for a, b in zip(walls, walls[1:])]


def simulation(work: Path, rounds: int, env: dict) -> Path:
    run_dir = work / "run"
    subprocess.run([str(BIN / "fedpd"), "run", str(ROOT / "examples" / "feddyn.toml"), "--out", str(run_dir),
                    "--set", f"run.rounds={rounds}", "--set", "run.eval_every=1", "--set", "run.engine=flower",
                    "--set", "run.nodes=2"], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return run_dir


def deployment(work: Path, rounds: int, env: dict, warm: bool) -> Path:
    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str]) -> None:
        log = open(work / f"{name}.log", "ab")
        procs.append(subprocess.Popen(argv, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))

    link = free_port()
    (work / "flwr_home").mkdir()
    (work / "flwr_home" / "config.toml").write_text(f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
                                                    f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    run_dir = work / "run"
    try:
        start("superlink", [str(BIN / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                            "--host", "127.0.0.1", "--port", str(link)])
        for k, hosted in enumerate(("0-14", "15-29")):
            port = free_port()
            isolation = ["--isolation", "process"] if warm else []
            start(f"node{k}", [str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}",
                               "--port", str(port), *isolation,
                               "--node-config", f"hosted-clients='{hosted}' store-dir='{work / f'node{k}'}'"])
            if warm:
                start(f"clientapp{k}", [str(BIN / "fedpd"), "flower", "clientapp", "--runtime-api-address",
                                        f"127.0.0.1:{port}", "--insecure"])
        subprocess.run([str(BIN / "fedpd"), "flower", "app", str(ROOT / "examples" / "feddyn.toml"), "--out",
                        str(work / "app"), "--run-dir", str(run_dir), "--set", f"run.rounds={rounds}",
                        "--set", "run.eval_every=1"], env=env, check=True, stdout=subprocess.DEVNULL)
        time.sleep(3)  # the SuperLink up
        done = subprocess.run([str(BIN / "flwr"), "run", str(work / "app"), "local", "--stream"], env=env,
                              capture_output=True, text=True, timeout=1800)
        if not (run_dir / "metrics.jsonl").exists() or len(records(run_dir)) != rounds + 1:
            raise RuntimeError(f"the deployment did not finish:\n{done.stdout[-3000:]}")
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
               "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        t0 = time.perf_counter()
        run_dir = simulation(work, rounds, env) if mode == "simulation" else deployment(work, rounds, env, mode == "warm")
        wall = time.perf_counter() - t0
        recs = records(run_dir)
    times = round_times(recs)
    return {"mode": mode, "end_to_end_s": wall, "first_round_s": times[0], "steady_s": statistics.median(times[1:]),
            "rounds_s": times, "metrics": [{k: v for k, v in r.items() if k != "wall_s"} for r in recs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES))
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if args.rounds < 3 or any(m not in MODES for m in modes):
        sys.exit(f"--rounds at least 3; --modes of {', '.join(MODES)}")
    results = []
    for r in range(args.repeats):  # alternating, so that load drifts hit every mode alike
        for mode in modes:
            res = measure(mode, args.rounds)
            res["repeat"] = r
            results.append(res)
            print(f"{mode:>10}  end to end {res['end_to_end_s']:6.1f} s  round 1 {res['first_round_s']:6.2f} s  "
                  f"steady {res['steady_s']:6.2f} s/round  ({', '.join(f'{t:.2f}' for t in res['rounds_s'])})",
                  flush=True)
    same = all(res["metrics"] == results[0]["metrics"] for res in results)
    print(f"metrics (wall_s aside) equal across modes and repeats: {same}")
    best = {m: min(res["steady_s"] for res in results if res["mode"] == m) for m in modes}
    if "simulation" in best:
        for m in modes:
            if m != "simulation":
                print(f"steady round, {m} deployment / simulation: {best[m] / best['simulation']:.1f}")
    if "cold" in best and "warm" in best:
        print(f"steady round, cold / warm deployment: {best['cold'] / best['warm']:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "best_steady_s": best}, indent=1))


if __name__ == "__main__":
    main()
