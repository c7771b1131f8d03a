"""A-FedPD on a GPU: seconds per round of each medium-budget method, then the screen's runs.

For a machine with a CUDA GPU and CIFAR-10 in $FEDPD_DATA (issue 31, parts 4 and 5). Two steps:

1. Timing. Each method of ``fedpd reproduce afedpd_table2 --budget medium`` (FedAvg, SCAFFOLD,
   FedDyn, A-FedPD, FedSAM, A-FedPDSAM; CIFAR-10 LeNet, balanced Dir-0.1, 10 clients a round, 50
   local steps of batch 50) is built with ``run.device`` = the device and run for one round
   (CUDA's start, cuDNN's choice of kernels: reported apart) and then ``--rounds`` rounds, timed by
   wall clock with the device synchronised, in both ways fedpd computes client gradients
   (``run.execution``): ``per_client`` (the module, one client after another; what "auto" picks
   for LeNet's 62 006 parameters) and ``vectorised`` (``torch.func.vmap`` over the round's 10
   clients, ``run.client_chunk`` = 0). Then one method (``--cpu-method``, FedAvg) on the CPU with
   one thread, as the medium runs are made there, for the ratio.
2. The screen. ``fedpd reproduce afedpd_table2 --budget medium --runs SCREEN --set
   run.device=DEVICE --jobs J --out OUT`` in a child process for at most ``--minutes``: FedAvg,
   FedDyn and A-FedPD on balanced Dir-0.1, 3 seeds (9 runs; ``--screen`` for more). Each run's
   record is written into OUT/records/ as it finishes; at the time limit the child is interrupted
   (Ctrl-C: the records stay, the report lists what is missing) and the same command continues
   later. Its records are the experiment's wherever they ran (``--set`` changes only how a run
   executes), so they merge with CPU-made ones by copying them into
   docs/reproductions/afedpd_table2/records/.

Written into ``--results`` (the device machine's $OUT): timing.json, timing.md (the table), and
afedpd_table2/ (the screen's records/, README.md and results.csv, not its run directories), also as
one archive, afedpd_table2.tar.gz, for a machine that sends back only shallow files. Killed from
outside (``timeout``'s SIGTERM), the script stops the screen's child too (it runs in its own session:
left running, it would keep a pipe such as ``| tee`` open) and still writes the archive.

    python benchmarks/gpu_afedpd.py --results "$OUT" --minutes 6
    python benchmarks/gpu_afedpd.py --smoke --results /tmp/gpu-smoke    # the same code on the CPU, tiny

``--smoke``: the same code path on the CPU in a minute or two (device cpu; A-FedPD both ways and
FedAvg on the CPU, 2 local steps on 10 clients of 500 images, one timed round; the screen is the
smoke budget's one run), for tests and to try the script before a GPU is lent
(tests/docs/test_gpu_script.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

#: the screen: the main claim's runs (issue 31, part 5), then, as time allows, the rest
SCREEN = "*/dir0.1/fedavg/*,*/dir0.1/feddyn/*,*/dir0.1/afedpd/*"
METHODS = ("fedavg", "scaffold", "feddyn", "afedpd", "fedsam", "afedpdsam")


def medium_config(method: str, budget: str = "medium", split: str = "dir0.1") -> dict:
    """The config of seed 0 of ``method`` in afedpd_table2's ``budget`` (as fedpd reproduce runs it)."""
    from fedpd.reproduce import core

    exp = core.get("afedpd_table2")
    for spec in exp.runs(exp.budgets[budget]):
        if spec.labels["method"] == method and spec.labels["split"] == split and spec.seed == 0:
            return spec.config
    raise SystemExit(f"gpu_afedpd: afedpd_table2 --budget {budget} has no {split} {method} run")


#: --smoke: the medium configs on a tenth of the data (10 clients of 500 images, 200 test images)
SMOKE_PROBLEM = {"clients": 10, "max_samples": 5000, "max_test_samples": 200}


def time_rounds(config: dict, device: str, execution: str, rounds: int, threads: int | None = None,
                local_steps: int | None = None, problem: dict | None = None) -> dict:
    """One Simulation of ``config`` on ``device``: set-up, a first round, then ``rounds`` rounds (wall clock)."""
    import torch

    from fedpd.config import load_config
    from fedpd.reproduce.spec import merge
    from fedpd.simulation import Simulation

    run = {"device": device, "execution": execution, "rounds": rounds + 1, "workers": 1}
    if execution == "vectorised":
        run["client_chunk"] = 0  # the round's clients in one vmap
    if threads:
        run["threads"] = threads
    extra = {"run": run, **({"solver": {"local_steps": local_steps}} if local_steps else {}),
             **({"problem": problem} if problem else {})}

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    sim = Simulation(load_config(merge(config, extra)))
    try:
        sync()
        t1 = time.perf_counter()
        sim.step()
        sync()
        t2 = time.perf_counter()
        for _ in range(rounds):
            sim.step()
        sync()
        t3 = time.perf_counter()
    finally:
        sim.close()
    return {"device": device, "execution": execution, "setup_s": round(t1 - t0, 2), "first_round_s": round(t2 - t1, 3),
            "round_s": round((t3 - t2) / rounds, 4), "rounds": rounds}


def timed_row(args, method: str, device: str, execution: str, rounds: int, threads: int | None = None) -> dict:
    """One row of the timing table, printed as it lands; a failure is a row too (one failing way
    must not cost the rest of a short GPU lease)."""
    where = f"{method:<10} {device:<6} {execution:<10}"
    try:
        row = {"method": method, **time_rounds(medium_config(method, args.budget), device, execution, rounds,
                                               threads=threads, local_steps=args.local_steps, problem=args.problem)}
    except Exception as e:
        row = {"method": method, "device": device, "execution": execution, "error": f"{type(e).__name__}: {e}"}
        print(f"{where} FAILED: {row['error']}", flush=True)
        return row
    print(f"{where} set-up {row['setup_s']:6.1f} s, first round {row['first_round_s']:7.3f} s, then "
          f"{row['round_s']:7.3f} s/round" + (" (one thread)" if threads == 1 else ""), flush=True)
    return row


def timing(args) -> list[dict]:
    rows = [timed_row(args, method, args.device, execution, args.rounds)
            for method in args.methods for execution in args.executions]
    if args.cpu_method:
        rows.append(timed_row(args, args.cpu_method, "cpu", "auto", args.cpu_rounds, threads=1))
    return rows


def table(rows: list[dict], cpu_method: str | None) -> str:
    cpu = next((r.get("round_s") for r in rows if r["device"] == "cpu" and r["method"] == cpu_method), None)
    lines = ["| method | device | execution | set-up s | first round s | s/round | CPU (1 thread) / this |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['method']} | {r['device']} | {r['execution']} | failed: {r['error']} | | | |")
            continue
        ratio = f"{cpu / r['round_s']:.1f}" if cpu and r["round_s"] and r["method"] == cpu_method else ""
        lines.append(f"| {r['method']} | {r['device']} | {r['execution']} | {r['setup_s']} | {r['first_round_s']} | "
                     f"{r['round_s']} | {ratio} |")
    return "\n".join(lines) + "\n"


def screen(args) -> int:
    """The screen's runs by ``fedpd reproduce`` in a child process, interrupted at ``--minutes``."""
    cmd = [sys.executable, "-m", "fedpd", "reproduce", "afedpd_table2", "--budget", args.screen_budget,
           "--runs", args.screen, "--out", str(args.out), "--set", f"run.device={args.device}",
           "--jobs", str(args.jobs)]
    print("screen:", " ".join(cmd[1:]), flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(cmd, env=env, start_new_session=True)

    def stop(signum, frame):  # killed from outside (`timeout`): the child, in its own session, stops too
        raise subprocess.TimeoutExpired(cmd, 0)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        code = child.wait(timeout=args.minutes * 60)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGINT)  # fedpd reproduce: records kept, report of what is recorded
        try:
            code = child.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            code = child.wait()
        print(f"screen: stopped at the {args.minutes:g}-minute limit or by SIGTERM (exit {code}); the same command "
              "continues it", flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    held = sorted(p.relative_to(args.out / "records").as_posix()
                  for p in (args.out / "records").rglob("*.json.gz")) if (args.out / "records").is_dir() else []
    print(f"screen: {len(held)} records in {args.out / 'records'}" + (f": {', '.join(held)}" if held else ""),
          flush=True)
    return code


def copy_report(out: Path, results: Path) -> None:
    """The report folder but its run directories (checkpoints, a cache) into ``results``, as a folder
    and as one archive, afedpd_table2.tar.gz (a device machine may send back only shallow files)."""
    if not out.is_dir():
        return
    target = results / "afedpd_table2"
    if out.resolve() != target.resolve():
        shutil.copytree(out, target, ignore=shutil.ignore_patterns("runs"), dirs_exist_ok=True)
    with tarfile.open(results / "afedpd_table2.tar.gz", "w:gz") as tar:
        tar.add(
            out, arcname="afedpd_table2", filter=lambda info: None if info.name.split("/")[1:2] == ["runs"] else info
        )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, required=True, help="where timing.json, timing.md and the screen's "
                   "report folder go (the device machine's $OUT)")
    p.add_argument("--out", type=Path, help="the screen's report folder (default RESULTS/afedpd_table2; "
                   "docs/reproductions/afedpd_table2 to add to the committed records)")
    p.add_argument("--device", default="cuda", help="run.device of the timed rounds and the screen (default cuda)")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per method and execution (default 2)")
    p.add_argument("--methods", default=",".join(METHODS), help="methods to time (default all six)")
    p.add_argument("--executions", default="per_client,vectorised", help="run.execution values to time")
    p.add_argument("--cpu-method", default="fedavg", help="the method also timed on the CPU ('' for none)")
    p.add_argument("--cpu-rounds", type=int, default=1, help="its timed rounds (default 1: ~20-35 s each)")
    p.add_argument(
        "--screen", default=SCREEN, help=f"the runs of the screen (fedpd reproduce --runs; default {SCREEN})"
    )
    p.add_argument("--minutes", type=float, default=6.0, help="time limit of the screen (0: no screen)")
    p.add_argument("--jobs", type=int, default=9, help="screen runs at once, one process each, sharing the GPU")
    p.add_argument("--smoke", action="store_true", help="the same code path on the CPU, tiny (tests)")
    args = p.parse_args(argv)
    args.budget, args.screen_budget, args.local_steps, args.problem = "medium", "medium", None, None
    if args.smoke:
        args.device, args.rounds, args.local_steps, args.cpu_rounds, args.jobs = "cpu", 1, 2, 1, 1
        args.methods, args.executions, args.screen, args.screen_budget = "afedpd", "per_client,vectorised", "*", "smoke"
        args.problem = SMOKE_PROBLEM
    args.methods = [m for m in args.methods.split(",") if m]
    args.executions = [e for e in args.executions.split(",") if e]
    args.results.mkdir(parents=True, exist_ok=True)
    args.out = args.out or args.results / "afedpd_table2"
    if not os.environ.get("FEDPD_DATA"):
        raise SystemExit("gpu_afedpd: set FEDPD_DATA to the folder that holds CIFAR-10")
    import torch

    info = {
        "torch": torch.__version__,
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") and torch.cuda.is_available() else None,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "smoke": args.smoke,
    }
    print(json.dumps(info), flush=True)
    rows = timing(args)
    (args.results / "timing.json").write_text(json.dumps({**info, "rows": rows}, indent=1) + "\n")
    (args.results / "timing.md").write_text(table(rows, args.cpu_method))
    print(table(rows, args.cpu_method), flush=True)
    code = screen(args) if args.minutes > 0 else 0
    copy_report(args.out, args.results)
    return 0 if code in (0, 130, -signal.SIGINT) else code


if __name__ == "__main__":
    sys.exit(main())
