"""Reading run directories back: ``fedpd compare`` tables and ``fedpd plot`` figures."""

from __future__ import annotations

import math
from pathlib import Path

from fedpd.config import load_toml
from fedpd.errors import ConfigError
from fedpd.io import read_jsonl

X_AXES = ("round", "comm_rounds", "uplink_floats", "downlink_floats", "wall_s")
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


def plot_runs(paths, metric: str, x: str = "round", output: str | Path = "plot.png", labels=None, title=None) -> Path:
    if x not in X_AXES:
        raise ConfigError(f"--x {x!r}: unknown axis (allowed: {', '.join(X_AXES)})")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'fedpd[plot]'") from None
    runs = [load_run(p) for p in paths]
    fig, ax = plt.subplots(figsize=(7, 4.5))
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
    output = Path(output)
    tmp = output.with_name(f".{output.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(output)
    return output
