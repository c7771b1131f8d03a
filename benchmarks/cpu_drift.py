"""How far fedpd's numbers move between kinds of CPU — the measurement behind the tolerances of
``fedpd reproduce --verify`` (fedpd.reproduce.verify; docs/performance.md, "Numbers across CPUs").

Another kind of CPU runs the same program through other code paths of MKL (BLAS) and of torch's own
kernels, which add the same terms in another order. This machine can take several of those paths
itself: MKL's conditional-numerical-reproducibility branches (``MKL_CBWR``: what MKL runs on a CPU
with only those instructions) and torch's kernels without vector instructions
(``ATEN_CPU_CAPABILITY=default``). So for each committed report with CPU records, a seeded choice of
``--records`` records is re-run for its first rounds (as ``--verify`` does, or to ``--rounds``) once
per path, each in a fresh process, and every float metric is compared with

* the record (made on the machine named in it, by the code of its commit), and
* the re-run on this machine's own path (the same code: only the CPU path differs).

It prints, per report, dtype and path, the largest relative difference of any float metric but
accuracies, the largest absolute difference of an accuracy (``*_acc``), and the smallest metric
value that differed. Run from the repository root with the test extras installed and FEDPD_DATA
pointing at the datasets::

    python benchmarks/cpu_drift.py --records 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "docs" / "reproductions"
#: code paths of another kind of CPU this machine can take (environment of the re-run's process)
PATHS = {
    "this CPU": {},
    "MKL_CBWR=AVX2": {"MKL_CBWR": "AVX2"},
    "MKL_CBWR=AVX": {"MKL_CBWR": "AVX"},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "ATEN_CPU_CAPABILITY=default": {"ATEN_CPU_CAPABILITY": "default"},
}
UNCOMPARED = ("wall_s",)


def child(report: str, keys: list[str], rounds: int | None) -> None:
    """Re-run ``keys`` of ``report`` for their verify rounds (or ``rounds``); print {key: rows} as JSON."""
    from fedpd.reproduce import records
    from fedpd.reproduce.execute import rerun

    held = records.load(REPORTS / report / "records")
    out = {}
    for key in keys:
        rec = held[key]
        evaluated = [int(m["round"]) for m in rec.metrics]
        upto = rounds if rounds is not None else next((r for r in evaluated if r >= 3), evaluated[-1])
        every = rec.config["run"].get("eval_every", 10) if rounds is None else 1
        again = rerun(rec.config, upto, device="cpu", every=every)
        out[key] = {str(r): m for r, m in again.items()}
    print(json.dumps(out))


def differences(rows: dict, again: dict) -> tuple[float, float, float]:
    """(largest relative difference of a float metric but accuracies, largest absolute difference
    of an accuracy, smallest magnitude of a float metric that differed) of ``again`` against ``rows``."""
    rel, acc, smallest = 0.0, 0.0, math.inf
    for r, row in rows.items():
        other = again.get(str(r)) or again.get(r)
        if other is None:
            continue
        for k, v in row.items():
            w = other.get(k)
            if k in UNCOMPARED or not isinstance(v, float) or not isinstance(w, float) or v == w:
                continue
            if math.isnan(v) or math.isnan(w):
                continue
            if "_acc" in k:
                acc = max(acc, abs(v - w))
            else:
                rel = max(rel, abs(v - w) / max(abs(v), abs(w)))
                smallest = min(smallest, abs(v))
    return rel, acc, smallest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=3, help="records per report (a seeded choice)")
    p.add_argument("--rounds", type=int, default=None, help="re-run this many rounds, evaluating each "
                   "(default: the rounds --verify re-runs)")
    p.add_argument("--reports", default="", help="comma-separated report names (default: every report with CPU "
                   "records)")
    p.add_argument("--json", default="", help="also write the table as JSON to this file")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child[0], args.child[1:], args.rounds)
        return

    from fedpd.reproduce import records
    from fedpd.reproduce.records import cpu_kind
    from fedpd.build import run_dtype
    from fedpd.config import load_config
    from fedpd.reproduce.verify import choose

    print(f"this machine: {cpu_kind()}", flush=True)
    names = [n for n in args.reports.split(",") if n] or sorted(d.name for d in REPORTS.iterdir()
                                                               if (d / "records").is_dir())
    table = []
    for name in names:
        held = {k: r for k, r in records.load(REPORTS / name / "records").items()
                if r.config.get("run", {}).get("device", "cpu") == "cpu"}
        if not held:
            continue
        keys = choose(list(held), args.records)
        made_on = sorted({held[k].provenance.get("machine", {}).get("cpu_kind")
                          or held[k].provenance.get("machine", {}).get("cpu", "?") for k in keys})
        runs = {}
        for path, env in PATHS.items():
            cmd = [sys.executable, __file__, "--child", name, *keys]
            cmd += ["--rounds", str(args.rounds)] if args.rounds else []
            done = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, check=True)
            runs[path] = json.loads(done.stdout.strip().splitlines()[-1])
        for path in PATHS:
            for key in keys:
                rec = held[key]
                dtype = run_dtype(load_config(rec.config))
                recorded = {m["round"]: m for m in rec.metrics}
                vs_record = differences(recorded, runs[path][key]) if not args.rounds else None
                vs_here = differences(runs["this CPU"][key], runs[path][key])
                table.append({"report": name, "key": key, "dtype": dtype, "path": path, "made_on": ", ".join(made_on),
                              "vs_record": vs_record, "vs_this_cpu": vs_here})
        _print(name, table, made_on)
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))


def _print(name: str, table: list[dict], made_on: list[str]) -> None:
    rows = [t for t in table if t["report"] == name]
    print(f"\n{name} (records made on {', '.join(made_on)})")
    print(f"{'path':30s} {'dtype':8s} {'vs record: rel':>15s} {'acc':>8s} {'vs this CPU: rel':>17s} {'acc':>8s}")
    for path in PATHS:
        for dtype in sorted({t["dtype"] for t in rows}):
            sel = [t for t in rows if t["path"] == path and t["dtype"] == dtype]
            if not sel:
                continue
            rec = [t["vs_record"] for t in sel if t["vs_record"] is not None]
            here = [t["vs_this_cpu"] for t in sel]
            fmt = lambda xs, i: f"{max(x[i] for x in xs):.1e}" if xs else "—"  # noqa: E731
            print(f"{path:30s} {dtype:8s} {fmt(rec, 0):>15s} {fmt(rec, 1):>8s} {fmt(here, 0):>17s} "
                  f"{fmt(here, 1):>8s}", flush=True)


if __name__ == "__main__":
    main()
