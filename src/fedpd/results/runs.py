"""Reading run directories back: a run's config and metric records, the best value of a metric,
labels that tell runs apart (by the config values that differ, else by their paths), and the groups
of runs that differ only in seeds (``fedpd plot``'s bands and ``fedpd compare``'s rows over seeds)
with a label that names each group by its config."""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from fedpd.checks import FedpdNotice
from fedpd.errors import ConfigError
from fedpd.io import load_toml, read_jsonl
from fedpd.rundir import is_run_dir, runs_below

X_AXES = ("round", "comm_rounds", "uplink_floats", "downlink_floats", "sample_grads", "wall_s", "sim_time_s")
LOWER_IS_BETTER = ("loss", "grad_norm", "residual", "drift", "error", "mse", "backdoor")
#: config keys that do not change a run's results (ignored when runs are grouped or told apart)
NO_EFFECT = ("run.threads", "run.tensorboard", "run.allow_nonfinite", "run.checkpoint_every", "run.client_chunk",
             "run.rounds", "run.eval_every")


@dataclass
class Run:
    path: Path
    cfg: dict
    records: list[dict]
    label: str = ""

    @property
    def name(self) -> str:
        return self.path.resolve().name


def load_run(path: str | Path) -> tuple[str, dict, list[dict]]:
    """(label, resolved config, metric records) of a run directory."""
    run = read_run(path)
    return run.path.name, run.cfg, run.records


def read_run(path: str | Path) -> Run:
    """The run in directory ``path`` (one line if it holds no metrics)."""
    path = Path(path)
    if not (path / "metrics.jsonl").is_file():
        raise ConfigError(f"{str(path)!r}: no metrics.jsonl (not a fedpd run directory)")
    cfg = load_toml(path / "config.toml") if (path / "config.toml").is_file() else {}
    records = read_jsonl(path / "metrics.jsonl")
    if not records:
        raise ConfigError(f"{str(path)!r}: metrics.jsonl holds no complete record")
    return Run(path, cfg, records)


def expand_runs(paths) -> list[Path]:
    """``paths`` with every folder of runs (one that holds no metrics.jsonl of its own but run
    directories below it, e.g. ``runs/`` or a sweep's ``--out``) replaced by the runs inside it."""
    out = []
    for p in map(Path, paths):
        inner = [] if is_run_dir(p) or not p.is_dir() else runs_below(p)
        out.extend(inner or [p])
    return out


def finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def best(records: list[dict], key: str):
    values = [r[key] for r in records if finite(r.get(key))]
    if not values:
        return None
    return min(values) if any(s in key for s in LOWER_IS_BETTER) else max(values)


# --- telling runs apart -----------------------------------------------------------------------
def flat_config(cfg: dict) -> dict[str, object]:
    """``{"algorithm.p": 0.5, ...}`` of a resolved config."""
    out = {}
    for section, table in cfg.items():
        if isinstance(table, dict):
            for key, value in table.items():
                out[f"{section}.{key}"] = value
        else:
            out[section] = table
    return out


def is_seed(key: str) -> bool:
    return key.rsplit(".", 1)[-1] == "seed"


def _value(v) -> str:
    return f"{v:g}" if isinstance(v, float) else json.dumps(v) if not isinstance(v, str) else v


def differing_keys(cfgs: list[dict], skip_seeds: bool = True) -> list[str]:
    """Config keys whose values differ between ``cfgs`` (keys that change no result left out)."""
    flats = [flat_config(c) for c in cfgs]
    keys = sorted({k for f in flats for k in f})
    out = []
    for k in keys:
        if k in NO_EFFECT or (skip_seeds and is_seed(k)):
            continue
        if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1:
            out.append(k)
    return out


def short_keys(keys: list[str]) -> dict[str, str]:
    """``algorithm.p`` -> ``p`` where the last part is unambiguous among ``keys``."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def _path_suffixes(paths: list[Path]) -> list[str]:
    """The shortest trailing parts of each path that tell the paths apart."""
    parts = [p.resolve().parts for p in paths]
    for k in range(1, max(len(p) for p in parts) + 1):
        tails = ["/".join(p[-k:]) for p in parts]
        if len(set(tails)) == len(tails):
            return tails
    return [str(p) for p in paths]


def disambiguate(names: list[str], cfgs: list[dict], paths: list[Path], skip_seeds: bool = True) -> list[str]:
    """``names``, where they repeat completed by the config values that differ between the runs
    sharing the name (seeds too unless ``skip_seeds``), else by as much of the path as tells them
    apart."""
    labels = list(names)
    for name in set(names):
        idx = [i for i, n in enumerate(names) if n == name]
        if len(idx) < 2:
            continue
        keys = differing_keys([cfgs[i] for i in idx], skip_seeds=skip_seeds)
        short = short_keys(keys)
        extra = [", ".join(f"{short[k]}={_value(flat_config(cfgs[i]).get(k))}" for k in keys[:3]) for i in idx]
        if keys and len(set(extra)) == len(extra):
            for i, e in zip(idx, extra):
                labels[i] = f"{name} ({e})"
        else:
            for i, tail in zip(idx, _path_suffixes([paths[i] for i in idx])):
                labels[i] = tail
    return labels


def run_labels(runs: list[Run], skip_seeds: bool = False) -> list[str]:
    """Legend / table labels of ``runs``: their folder names, told apart where they repeat."""
    return disambiguate([r.name for r in runs], [r.cfg for r in runs], [r.path for r in runs], skip_seeds)


def group_runs(runs: list[Run]) -> list[list[Run]]:
    """Runs whose configs differ only in seeds (and in keys that change no result) form a group."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        flat = {k: v for k, v in flat_config(run.cfg).items() if k not in NO_EFFECT and not is_seed(k)}
        key = json.dumps(flat, sort_keys=True, default=str) if run.cfg else f"__{id(run)}"
        groups.setdefault(key, []).append(run)
    return list(groups.values())


def _seeds(run: Run) -> str:
    return json.dumps({k: v for k, v in flat_config(run.cfg).items() if is_seed(k)}, sort_keys=True)


def one_per_seed(members: list[Run], kept_as: str = "counted once") -> list[Run]:
    """The runs of one group, one per seed: runs of the same config and the same seeds are the same
    run twice (a copy, or a rerun) — kept once, with a note naming them (and ``kept_as``), never
    counted as seeds."""
    first: dict[str, Run] = {}
    for run in members:
        kept = first.setdefault(_seeds(run), run)
        if kept is not run:
            warnings.warn(f"{run.path} and {kept.path} have the same config and seed: duplicates, {kept_as}",
                          FedpdNotice, stacklevel=2)
    return list(first.values())


def seed_groups(runs: list[Run], kept_as: str = "counted once") -> list[list[Run]]:
    """:func:`group_runs`, each group one run per seed (:func:`one_per_seed`)."""
    return [one_per_seed(members, kept_as) for members in group_runs(runs)]


def _folder_label(runs: list[Run]) -> str:
    """The members' folder name, or what their names share (``fedavg-s0``, ``fedavg-s1``: ``fedavg``)."""
    names = [r.name for r in runs]
    if len(set(names)) == 1:
        return names[0]
    prefix = re.sub(r"[-_.]*(seed|s)?[-_.]*$", "", os.path.commonprefix(names))
    return prefix or names[0]


#: how many config values a group's label names at most, beyond its algorithm
LABEL_KEYS = 4


def _config_labels(units: list[list[Run]]) -> list[str] | None:
    """A label per group naming what tells the groups' configs apart: the algorithm first (bare),
    then ``key=value`` of the other keys that differ — keys every group sets before the others, as
    few as tell the groups apart; None when no choice of keys does."""
    cfgs = [u[0].cfg for u in units]
    flats = [flat_config(c) for c in cfgs]
    keys = differing_keys(cfgs)
    keys.sort(key=lambda k: (k != "algorithm.name", not all(k in f for f in flats)))
    for n in range(1, min(len(keys), LABEL_KEYS + 1) + 1):
        chosen = keys[:n]
        short = short_keys([k for k in chosen if k != "algorithm.name"])
        labels = [", ".join(_value(f[k]) if k == "algorithm.name" else f"{short[k]}={_value(f[k])}"
                            for k in chosen if k in f) for f in flats]
        if all(labels) and len(set(labels)) == len(labels):
            return labels
    return None


def group_labels(units: list[list[Run]]) -> list[str]:
    """A label per group of runs (each a list of :class:`Run`). Where some group holds several runs
    (seeds), each is named by its config, by what differs between the groups (:func:`_config_labels`);
    otherwise, or where the configs do not tell them apart, by folder names (:func:`disambiguate`)."""
    if len(units) > 1 and any(len(u) > 1 for u in units):
        labels = _config_labels(units)
        if labels is not None:
            return labels
    return disambiguate([_folder_label(u) for u in units], [u[0].cfg for u in units], [u[0].path for u in units],
                        skip_seeds=True)


def split_metrics(metrics) -> list[str]:
    """``"a,b"`` or ``["a", "b,c"]`` -> ``["a", "b", "c"]``."""
    if isinstance(metrics, str):
        metrics = [metrics]
    out = [m.strip() for item in metrics for m in item.split(",") if m.strip()]
    if not out:
        raise ConfigError("--metric: give at least one metric key, e.g. grad_norm_sq")
    return out
