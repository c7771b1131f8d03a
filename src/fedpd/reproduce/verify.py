"""``fedpd reproduce NAME --verify K``: are the committed records still what the code computes?

K records (a seeded choice among those of the report folder's budget) are run again from their own
config for their first few rounds, in this process, and every metric they recorded up to that round
is compared with the re-run's: ``float64`` runs must give identical numbers; ``float32`` runs agree
to :data:`FLOAT32_RTOL` relative (+ :data:`FLOAT32_ATOL`), because a float32 sum's rounding depends
on the order of its terms, which the machine's vector width and the library build may change (the
robustness experiment's float32 MNIST MLP, run per client and vectorised — two summation orders —
differs by at most 2.3e-7 relative after 3 rounds; 1e-4 leaves room for more rounds and other
machines, while an update rule's change — a step's size, a sign, a term left out — moves a metric by
far more). Wall-clock metrics are not compared.

A record made on a device this machine lacks (a GPU) is re-run on the CPU, and there the rounding
differences of two devices' kernels grow through training: a CUDA record of the A-FedPD screen
(LeNet, 10 rounds of 50 local steps) and its CPU re-run differed by 0.7 % in the training loss at
round 10 (2026-11-26). So across devices round 0 (data, split, initial model, evaluation: no
training yet) is compared to the float32 tolerance and the trained rounds only to
:data:`CROSS_DEVICE_RTOL`: a check against a wrong config or a broken rule, not against a subtle
change. Counters (communication, samples read) are exact on every device.
"""

from __future__ import annotations

import math
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fedpd.errors import ConfigError

#: the tolerance for float32 runs (see the module docstring for why)
FLOAT32_RTOL, FLOAT32_ATOL = 1e-4, 1e-9
#: a record re-run on another device: the tolerance of its trained rounds (see the module docstring)
CROSS_DEVICE_RTOL = 5e-2
#: metrics that measure time, not the computation
UNTIMED = ("wall_s",)


@dataclass
class Verified:
    key: str
    rounds: int
    compared: int  # numbers compared
    dtype: str
    mismatch: str  # "" when every number agrees
    across: str = ""  # "cuda → cpu": re-run on another device (trained rounds to CROSS_DEVICE_RTOL)

    @property
    def ok(self) -> bool:
        return not self.mismatch


def choose(keys: list[str], k: int, seed: int = 0) -> list[str]:
    """``k`` of ``keys``, a seeded choice (the same keys every time for the same seed)."""
    keys = sorted(keys)
    return sorted(random.Random(seed).sample(keys, min(k, len(keys))))


def agree(recorded, rerun, dtype: str, rtol: float = FLOAT32_RTOL) -> bool:
    """Whether a recorded metric and its re-run agree: integers and float64 exactly, float32 to ``rtol``."""
    if recorded is None or rerun is None:
        return recorded is rerun
    if isinstance(recorded, float) or isinstance(rerun, float):
        a, b = float(recorded), float(rerun)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if dtype == "float64" or math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= rtol * max(abs(a), abs(b)) + FLOAT32_ATOL
    return recorded == rerun


def verify_record(record, rounds: int = 3) -> Verified:
    """Re-run ``record``'s config to its first evaluation at or after round ``rounds`` and compare."""
    from fedpd.io import read_jsonl
    from fedpd.reproduce.spec import merge
    from fedpd.runner import run

    evaluated = [int(m["round"]) for m in record.metrics if "round" in m]
    if not evaluated:
        return Verified(record.key, 0, 0, "", "the record holds no metrics")
    upto = next((r for r in evaluated if r >= rounds), evaluated[-1])
    dtype = _dtype(record.config)
    made_on = record.config.get("run", {}).get("device", "cpu")
    device = _present(made_on)
    across = f"{made_on} → {device}" if device != made_on else ""
    config = merge(record.config, {"run": {"rounds": max(upto, 1), "tensorboard": False, "device": device}})
    with tempfile.TemporaryDirectory(prefix="fedpd-verify-") as tmp:
        run(config, Path(tmp) / "run", overwrite=True, progress=False)
        again = {int(m["round"]): m for m in read_jsonl(Path(tmp) / "run" / "metrics.jsonl")}
    compared = 0
    for row in record.metrics:
        r = int(row.get("round", -1))
        if r > upto:
            break
        if r not in again:
            return Verified(record.key, upto, compared, dtype, f"round {r}: recorded, not evaluated by the re-run")
        for key, value in row.items():
            if key in UNTIMED:
                continue
            other = again[r].get(key)
            # across devices no run is bitwise the same, float64 included: tolerances for both
            if not agree(value, other, "float32" if across else dtype,
                         CROSS_DEVICE_RTOL if across and r > 0 else FLOAT32_RTOL):
                return Verified(record.key, upto, compared, dtype,
                                f"round {r}, {key}: recorded {value!r}, re-run {other!r}", across)
            compared += 1
    return Verified(record.key, upto, compared, dtype, "", across)


def _present(device: str) -> str:
    """``device`` if this machine has it, else "cpu": a record made on a GPU is checked on a CPU too
    (its trained rounds to :data:`CROSS_DEVICE_RTOL`)."""
    from fedpd.build import resolve_device

    try:
        resolve_device(device)
    except ConfigError:
        return "cpu"
    return device


def _dtype(config: dict) -> str:
    """The dtype a run computed in: run.dtype, or for "auto" the problem's own (float32 for the
    problems that take a model, i.e. datasets; float64 for the built-in ones; fedpd.build)."""
    import inspect

    from fedpd.config import load_config

    cfg = load_config(config)
    if cfg.run.dtype != "auto":
        return cfg.run.dtype
    takes_model = "model" in inspect.signature(cfg.entries["problem"].build).parameters
    return "float32" if takes_model else "float64"


def verify(name: str, out: str | Path, k: int, budget: str | None = None, rounds: int = 3, seed: int = 0,
           data_dir: str | None = None, progress: bool = True, runs: str | None = None) -> list[Verified]:
    """Re-run ``k`` of the records in ``out/records`` (:func:`choose`; ``runs``: among those whose
    key these patterns pick, :func:`fedpd.reproduce.core.select`) for their first ``rounds`` rounds
    and compare (:func:`verify_record`)."""
    import sys

    from fedpd.reproduce import core, records
    from fedpd.reproduce.execute import _environment, validate

    if k < 1:
        raise ConfigError(f"reproduce --verify {k} (allowed: 1 or more records)")
    exp = core.get(name)
    held = records.load(Path(out) / "records")
    budget = budget or core.budget_of(name, held)
    if budget not in exp.budgets:
        raise ConfigError(f"reproduce {name}: unknown budget {budget!r} (allowed: {', '.join(exp.budgets)})")
    specs = core.select(exp.runs(exp.budgets[budget]), runs, name)
    current = {s.key for s, cfg in zip(specs, validate(specs))
               if s.key in held and not held[s.key].config_difference(cfg)}
    if not current:
        raise ConfigError(f"reproduce {name} --verify: {Path(out) / 'records'} holds no record of the {budget} "
                          "budget's runs at their current configs")
    core.check_data(exp, exp.budgets[budget], data_dir)
    env = {"FEDPD_DATA": str(Path(data_dir).resolve())} if data_dir else {}
    found = []
    with _environment(env):
        for key in choose(list(current), k, seed):
            result = verify_record(held[key], rounds)
            found.append(result)
            if progress:
                state = "agrees" if result.ok else f"DIFFERS: {result.mismatch}"
                across = (f", re-run {result.across}: rounds after 0 to {CROSS_DEVICE_RTOL:g} relative"
                          if result.across else "")
                print(f"{key} ({result.dtype}, rounds 0–{result.rounds}, {result.compared} numbers{across}): {state}",
                      file=sys.stderr, flush=True)
    return found
