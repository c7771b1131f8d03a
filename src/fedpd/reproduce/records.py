"""Run records: what each finished run of a reproduction leaves in its report folder, for good.

A run directory (``runs/<key>/``: checkpoints, the full config, ``metrics.jsonl``) is a working
cache and is not committed; a record is the run's result in a form small enough to commit for every
experiment, so a budget accumulates over any number of days and machines (a CPU, a GPU machine, a
Ray cluster) and the report is rebuilt from the records alone (``fedpd reproduce NAME
--report-only``)::

    records/<key>.json.gz          one gzipped JSON object per run:
        format, key, group, seed, labels, budget
        config      the resolved config the run ran (every default filled in)
        metrics     its metrics history, column by column: {"round": [0, 5, ...], "train_loss": [...]}
                    (a record's missing value is null); floats as Python writes them, so exact
        provenance  fedpd's version and commit, the invocation, the machine (cores, CPU and its kind,
                    threads, device, Python, torch) and the run's seconds (wall clock, and its own compute)
        early       (a run on a GPU) its metrics after each of its first rounds, 0 to
                    fedpd.reproduce.verify.EARLY_ROUNDS, for a close check on another device
    records/<key>.trajectory.pt    the model after every round, for runs that trace it

A run counts as done when its record holds the config the experiment asks for now (the same
fingerprint a checkpoint must match, :meth:`fedpd.config.Config.fingerprint`); a record of another
config is stale and its run is done again. Each file is written atomically.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from fedpd.config import first_difference, load_config
from fedpd.errors import ConfigError
from fedpd.io import atomic_write_bytes

FORMAT = 1
SUFFIX, TRAJECTORY_SUFFIX = ".json.gz", ".trajectory.pt"


@dataclass
class Record:
    """One finished run: its spec's key, group, seed and labels, the budget it ran at, the resolved
    config, the metrics history (one dict per evaluation) and where, when and by what it ran."""

    key: str
    group: str
    seed: int
    labels: dict
    budget: str
    config: dict
    metrics: list[dict]
    provenance: dict = field(default_factory=dict)
    trajectory: Path | None = None  # the file, for a traced run
    early: list[dict] = field(default_factory=list)  # metrics of each of the first rounds (runs on a GPU)

    def to_json(self) -> dict:
        columns: list[str] = []
        for row in self.metrics:
            columns += [k for k in row if k not in columns]
        return {"format": FORMAT, "key": self.key, "group": self.group, "seed": self.seed, "labels": self.labels,
                "budget": self.budget, "config": self.config,
                "metrics": {k: [row.get(k) for row in self.metrics] for k in columns},
                "provenance": self.provenance, **({"early": self.early} if self.early else {})}

    @classmethod
    def from_json(cls, data: dict, trajectory: Path | None = None) -> "Record":
        columns = data["metrics"]
        n = max((len(v) for v in columns.values()), default=0)
        metrics = [{k: v[i] for k, v in columns.items() if v[i] is not None} for i in range(n)]
        return cls(data["key"], data["group"], int(data["seed"]), dict(data.get("labels") or {}), data["budget"],
                   data["config"], metrics, dict(data.get("provenance") or {}), trajectory,
                   list(data.get("early") or []))

    def config_difference(self, cfg) -> str:
        """The first key where this record's config differs from ``cfg`` (a :class:`Config`) as a
        checkpoint would ("" if the record is of that config)."""
        held = load_config(self.config).fingerprint()
        if cfg.run.store == "auto":
            held["run"]["store"] = "auto"  # a run writes run.store = "auto" as what it resolved to
        return first_difference(held, cfg.fingerprint())


def path_of(folder: Path, key: str) -> Path:
    return Path(folder) / f"{key}{SUFFIX}"


def trajectory_of(folder: Path, key: str) -> Path:
    return Path(folder) / f"{key}{TRAJECTORY_SUFFIX}"


def load(folder: Path) -> dict[str, Record]:
    """Every record under ``folder`` by key ({} when there is none); a file that is not a record is
    one line naming it."""
    folder = Path(folder)
    out: dict[str, Record] = {}
    if not folder.is_dir():
        return out
    for path in sorted(folder.rglob(f"*{SUFFIX}")):
        try:
            data = json.loads(gzip.decompress(path.read_bytes()))
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r} (this fedpd reads {FORMAT})")
            key = data["key"]
            traj = trajectory_of(folder, key)
            out[key] = Record.from_json(data, traj if traj.is_file() else None)
        except (OSError, ValueError, KeyError, TypeError, EOFError, gzip.BadGzipFile) as err:
            raise ConfigError(f"{path}: not a run record ({type(err).__name__}: {err})") from None
        if path != path_of(folder, key):
            raise ConfigError(f"{path}: holds the record of run {key!r}, which belongs at {path_of(folder, key)}")
    return out


def write(folder: Path, spec, budget: str, config: dict, metrics: list[dict], provenance: dict,
          trajectory: Path | None = None, early: list[dict] | None = None) -> Record:
    """The record of the finished run ``spec`` into ``folder``: the ``config`` it ran (resolved), its
    ``metrics`` history and ``provenance`` (:func:`provenance`; its own compute is added from the
    metrics); ``trajectory``: the file of a traced run's models, copied beside the record; ``early``:
    its metrics after each of its first rounds (a run on a GPU)."""
    provenance = {**provenance, "compute_s": float((metrics[-1] if metrics else {}).get("wall_s") or 0.0)}
    record = Record(spec.key, spec.group, spec.seed, dict(spec.labels), budget, config, metrics, provenance,
                    early=list(early or []))
    target = path_of(folder, spec.key)
    target.parent.mkdir(parents=True, exist_ok=True)
    if trajectory is not None:
        traj = trajectory_of(folder, spec.key)
        tmp = traj.with_name(traj.name + ".tmp")
        shutil.copyfile(trajectory, tmp)
        os.replace(tmp, traj)
        record.trajectory = traj
    text = json.dumps(record.to_json(), separators=(",", ":"), sort_keys=False)
    # mtime 0: the same record is the same bytes (a rebuilt report's records do not change)
    atomic_write_bytes(target, gzip.compress(text.encode(), compresslevel=9, mtime=0))
    return record


def machine(threads: int | None = None, device: str | None = None) -> dict:
    """The machine a run ran on, as a record keeps it (no host name: records are published)."""
    import torch

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 0
    out = {"cores": cores, "cpu": _cpu_model(), "cpu_kind": cpu_kind(), "threads": threads or torch.get_num_threads(),
           "device": device or "cpu", "python": platform.python_version(), "torch": torch.__version__,
           "system": f"{platform.system()} {platform.machine()}"}
    if str(out["device"]).startswith("cuda") and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name()
    return out


#: instruction-set extensions that choose the code paths of torch's kernels and of MKL
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "amx_tile")


def cpu_kind() -> str:
    """What decides a CPU's floating-point results for the same program: vendor, family and model
    numbers (a virtual machine may show every EPYC as "AMD EPYC"), torch's vector capability and the
    instruction sets MKL and oneDNN dispatch on — e.g. ``AuthenticAMD 25/1, AVX2 (sse4_2 avx avx2
    fma)``. Two machines of one kind and one torch give the same bits (the rule of
    ``fedpd reproduce --verify``); the CPU's model name alone does not say that."""
    import torch

    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("vendor_id", "cpu family", "model", "flags") and key not in fields:
                fields[key] = value.strip()
            if key == "flags":
                break
    except OSError:
        pass
    flags = set(fields.get("flags", "").split())
    isa = " ".join(f for f in ISA_FLAGS if f in flags) or platform.machine()
    vendor = fields.get("vendor_id") or platform.processor() or "unknown"
    numbers = f" {fields['cpu family']}/{fields['model']}" if "cpu family" in fields and "model" in fields else ""
    return f"{vendor}{numbers}, {torch.backends.cpu.get_cpu_capability()} ({isa})"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def provenance(command: str, started: str, elapsed_s: float | None, run_machine: dict | None, commit: str,
               adopted: bool = False) -> dict:
    """A record's provenance. ``adopted``: the record was written later from a run directory that
    an earlier invocation completed (its machine then is the one that wrote the record)."""
    from fedpd import __version__

    out = {"fedpd": __version__, "commit": commit, "command": command, "started": started,
           "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           # milliseconds: a smoke run takes a few hundredths of a second (tenths read 0.0)
           "elapsed_s": None if elapsed_s is None else round(float(elapsed_s), 3),
           "machine": run_machine or machine()}
    if adopted:
        out["adopted"] = True
    return out
