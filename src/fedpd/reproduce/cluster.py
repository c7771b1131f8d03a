"""Runs across machines: ``fedpd sweep --ray`` and ``fedpd reproduce --ray`` (or ``RAY_ADDRESS``).

Each run of a sweep or a reproduction is one Ray task asking for its CPUs and GPUs (:class:`Cluster`:
``--cpus-per-run``, default the config's ``run.workers`` when it is a number, else 1;
``--gpus-per-run``, default 1 for a run whose ``run.device`` is CUDA, else 0). The task runs the
run exactly as a local job does (:func:`fedpd.reproduce.execute.execute`) in a temporary directory
of the node Ray puts it on, with ``OMP_NUM_THREADS`` = its CPUs (its share of the cores:
``run.threads`` and ``run.workers = "auto"`` follow it). No file system is shared: the task
streams the run directory's files back to the head after a checkpoint (at most every
:data:`SNAPSHOT_SECONDS`, and at intervals of at least 20 times the last reading of them took)
and at the end,
and the head writes them into the run's own directory (atomically, file by file). So an
interrupted sweep — the head stopped, a node lost — leaves each unfinished run's last checkpoint
on the head, and the next invocation sends that partial directory with the task that continues it
(a resume, as locally). Tasks are not retried by Ray: a failed run is reported like a local one.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from fedpd.errors import ConfigError
from fedpd.io import atomic_write_bytes

#: the least seconds between two snapshots of a run directory sent back to the head
SNAPSHOT_SECONDS = 5.0
#: ... and at least this many times the last reading of them took (reading stays under 5 % of a run)
SNAPSHOT_SPACING = 20
#: a task's temporary run directory: this, its process id, a random suffix
TEMP_PREFIX = "fedpd-run-"
#: seconds to wait for the cluster to answer when connecting
CONNECT_TIMEOUT = 20.0

Files = dict[str, bytes]


def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError('--ray: running on a Ray cluster needs Ray: pip install "fedpd[flower]" (flwr[simulation] '
                          'brings it)') from None
    return ray


def add_cluster_options(parser) -> None:
    """``--ray [ADDRESS]``, ``--cpus-per-run``, ``--gpus-per-run`` (fedpd sweep, fedpd reproduce)."""
    parser.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                        help="run each run as a task on this Ray cluster (HOST:PORT of its head, ray://HOST:PORT, or "
                        "auto; --ray alone: $RAY_ADDRESS); the run directories come back here (needs fedpd[flower])")
    parser.add_argument("--cpus-per-run", type=float, metavar="N", help="with --ray: CPUs each run asks for (default: "
                        "its run.workers when a number, else 1); its threads and workers use them")
    parser.add_argument("--gpus-per-run", type=float, metavar="N", help="with --ray: GPUs each run asks for (default: "
                        "1 when its run.device is cuda, else 0)")


def cluster_from(args) -> Cluster | None:
    """The cluster ``--ray`` names (None: run on this machine); one line for options that do not fit."""
    if args.ray is None:
        if args.cpus_per_run is not None or args.gpus_per_run is not None:
            raise ConfigError(
                "--cpus-per-run / --gpus-per-run: they apply to runs on a Ray cluster (add --ray ADDRESS)"
            )
        return None
    address = args.ray or os.environ.get("RAY_ADDRESS", "")
    if not address:
        raise ConfigError("--ray: no ADDRESS given and RAY_ADDRESS is not set (allowed: --ray HOST:PORT, "
                          "ray://HOST:PORT or auto)")
    if args.jobs is not None:
        raise ConfigError("--jobs: runs on a Ray cluster go as many at once as its resources allow (each asks for "
                          "--cpus-per-run); give --jobs or --ray, not both")
    for flag, value in (("--cpus-per-run", args.cpus_per_run), ("--gpus-per-run", args.gpus_per_run)):
        if value is not None and value < 0 or flag == "--cpus-per-run" and value == 0:
            raise ConfigError(f"{flag} {value:g}: allowed: {'more than 0' if 'cpus' in flag else '0 or more'}")
    return Cluster(address, args.cpus_per_run, args.gpus_per_run)


# --- the run directory as files ----------------------------------------------------------------
def _version(stat: os.stat_result) -> tuple[int, int, int]:
    return stat.st_size, stat.st_mtime_ns, stat.st_ino  # an atomic write is a new file: a new inode


def read_files(root: Path, sent: dict[str, tuple] | None = None) -> tuple[Files, list[str]]:
    """(the files under ``root`` that changed since ``sent`` — every file if None —, the names of
    every file there). ``sent`` is updated with what is returned."""
    files, names = {}, []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        if name.startswith(".") or "/." in name:  # an atomic write's temporary file
            continue
        names.append(name)
        version = _version(path.stat())
        if sent is None or sent.get(name) != version:
            files[name] = path.read_bytes()
            if sent is not None:
                sent[name] = version
    return files, names


def write_files(root: Path, files: Files) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data)


def land(root: Path, files: Files, names: list[str], received: set[str]) -> None:
    """A task's snapshot into the run directory ``root`` on the head: ``files`` written, and the
    files it had sent (``received``, kept up to date) but no longer holds (``names``: every file
    it holds) deleted — a complete run's checkpoint, unless checkpoints are kept."""
    write_files(root, files)
    received.update(files)
    for name in received - set(names):
        (root / name).unlink(missing_ok=True)
    received.intersection_update(names)


# --- the task, on a node of the cluster ---------------------------------------------------------
def run_task(key: str, config: dict, status: str, trace: bool, keep_checkpoints: bool, files: Files,
             env: dict) -> Iterator[tuple]:
    """One run in a temporary directory of this node, started from ``files`` (a partial run
    directory, for a resume); yields ("files", changed files, every file's name) after
    checkpoints and at the end, then ("done", (key, seconds, error))."""
    from fedpd.reproduce.execute import execute

    os.environ.update(env)
    _remove_orphans()
    with tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        path = Path(tmp) / "run"
        path.mkdir()
        write_files(path, files)
        sent = {name: _version((path / name).stat()) for name in files}
        snapshots: queue.Queue = queue.Queue()
        due = [time.monotonic() + SNAPSHOT_SECONDS]

        def on_checkpoint(out) -> None:  # between rounds: the directory is complete and quiet
            if time.monotonic() >= due[0]:
                t0 = time.monotonic()
                snapshots.put(read_files(path, sent))
                due[0] = time.monotonic() + max(SNAPSHOT_SECONDS, SNAPSHOT_SPACING * (time.monotonic() - t0))

        result: list = []
        worker = threading.Thread(target=lambda: result.append(
            execute(key, config, str(path), status, trace, keep_checkpoints, on_checkpoint)), daemon=True)
        worker.start()
        while worker.is_alive() or not snapshots.empty():
            try:
                yield ("files", *snapshots.get(timeout=0.5))
            except queue.Empty:
                pass
        yield ("files", *read_files(path, sent))
        yield ("done", result[0] if result else (key, 0.0, "the run's thread ended without a result"))


def _remove_orphans() -> None:
    """Temporary run directories of tasks whose process is gone (stopped with the head that
    started them, before they could clean up)."""
    for path in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*-*"):
        pid = path.name[len(TEMP_PREFIX):].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's
        pass
    return True


# --- the head -----------------------------------------------------------------------------------
@dataclass
class Cluster:
    """A Ray cluster to run on (``address``) and what each run asks of it (None: the defaults of
    the module docstring)."""

    address: str
    cpus: float | None = None
    gpus: float | None = None

    def request(self, cfg) -> dict:
        workers = cfg.run.workers
        cpus = self.cpus if self.cpus is not None else (workers if isinstance(workers, int) else 1)
        gpus = self.gpus if self.gpus is not None else float(cfg.run.device.startswith("cuda"))
        return {"num_cpus": cpus, "num_gpus": gpus}

    def connect(self):
        """Ray, connected to the cluster; one line within about 30 s if it does not answer."""
        ray = import_ray()
        if ray.is_initialized():
            return ray
        _reachable(self.address)
        # Ray 2.5x's notice about a future default (tasks without GPUs will see them): ours ask for what they use
        warnings.filterwarnings("ignore", message="Tip: In future versions of Ray", category=FutureWarning)
        error: list[BaseException] = []

        def init():
            try:
                ray.init(address=self.address, logging_level="ERROR", log_to_driver=False)
            except BaseException as err:  # reported in the caller's thread
                error.append(err)

        thread = threading.Thread(target=init, daemon=True)
        thread.start()
        thread.join(CONNECT_TIMEOUT)
        if thread.is_alive() or error:
            why = f"{type(error[0]).__name__}: {str(error[0]).splitlines()[0][:200]}" if error else \
                f"no answer within {CONNECT_TIMEOUT:.0f} s"
            raise ConfigError(f"--ray {self.address}: cannot join the Ray cluster ({why})")
        return ray

    def run(self, jobs, keep_checkpoints: bool, env: dict, finished: Callable, poll: Callable) -> None:
        """Every job as a task; files land in each job's directory as they come; ``finished(key,
        seconds, error)`` as each ends, ``poll(running keys)`` about every second."""
        ray = self.connect()
        try:
            task = ray.remote(num_returns="streaming", max_retries=0, max_calls=1)(run_task)
            pending = {}
            for job in jobs:
                if job.status != "resume":  # what an earlier start left (no checkpoint): the task starts afresh
                    shutil.rmtree(job.path, ignore_errors=True)
                    job.path.mkdir(parents=True)
                files = read_files(job.path)[0] if job.status == "resume" else {}
                request = self.request(job.cfg)
                job_env = {**env, **{v: str(max(1, int(request["num_cpus"]))) for v in ("OMP_NUM_THREADS",
                                                                                       "MKL_NUM_THREADS")}}
                generator = task.options(**request).remote(job.spec.key, job.spec.config, job.status, job.spec.trace,
                                                            keep_checkpoints, files, job_env)
                pending[generator] = (job, set(files))
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for generator in ready:
                    job, received = pending[generator]
                    try:
                        item = ray.get(next(generator))
                    except StopIteration:
                        del pending[generator]
                        continue
                    except Exception as err:  # the task or its node failed
                        del pending[generator]
                        finished(job.spec.key, 0.0, f"its Ray task failed ({type(err).__name__}: "
                                 f"{str(err).splitlines()[0][:200]}); run the command again to continue it")
                        continue
                    if item[0] == "files":
                        land(job.path, item[1], item[2], received)
                    else:
                        finished(*item[1])
                poll([job.spec.key for job, _ in pending.values()])
        finally:
            ray.shutdown()  # the head leaves: Ray stops its tasks


def _reachable(address: str) -> None:
    """Refuse at once an address whose port does not answer (``ray.init`` would retry for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        if address in ("auto", "local"):
            return
        raise ConfigError(f"--ray {address!r}: expected HOST:PORT (the head's GCS port, 6379 by default), "
                          f"ray://HOST:PORT (Ray Client) or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as err:
        raise ConfigError(f"--ray {address}: nothing answers there ({err.strerror or err}); start the cluster "
                          f"(ray start --head) or check the address") from None

