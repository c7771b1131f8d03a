"""``fedpd sweep``: independent runs — configs × grid points × seeds — in parallel processes, one
progress display, and the value of the grid each config does best with.

Every run is an ordinary run directory, ``<out>/<config name>/s<seed>/`` (with ``--grid``:
``<out>/<config name>/<key=value>/.../s<seed>/``; ``fedpd compare``, ``fedpd plot`` read it),
written by :func:`fedpd.run` in a worker process with one CPU thread, so ``--jobs`` processes use
that many cores — or, with ``--ray``, as a task on a Ray cluster whose
files come back here (:mod:`fedpd.reproduce.cluster`). Execution is the reproductions' (:mod:`fedpd.reproduce.
execute`): every config is checked before anything runs, complete runs are skipped, interrupted
ones resume from their checkpoint, a failed run does not stop the others. So a sweep that was
stopped continues when the same command is run again.

A seed sets ``run.seed`` (sampling, clients' minibatches and augmentation, attacks, FedPD's
coin); the data, the split and the initial model keep ``problem.seed`` unless ``--vary`` names it
too (``--vary run.seed,problem.seed``: each seed its own data and initial model as well).

A grid (``--grid solver.lr=0.1,0.03``, repeatable: the product) varies keys a config takes; a config
that does not take a key is run without varying it, and says so. :class:`Selection` states how the
value is chosen per config: the mean of a named metric over each run's last k evaluations, maximised
or minimised, averaged over the seeds; the first value of the grid wins a tie. fedpd has no
validation split, so a rule on ``test_acc`` tunes on the test data (optimistic); one on a training
metric (``train_loss``) does not.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path

from fedpd import plugins
from fedpd.checks import FedpdNotice
from fedpd.config import apply_overrides, load_config, load_toml, parse_value
from fedpd.errors import ConfigError
from fedpd.options import SEED_MAX
from fedpd.reproduce.execute import default_jobs, plan, run_jobs
from fedpd.reproduce.spec import RunSpec
from fedpd.results.runs import LOWER_IS_BETTER, Run, is_seed, read_run, short_keys
from fedpd.results.stats import Summary, summarise


def parse_seeds(text: str) -> list[int]:
    """``"1,2,5"`` or ``"1-4"`` (or both, comma-separated) as a list of distinct seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m[2] is not None and int(m[2]) < int(m[1])):
            raise ConfigError(f"--seeds {text!r}: expected seeds like 1,2,3 or 1-4 (non-negative integers)")
        seeds.extend(range(int(m[1]), int(m[2] or m[1]) + 1))
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: a seed appears twice")
    if max(seeds) > SEED_MAX:
        raise ConfigError(f"--seeds {text!r}: {max(seeds)} is too large (allowed: 0..{SEED_MAX})")
    return seeds


def _names(configs: list[Path]) -> list[str]:
    """A run-directory name per config: its file name without .toml, or its path if two share one."""
    stems = [c.stem for c in configs]
    if len(set(stems)) == len(stems):
        return stems
    return [str(c.with_suffix("")).strip("/").replace("/", "_") for c in configs]


#: what a grid value may be: it names a directory (numbers, true / false, bare names)
_VALUE = re.compile(r"[A-Za-z0-9_.+-]+")


def parse_grid(items: list[str] | tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """``--grid SECTION.KEY=V1,V2,...`` items as (key, [value as typed]), in the order given."""
    grid: list[tuple[str, list[str]]] = []
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or "." not in key or not text.strip():
            raise ConfigError(f"--grid {item!r}: expected SECTION.KEY=V1,V2,... (e.g. --grid solver.lr=0.1,0.03)")
        if is_seed(key):
            raise ConfigError(f"--grid {key}: a seed is varied by --seeds (and --vary {key}), not by --grid")
        if key in (k for k, _ in grid):
            raise ConfigError(f"--grid {key}: given twice (allowed: one --grid per key, its values comma-separated)")
        values = [v.strip() for v in text.split(",")]
        bad = [v for v in values if not _VALUE.fullmatch(v)]
        if bad:
            raise ConfigError(f"--grid {key}: value {bad[0]!r} (allowed: numbers, true, false or bare names — "
                              f"letters, digits, _ . + - — separated by commas)")
        parsed = [repr(parse_value(v)) for v in values]
        if len(set(parsed)) != len(parsed):
            raise ConfigError(f"--grid {key}: a value appears twice ({text.strip()})")
        grid.append((key, values))
    return grid


def parse_vary(items: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``--vary`` items (comma-separated or repeated): the seed keys each ``--seeds`` value sets;
    default ``run.seed``."""
    keys = [k.strip() for item in items or () for k in item.split(",") if k.strip()]
    for key in keys:
        if "." not in key or not is_seed(key):
            raise ConfigError(f"--vary {key}: not a seed key (allowed: run.seed, problem.seed, attack.seed, ...: "
                              f"SECTION.seed)")
    if len(set(keys)) != len(keys):
        raise ConfigError(f"--vary: a key appears twice ({', '.join(keys)})")
    return tuple(keys) or ("run.seed",)


def _unknown_key(err: ConfigError, key: str) -> bool:
    return str(err).startswith(f"{key}: unknown key")


def _grid_of(raw: dict, grid: list[tuple[str, list[str]]]) -> tuple[list[tuple[str, list[str]]], dict[str, str]]:
    """The part of ``grid`` the config ``raw`` takes, and why it does not take the others (their keys'
    errors). Any other error is the config's own: :func:`fedpd.reproduce.execute.plan` names it with its run."""
    taken, refused = [], {}
    for key, values in grid:
        try:
            load_config(apply_overrides(raw, [f"{key}={values[0]}"]))
        except ConfigError as err:
            if _unknown_key(err, key):
                refused[key] = str(err)
                continue
        taken.append((key, values))
    return taken, refused


def specs(configs: list[str | Path], seeds: list[int] | None = None, overrides: list[str] = (),
          grid: list[tuple[str, list[str]]] = (), vary: tuple[str, ...] = ("run.seed",)) -> list[RunSpec]:
    """One :class:`RunSpec` per config, point of ``grid`` (:func:`parse_grid`; each config the keys
    it takes) and seed — the config's own ``run.seed`` when ``seeds`` is None; a seed sets every
    key of ``vary``. Keys ``<config>[/<key=value>...]/s<seed>``, groups without the seed."""
    paths = [Path(c) for c in configs]
    if len(set(map(Path.resolve, paths))) != len(paths):
        raise ConfigError("fedpd sweep: a config is given twice")
    if seeds is None and tuple(vary) != ("run.seed",):
        raise ConfigError(f"--vary {','.join(vary)}: needs --seeds (the values the seed keys take)")
    grid = list(grid)
    set_keys = {str(o).partition("=")[0].strip() for o in overrides}
    both = [k for k, _ in grid if k in set_keys]
    if both:
        raise ConfigError(f"--grid {both[0]}: also given by --set or --unset (allowed: one of them)")
    short = short_keys([k for k, _ in grid])
    out, taken_anywhere, skipped = [], set(), []
    for path, name in zip(paths, _names(paths)):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.=+-]*", name):
            raise ConfigError(
                f"config {str(path)!r}: its name makes no directory name (letters, digits, _ . = + - only)"
            )
        raw = apply_overrides(load_toml(path), list(overrides))
        plugins.search(plugins.default_path(path))  # its plug-ins, for this process and the workers it spawns
        if seeds is None:
            try:
                own = [load_config(raw).run.seed]
            except ConfigError as err:
                raise ConfigError(f"config {str(path)!r}: {err}") from None
        mine, refused = _grid_of(raw, grid)
        taken_anywhere.update(k for k, _ in mine)
        skipped += [(key, path.name, why) for key, why in refused.items()]
        for point in itertools.product(*[[(k, v) for v in values] for k, values in mine]):
            group = "/".join([name, *(f"{short[k]}={v}" for k, v in point)])
            at = apply_overrides(raw, [f"{k}={v}" for k, v in point])
            for seed in seeds if seeds is not None else own:
                cfg = apply_overrides(at, [f"{k}={seed}" for k in vary])
                out.append(RunSpec(key=f"{group}/s{seed}", group=group, seed=seed, config=cfg,
                                   labels={"config": name, **dict(point)}))
    for key, config, why in skipped:
        if key not in taken_anywhere:
            raise ConfigError(f"--grid {key}: no config takes it ({config}: {why})")
    for key, config, why in skipped:
        warnings.warn(f"--grid {key}: {config} does not take it ({why}); its runs do not vary it", FedpdNotice,
                      stacklevel=2)
    return out


# --- choosing a value of the grid -------------------------------------------------------------------
@dataclass(frozen=True)
class Selection:
    """How a sweep chooses a config's value of the grid: the mean of ``metric`` over each run's last
    ``last`` evaluations (a run whose metric is not finite there scores worst), averaged over the
    seeds, maximised (``maximise``) or minimised."""

    metric: str
    last: int
    maximise: bool

    @property
    def name(self) -> str:
        return f"{self.metric}:last{self.last}"

    def describe(self) -> str:
        return (f"{self.name}: the mean of {self.metric} over each run's last {self.last} evaluation"
                f"{'s' * (self.last != 1)}, {'maximised' if self.maximise else 'minimised'}, averaged over the seeds")

    def score(self, run: Run) -> float | None:
        """The run's score; None when a value of the last evaluations is not finite (it diverged)."""
        values = [r.get(self.metric) for r in run.records if self.metric in r][-self.last:]
        if not values:
            recorded = sorted({k for r in run.records for k in r})
            raise ConfigError(f"--select {self.name}: run {str(run.path)!r} does not record {self.metric!r} "
                              f"(it records: {', '.join(recorded)}); the runs are kept, run the same command "
                              f"with another --select")
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
            return None
        return statistics.fmean(values)


def parse_select(text: str) -> Selection:
    """``METRIC``, ``METRIC:lastK`` (the default K is 1: the final value), each optionally followed
    by ``:max`` or ``:min`` (default: minimised where the metric's name says lower is better —
    loss, grad_norm, error, mse, ... —, else maximised)."""
    parts = [p.strip() for p in text.split(":")]
    metric, rest = parts[0], parts[1:]
    last, direction = 1, None
    if rest and (m := re.fullmatch(r"last(\d+)", rest[0])):
        last, rest = int(m[1]), rest[1:]
    if rest and rest[0] in ("max", "min"):
        direction, rest = rest[0], rest[1:]
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", metric) or rest or last < 1:
        raise ConfigError(f"--select {text!r}: expected METRIC[:lastK][:max|:min], e.g. test_acc:last5 or "
                          f"train_loss:last5:min (K >= 1)")
    maximise = not any(s in metric for s in LOWER_IS_BETTER) if direction is None else direction == "max"
    return Selection(metric, last, maximise)


@dataclass(frozen=True)
class Choice:
    """A config's chosen grid point (its ``key=value`` parts, empty when it varies none), the
    :class:`Summary` of its runs' scores over the seeds, and how many points were compared."""

    config: str
    point: tuple[str, ...]
    summary: Summary
    points: int


def choose(dirs: list[Path], out: str | Path, selection: Selection) -> tuple[list[Choice], dict[Path, float | None]]:
    """Each config's best grid point by ``selection`` (the first of the grid on a tie), and every
    run's score. A run directory ``<out>/<config>/<key=value>.../s<seed>`` says which point it is."""
    scores: dict[Path, float | None] = {}
    by_point: dict[str, dict[tuple[str, ...], list[float | None]]] = {}
    short = 0
    for path in dirs:
        run = read_run(path)
        scores[path] = selection.score(run)
        short += sum(selection.metric in r for r in run.records) < selection.last
        config, *point, _seed = Path(path).relative_to(out).parts
        by_point.setdefault(config, {}).setdefault(tuple(point), []).append(scores[path])
    if short:
        warnings.warn(f"--select {selection.name}: {short} run{'s' * (short != 1)} evaluated {selection.metric} "
                      f"fewer than {selection.last} times; their score is the mean of what they have",
                      FedpdNotice, stacklevel=2)
    sign = 1.0 if selection.maximise else -1.0
    worst = -math.inf

    def rank(values: list[float | None]) -> float:  # a point with a diverged seed ranks last
        return worst if any(v is None for v in values) else sign * statistics.fmean(values)

    choices = []
    for config, points in by_point.items():
        best = max(points, key=lambda p: rank(points[p]))  # max keeps the first of equals: the grid's order
        choices.append(Choice(config, best, summarise(points[best]), len(points)))
    return choices, scores


def selection_measures(selection: Selection, choices: list[Choice], scores: dict[Path, float | None], out: str | Path):
    """The compare table's columns of a selection: each run's ``score`` and whether its point is the
    one ``chosen`` for its config (over a group of seeds: the score's mean, sd and CI)."""
    from fedpd.results.tables import SHORT, Column, Measure

    chosen = {(c.config, c.point) for c in choices}

    def is_chosen(run: Run) -> bool:
        config, *point, _seed = run.path.relative_to(out).parts
        return (config, tuple(point)) in chosen

    header = f"score\n{SHORT.get(selection.metric, selection.metric)} last {selection.last}"
    return [Measure(Column("score", header, True, 1), lambda run: scores.get(run.path), spread=True),
            Measure(Column("chosen", "chosen", False, 1), is_chosen)]


def choice_lines(selection: Selection, choices: list[Choice]) -> list[str]:
    """What was chosen, a line per config: ``fedavg: lr=0.03 (score 0.912 ± 0.004 over 3 seeds; 3 values)``."""
    lines = [f"chosen by {selection.describe()} (the first value of the grid on a tie):"]
    for c in choices:
        s = c.summary
        score = ("diverged on a seed" if s.mean is None else f"{s.mean:.4g}" if s.sd is None
                 else f"{s.mean:.4g} ± {s.sd:.2g}, 95% CI [{s.low:.4g}, {s.high:.4g}]")
        what = ", ".join(c.point) if c.point else "its only setting (no --grid key it takes)"
        lines.append(f"  {c.config}: {what} — score {score} over {s.n} seed{'s' * (s.n != 1)}, "
                     f"best of {c.points} setting{'s' * (c.points != 1)}")
    return lines


def sweep(configs: list[str | Path], out: str | Path, seeds: list[int] | None = None, overrides: list[str] = (),
          jobs: int | None = None, progress: bool = True, keep_checkpoints: bool = True, cluster=None,
          grid: list[tuple[str, list[str]]] = (), vary: tuple[str, ...] = ("run.seed",)) -> list[Path]:
    """Run every config × point of ``grid`` × seed (:func:`specs`) into
    ``out/<config name>/[<key=value>/...]s<seed>``, ``jobs`` at a time (default: the cores this
    process may use) or as tasks on a Ray ``cluster``
    (:class:`fedpd.reproduce.cluster.Cluster`); returns the run directories. Raises one-line errors
    before anything runs (a bad config names its run; a directory holding another config's run is
    refused), and after the runs if any failed (the others are complete and kept)."""
    if jobs is not None and jobs < 1:
        raise ConfigError(f"fedpd sweep: --jobs {jobs} (allowed: 1 or more)")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r}: exists and is not a directory")
    work = plan(specs(configs, seeds, overrides, grid, vary), out)  # every config checked before anything runs
    run_jobs(work, jobs or default_jobs(), progress=progress, keep_checkpoints=keep_checkpoints, title="sweep",
             cluster=cluster)
    return [job.path for job in work]
