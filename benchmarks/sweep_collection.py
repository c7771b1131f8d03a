"""A sweep of short runs: seconds per run when each run ends with a full garbage collection of the
process (before 2026-11-27) against one of what the run made (``execute._garbage_collected``:
what was alive before the run, the imported modules above all, is frozen meanwhile).

Both in one process, side by side, alternating (A B B A ...), on the same configs; the metrics of
the two must be equal (the collection frees memory, it computes nothing).

    python benchmarks/sweep_collection.py [--runs 60] [--repeats 2]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from fedpd.io import read_jsonl
from fedpd.reproduce import execute
from fedpd.reproduce.spec import RunSpec


@contextmanager
def full_collection():
    """What execute() did before: a collection of every object of the process after each run."""
    try:
        yield
    finally:
        gc.collect()


def specs(runs: int) -> list[RunSpec]:
    config = {"problem": {"name": "fedplus_regression"}, "algorithm": {"name": "fedavg_plus"},
              "solver": {"name": "sgd", "lr": 1e-4, "local_steps": 20, "batch_size": 10},
              "sampler": {"name": "all"}, "run": {"rounds": 2, "eval_every": 1, "threads": 1}}
    return [RunSpec(f"p{i}/s0", f"p{i}", 0, {**config, "problem": {**config["problem"], "seed": i}})
            for i in range(runs)]


def sweep(todo: list[RunSpec], out: Path) -> float:
    t0 = time.perf_counter()
    execute.run_jobs(execute.plan(todo, out), 1, progress=False)
    return (time.perf_counter() - t0) / len(todo)


def metrics(out: Path, todo: list[RunSpec]) -> list:
    return [[{k: v for k, v in r.items() if k != "wall_s"} for r in read_jsonl(out / s.key / "metrics.jsonl")]
            for s in todo]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    todo = specs(args.runs)
    own = execute._garbage_collected
    seconds: dict[str, list[float]] = {"full": [], "own": []}
    with tempfile.TemporaryDirectory() as tmp:
        sweep(todo[:2], Path(tmp) / "warm-up")  # imports and first-run costs out of the timings
        for r in range(args.repeats):
            for name in (("full", "own") if r % 2 == 0 else ("own", "full")):
                execute._garbage_collected = full_collection if name == "full" else own
                out = Path(tmp) / f"{name}{r}"
                seconds[name].append(sweep(todo, out))
        execute._garbage_collected = own
        assert metrics(Path(tmp) / "full0", todo) == metrics(Path(tmp) / "own0", todo)
    full, mine = min(seconds["full"]), min(seconds["own"])
    print(f"{args.runs} runs of 2 rounds, in one process, best of {args.repeats}:")
    print(f"  full collection after each run       {1000 * full:7.1f} ms a run")
    print(f"  the run's own objects (gc.freeze)     {1000 * mine:7.1f} ms a run")
    print(f"  ratio                                 {full / mine:7.2f}x")


if __name__ == "__main__":
    main()
