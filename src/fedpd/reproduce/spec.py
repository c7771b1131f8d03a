"""What a reproduction is, as data: runs (configs × seeds) at a budget, and the report built from them.

An :class:`Experiment` names the paper's table or figure it reproduces, offers budgets
(``smoke``: a few rounds, for the test suite; ``reduced``: fits this project's 2-core CPU in under
an hour; ``medium``: the budget verdicts are read from — enough rounds, local work and seeds (>= 3) for
the paired tests, about 6 core-hours where that suffices; docs/reproductions/README.md says per
report what its medium budget can and cannot decide; ``full``: the paper's budget, for a GPU or a Ray
cluster) and turns a budget into :class:`RunSpec` s —
plain config dicts, one per (setting, seed). After the runs it writes its report sections from
their metrics (:mod:`fedpd.reproduce.report`). Nothing here runs anything.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

BUDGETS = ("smoke", "reduced", "medium", "full")
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=+-]*(/[A-Za-z0-9][A-Za-z0-9_.=+-]*)*")


@dataclass(frozen=True)
class Budget:
    """One budget of an experiment.

    ``seeds``: the seeds every setting runs with; ``note``: how this budget differs from the
    paper (printed in the report); ``params``: the experiment's own knobs (rounds, subsamples, ...).
    """

    name: str
    seeds: tuple[int, ...]
    note: str
    params: dict = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)


@dataclass(frozen=True)
class RunSpec:
    """One run: ``key`` (its folder under ``runs/``, also its name in tables: ``group/s<seed>``),
    the config dict, the ``group`` it belongs to (the runs of one setting over the seeds) and
    free-form ``labels`` the report selects by (panel, method, split, attack, ...).
    ``trace``: also store the model after every round (``trajectory.pt``) for reports that compare
    iterates, not just metrics."""

    key: str
    group: str
    seed: int
    config: dict
    labels: dict = field(default_factory=dict)
    trace: bool = False

    def __post_init__(self):
        if not _KEY.fullmatch(self.key):
            raise ValueError(f"run key {self.key!r}: letters, digits, _ . = + - and / only")


def merge(*parts: dict) -> dict:
    """Deep merge of config dicts (later wins), every part copied."""
    out: dict = {}
    for part in parts:
        for k, v in part.items():
            if isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = merge(out[k], v)
            else:
                out[k] = copy.deepcopy(v)
    return out


def seeded(config: dict, seed: int, problem_seed: bool = True) -> dict:
    """``config`` with ``run.seed = seed`` and (``problem_seed``) ``problem.seed = seed``: each seed
    draws its own data, split and initialisation as well as its own sampling and minibatches."""
    extra = {"run": {"seed": seed}}
    if problem_seed:
        extra["problem"] = {"seed": seed}
    return merge(config, extra)


def grid(group: str, config: dict, seeds: Iterable[int], labels: dict | None = None, trace: bool = False,
         problem_seed: bool = True) -> list[RunSpec]:
    """The runs of one setting over ``seeds``: keys ``group/s<seed>``."""
    return [RunSpec(f"{group}/s{s}", group, s, seeded(config, s, problem_seed), dict(labels or {}), trace)
            for s in seeds]


@dataclass(frozen=True)
class Claim:
    """A statement of the paper, with where it is made and a check on our results.

    ``check(results) -> (holds, what we measured)``; ``holds`` is True, False or None (cannot tell
    at this budget). ``paired``: the check decides on paired per-seed differences by their 95 %
    t-interval, Bonferroni-corrected over its comparisons (:func:`fedpd.reproduce.report.all_of`);
    otherwise it is a threshold check on the seeds' means, and the report says so."""

    text: str
    where: str
    check: Callable
    paired: bool = False


class Experiment:
    """A paper's experiment: subclasses set the class attributes and implement :meth:`runs` and
    :meth:`report`."""

    name: str = ""
    title: str = ""
    #: the paper(s) and the table / figure, as users should cite them
    source: str = ""
    #: datasets the runs read (checked before anything runs)
    datasets: tuple[str, ...] = ()
    #: which budgets write their report into docs/reproductions/<name>/ (informational)
    budgets: dict[str, Budget] = {}

    def budget(self, name: str) -> Budget:
        return self.budgets[name]

    def datasets_for(self, budget: Budget) -> tuple[str, ...]:
        return self.datasets

    def runs(self, budget: Budget) -> list[RunSpec]:
        raise NotImplementedError

    def report(self, results, budget: Budget, out) -> list[str]:
        """Markdown sections (tables, figures written into ``out`` via the report helpers,
        claim checks), in order."""
        raise NotImplementedError
