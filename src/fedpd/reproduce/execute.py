"""Run a reproduction's runs: in parallel processes, one thread each (or as tasks on a Ray cluster,
:mod:`fedpd.reproduce.cluster`), resumable, with one progress display.

Each run writes its own run directory ``<runs>/<key>/`` through :func:`fedpd.run`, so a run
directory here is an ordinary one (``fedpd compare``, ``fedpd plot`` read it). Before anything
runs every config is validated and every existing directory classified:

* complete (its ``metrics.jsonl`` reaches ``run.rounds``, and ``trajectory.pt`` is there if the
  run is traced): skipped;
* interrupted with a checkpoint: resumed (:func:`fedpd.run` with ``resume``: the same
  ``metrics.jsonl`` as an uninterrupted run);
* interrupted before its first checkpoint: started again;
* holding a run of another config: refused with one line (a reproduction never mixes budgets or
  versions of an experiment in one directory; use another ``--out``).

So an interrupted ``fedpd reproduce`` continues where it stopped when run again. Checkpoints of
complete runs are deleted unless ``keep_checkpoints`` (the report needs only the metrics).
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fedpd.config import Config, first_difference, load_config
from fedpd.errors import ConfigError, FedpdError
from fedpd.io import atomic_torch_save, read_jsonl
from fedpd.reproduce.records import machine
from fedpd.reproduce.spec import RunSpec

METRICS, CONFIG, CHECKPOINT, TRAJECTORY = "metrics.jsonl", "config.toml", "checkpoint.pt", "trajectory.pt"
EARLY = "early.jsonl"  # a run on a GPU: its metrics after each of its first rounds (records' ``early``)
#: the rounds ``early.jsonl`` holds (0 to this), which ``fedpd reproduce --verify`` compares closely across devices
EARLY_ROUNDS = 3


@dataclass
class Job:
    spec: RunSpec
    cfg: Config
    path: Path
    status: str  # complete, resume, restart, new

    @property
    def rounds(self) -> int:
        return self.cfg.run.rounds


def validate(specs: list[RunSpec]) -> list[Config]:
    """Every config checked before anything runs; the first bad one is one line naming its run."""
    keys = [s.key for s in specs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ConfigError(f"run key {dup!r} appears twice in the experiment")
    out = []
    for spec in specs:
        try:
            out.append(load_config(spec.config))
        except ConfigError as err:
            raise ConfigError(f"run {spec.key}: {err}") from None
    return out


def last_round(path: Path) -> int:
    """The round of the last complete record of a metrics file (-1: none), reading only its tail."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return -1
    for line in reversed(tail.splitlines()):
        try:
            return int(json.loads(line)["round"])
        except (ValueError, KeyError, TypeError):
            continue
    return -1


def classify(spec: RunSpec, cfg: Config, path: Path) -> str:
    if not (path / METRICS).is_file() and not (path / CHECKPOINT).is_file():
        return "new"
    if (path / CONFIG).is_file():
        try:
            held = load_config(path / CONFIG).fingerprint()
        except FedpdError:
            held = None
        if held is not None and cfg.run.store == "auto":
            held["run"]["store"] = "auto"  # a run writes run.store = "auto" as what it resolved to
        differs = first_difference(held, cfg.fingerprint()) if held is not None else "config.toml"
        if differs:
            raise ConfigError(f"{path}: holds a run of another config ({differs} differs); give the reproduction "
                              f"another --out, or delete that run directory")
    if last_round(path / METRICS) >= cfg.run.rounds and (not spec.trace or (path / TRAJECTORY).is_file()):
        return "complete"
    if (path / CHECKPOINT).is_file() and (path / CONFIG).is_file():
        return "resume"
    return "restart"


def plan(specs: list[RunSpec], runs_dir: Path) -> list[Job]:
    cfgs = validate(specs)
    return [Job(s, c, runs_dir / s.key, classify(s, c, runs_dir / s.key)) for s, c in zip(specs, cfgs)]


def trace_models(config: dict, path: Path) -> None:
    """The model after every round, [rounds + 1, d] float64, to ``trajectory.pt`` (a second,
    identical pass of the run: the simulator is deterministic given the config)."""
    import torch

    from fedpd.simulation import Simulation

    sim = Simulation(load_config(config))
    try:
        models = [sim.model().detach().to("cpu", torch.float64).clone()]
        for _ in range(sim.cfg.run.rounds):
            sim.step()
            models.append(sim.model().detach().to("cpu", torch.float64).clone())
    finally:
        sim.close()  # run.workers' processes
    atomic_torch_save(torch.stack(models), path / TRAJECTORY)


def rerun(config: dict, rounds: int, device: str | None = None, every: int | None = None) -> dict[int, dict]:
    """The metrics of ``config`` run for ``rounds`` rounds (on ``device``; None: the config's) in a
    temporary directory, by round; ``every``: evaluate every this many rounds instead of the config's.
    ``rounds`` 0: the metrics before any training only (data, split, initial model, evaluation)."""
    import tempfile

    from fedpd.reproduce.spec import merge
    from fedpd.runner import run

    runs = {"rounds": max(rounds, 1), "tensorboard": False, **({"device": device} if device else {}),
            **({"eval_every": every} if every else {})}
    if rounds == 0:
        from fedpd.simulation import Simulation

        sim = Simulation(load_config(merge(config, {"run": runs})))
        try:
            return {0: sim.metrics()}
        finally:
            sim.close()
    with tempfile.TemporaryDirectory(prefix="fedpd-rerun-") as tmp:
        run(merge(config, {"run": runs}), Path(tmp) / "run", overwrite=True, progress=False)
        return {int(m["round"]): m for m in read_jsonl(Path(tmp) / "run" / METRICS)}


def keeps_early_rounds(config: dict) -> bool:
    """Whether a run's record keeps its first rounds (``early.jsonl``): a float32 run or a run on a
    GPU, whose re-run on another kind of CPU or device can be compared closely only there, before
    rounding differences compound through training (:mod:`fedpd.reproduce.verify`)."""
    from fedpd.build import run_dtype

    cfg = load_config(config)
    return cfg.run.device != "cpu" or run_dtype(cfg) == "float32"


def record_early_rounds(config: dict, path: Path) -> None:
    """``early.jsonl``: the metrics after each of the run's first :data:`EARLY_ROUNDS` rounds (at
    most its rounds): the run's own where it evaluated each of them, else a second, identical pass
    of those rounds evaluated every round (the simulator is deterministic given the config) — a few
    per cent of a run of a hundred rounds."""
    from fedpd.io import atomic_write_text

    wanted = range(min(EARLY_ROUNDS, load_config(config).run.rounds) + 1)
    rows = {int(m["round"]): m for m in read_jsonl(path / METRICS)} if (path / METRICS).is_file() else {}
    if not all(r in rows for r in wanted):
        rows = rerun(config, wanted[-1], every=1)
    atomic_write_text(path / EARLY, "".join(json.dumps(rows[r]) + "\n" for r in wanted))


@contextmanager
def _garbage_collected():
    """A run's garbage collected when it ends: a finished Simulation is a web of reference cycles
    holding the data set (~0.5 GB for MNIST), and without a collection a worker that runs many runs
    grows until the OS kills it. What was alive before the run (the imported modules: some 10^5
    objects, about 0.1 s a full collection) is frozen meanwhile, so that the collection looks only at
    what the run made: a sweep of short runs took twice as long otherwise. (A cycle that the run cuts
    loose among older objects is left to Python's own collections.)"""
    freeze = gc.get_freeze_count() == 0  # (not where a caller froze objects of its own)
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        gc.collect()
        if freeze:
            gc.unfreeze()


def execute(key: str, config: dict, path: str, status: str, trace: bool, keep_checkpoints: bool,
            on_checkpoint=None) -> tuple[str, float, str, dict | None]:
    """Run one job (in a worker process, in-process or in a Ray task): (key, seconds, error or "",
    the machine it ran on (:func:`fedpd.reproduce.records.machine`; None after an error));
    ``on_checkpoint(path)`` after every checkpoint (:func:`fedpd.run`'s)."""
    from fedpd.runner import run

    t0 = time.perf_counter()
    path = Path(path)
    with _garbage_collected():
        try:
            if status in ("new", "restart"):
                run(config, path, overwrite=True, on_checkpoint=on_checkpoint)
            elif status == "resume":  # to this config's target (a run may have been started with fewer rounds)
                run(resume=path, overrides=[f"run.rounds={load_config(config).run.rounds}"],
                    on_checkpoint=on_checkpoint)
            if trace and not (path / TRAJECTORY).is_file():
                trace_models(config, path)
            if keeps_early_rounds(config) and not (path / EARLY).is_file():
                record_early_rounds(config, path)
            if not keep_checkpoints:
                (path / CHECKPOINT).unlink(missing_ok=True)
        except FedpdError as err:
            return key, time.perf_counter() - t0, str(err), None
        except Exception as err:  # a bug: keep the other runs going, report it at the end
            where = traceback.extract_tb(err.__traceback__)[-1]
            return (key, time.perf_counter() - t0,
                    f"{type(err).__name__}: {err} ({Path(where.filename).name}:{where.lineno})", None)
    cfg = load_config(config).run
    return key, time.perf_counter() - t0, "", machine(cfg.threads, cfg.device)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class _Display:
    """One progress display for the whole reproduction: a rich bar over all rounds (with the runs
    done) on a terminal, one plain line per finished run otherwise."""

    def __init__(self, jobs: list[Job], enabled: bool, title: str):
        self.jobs = {j.spec.key: j for j in jobs}
        self.enabled, self.title = enabled, title
        self.total_runs = sum(j.status != "complete" for j in jobs)
        self.total_rounds = sum(j.rounds for j in jobs if j.status != "complete")
        self.done_runs = 0
        self.done_rounds = 0
        self.t0 = time.perf_counter()
        self.bar = None
        if enabled and sys.stderr.isatty() and self.total_runs:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=30),
                                TextColumn("{task.fields[runs]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                                TextColumn("{task.fields[running]}"), transient=False)
            self.task = self.bar.add_task(title, total=self.total_rounds, runs="", running="")
            self.bar.start()
        elif enabled:
            print(f"{title}: {self.total_runs} runs to do ({len(jobs) - self.total_runs} already complete)",
                  file=sys.stderr, flush=True)

    def poll(self, running: list[str]) -> None:
        if self.bar is None:
            return
        live = sum(max(0, last_round(self.jobs[k].path / METRICS)) for k in running)
        self.bar.update(self.task, completed=self.done_rounds + live,
                        runs=f"runs {self.done_runs}/{self.total_runs}",
                        running=", ".join(running[:2]) + (" ..." if len(running) > 2 else ""))

    def finished(self, key: str, seconds: float, error: str) -> None:
        self.done_runs += 1
        self.done_rounds += self.jobs[key].rounds
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done_rounds, runs=f"runs {self.done_runs}/{self.total_runs}")
            if error:
                self.bar.console.print(f"[red]failed[/red] {key}: {error}")
        else:
            state = f"FAILED: {error}" if error else f"{seconds:.0f} s"
            print(f"[{self.done_runs}/{self.total_runs}] {key}  {state}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def run_jobs(jobs: list[Job], jobs_at_once: int, progress: bool = True, keep_checkpoints: bool = False,
             title: str = "reproduce", env: dict | None = None, seconds: dict | None = None,
             cluster=None, on_done=None) -> dict[str, float]:
    """Run every job that is not complete — in this process, in ``jobs_at_once`` processes, or as
    tasks on a Ray ``cluster`` (:class:`fedpd.reproduce.cluster.Cluster`) —; returns {key: seconds}
    of the runs done now (also filled into ``seconds`` as they finish, so a caller sees them after a
    failure). ``on_done(job, seconds, machine)`` as each run finishes without error (the run's record
    is written then, not at the end). Failed runs do not stop the others; afterwards one line names
    how many failed and the first."""
    todo = [j for j in jobs if j.status != "complete"]
    if cluster is not None and todo:
        cluster.connect()  # a cluster that does not answer: one line before anything is written
    for j in todo:
        j.path.mkdir(parents=True, exist_ok=True)
    display = _Display(jobs, progress, title)
    seconds = {} if seconds is None else seconds
    errors: list[tuple[str, str]] = []

    by_key = {j.spec.key: j for j in todo}

    def finished(key: str, sec: float, err: str, ran_on: dict | None = None) -> None:
        seconds[key] = sec
        if err:
            errors.append((key, err))
        elif on_done is not None:
            on_done(by_key[key], sec, ran_on)
        display.finished(key, sec, err)

    args = [(j.spec.key, j.spec.config, str(j.path), j.status, j.spec.trace, keep_checkpoints) for j in todo]
    try:
        if cluster is not None:  # each run a Ray task with its own resources; the environment travels with it
            cluster.run(todo, keep_checkpoints, env or {}, finished, display.poll)
        elif jobs_at_once <= 1 or len(todo) <= 1:
            with _environment(env or {}):
                for a in args:
                    display.poll([a[0]])
                    finished(*execute(*a))
        else:  # one thread each (inherited by the workers): --jobs processes use that many cores
            with _environment({**(env or {}), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}):
                _in_processes(args, min(jobs_at_once, len(todo)), finished, display.poll)
    finally:
        display.close()
    if errors:
        key, err = errors[0]
        raise FedpdError(f"{len(errors)} of {len(todo)} runs failed (the others are complete and kept); "
                         f"first: {key}: {err}")
    return seconds


@contextmanager
def _environment(env: dict):
    """``os.environ`` with ``env`` set, restored afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _in_processes(args: list[tuple], processes: int, finished, poll) -> None:
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that holds torch threads
    pool = ProcessPoolExecutor(max_workers=processes, mp_context=ctx)
    try:
        pending = {pool.submit(execute, *a): a[0] for a in args}
        while pending:
            done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for fut in done:
                del pending[fut]
                finished(*fut.result())
            poll([k for f, k in pending.items() if f.running()])
    except BrokenProcessPool:
        pool.shutdown(wait=False, cancel_futures=True)
        raise FedpdError("a worker process died (killed by the OS, e.g. out of memory); the complete runs are "
                         "kept and the others resume from their checkpoints: run the same command again, "
                         "perhaps with fewer --jobs") from None
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def load_records(path: Path) -> list[dict]:
    return read_jsonl(path / METRICS)
