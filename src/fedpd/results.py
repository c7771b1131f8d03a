"""Reading run directories back: ``fedpd compare`` tables and ``fedpd plot`` figures (metrics, or\nthe label distribution of a run's split)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import torch

from fedpd.config import load_toml
from fedpd.errors import ConfigError
from fedpd.data.partition import label_matrix
from fedpd.io import atomic_write_bytes, read_jsonl
from fedpd.problems.base import ClientSplit

X_AXES = ("round", "comm_rounds", "uplink_floats", "downlink_floats", "sample_grads", "wall_s")
LOWER_IS_BETTER = ("loss", "grad_norm", "residual", "drift", "error")


def load_run(path: str | Path) -> tuple[str, dict, list[dict]]:
    """(label, resolved config, metric records) of a run directory."""
    path = Path(path)
    if not (path / "metrics.jsonl").is_file():
        raise ConfigError(f"{str(path)!r}: no metrics.jsonl (not a fedpd run directory)")
    cfg = load_toml(path / "config.toml") if (path / "config.toml").is_file() else {}
    records = read_jsonl(path / "metrics.jsonl")
    if not records:
        raise ConfigError(f"{str(path)!r}: metrics.jsonl holds no complete record")
    return path.name, cfg, records


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def best(records: list[dict], key: str):
    values = [r[key] for r in records if _finite(r.get(key))]
    if not values:
        return None
    return min(values) if any(s in key for s in LOWER_IS_BETTER) else max(values)


def compare_rows(paths, metrics=("train_loss", "grad_norm_sq", "test_loss", "test_acc")) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the final and best value of each of ``metrics`` that the runs report."""
    runs = [load_run(p) for p in paths]
    metrics = [k for k in metrics if any(k in r[2][-1] for r in runs)]
    header = ["run", "algorithm", "rounds", "comm_rounds", "uplink_floats"]
    for m in metrics:
        header += [f"{m} (final)", f"{m} (best)"]
    rows = []
    for label, cfg, recs in runs:
        last = recs[-1]
        row = [label, cfg.get("algorithm", {}).get("name", "?"), str(last["round"]), str(last["comm_rounds"]),
               f"{last['uplink_floats']:.3g}"]
        for m in metrics:
            row += [_fmt(last.get(m)), _fmt(best(recs, m))]
        rows.append(row)
    return header, rows


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def print_table(header, rows, title: str | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for h in header:
        table.add_column(h, justify="left" if h in ("run", "algorithm") else "right")
    for r in rows:
        table.add_row(*r)
    Console(width=max(120, sum(len(h) + 3 for h in header))).print(table)


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


def plot_runs(paths, metric: str, x: str = "round", output: str | Path = "plot.png", labels=None, title=None) -> Path:
    if x not in X_AXES:
        raise ConfigError(f"--x {x!r}: unknown axis (allowed: {', '.join(X_AXES)})")
    output, fmt = _figure_path(output)
    from matplotlib.figure import Figure

    runs = [load_run(p) for p in paths]
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    values = []
    for i, (label, cfg, recs) in enumerate(runs):
        pts = [(r[x], r[metric]) for r in recs if _finite(r.get(metric)) and x in r]
        if not pts:
            raise ConfigError(f"--metric {metric!r}: run {label!r} has no such metric "
                              f"(it has: {', '.join(k for k in recs[-1] if k not in X_AXES)})")
        xs, ys = zip(*pts)
        values += ys
        ax.plot(xs, ys, label=labels[i] if labels else label)
    positive = [v for v in values if v > 0]
    if positive and len(positive) == len(values) and max(positive) / min(positive) > 100:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    _write_figure(lambda f: fig.savefig(f, dpi=120), output, fmt)
    return output


def label_counts(split: ClientSplit, num_classes: int = 0) -> tuple[np.ndarray, list]:
    """Samples of each class per client, [clients, classes], and the label of each column.
    Integer labels are their own column; other labels (e.g. ±1) are numbered in sorted order."""
    y = split.y[0:split.y.shape[0]]  # a tensor, also where the samples are generated on demand (issue 14)
    if y.is_floating_point():
        values, column = torch.unique(y, return_inverse=True)
        values = values.tolist()
    else:
        column = y.long()
        values = list(range(max(num_classes, int(column.max()) + 1 if column.numel() else 0)))
    offsets = split.offsets.tolist()
    parts = [np.arange(a, b) for a, b in zip(offsets[:-1], offsets[1:])]
    return label_matrix(column.numpy(), parts, len(values)), values


def plot_split(path: str | Path, output: str | Path = "split.png") -> Path:
    """Heatmap of the label distribution (clients × classes) of a run's training split, rebuilt
    from the run's ``config.toml`` (the same problem, partition and seed)."""
    from fedpd.config import load_config
    from fedpd.data.cli import plot_label_matrix
    from fedpd.runner import CONFIG, build_problem

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
    title = f"{path.resolve().name}: {name}, {counts.shape[0]} clients"
    if values != list(range(len(values))):
        title += " (class " + ", ".join(f"{i} = label {v:g}" for i, v in enumerate(values)) + ")"
    _write_figure(lambda f: plot_label_matrix(counts, f, title), output, fmt)
    return output
