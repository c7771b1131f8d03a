"""The report of a reproduction: results read back from the run directories, tables of mean ± std
over seeds beside the paper's numbers, figures, the exact configs, the budget, the command and date.

Layout of a report directory::

    README.md        the report (what the command produced; the reading, written by people
                     after a run at this budget, is included from reproduce/readings/<name>.md)
    results.csv      one row per run: its labels, seed and final metrics
    configs/         the resolved config of every setting (first seed; the file says which
                     keys the other seeds change)
    *.png            the figures
    records/         one record per finished run (:mod:`fedpd.reproduce.records`): its config,
                     metrics history and provenance; the report is rebuilt from these alone
    runs/            the run directories (metrics, configs, checkpoints); a cache, not committed

Every file is written atomically (:mod:`fedpd.io`).
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import tomli_w

from fedpd.config import load_config
from fedpd.io import atomic_write_bytes, atomic_write_text, read_jsonl
from fedpd.reproduce.spec import RunSpec
from fedpd.results.stats import t_cdf2, t_quantile  # noqa: F401  (the intervals' quantiles, shared with fedpd compare)

# --- results -------------------------------------------------------------------------------------


@dataclass
class Run:
    """One run's metrics history (``records``: one dict per evaluation); ``trajectory_file``: the
    model after every round, for traced runs."""

    spec: RunSpec
    records: list[dict]
    path: Path | None = None
    trajectory_file: Path | None = None

    @property
    def labels(self) -> dict:
        return self.spec.labels

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def last(self) -> dict:
        return self.records[-1] if self.records else {}

    def final(self, key: str):
        v = self.last.get(key)
        return v if _finite(v) else None

    def series(self, key: str, x: str = "round") -> tuple[list, list]:
        pts = [(r[x], r[key]) for r in self.records if x in r and _finite(r.get(key))]
        return ([p[0] for p in pts], [p[1] for p in pts]) if pts else ([], [])

    def first_reach(self, key: str, target: float, x: str = "comm_rounds"):
        """The first ``x`` at which ``key`` <= ``target`` (None: never)."""
        for r in self.records:
            v = r.get(key)
            if _finite(v) and v <= target:
                return r.get(x)
        return None

    def trajectory(self):
        import torch

        path = self.trajectory_file or (self.path / "trajectory.pt" if self.path else None)
        if path is None:
            raise FileNotFoundError(f"run {self.spec.key}: no trajectory recorded")
        return torch.load(path, map_location="cpu", weights_only=True)


class Results:
    """Every run of a reproduction with its metrics; select by labels."""

    def __init__(self, runs: Sequence[Run]):
        self.runs = list(runs)

    @classmethod
    def from_dirs(cls, specs: Sequence[RunSpec], runs_dir: Path) -> "Results":
        """The runs' metrics read from their run directories ``runs_dir/<key>/metrics.jsonl``."""
        return cls([Run(s, read_jsonl(runs_dir / s.key / "metrics.jsonl"), runs_dir / s.key) for s in specs])

    def select(self, **labels) -> list[Run]:
        return [r for r in self.runs if all(r.labels.get(k) == v for k, v in labels.items())]

    def one(self, **labels) -> list[Run]:
        """The runs (over seeds) of exactly one group matching ``labels``."""
        runs = self.select(**labels)
        groups = {r.spec.group for r in runs}
        if len(groups) > 1:
            raise ValueError(f"labels {labels} match several groups: {sorted(groups)}")
        return runs

    def values(self, key: str, **labels) -> list[float]:
        return [v for v in (r.final(key) for r in self.select(**labels)) if v is not None]


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# --- numbers ---------------------------------------------------------------------------------------


def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """(mean, sample standard deviation (n − 1), n) of the finite values; std 0 for one value."""
    vs = [float(v) for v in values if _finite(v)]
    if not vs:
        return math.nan, math.nan, 0
    return statistics.fmean(vs), (statistics.stdev(vs) if len(vs) > 1 else 0.0), len(vs)


def seeds_of(runs: Iterable[Run]) -> str:
    """How many seeds the runs of each group have, for a table's caption: "3 seeds" (or "2–3 seeds
    per cell" when some runs are missing)."""
    counts: dict[str, int] = {}
    for r in runs:  # a group none of whose runs is recorded yet counts as 0
        counts[r.spec.group] = counts.get(r.spec.group, 0) + bool(r.records)
    if not any(counts.values()):
        return "no runs"
    lo, hi = min(counts.values()), max(counts.values())
    return f"n = {hi} seed{'s' * (hi != 1)}" if lo == hi else f"n = {lo}–{hi} seeds per cell"


# --- paired comparisons ----------------------------------------------------------------------------

#: the confidence of a verdict: a claim holds / fails only when the 95 % interval of the mean
#: paired difference excludes 0 (several comparisons: simultaneous intervals, :func:`all_of`)
LEVEL = 0.95


def fmt_level(level: float) -> str:
    """A confidence level as a percentage: 0.95 → "95", 0.98333 → "98.33"."""
    return f"{100 * level:.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Paired:
    """The per-seed differences A − B of one quantity between two settings run on the same seeds (a
    seed fixes the data, the split and the initial model, so the pairs share them)."""

    diffs: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.diffs) if self.diffs else math.nan

    @property
    def se(self) -> float:
        """Standard error of the mean difference, sd (n − 1) / √n; nan below 2 pairs or when a
        difference is infinite (a diverged run)."""
        if self.n < 2 or not all(math.isfinite(d) for d in self.diffs):
            return math.nan
        return statistics.stdev(self.diffs) / math.sqrt(self.n)

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        """The paired t-interval mean ± t_{(1 + level)/2, n − 1} · SE; (nan, nan) below 2 pairs or
        with an infinite difference."""
        if math.isnan(self.se):
            return math.nan, math.nan
        half = t_quantile((1 + level) / 2, self.n - 1) * self.se
        return self.mean - half, self.mean + half

    def verdict(self, higher: bool = True, level: float = LEVEL) -> bool | None:
        """Whether "A > B" (``higher``; else "A < B") holds (True), fails (False) or is inconclusive
        (None) by the paired t-interval at ``level`` with n − 1 degrees of freedom: decided only
        when the interval excludes 0 (so never below 2 pairs); with an infinite difference (a
        diverged run) only when every pair points the same way."""
        if self.n < 2 or any(math.isnan(d) for d in self.diffs):
            return None
        sign = 1.0 if higher else -1.0
        if not all(math.isfinite(d) for d in self.diffs):
            if all(sign * d > 0 for d in self.diffs):
                return True
            if all(sign * d < 0 for d in self.diffs):
                return False
            return None
        lo, hi = self.interval(level)
        if (lo > 0) if higher else (hi < 0):
            return True
        if (hi < 0) if higher else (lo > 0):
            return False
        return None

    def text(self, style: str = "g", level: float = LEVEL) -> str:
        """"+1.2, 95 % CI [0.3, 2.1], n = 3": the mean difference and its t-interval."""
        if not self.n:
            return "no pairs"
        mean = self.mean
        m = f"{mean:+}" if math.isinf(mean) else fmt_num(mean, style)  # ±inf: a diverged run
        m = m if m.startswith(("-", "+", "—")) else "+" + m
        lo, hi = self.interval(level)
        if math.isnan(lo):
            why = "one seed" if self.n == 1 else "a diverged run"
            return f"{m}, no interval ({why}), n = {self.n}"
        return f"{m}, {fmt_level(level)} % CI [{fmt_num(lo, style)}, {fmt_num(hi, style)}], n = {self.n}"


def by_seed(runs: Iterable[Run], value) -> dict[int, float]:
    """{seed: value(run)} of the runs whose value is not None."""
    out = {}
    for r in runs:
        v = value(r)
        if v is not None:
            out[r.seed] = float(v)
    return out


def paired(a: dict[int, float], b: dict[int, float]) -> Paired:
    """The differences a[s] − b[s] over the seeds both have."""
    return Paired(tuple(a[s] - b[s] for s in sorted(set(a) & set(b))))


@dataclass(frozen=True)
class Comparison:
    """One paired test of "A is better than B" (``higher``: larger is better), beyond ``margin``:
    "A − B > margin" (``higher``) or "A − B < margin"; ``name`` ("A − B") and ``style`` for the text."""

    name: str
    diff: Paired
    higher: bool = True
    style: str = "g"
    margin: float = 0.0

    def verdict(self, level: float = LEVEL) -> bool | None:
        return Paired(tuple(d - self.margin for d in self.diff.diffs)).verdict(self.higher, level)

    def text(self, level: float = LEVEL) -> str:
        """"A − B = +1.2, 95 % CI [0.3, 2.1], n = 3" (and the margin the interval must clear)."""
        need = f" ({'>' if self.higher else '<'} {fmt_num(self.margin, self.style)} claimed)" if self.margin else ""
        return f"{self.name} = {self.diff.text(self.style, level)}{need}"

    def where(self, prefix: str) -> "Comparison":
        """The same comparison named "prefix: A − B" (the column, the data set, ...)."""
        return Comparison(f"{prefix}: {self.name}", self.diff, self.higher, self.style, self.margin)

    def check(self) -> tuple[bool | None, str]:
        """(verdict, text) at 95 %: a claim that is this one comparison."""
        return self.verdict(), self.text()


def compare(name_a: str, a: dict[int, float], name_b: str, b: dict[int, float], higher: bool = True,
            style: str = "g", margin: float = 0.0) -> Comparison:
    """The paired test of "A is better than B" (``higher``: larger is better) on the seeds both have:
    verdict and text "A − B = +1.2, 95 % CI [0.3, 2.1], n = 3" via :meth:`Comparison.check` or, for a
    claim of several comparisons, :func:`all_of`."""
    return Comparison(f"{name_a} − {name_b}", paired(a, b), higher, style, margin)


def family_level(m: int, level: float = LEVEL) -> float:
    """Bonferroni: the level of each of ``m`` intervals that hold simultaneously with ``level``."""
    return 1 - (1 - level) / max(m, 1)


def all_of(parts: Sequence, sep: str = "; ", text=None) -> tuple[bool | None, str]:
    """A conjunction "every part holds", its parts :class:`Comparison` s (or fixed threshold checks
    ``(verdict, text)``).

    Multiple comparisons, Bonferroni: each of the m comparisons is judged by its interval at level
    1 − 0.05/m (98.33 % for m = 3), so the m intervals cover their true differences simultaneously
    with probability ≥ 95 % and every verdict read from them is wrong with probability ≤ 5 %. The
    claim **holds** when every part holds at that level and **fails** when any part fails at that
    level (its interval lies wholly on the other side: that part of the claim is refuted, so the
    conjunction is); otherwise it is inconclusive. ("holds" alone would not need the correction —
    an intersection-union test may test each part at 95 % — but "fails" does, and one set of
    simultaneous intervals serves both.) A threshold check counts in the conjunction, not in m.
    ``text(level)``: the claim's own text at the corrected level (default: the parts' texts joined);
    the rule and m are appended."""
    if not parts:
        return None, "nothing to compare at this budget"
    m = sum(isinstance(p, Comparison) for p in parts)
    level = family_level(m)
    verdicts = [p.verdict(level) if isinstance(p, Comparison) else p[0] for p in parts]
    holds = False if False in verdicts else (True if all(v is True for v in verdicts) else None)
    if text:
        body = text(level)
    else:  # in an undecided claim, the parts that are decided say so (e.g. one split holds, another unrecorded)
        marks = ["" if holds is not None or not isinstance(p, Comparison) or v is None else
                 f" ({'holds' if v else 'fails'})" for p, v in zip(parts, verdicts)]
        body = sep.join((p.text(level) if isinstance(p, Comparison) else p[1]) + mark for p, mark in zip(parts, marks))
    if m > 1:
        body += f" (Bonferroni over {m} comparisons: each {fmt_level(level)} % interval)"
    return holds, body


def any_of(parts: Sequence[Comparison], level: float) -> bool | None:
    """A disjunction "some part holds", each part judged at ``level`` (the caller's Bonferroni level
    over every comparison of its claim): True when one part holds, False when every part fails,
    otherwise (and with no part) None."""
    verdicts = [p.verdict(level) for p in parts]
    if True in verdicts:
        return True
    return False if verdicts and all(v is False for v in verdicts) else None


def some_of(parts: Sequence[Comparison]) -> bool | None:
    """An existence claim "some part holds" (at some point of a sweep, on some data set): True when
    one part holds at the Bonferroni level 1 − 0.05/m of its m parts (confirming one of m needs the
    correction: the best of m intervals at 95 % clears 0 by chance far more often than 5 % of the
    time); False when every part fails at 95 % (refuting it needs every part refuted, an
    intersection–union test: each part at 95 % keeps a wrong "fails" at 5 % or less, with no
    correction); otherwise (and with no part) None."""
    if not parts:
        return None
    if any(p.verdict(family_level(len(parts))) is True for p in parts):
        return True
    return False if all(p.verdict() is False for p in parts) else None


def equivalence(diff: Paired, edge: float, level: float = LEVEL) -> bool | None:
    """"A and B are alike": the paired differences' t-interval at ``level`` lies inside (−edge, edge)
    (True), wholly outside it (False), or across one of its ends (None; also below 2 pairs) — an
    equivalence test, the verdict of "comparable" or "similar" claims."""
    lo, hi = diff.interval(level)
    if math.isnan(lo):
        return None
    if -edge < lo and hi < edge:
        return True
    return False if lo >= edge or hi <= -edge else None


def fmt_num(v, style: str = "g") -> str:
    """A number as the tables print it: style "pct" (0.912 → 91.2), "e" (1.2e-05), "g", "int"."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if style == "pct":
        return f"{100 * v:.1f}"
    if style == "e":
        return f"{v:.1e}"
    if style == "int":
        return f"{v:.0f}"
    if style.startswith("."):
        return f"{v:{style}}"
    return f"{v:.3g}"


def fmt_ms(values: Iterable, style: str = "g", expected: int | None = None) -> str:
    """"mean ± std" over seeds (std of n − 1), "—" if no value; "(k/n)" when only k of the
    ``expected`` seeds have a value (e.g. the others never reached a target)."""
    values = list(values)
    m, s, n = mean_std(values)
    if n == 0:
        return "—"
    text = fmt_num(m, style) if n == 1 else f"{fmt_num(m, style)} ± {fmt_num(s, style)}"
    if expected is not None and n < expected:
        text += f" ({n}/{expected})"
    return text


def md_table(header: Sequence[str], rows: Iterable[Sequence]) -> str:
    """A markdown table; a "|" inside a cell is escaped."""
    cell = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- figures ---------------------------------------------------------------------------------------


def figure(rows: int = 1, cols: int = 1, size: tuple[float, float] | None = None):
    """A matplotlib Figure (no pyplot state) and its axes, small enough for a repository."""
    try:
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - matplotlib is in the test extras
        from fedpd.errors import ConfigError

        raise ConfigError("reports need matplotlib: pip install 'fedpd[plot]'") from None
    fig = Figure(figsize=size or (5.2 * cols, 3.6 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def save_figure(fig, path: Path, rect=None) -> str:
    """The figure as a PNG at ``path`` (atomic); returns its file name for the markdown. ``rect``:
    the part of the figure the axes may fill (room for a figure legend)."""
    buf = io.BytesIO()
    fig.tight_layout(rect=rect)
    fig.savefig(buf, format="png", dpi=90)
    atomic_write_bytes(path, buf.getvalue())
    return path.name


def band(ax, runs: Sequence[Run], key: str, x: str = "round", label: str = "", log: bool = False, **style) -> None:
    """The seeds' mean curve of ``key`` against ``x`` (geometric mean when ``log``) and their
    min–max band; seeds are aligned on the x values they share."""
    series = [r.series(key, x) for r in runs]
    series = [s for s in series if s[0]]
    if not series:
        return
    common = sorted(set(series[0][0]).intersection(*(set(s[0]) for s in series[1:])))
    if not common:
        return
    table = [[dict(zip(*s))[xv] for xv in common] for s in series]
    cols = list(zip(*table))
    if log:
        cols = [[max(v, 1e-300) for v in c] for c in cols]
        mid = [math.exp(statistics.fmean(math.log(v) for v in c)) for c in cols]
    else:
        mid = [statistics.fmean(c) for c in cols]
    line, = ax.plot(common, mid, label=label, **style)
    if len(series) > 1:
        ax.fill_between(common, [min(c) for c in cols], [max(c) for c in cols], color=line.get_color(), alpha=0.15,
                        linewidth=0)


# --- the report directory -----------------------------------------------------------------------


def write_configs(specs: Sequence[RunSpec], folder: Path) -> int:
    """configs/<group>.toml: the resolved config of each group's first seed, with a header saying
    what the other seeds change (checked: nothing else differs); returns the number of files."""
    groups: dict[str, list[RunSpec]] = {}
    for s in specs:
        groups.setdefault(s.group, []).append(s)
    for group, members in groups.items():
        resolved = [load_config(m.config).resolved() for m in members]
        first = resolved[0]
        changed = sorted({f"{sec}.{k}" for r in resolved[1:] for sec in r for k in r[sec]
                          if r[sec].get(k) != first.get(sec, {}).get(k)})
        head = [f"# run {members[0].key} of this reproduction (resolved: every default filled in)"]
        if len(members) > 1:
            head.append(f"# seeds {', '.join(str(m.seed) for m in members)}: the other seeds' runs differ only in "
                        f"{', '.join(changed) or 'nothing'} (= the seed)")
            for m, r in zip(members[1:], resolved[1:]):
                for key in changed:
                    sec, _, k = key.partition(".")
                    if r[sec].get(k) != m.seed:
                        raise ValueError(f"{m.key}: {key} differs from the first seed by more than the seed")
        path = folder / f"{group}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "\n".join(head) + "\n" + tomli_w.dumps(first))
    return len(groups)


RESULT_KEYS = ("round", "comm_rounds", "uplink_floats", "train_loss", "grad_norm_sq", "test_loss", "test_acc",
               "personal_acc", "personal_acc_worst10", "personal_mse", "personal_mse_worst10", "backdoor_acc",
               "sample_grads", "wall_s")
#: columns results.csv has only when some run's records hold them (a report without them is unchanged)
OPTIONAL_RESULT_KEYS = ("sim_time_s",)


def write_results_csv(results: Results, path: Path, commits: dict[str, str] | None = None) -> None:
    """One row per run: its labels, seed, final metrics and (``commits``) the fedpd commit that ran it
    (empty when not known; no row values for a run not recorded yet)."""
    label_keys: list[str] = []
    for r in results.runs:
        label_keys += [k for k in r.labels if k not in label_keys]
    keys = RESULT_KEYS + tuple(k for k in OPTIONAL_RESULT_KEYS if any(k in r.last for r in results.runs))
    if set(label_keys) & {"run", "group", "seed", "commit", *RESULT_KEYS, *OPTIONAL_RESULT_KEYS}:
        raise ValueError(f"run labels {label_keys} reuse a results.csv column name")
    commits = commits or {}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["run", "group", "seed", *label_keys, *keys, "commit"])
    for r in results.runs:
        w.writerow([r.spec.key, r.spec.group, r.spec.seed, *(r.labels.get(k, "") for k in label_keys),
                    *(_csv(r.last.get(k)) for k in keys), commits.get(r.spec.key, "")])
    atomic_write_text(path, buf.getvalue())


def _csv(v) -> str:
    if v is None:
        return ""
    return repr(v) if isinstance(v, float) else str(v)


def machine_text(m: dict) -> str:
    """A record's machine in a few words: "2 cores (Intel Xeon ...), 1 thread, cpu"."""
    if not m:
        return "unknown"
    threads = m.get("threads")
    text = (
        f"{m.get('cores', '?')} cores ({m.get('cpu', '?')}), {threads} thread{'s' * (threads != 1)}, {m.get('device')}"
    )
    return text + (f" ({m['gpu']})" if m.get("gpu") else "")


def provenance_table(records: Sequence) -> str:
    """Who made the records: one row per (command, fedpd commit, machine) with the runs it recorded,
    when they finished and the compute they took. A record written later from a run directory an
    earlier invocation completed (``adopted``) says so."""
    groups: dict[tuple, list] = {}
    for rec in records:
        p = rec.provenance
        key = (p.get("command", ""), p.get("commit", ""), machine_text(p.get("machine") or {}), bool(p.get("adopted")))
        groups.setdefault(key, []).append(p)
    rows = []
    for (command, commit, machine, adopted), ps in sorted(groups.items(), key=lambda kv: min(p.get("finished", "")
                                                                                            for p in kv[1])):
        done = sorted(p.get("finished", "") for p in ps)
        when = done[0][:16] if done[0][:16] == done[-1][:16] else f"{done[0][:16]} – {done[-1][:16]}"
        rows.append([f"`{command}`" + (" (recorded afterwards from its run directories)" if adopted else ""),
                     commit if not uncommitted({"commit": commit}) or UNCOMMITTED in commit else "unknown", machine,
                     len(ps), when,
                     f"{sum(float(p.get('compute_s') or 0) for p in ps) / 3600:.2f}"])
    return md_table(["command", "fedpd commit", "machine", "runs", "finished (UTC)", "core-hours"], rows)


#: the verdict of a claim these runs cannot test as the experiment is set up (its row says why): the
#: runs measure another quantity than the paper's sentence, or only part of what it averages over
NOT_TESTABLE = "not testable"
VERDICTS = {True: "holds", False: "**fails**", None: "inconclusive at this budget",
            NOT_TESTABLE: "not testable as set up"}


def claims_section(claims, results: Results, own: bool = False) -> str:
    """The paper's statements and whether they hold on these runs (checked by code, not by hand).
    A paired claim (``Claim.paired``) is decided on the per-seed differences (:class:`Paired`):
    "holds" / "fails" only when their 95 % t-interval (n − 1 degrees of freedom; Bonferroni over a
    claim's m comparisons, :func:`all_of`) excludes 0; any other claim is a threshold check on the
    seeds' means, marked as such; a check may answer :data:`NOT_TESTABLE` with the reason.
    ``own``: the project's own checks (readings the paper does not make), in a table of their own
    so that the paper's table holds only the paper's claims."""
    rows, unpaired = [], False
    for c in claims:
        try:
            holds, measured = c.check(results)
        except Exception as err:  # a check that cannot be evaluated at this budget says so
            holds, measured = None, f"not evaluated ({type(err).__name__}: {err})"
        verdict = VERDICTS[holds]
        if not c.paired and holds != NOT_TESTABLE:
            unpaired = True
            verdict = {True: "holds †", False: "**fails** †", None: "cannot tell †"}[holds]
        rows.append([c.text, c.where, measured, verdict])
    if own:
        text = ("## The project's own checks\n\nNot the paper's claims: readings the project adds (the row says "
                "which of the paper's statements each reads, and on what), decided by the same rules as the "
                "paper's claims above.\n\n")
        return text + md_table(["check (the project's)", "reads", "measured here", "verdict"], rows) + (
            "\n\n†: a threshold check on the seeds' means, not a paired test over seeds." if unpaired else "")
    text = ("## The paper's claims, checked on these runs\n\nEach claim that compares settings is checked on the "
            "paired per-seed differences (a seed fixes the data, the split and the initial model, shared by every "
            "setting): their mean and its 95 % confidence interval, mean ± t · sd / √n with t the 97.5 % quantile of "
            "Student's t with n − 1 degrees of freedom (n seeds). It holds or fails only when the interval excludes "
            "0, on the claimed or the opposite side; otherwise it is inconclusive at this budget (always so with one "
            "seed). A claim made of m comparisons (every split, every data set) uses Bonferroni's simultaneous "
            "intervals, each at level 1 − 0.05/m: it holds when every part holds and fails when any part fails at "
            "that level.\n\n")
    text += md_table(["claim (the paper)", "where", "measured here", "verdict"], rows)
    if unpaired:
        text += ("\n\n†: a threshold check on the seeds' means (as described in its row), not a paired test over "
                 "seeds.")
    if any(row[-1] == VERDICTS[NOT_TESTABLE] for row in rows):
        text += ("\n\nNot testable as set up: these runs measure another quantity than the claim's, or only part of "
                 "what it averages over (the row says why); no verdict is read from them.")
    return text


#: how a record's commit says that fedpd's code had uncommitted changes when it ran
UNCOMMITTED = "(with uncommitted changes)"


def _git(package: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(package), *args], capture_output=True, text=True, timeout=10)


def _code_paths(package: Path, top: str) -> list[str]:
    """fedpd's code in the checkout at ``top``: the package folder and the checkout's pyproject.toml."""
    return [str(package)] + [str(Path(top) / "pyproject.toml")] * (Path(top) / "pyproject.toml").is_file()


def git_commit(package: Path) -> str:
    """The commit of the git checkout that holds fedpd's ``package`` folder ("" outside one), followed
    by :data:`UNCOMMITTED` when fedpd's code differs from that commit: a file of the package or the
    checkout's pyproject.toml modified or staged, or a file in the package that git does not track
    and does not ignore. Only the code counts — a report folder's records and README written by an
    earlier invocation are not the code that runs — so the mark says exactly that the commit does
    not name what ran."""
    try:
        sha = _git(package, "rev-parse", "--short", "HEAD").stdout.strip()
        top = _git(package, "rev-parse", "--show-toplevel").stdout.strip()
        if not sha or not top:
            return ""
        dirty = _git(package, "status", "--porcelain", "--untracked-files=all", "--", *_code_paths(package, top))
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{sha} {UNCOMMITTED}" if dirty.stdout.strip() else sha


def same_code(package: Path, commit: str) -> bool:
    """Whether fedpd's code in the checkout is now exactly that of ``commit`` (a clean commit as
    :func:`git_commit` names it): no file of the package or pyproject.toml differs from it — changed
    in the working tree, staged or committed since — and none is untracked. A commit of records or
    a report alone keeps the code the same, so runs that finish after it still name ``commit``."""
    try:
        top = _git(package, "rev-parse", "--show-toplevel").stdout.strip()
        if not top or not commit or UNCOMMITTED in commit:
            return False
        paths = _code_paths(package, top)
        diff = _git(package, "diff", "--quiet", commit, "--", *paths)  # the working tree against the commit
        untracked = _git(package, "ls-files", "--others", "--exclude-standard", "--", *paths)
    except (OSError, subprocess.SubprocessError):
        return False
    return diff.returncode == 0 and untracked.returncode == 0 and not untracked.stdout.strip()


def uncommitted(provenance: dict) -> bool:
    """Whether a record names no committed code: made with uncommitted changes to fedpd's code
    (:func:`git_commit`'s mark), or naming no commit at all — empty, "unknown", anything but a
    commit's hash (a record written afterwards from a run directory whose invocation left no
    commit, or made outside a git checkout)."""
    return not re.fullmatch(r"[0-9a-f]{7,40}", str(provenance.get("commit") or ""))


def uncommitted_note(records: Sequence, name: str) -> str:
    """The report's plain statement, in bold, of how many of its ``records`` name no committed code
    ("" when every one does): those made with uncommitted changes and those that name no commit."""
    dirty = sum(UNCOMMITTED in str(r.provenance.get("commit", "")) for r in records)
    unknown = sum(uncommitted(r.provenance) for r in records) - dirty
    if not dirty and not unknown:
        return ""
    said = []
    if dirty:
        said.append(f"**{dirty} of the {len(records)} records were made with uncommitted changes to fedpd's code** "
                    f"(their commit is marked \"{UNCOMMITTED}\" above)")
    if unknown:
        said.append(f"**{unknown} of the {len(records)} records name no commit** (\"unknown\" above: written "
                    "afterwards from a run directory whose invocation left no commit, or made outside a git checkout)")
    why = ("the code that ran them is not in the repository's history, so they name no committed code — only the "
           "commit those changes were made on" if not unknown else
           "the code that ran them is not in the repository's history or not known, so they name no committed code")
    return (f"{'; '.join(said)}: {why}. `fedpd reproduce {name} --verify K --out <this folder>` re-runs K records "
            "with today's code and says whether it still computes what they hold.")
