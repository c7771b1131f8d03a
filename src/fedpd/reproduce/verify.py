"""``fedpd reproduce NAME --verify K``: are the committed records still what the code computes?

K records (a seeded choice among those of the report folder's budget) are run again from their own
config for their first few rounds, in this process, and every metric they recorded up to that round
is compared with the re-run's under one of three rules, chosen by where the record was made and
printed with each result (docs/reproductions/README.md, "Verification"):

* **same kind of CPU** (the record's ``cpu_kind`` and torch are this machine's,
  :func:`fedpd.reproduce.records.cpu_kind`): float64 numbers identical — fedpd's own sums have a
  fixed order (:mod:`fedpd.ordered`), so nothing but the code can change them; float32 numbers to
  :data:`FLOAT32_RTOL`, as a float32 BLAS product's rounding may depend on the thread count.
* **another kind of CPU** (or a record that does not name its kind): MKL and torch's kernels take
  other code paths there, which add the same terms in another order. float64 numbers to
  :data:`CROSS_CPU_RTOL`: the largest drift measured over the rounds ``--verify`` re-runs of every
  committed report (``benchmarks/cpu_drift.py``; docs/performance.md, "Numbers across CPUs") with a
  margin, while a 1 % change of an update rule moves them by far more. float32 numbers compound
  their rounding through training as far as such a change moves them, so they are compared closely
  where training has not amplified it yet: round 0 to :data:`FLOAT32_RTOL`, the record's per-round
  metrics of its first rounds (``early``, kept by float32 records) to :data:`EARLY_RTOL`, the later
  rounds to :data:`CROSS_CPU_TRAINED_RTOL` only.
* **another device** (a GPU's record re-run on the CPU): as float32 on another CPU, the later rounds
  to :data:`CROSS_DEVICE_RTOL` (a CUDA record of the A-FedPD screen and its CPU re-run differed by
  0.7 % in training loss at round 10).

A share of correct predictions may also differ by :data:`FLIPS_ATOL` on another CPU or device.
Integer metrics are of two kinds (:data:`KINDS`, the one place that says which): counters of what
the run did (rounds, floats sent, sample gradients, dropouts, rejected uploads) are exact under
every rule; counters that follow from a float comparison (an iterative aggregator's iterations) are
held to what their floats are held to — exact where floats must be identical, else free to differ
while the float metrics of their round agree (:func:`compare`). Wall-clock metrics are not compared.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from fedpd.build import run_dtype
from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.reproduce.execute import EARLY_ROUNDS, rerun

#: float32 numbers untrained (round 0) or on the same kind of CPU: a float32 sum's rounding depends
#: on the order of its terms, which a BLAS product's thread split may change; ATOL: 0 up to rounding
FLOAT32_RTOL, FLOAT32_ATOL = 1e-4, 1e-9
#: float64 numbers on another kind of CPU (the module docstring; the drift measured: docs/performance.md,
#: "Numbers across CPUs"); ATOL: a number that is 0 up to rounding (‖∇f‖² at machine precision, ~1e-33)
CROSS_CPU_RTOL, CROSS_CPU_ATOL = 1e-7, 1e-20
#: float32 numbers of trained rounds on another kind of CPU: rounding differences compound through
#: training (the MNIST MLP of the robustness report: 4.3e-4 relative after 10 rounds) nearly as far
#: as a 1 % change of the learning rate moves them (1.2e-3 to 1.6e-2), so this is a check against a
#: wrong config only — the close one is of the early rounds
CROSS_CPU_TRAINED_RTOL = 1e-2
#: a share of correct predictions (``test_acc``, ``personal_acc_worst10``, ...) on another CPU or
#: device: a rounding difference may move a test sample across a decision boundary (measured: 5e-4
#: of the pooled test set, 1e-3 of the worst clients' mean, after 10 MLP rounds)
FLIPS_ATOL = 5e-3
#: the first rounds a float32 or GPU record keeps per round (``early``: rounds 0 to
#: :data:`fedpd.reproduce.execute.EARLY_ROUNDS`), compared on another CPU or device to this
EARLY_RTOL = 1e-3
#: another device: the tolerance of the record's later rounds (a check against a wrong config only)
CROSS_DEVICE_RTOL = 5e-2

#: the kinds of metric --verify tells apart (:func:`kind_of`)
UNTIMED, COUNTER, FROM_FLOATS, FLOAT = "untimed", "counter", "counter from floats", "float"
#: every metric whose kind its value does not say, in one place; any other metric is a float when its
#: value is a float and a counter (exact) when it is an integer — so an integer metric nobody
#: classified fails on a difference rather than passing it (tests/reproduce/test_verify_rules.py holds every
#: integer metric of the committed records to this table)
KINDS = {
    "wall_s": UNTIMED,  # measures time, not the computation
    # what the run did, which no rounding changes: exact under every rule
    **dict.fromkeys(("round", "comm_rounds", "uplink_floats", "downlink_floats", "sample_grads", "dropouts",
                     "rejected_uploads", "eval_clients", "eval_train_samples", "dp_rounds", "dp_population",
                     "dp_sample_size"), COUNTER),
    # the outcome of a float comparison: the iterations until a float stopping test holds (a float32
    # Weiszfeld at tol 1e-7 stops anywhere in 6-12 iterations by rounding alone: measured on this
    # kind of CPU's three code paths, whose float metrics agree to 4e-4), the rounds that hit the cap
    **dict.fromkeys(("agg_iterations", "agg_unconverged_rounds"), FROM_FLOATS),
}


def kind_of(key: str, value) -> str:
    """How --verify compares the metric ``key`` holding ``value`` (:data:`KINDS`)."""
    if key in KINDS:
        return KINDS[key]
    return FLOAT if isinstance(value, float) else COUNTER


@dataclass(frozen=True)
class Rule:
    """How a record and its re-run are compared: each float metric to a (relative, absolute)
    tolerance (:meth:`tolerance`; (0, 0): identical); counters always exactly."""

    name: str
    float64_rtol: float | None  # every round of a float64 record (None: as float32)
    float32_rtol: float  # round 0 of a float32 record: no training yet
    trained_rtol: float | None = None  # float32 rounds after 0 (None: float32_rtol)
    early_rtol: float | None = None  # the record's ``early`` rounds after 0
    acc_atol: float = 0.0  # ``*_acc`` metrics: this much absolute difference allowed as well

    def tolerance(self, dtype: str, round_: int, early: bool = False) -> tuple[float, float]:
        """(relative, absolute) tolerance of a float metric of round ``round_`` (``early``: one of
        the record's early rounds)."""
        if early and round_ > 0 and self.early_rtol is not None:
            return self.early_rtol, FLOAT32_ATOL
        if dtype == "float64" and self.float64_rtol is not None:
            return self.float64_rtol, CROSS_CPU_ATOL if self.float64_rtol else 0.0
        if round_ > 0 and self.trained_rtol is not None:
            return self.trained_rtol, FLOAT32_ATOL
        return self.float32_rtol, FLOAT32_ATOL


SAME_CPU = Rule(f"same kind of CPU: float64 identical, float32 to {FLOAT32_RTOL:g}", 0.0, FLOAT32_RTOL)
OTHER_CPU = Rule(f"another kind of CPU: float64 to {CROSS_CPU_RTOL:g}; float32 round 0 to {FLOAT32_RTOL:g}, early "
                 f"rounds to {EARLY_RTOL:g}, later rounds to {CROSS_CPU_TRAINED_RTOL:g}", CROSS_CPU_RTOL,
                 FLOAT32_RTOL, CROSS_CPU_TRAINED_RTOL, EARLY_RTOL, FLIPS_ATOL)
OTHER_DEVICE = Rule(f"another device: round 0 to {FLOAT32_RTOL:g}, early rounds to {EARLY_RTOL:g}, later rounds to "
                    f"{CROSS_DEVICE_RTOL:g}", None, FLOAT32_RTOL, CROSS_DEVICE_RTOL, EARLY_RTOL, FLIPS_ATOL)


@dataclass
class Verified:
    key: str
    rounds: int
    compared: int  # numbers compared
    dtype: str
    mismatch: str  # "" when every number agrees
    across: str = ""  # "cuda → cpu": re-run on another device
    rule: str = ""  # the rule applied (:class:`Rule`'s name)
    rounded: tuple[str, ...] = ()  # counters from floats that differed while their round's floats agreed

    @property
    def ok(self) -> bool:
        return not self.mismatch


def choose(keys: list[str], k: int, seed: int = 0) -> list[str]:
    """``k`` of ``keys``, a seeded choice (the same keys every time for the same seed)."""
    keys = sorted(keys)
    return sorted(random.Random(seed).sample(keys, min(k, len(keys))))


def agree(recorded, rerun, tolerance: tuple[float, float] = (0.0, 0.0), acc_atol: float = 0.0,
          key: str = "") -> bool:
    """Whether a recorded metric and its re-run agree: integers exactly, floats to ``tolerance``
    (relative, absolute; (0, 0): exactly), a share of correct predictions (``test_acc``,
    ``personal_acc_worst10``, ...) also to ``acc_atol``."""
    rtol, atol = tolerance
    if recorded is None or rerun is None:
        return recorded is rerun
    if isinstance(recorded, float) or isinstance(rerun, float):
        a, b = float(recorded), float(rerun)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if a == b:
            return True
        if math.isinf(a) or math.isinf(b):
            return False
        return (abs(a - b) <= rtol * max(abs(a), abs(b)) + atol
                or ("_acc" in key and abs(a - b) <= acc_atol))
    return recorded == rerun


def rule_of(record, device: str) -> Rule:
    """The rule for ``record`` re-run here on ``device`` (the module docstring)."""
    from fedpd.reproduce.records import cpu_kind

    made_on = record.config.get("run", {}).get("device", "cpu")
    if device != made_on:
        return OTHER_DEVICE
    machine = record.provenance.get("machine", {})
    import torch

    same = machine.get("cpu_kind") == cpu_kind() and machine.get("torch") == torch.__version__
    return SAME_CPU if same else OTHER_CPU


def compare(rows: list[dict], again: dict[int, dict], dtype: str, rule: Rule, upto: int,
            early: bool = False) -> tuple[int, str, list[str]]:
    """(numbers compared, the first mismatch or "", the counters from floats that differed) of
    recorded ``rows`` up to round ``upto`` against the re-run's ``again`` under ``rule``. A counter
    that follows from floats (:data:`FROM_FLOATS`) is exact where the round's floats must be
    identical; elsewhere it may differ, as rounding moves the float comparison it counts, when the
    round's float metrics agree under the rule — a changed update rule shows there, not in the
    counter alone — and fails when the round holds no float metric to vouch for it."""
    compared, rounded = 0, []
    for row in rows:
        r = int(row.get("round", -1))
        if r > upto:
            break
        where = f"round {r}" + (" (early rounds)" if early else "")
        if r not in again:
            return compared, f"{where}: recorded, not evaluated by the re-run", rounded
        tolerance = rule.tolerance(dtype, r, early)
        floats, moved = 0, []
        for key, value in row.items():
            kind = kind_of(key, value)
            if kind == UNTIMED:
                continue
            other = again[r].get(key)
            if (kind == FROM_FLOATS and tolerance != (0.0, 0.0) and isinstance(value, int)
                    and isinstance(other, int) and value != other):
                moved.append(f"{key}: recorded {value!r}, re-run {other!r}")
            elif not agree(value, other, tolerance, rule.acc_atol, key):
                return compared, f"{where}, {key}: recorded {value!r}, re-run {other!r}", rounded
            compared += 1
            floats += kind == FLOAT
        if moved and not floats:
            return (compared, f"{where}, {moved[0]} (a counter that follows from floats, and the round holds no "
                              "float metric to vouch for it)", rounded)
        rounded += [f"{where}, {m}" for m in moved]
    return compared, "", rounded


def verify_record(record, rounds: int = 3) -> Verified:
    """Re-run ``record``'s config to its first evaluation at or after round ``rounds`` and compare
    under :func:`rule_of`'s rule (a record of another device with ``early`` metrics: re-run with
    an evaluation every round, and its early rounds compared too)."""
    evaluated = [int(m["round"]) for m in record.metrics if "round" in m]
    if not evaluated:
        return Verified(record.key, 0, 0, "", "the record holds no metrics")
    upto = next((r for r in evaluated if r >= rounds), evaluated[-1])
    dtype = run_dtype(load_config(record.config))
    made_on = record.config.get("run", {}).get("device", "cpu")
    device = _present(made_on)
    across = f"{made_on} → {device}" if device != made_on else ""
    rule = rule_of(record, device)
    loose = rule.trained_rtol is not None and (dtype == "float32" or rule.float64_rtol is None)
    early = record.early if loose else []  # its trained rounds are compared loosely: the early ones closely
    again = rerun(record.config, max(upto, len(early) - 1), device, every=1 if early else None)
    compared, mismatch, rounded = compare(early, again, dtype, rule, EARLY_ROUNDS, early=True) if early else (0, "", [])
    if not mismatch:
        more, mismatch, later = compare(record.metrics, again, dtype, rule, upto)
        compared, rounded = compared + more, rounded + later
    name = rule.name
    if loose and not early:
        name += " (the record keeps no early rounds: its trained rounds are checked loosely only)"
    return Verified(record.key, upto, compared, dtype, mismatch, across, name, tuple(rounded))


def _present(device: str) -> str:
    """``device`` if this machine has it, else "cpu": a record made on a GPU is checked on a CPU too
    (under :data:`OTHER_DEVICE`)."""
    from fedpd.build import resolve_device

    try:
        resolve_device(device)
    except ConfigError:
        return "cpu"
    return device


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
                if result.ok and result.rounded:
                    state += (f" (its floats agreeing, rounding moved a counter that follows from floats: "
                              f"{'; '.join(result.rounded[:3])}{' …' if len(result.rounded) > 3 else ''})")
                across = f", re-run {result.across}" if result.across else ""
                print(f"{key} ({result.dtype}, rounds 0–{result.rounds}, {result.compared} numbers{across}; rule: "
                      f"{result.rule}): {state}", file=sys.stderr, flush=True)
    return found
