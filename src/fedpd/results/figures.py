"""Figures of runs: ``fedpd plot``'s panels (one per metric, one line per run or per group of
seeds, with a ± std band) and the label distribution of a run's split."""

from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedpd.data.partition import label_matrix
from fedpd.errors import ConfigError, reason
from fedpd.io import atomic_write_bytes
from fedpd.results.runs import (X_AXES, Run, expand_runs, finite, group_labels, read_run, run_labels, seed_groups,
                                split_metrics)

if TYPE_CHECKING:  # a plot of metrics reads JSON lines: no torch
    from fedpd.problems.base import ClientSplit

#: axis labels, in words and maths
LABELS = {
    "round": "rounds",
    "comm_rounds": "communication rounds",
    "uplink_floats": "floats uploaded (all clients)",
    "downlink_floats": "floats downloaded (all clients)",
    "sample_grads": "per-sample gradients computed",
    "wall_s": "wall-clock time (s)",
    "sim_time_s": "simulated time (s)",
    "train_loss": r"training loss $f(x)$",
    "grad_norm_sq": r"stationarity gap $\|\nabla f(x)\|^2$",
    "test_loss": "test loss",
    "test_acc": "test accuracy",
    "backdoor_acc": "backdoor accuracy (triggered test inputs classified as the target)",
    "personal_acc": "personal test accuracy (mean over clients)",
    "personal_acc_worst10": "personal test accuracy (worst 10 % of clients)",
    "personal_loss": "personal test loss (mean over clients)",
    "personal_mse": "personal test MSE (mean over clients)",
    "personal_mse_worst10": "personal test MSE (worst 10 % of clients)",
    "primal_residual": r"primal residual $\|x_i - x_0\|^2$ (mean)",
    "dual_drift": "dual drift (mean)",
}
#: metrics drawn on a log axis whatever their range (when every value is positive)
LOG_METRICS = ("grad_norm_sq", "primal_residual", "dual_drift")


def _figure_path(output: str | Path) -> tuple[Path, str]:
    """``-o``'s path and the format its suffix names, checked before anything is drawn."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'fedpd[plot]'") from None
    output = Path(output)
    if output.is_dir():
        raise ConfigError(f"-o {str(output)!r}: is a directory (give a file, e.g. {output / 'plot.png'})")
    if not output.parent.is_dir():
        raise ConfigError(f"-o {str(output)!r}: directory {str(output.parent)!r} does not exist")
    formats = FigureCanvasBase.get_supported_filetypes()
    fmt = output.suffix[1:].lower()
    if fmt not in formats:
        what = f"unknown figure format '.{fmt}'" if fmt else "no suffix to pick the figure format"
        raise ConfigError(f"-o {str(output)!r}: {what} (allowed: {', '.join('.' + f for f in formats)})")
    return output, fmt


def _write_figure(save, output: Path, fmt: str) -> None:
    """``save(buffer)`` saves a figure in matplotlib's default format, here ``fmt``; the bytes
    then go to ``output`` atomically."""
    import matplotlib

    buf = io.BytesIO()
    try:
        with matplotlib.rc_context({"savefig.format": fmt}):
            save(buf)
    except RuntimeError as err:  # e.g. .pgf without a LaTeX installation
        raise ConfigError(f"-o {str(output)!r}: matplotlib cannot write .{fmt} here ({reason(err)})") from None
    atomic_write_bytes(output, buf.getvalue())


@dataclass
class Curve:
    """One line of a plot: a run, or the mean of several seeds of one config (with ``std`` and
    ``lowest``, the lowest member at each point)."""

    label: str
    runs: list[Run]
    x: list = field(default_factory=list)
    y: list = field(default_factory=list)
    std: list | None = None
    lowest: list | None = None


def _curve_points(run: Run, metric: str, x: str) -> list[tuple[float, float, int]]:
    return [(r[x], r[metric], r.get("round", 0)) for r in run.records if finite(r.get(metric)) and x in r]


def _curves(runs: list[Run], metric: str, x: str, labels: list[str] | None, group: bool) -> list[Curve]:
    for run in runs:
        if not _curve_points(run, metric, x):
            have = ", ".join(k for k in run.records[-1] if k not in X_AXES)
            raise ConfigError(f"--metric {metric!r}: run {str(run.path)!r} has no such metric (it has: {have})")
    units = seed_groups(runs, "drawn once") if group else [[r] for r in runs]
    if labels is not None:
        given = {id(r): lab for r, lab in zip(runs, labels)}
        names = [given[id(u[0])] for u in units]
    elif group:
        names = group_labels(units)
    else:
        names = run_labels(runs, skip_seeds=False)
    curves = []
    for members, name in zip(units, names):
        if len(members) == 1:
            xs, ys, _ = zip(*_curve_points(members[0], metric, x))
            curves.append(Curve(name, members, list(xs), list(ys)))
            continue
        per_run = [{rnd: (xv, yv) for xv, yv, rnd in _curve_points(r, metric, x)} for r in members]
        common = sorted(set.intersection(*(set(p) for p in per_run)))
        xs = [float(np.mean([p[rnd][0] for p in per_run])) for rnd in common]
        ys = np.array([[p[rnd][1] for p in per_run] for rnd in common], dtype=float)
        curves.append(
            Curve(
                f"{name} (mean ± std, {len(members)} seeds)",
                members,
                xs,
                ys.mean(1).tolist(),
                ys.std(1).tolist(),
                ys.min(1).tolist(),
            )
        )
    return curves


def use_log_axis(metric: str, values: list[float]) -> bool:
    """The automatic y scale: log for ‖∇f‖², residuals and drifts; linear for accuracies; else
    log when every value is positive and they span more than two decades."""
    positive = [v for v in values if v > 0]
    if not positive:
        return False
    if metric in LOG_METRICS:
        return True
    if "acc" in metric or len(positive) < len(values):
        return False
    return max(positive) / min(positive) > 100


#: characters of a y label's line: a panel's axis (3.9 inches a row) holds about 44 at 10 points
Y_LABEL_CHARS = 40


def axis_label(key: str, width: int | None = None) -> str:
    """The axis label of ``key``; ``width``: broken into lines of at most that many characters
    (a label with maths is kept whole: none of them is that long)."""
    label = LABELS.get(key, key.replace("_", " "))
    return label if width is None or "$" in label else textwrap.fill(label, width)


def plot_runs(paths, metrics, x: str = "round", output: str | Path = "plot.png", labels=None, title=None,
              yscale: str = "auto", group: bool = True, caption: str | None = None) -> Path:
    """One panel per metric of ``metrics`` (a key, ``"a,b"`` or a list), every run a line, written
    to ``output`` (its suffix picks the format). See :func:`runs_figure`."""
    if x not in X_AXES:
        raise ConfigError(f"--x {x!r}: unknown axis (allowed: {', '.join(X_AXES)})")
    output, fmt = _figure_path(output)
    fig = runs_figure(paths, metrics, x, labels=labels, title=title, yscale=yscale, group=group, caption=caption)
    _write_figure(lambda f: fig.savefig(f, dpi=150), output, fmt)
    return output


def runs_figure(paths, metrics, x: str = "round", labels=None, title=None, yscale: str = "auto",
                group: bool = True, caption: str | None = None):
    """The matplotlib Figure of :func:`plot_runs`: one panel per metric, every run a line.

    ``yscale``: "auto" (:func:`use_log_axis`), "log" or "linear". ``group``: runs of one config
    that differ only in seeds become one line, their mean, with a band of ± one standard
    deviation (aligned on rounds; x is the members' mean x). ``labels``: one legend entry per
    path (default: folder names, told apart where they repeat). ``caption``: text under the figure."""
    if x not in X_AXES:
        raise ConfigError(f"--x {x!r}: unknown axis (allowed: {', '.join(X_AXES)})")
    if yscale not in ("auto", "log", "linear"):
        raise ConfigError(f"yscale {yscale!r}: unknown (allowed: auto, log, linear)")
    metrics = split_metrics(metrics)
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'fedpd[plot]'") from None

    runs = [read_run(p) for p in (paths if labels is not None else expand_runs(paths))]
    if labels is not None and len(labels) != len(runs):
        raise ConfigError(f"labels: {len(labels)} given for {len(runs)} runs")
    panels = [_curves(runs, m, x, labels, group) for m in metrics]

    n = len(metrics)
    ncols = n if n <= 3 else 2
    nrows = math.ceil(n / ncols)
    wrapped = textwrap.fill(caption, width=int(95 * ncols ** 0.5)) if caption else ""
    cap_lines = wrapped.count("\n") + 1 if wrapped else 0
    height = 3.9 * nrows + 0.135 * cap_lines
    fig = Figure(figsize=(6.4 if ncols == 1 else 4.8 * ncols, height))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax, metric, curves in zip(axes, metrics, panels):
        values = [v for c in curves for v in c.y]
        log = use_log_axis(metric, values) if yscale == "auto" else yscale == "log"
        if log and not any(v > 0 for v in values):
            raise ConfigError(f"--logy: metric {metric!r} has no positive value to draw on a log axis "
                              f"(allowed: --linear)")
        for curve in curves:
            (line,) = ax.plot(curve.x, curve.y, label=curve.label, linewidth=1.4)
            if curve.std is not None:
                y, s = np.array(curve.y), np.array(curve.std)
                low = y - s
                if log:  # keep the band drawable: its lower edge no lower than the lowest run
                    low = np.maximum(low, np.array(curve.lowest))
                ax.fill_between(curve.x, low, y + s, color=line.get_color(), alpha=0.2, linewidth=0)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel(axis_label(x))
        ax.set_ylabel(axis_label(metric, width=Y_LABEL_CHARS))
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    axes[0].legend(handles, names, fontsize="small" if len(names) > 4 else "medium")
    if title:
        fig.suptitle(title)
    bottom = 0.0
    if wrapped:
        bottom = (0.135 * cap_lines + 0.1) / height
        fig.text(0.01, 0.01, wrapped, ha="left", va="bottom", fontsize=8, wrap=False)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def label_counts(split: ClientSplit, num_classes: int = 0) -> tuple[np.ndarray, list]:
    """Samples of each class per client, [clients, classes], and the label of each column.
    Integer labels are their own column; other labels (e.g. ±1) are numbered in sorted order."""
    import torch

    y = split.y[0:split.y.shape[0]]  # a tensor, also where the samples are generated on demand
    if y.is_floating_point():
        values, column = torch.unique(y, return_inverse=True)
        values = values.tolist()
    else:
        column = y.long()
        values = list(range(max(num_classes, int(column.max()) + 1 if column.numel() else 0)))
    offsets = split.offsets.tolist()
    parts = [np.arange(a, b) for a, b in zip(offsets[:-1], offsets[1:])]
    return label_matrix(column.numpy(), parts, len(values)), values


def class_names(problem, values: list) -> list[str]:
    """A name for each column of :func:`label_counts`: the dataset's class names where it has
    them, else the label itself (``+1`` / ``-1`` for ±1 labels)."""
    from fedpd.data.cli import known_class_names

    names = problem.info.get("classes") or known_class_names(problem.info.get("dataset") or "")
    if names and len(names) == len(values):
        return [str(n) for n in names]
    return [f"{v:+g}" if isinstance(v, float) else str(v) for v in values]


def plot_split(path: str | Path, output: str | Path = "split.png") -> Path:
    """Heatmap of the label distribution (clients × classes) of a run's training split, rebuilt
    from the run's ``config.toml`` (the same problem, partition and seed)."""
    from fedpd.build import build_problem
    from fedpd.data.cli import plot_label_matrix
    from fedpd.runner import CONFIG, load_run_config

    path = Path(path)
    output, fmt = _figure_path(output)
    if not (path / CONFIG).is_file():
        raise ConfigError(f"{str(path)!r}: no {CONFIG} (not a fedpd run directory)")
    cfg = load_run_config(path)  # a run of a user's data finds the loader where the run did
    problem = build_problem(cfg)
    name = cfg.names["problem"]
    if not problem.classifies:
        raise ConfigError(f"--split: problem '{name}' does not classify, its labels are not classes "
                          f"(allowed: classification problems, e.g. synthetic, fedpd_logreg, dataset)")
    classes = problem.info.get("num_classes") or getattr(cfg.options["problem"], "classes", 0)  # e.g. synthetic
    counts, values = label_counts(problem.train, classes)
    dataset = problem.info.get("dataset")
    title = f"{path.resolve().name}: {dataset or name}, {counts.shape[0]} clients"
    _write_figure(lambda f: plot_label_matrix(counts, f, title, class_names(problem, values)), output, fmt)
    return output
