"""When a run first reaches a target value of a metric: after how many rounds, communication
rounds, floats sent and — with ``[system]`` — simulated seconds (``fedpd compare --target``).

A target is ``METRIC>=VALUE`` or ``METRIC<=VALUE``; ``METRIC=VALUE`` means ``>=`` for an accuracy
(a name with ``acc``) and ``<=`` for everything else (losses, ‖∇f‖², errors). A run reaches it at
its first evaluated record that meets it: the time to a target is known only to the resolution of
``run.eval_every``, and a run that never meets it has no time ("—" in a table)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from fedpd.errors import ConfigError

_FORM = re.compile(r"\s*([A-Za-z_][\w]*)\s*(>=|<=|=)\s*([^\s]+)\s*$")
#: what the time to a target is counted in, when the records hold it
COSTS = ("round", "comm_rounds", "uplink_floats", "downlink_floats", "sample_grads", "sim_time_s")


@dataclass(frozen=True)
class Target:
    metric: str
    value: float
    at_least: bool  # reached when metric >= value (else <=)

    def met(self, record: dict) -> bool:
        v = record.get(self.metric)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            return False
        return v >= self.value if self.at_least else v <= self.value

    def __str__(self) -> str:
        return f"{self.metric}{'>=' if self.at_least else '<='}{self.value:g}"


def parse_target(text: str) -> Target:
    """A :class:`Target` from ``METRIC>=VALUE``, ``METRIC<=VALUE`` or ``METRIC=VALUE``."""
    m = _FORM.match(text)
    value = None
    if m:
        try:
            value = float(m.group(3))
        except ValueError:
            value = None
    if value is None or not math.isfinite(value):
        raise ConfigError(f"--target {text!r}: expected METRIC=VALUE, METRIC>=VALUE or METRIC<=VALUE with a finite "
                          f"number (e.g. test_acc=0.8)")
    metric, op = m.group(1), m.group(2)
    at_least = op == ">=" or (op == "=" and "acc" in metric)
    return Target(metric, value, at_least)


def reached(history: list[dict], target: Target) -> dict | None:
    """The costs (:data:`COSTS` the records hold) of the first record of ``history`` that meets
    ``target``, or None when none does."""
    for record in history:
        if target.met(record):
            return {k: record[k] for k in COSTS if k in record}
    return None


def target_measures(target: Target) -> list:
    """``fedpd compare``'s columns of the time to ``target``: rounds, floats sent up and simulated
    seconds (where the runs have a clock); "-" for a run — or a group of seeds, unless each
    reached it — that never did."""
    from fedpd.results.tables import Column, Measure

    def cost(key: str):
        def value(run):
            got = reached(run.records, target)
            return None if got is None else got.get(key)
        return value

    name = str(target)
    out = [Measure(Column(f"{name} rounds", f"{name}\nrounds", True, 2), cost("round"), spread=True),
           Measure(Column(f"{name} uplink_floats", f"{name}\nuplink", True, 5), cost("uplink_floats"), spread=True),
           Measure(Column(f"{name} sim_time_s", f"{name}\nsim s", True, 2), cost("sim_time_s"), spread=True)]
    return out
