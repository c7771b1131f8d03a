"""Reading run directories back: ``fedpd compare`` tables (fitted to the terminal, or CSV / JSON /
Markdown) and ``fedpd plot`` figures (metrics, or the label distribution of a run's split)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from fedpd.config import load_toml
from fedpd.data.partition import label_matrix
from fedpd.errors import ConfigError
from fedpd.io import atomic_write_bytes, read_jsonl
from fedpd.problems.base import ClientSplit

X_AXES = ("round", "comm_rounds", "uplink_floats", "downlink_floats", "sample_grads", "wall_s")
LOWER_IS_BETTER = ("loss", "grad_norm", "residual", "drift", "error", "mse")

#: axis labels, in words and maths
LABELS = {
    "round": "rounds",
    "comm_rounds": "communication rounds",
    "uplink_floats": "floats uploaded (all clients)",
    "downlink_floats": "floats downloaded (all clients)",
    "sample_grads": "per-sample gradients computed",
    "wall_s": "wall-clock time (s)",
    "train_loss": r"training loss $f(x)$",
    "grad_norm_sq": r"stationarity gap $\|\nabla f(x)\|^2$",
    "test_loss": "test loss",
    "test_acc": "test accuracy",
    "personal_acc": "personal test accuracy (mean over clients)",
    "personal_acc_worst10": "personal test accuracy (worst 10 % of clients)",
    "personal_loss": "personal test loss (mean over clients)",
    "personal_mse": "personal test MSE (mean over clients)",
    "personal_mse_worst10": "personal test MSE (worst 10 % of clients)",
    "primal_residual": r"primal residual $\|x_i - x_0\|^2$ (mean)",
    "dual_drift": "dual drift (mean)",
}
#: short column headers for terminal tables
SHORT = {"train_loss": "train loss", "grad_norm_sq": "‖∇f‖²", "test_loss": "test loss", "test_acc": "test acc",
         "personal_acc": "pers. acc", "personal_loss": "pers. loss", "personal_mse": "pers. MSE",
         "comm_rounds": "comm", "uplink_floats": "uplink", "rounds": "rounds", "algorithm": "algorithm",
         "run": "run"}
#: metrics drawn on a log axis whatever their range (when every value is positive)
LOG_METRICS = ("grad_norm_sq", "primal_residual", "dual_drift")
#: what `fedpd compare` shows by default, where the runs report it (personal metrics first)
COMPARE_METRICS = ("personal_acc", "personal_mse", "personal_loss", "train_loss", "grad_norm_sq", "test_loss",
                   "test_acc")
#: config keys that do not change a run's results (ignored when runs are grouped or told apart)
NO_EFFECT = ("run.threads", "run.tensorboard", "run.allow_nonfinite", "run.checkpoint_every", "run.client_chunk",
             "run.rounds", "run.eval_every")
FORMATS = ("table", "csv", "json", "markdown")


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
    run = _load(path)
    return run.path.name, run.cfg, run.records


def _load(path: str | Path) -> Run:
    path = Path(path)
    if not (path / "metrics.jsonl").is_file():
        raise ConfigError(f"{str(path)!r}: no metrics.jsonl (not a fedpd run directory)")
    cfg = load_toml(path / "config.toml") if (path / "config.toml").is_file() else {}
    records = read_jsonl(path / "metrics.jsonl")
    if not records:
        raise ConfigError(f"{str(path)!r}: metrics.jsonl holds no complete record")
    return Run(path, cfg, records)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def best(records: list[dict], key: str):
    values = [r[key] for r in records if _finite(r.get(key))]
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


def _is_seed(key: str) -> bool:
    return key.rsplit(".", 1)[-1] == "seed"


def _value(v) -> str:
    return f"{v:g}" if isinstance(v, float) else json.dumps(v) if not isinstance(v, str) else v


def differing_keys(cfgs: list[dict], skip_seeds: bool = True) -> list[str]:
    """Config keys whose values differ between ``cfgs`` (keys that change no result left out)."""
    flats = [flat_config(c) for c in cfgs]
    keys = sorted({k for f in flats for k in f})
    out = []
    for k in keys:
        if k in NO_EFFECT or (skip_seeds and _is_seed(k)):
            continue
        if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1:
            out.append(k)
    return out


def _short_keys(keys: list[str]) -> dict[str, str]:
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
        short = _short_keys(keys)
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


# --- fedpd compare --------------------------------------------------------------------------
@dataclass
class Column:
    key: str            # machine-readable name
    header: str         # terminal header (may hold a line break)
    numeric: bool = True
    priority: int = 0   # lower: kept first when the terminal is narrow


def compare_table(paths, metrics=None, labels: list[str] | None = None) -> tuple[list[Column], list[dict]]:
    """The columns and the rows (raw values) of ``fedpd compare``: per run its label (default:
    what tells the runs apart), path, algorithm, rounds, communication and the final and best
    value of each metric."""
    runs = [_load(p) for p in paths]
    labels = labels or run_labels(runs, skip_seeds=False)
    if metrics is None:
        metrics = [m for m in COMPARE_METRICS if any(m in r.records[-1] for r in runs)]
    else:
        unknown = [m for m in metrics if not any(m in rec for r in runs for rec in r.records)]
        if unknown:
            have = sorted({k for r in runs for k in r.records[-1] if k not in X_AXES})
            raise ConfigError(f"--metrics {unknown[0]!r}: no run reports it (allowed: {', '.join(have)})")
    order = {m: i for i, m in enumerate(metrics)}
    columns = [Column("run", "run", False, 0), Column("algorithm", "algorithm", False, 1),
               Column("rounds", "rounds", True, 20 + len(metrics)), Column("comm_rounds", "comm\nrounds", True, 3),
               Column("uplink_floats", "uplink\nfloats", True, 21 + len(metrics))]
    for m in metrics:
        short = SHORT.get(m, m)
        columns.append(Column(f"{m}_final", f"{short}\nfinal", True, 2 if order[m] == 0 else 4 + order[m]))
        columns.append(Column(f"{m}_best", f"{short}\nbest", True, 40 + order[m]))
    rows = []
    for run, label in zip(runs, labels):
        last = run.records[-1]
        row = {"run": label, "path": str(run.path), "algorithm": run.cfg.get("algorithm", {}).get("name", "?"),
               "rounds": last.get("round"), "comm_rounds": last.get("comm_rounds"),
               "uplink_floats": last.get("uplink_floats")}
        for m in metrics:
            row[f"{m}_final"] = last.get(m) if _finite(last.get(m)) else None
            row[f"{m}_best"] = best(run.records, m)
        rows.append(row)
    return columns, rows


def compare_rows(paths, metrics=("train_loss", "grad_norm_sq", "test_loss", "test_acc")) -> tuple[list[str], list[list[str]]]:
    """Header and rows (text) of the final and best value of each of ``metrics`` that the runs report."""
    runs = [_load(p) for p in paths]
    metrics = [m for m in metrics if any(m in r.records[-1] for r in runs)]
    columns, rows = compare_table(paths, metrics)
    header = [c.key.replace("_final", " (final)").replace("_best", " (best)") for c in columns]
    return header, [[_fmt(row[c.key]) for c in columns] for row in rows]


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 100_000:
        return f"{v:.3g}"
    return str(v)


def terminal_width() -> int:
    """Columns of the terminal ($COLUMNS when set; 80 when stdout is not a terminal)."""
    import shutil

    return max(40, shutil.get_terminal_size((80, 24)).columns)


RUN_MIN = 16  # the run column keeps at least this many characters when the terminal is narrow


def _shorten(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters (run names differ at either end)."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def fit_columns(columns: list[Column], cells: list[list[str]], width: int) -> tuple[list[int], int]:
    """The columns to show so that the table fits ``width``, chosen by priority and kept in their
    order, and the width of the run column. A column costs its widest cell or header line plus 3
    (padding and separator); the table 1 more."""
    natural = [max([len(s) for s in c.header.split("\n")] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    run = next((i for i, c in enumerate(columns) if c.key == "run"), None)
    run_min = max(RUN_MIN, width // 4)
    chosen, used = [], 1
    for i in sorted(range(len(columns)), key=lambda i: columns[i].priority):
        need = (min(natural[i], run_min) if i == run else natural[i]) + 3
        if used + need <= width or not chosen:
            chosen.append(i)
            used += need
    run_width = 0
    if run is not None and run in chosen:
        run_width = max(3, min(natural[run], min(natural[run], run_min) + width - used))
    return sorted(chosen), run_width


def render_table(columns: list[Column], rows: list[dict], width: int | None = None, title: str | None = None,
                 file=None) -> list[str]:
    """Print ``rows`` as a table that fits ``width`` (default: the terminal), leaving out the least
    important columns when it must; returns the keys left out (also named under the table)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    width = width or terminal_width()
    cells = [[_fmt(row.get(c.key)) for c in columns] for row in rows]
    keep, run_width = fit_columns(columns, cells, width)
    console = Console(file=file, width=width, highlight=False, soft_wrap=False)
    if title:
        console.print(textwrap.fill(title, width=width), markup=False)
    table = Table(box=box.SIMPLE_HEAVY, show_edge=False)
    for i in keep:
        c = columns[i]
        if c.key == "run":
            table.add_column(c.header, justify="left", no_wrap=True, width=run_width)
        else:
            table.add_column(c.header, justify="right" if c.numeric else "left", no_wrap=True)
    for r in cells:
        table.add_row(*[_shorten(r[i], run_width) if columns[i].key == "run" else r[i] for i in keep])
    console.print(table)
    dropped = [columns[i] for i in range(len(columns)) if i not in keep]
    if dropped:
        names = ", ".join(c.header.replace("\n", " ") for c in dropped)
        note = f"left out at {width} columns: {names} (all of them: --format csv, json or markdown)"
        console.print(textwrap.fill(note, width=width), markup=False)
    return [c.key for c in dropped]


def format_table(columns: list[Column], rows: list[dict], fmt: str) -> str:
    """``rows`` as CSV, JSON or Markdown: every column, full precision (CSV, JSON), none left out."""
    keys = ["run", "path"] + [c.key for c in columns if c.key != "run"]
    if fmt == "json":
        return json.dumps([{k: row.get(k) for k in keys} for row in rows], indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(keys)
        for row in rows:
            writer.writerow(["" if row.get(k) is None else repr(row[k]) if isinstance(row[k], float) else row[k]
                             for k in keys])
        return buf.getvalue()
    if fmt == "markdown":
        keys = [k for k in keys if k != "path"]

        def cell(v):
            return _fmt(v).replace("|", "\\|")

        lines = ["| " + " | ".join(keys) + " |",
                 "|" + "|".join("---" if k in ("run", "algorithm") else "---:" for k in keys) + "|"]
        lines += ["| " + " | ".join(cell(row.get(k)) for k in keys) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    raise ConfigError(f"--format {fmt!r}: unknown (allowed: {', '.join(FORMATS)})")


def print_table(header, rows, title: str | None = None) -> None:
    """A plain header and text rows as a table fitted to the terminal."""
    columns = [Column(h, h, h not in ("run", "algorithm"), i) for i, h in enumerate(header)]
    render_table(columns, [dict(zip(header, r)) for r in rows], title=title)


# --- figures -------------------------------------------------------------------------------
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
        raise ConfigError(f"-o {str(output)!r}: matplotlib cannot write .{fmt} here ({str(err).splitlines()[0]})") from None
    atomic_write_bytes(output, buf.getvalue())


def split_metrics(metrics) -> list[str]:
    """``"a,b"`` or ``["a", "b,c"]`` -> ``["a", "b", "c"]``."""
    if isinstance(metrics, str):
        metrics = [metrics]
    out = [m.strip() for item in metrics for m in item.split(",") if m.strip()]
    if not out:
        raise ConfigError("--metric: give at least one metric key, e.g. grad_norm_sq")
    return out


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


def group_runs(runs: list[Run]) -> list[list[Run]]:
    """Runs whose configs differ only in seeds (and in keys that change no result) form a group."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        flat = {k: v for k, v in flat_config(run.cfg).items() if k not in NO_EFFECT and not _is_seed(k)}
        key = json.dumps(flat, sort_keys=True, default=str) if run.cfg else f"__{id(run)}"
        groups.setdefault(key, []).append(run)
    return list(groups.values())


def _group_label(runs: list[Run]) -> str:
    names = [r.name for r in runs]
    if len(set(names)) == 1:
        return names[0]
    prefix = re.sub(r"[-_.]*(seed|s)?[-_.]*$", "", os.path.commonprefix(names))
    return prefix or names[0]


def _curve_points(run: Run, metric: str, x: str) -> list[tuple[float, float, int]]:
    return [(r[x], r[metric], r.get("round", 0)) for r in run.records if _finite(r.get(metric)) and x in r]


def _curves(runs: list[Run], metric: str, x: str, labels: list[str] | None, group: bool) -> list[Curve]:
    for run in runs:
        if not _curve_points(run, metric, x):
            have = ", ".join(k for k in run.records[-1] if k not in X_AXES)
            raise ConfigError(f"--metric {metric!r}: run {str(run.path)!r} has no such metric (it has: {have})")
    units = group_runs(runs) if group else [[r] for r in runs]
    if labels is not None:
        given = {id(r): lab for r, lab in zip(runs, labels)}
        names = [given[id(u[0])] for u in units]
    else:
        names = disambiguate([_group_label(u) for u in units], [u[0].cfg for u in units],
                             [u[0].path for u in units], skip_seeds=group)
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
        seeds = {json.dumps({k: v for k, v in flat_config(r.cfg).items() if _is_seed(k)}, sort_keys=True)
                 for r in members}
        what = f"{len(members)} seeds" if len(seeds) == len(members) else f"{len(members)} runs"
        curves.append(Curve(f"{name} (mean ± std, {what})", members, xs, ys.mean(1).tolist(), ys.std(1).tolist(),
                            ys.min(1).tolist()))
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


def axis_label(key: str) -> str:
    return LABELS.get(key, key.replace("_", " "))


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

    runs = [_load(p) for p in paths]
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
        ax.set_ylabel(axis_label(metric))
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
    from fedpd.config import load_config
    from fedpd.data.cli import plot_label_matrix
    from fedpd.runner import CONFIG

    path = Path(path)
    output, fmt = _figure_path(output)
    if not (path / CONFIG).is_file():
        raise ConfigError(f"{str(path)!r}: no {CONFIG} (not a fedpd run directory)")
    cfg = load_config(path / CONFIG)
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
