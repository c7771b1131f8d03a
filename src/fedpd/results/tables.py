"""Tables of runs: ``fedpd compare``'s columns and rows, printed to fit the terminal (the least
important columns left out, and named) or written whole as CSV, JSON or Markdown."""

from __future__ import annotations

import csv
import io
import json
import sys
import textwrap
from dataclasses import dataclass

from fedpd.errors import ConfigError
from fedpd.results.runs import X_AXES, best, expand_runs, finite, read_run, run_labels

#: short column headers for terminal tables
SHORT = {"train_loss": "train loss", "grad_norm_sq": "‖∇f‖²", "test_loss": "test loss", "test_acc": "test acc",
         "personal_acc": "pers. acc", "personal_loss": "pers. loss", "personal_mse": "pers. MSE",
         "comm_rounds": "comm", "uplink_floats": "uplink", "rounds": "rounds", "algorithm": "algorithm",
         "run": "run", "backdoor_acc": "backdoor acc", "downlink_floats": "downlink\nfloats",
         "sample_grads": "sample\ngrads", "rejected_uploads": "rejected\nuploads", "wall_s": "wall s",
         "personal_acc_worst10": "worst 10% acc", "personal_mse_worst10": "worst 10% MSE"}
#: what `fedpd compare` shows first, where the runs report it (personal metrics first); every other
#: metric a run recorded follows (:func:`recorded_metrics`)
COMPARE_METRICS = ("personal_acc", "personal_mse", "personal_loss", "train_loss", "grad_norm_sq", "test_loss",
                   "test_acc", "backdoor_acc")
#: record keys that count up over the run (or say how it was evaluated): one column, the final value
COUNTERS = ("downlink_floats", "sample_grads", "rejected_uploads", "dropouts", "agg_unconverged_rounds",
            "eval_clients", "eval_train_samples", "wall_s")
#: columns of their own (not metrics): where the run is, and the ε spent ([privacy])
OWN_COLUMNS = ("round", "comm_rounds", "uplink_floats", "dp_epsilon")
#: the keys that name a private run's mechanism beside dp_epsilon (docs/privacy.md): settings, not metrics
MECHANISM_PREFIX = "dp_"
FORMATS = ("table", "csv", "json", "markdown")


@dataclass
class Column:
    key: str            # machine-readable name
    header: str         # terminal header (may hold a line break)
    numeric: bool = True
    priority: int = 0   # lower: kept first when the terminal is narrow


def compare_table(paths, metrics=None, labels: list[str] | None = None) -> tuple[list[Column], list[dict]]:
    """The columns and the rows (raw values) of ``fedpd compare``: per run its label (default:
    what tells the runs apart), path, algorithm, its aggregator, attack and privacy where some run
    sets them, rounds, communication and the final and best value of each metric (``metrics``;
    default: every metric the runs recorded, :data:`COMPARE_METRICS` first), then the final
    value of each counter (:data:`COUNTERS`). A folder of runs (``runs/``, a sweep's ``--out``)
    stands for every run inside it."""
    runs = [read_run(p) for p in (paths if labels else expand_runs(paths))]
    labels = labels or run_labels(runs, skip_seeds=False)
    counters = []
    if metrics is None:
        recorded = recorded_metrics(runs)
        metrics = [m for m in COMPARE_METRICS if m in recorded] + [m for m in recorded if m not in COMPARE_METRICS]
        counters = [c for c in COUNTERS if c in recorded]
        metrics = [m for m in metrics if m not in counters]
    else:
        unknown = [m for m in metrics if not any(m in rec for r in runs for rec in r.records)]
        if unknown:
            have = sorted({k for r in runs for k in r.records[-1] if k not in X_AXES})
            raise ConfigError(f"--metrics {unknown[0]!r}: no run reports it (allowed: {', '.join(have)})")
    order = {m: i for i, m in enumerate(metrics)}
    settings = {key: [describe(r.cfg) for r in runs] for key, describe in SETTINGS.items()}
    settings = {key: values for key, values in settings.items() if any(values)}  # where some run sets it
    columns = [Column("run", "run", False, 0), Column("algorithm", "algorithm", False, 1),
               *[Column(key, key, False, 3) for key in settings],  # after the first metric and accuracies
               Column("rounds", "rounds", True, 20 + len(metrics)), Column("comm_rounds", "comm\nrounds", True, 3),
               Column("uplink_floats", "uplink\nfloats", True, 21 + len(metrics))]
    private = any("dp_epsilon" in r.records[-1] for r in runs)  # [privacy]: the ε spent, at the run's delta
    if private:
        columns.append(Column("dp_epsilon", "ε\nspent", True, 3))
    for m in metrics:
        short = SHORT.get(m, m)
        kept = order[m] == 0 or m.endswith("_acc")  # the first metric and a classifier's accuracies: kept first
        columns.append(Column(f"{m}_final", f"{short}\nfinal", True, 2 if kept else 4 + order[m]))
        columns.append(Column(f"{m}_best", f"{short}\nbest", True, 40 + order[m]))
    columns += [Column(c, SHORT.get(c, c), True, 60 + i) for i, c in enumerate(counters)]
    rows = []
    for k, (run, label) in enumerate(zip(runs, labels)):
        last = run.records[-1]
        row = {"run": label, "path": str(run.path), "algorithm": run.cfg.get("algorithm", {}).get("name", "?"),
               **{key: values[k] or "-" for key, values in settings.items()},
               "rounds": last.get("round"), "comm_rounds": last.get("comm_rounds"),
               "uplink_floats": last.get("uplink_floats"), **{c: last.get(c) for c in counters}}
        if private:
            row["dp_epsilon"] = last.get("dp_epsilon")
        for m in metrics:
            row[f"{m}_final"] = last.get(m) if finite(last.get(m)) else None
            row[f"{m}_best"] = best(run.records, m)
        rows.append(row)
    return columns, rows


def recorded_metrics(runs) -> list[str]:
    """Every key the runs' records hold but those with columns of their own and the description of
    a private run's mechanism (``dp_*`` but ``dp_epsilon``: its settings, shown by the privacy
    column), in the order they first appear (a metric a run recorded only at some evaluations
    counts too)."""
    seen = dict.fromkeys(k for r in runs for rec in r.records for k in rec)
    return [k for k in seen if k not in OWN_COLUMNS and not k.startswith(MECHANISM_PREFIX)]


def _aggregator(cfg: dict) -> str:
    """The server's aggregator where it is not the plain mean ("" otherwise)."""
    name = cfg.get("algorithm", {}).get("aggregator")
    return "" if name in (None, "mean") else str(name)


def _attack(cfg: dict) -> str:
    """The attack (and on how many parties) where there is one ("" otherwise)."""
    attack = cfg.get("attack", {})
    name = attack.get("name", "none")
    if name == "none":
        return ""
    parties, fraction = attack.get("parties"), attack.get("fraction")
    if parties:
        who = f"{len(parties)} part{'y' if len(parties) == 1 else 'ies'}"
    else:
        who = f"{fraction:.0%}" if isinstance(fraction, (int, float)) else ""
    return f"{name} {who}".strip()


def _privacy(cfg: dict) -> str:
    """Client-level DP ([privacy]) where it is on: the clipping and the noise multiplier z."""
    privacy = cfg.get("privacy", {})
    clip = privacy.get("clip", "none")
    if clip == "none":
        return ""
    z = privacy.get("noise_multiplier")
    return f"{clip} clip, z={z:g}" if isinstance(z, (int, float)) else f"{clip} clip"


#: columns that name how a run was set up, shown where some run sets them
SETTINGS = {"aggregator": _aggregator, "attack": _attack, "privacy": _privacy}


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
        names = ", ".join(_named(dropped))
        note = f"left out at {width} columns: {names} (all of them: --format csv, json or markdown)"
        console.print(textwrap.fill(note, width=width), markup=False)
    return [c.key for c in dropped]


def _named(columns: list[Column]) -> list[str]:
    """The headers of ``columns`` on one line each, a metric's final and best as one: "test loss
    (final, best)"."""
    parts: dict[str, list[str]] = {}
    for c in columns:
        name, _, part = c.header.rpartition("\n")
        if part in ("final", "best") and name:
            parts.setdefault(name.replace("\n", " "), []).append(part)
        else:
            parts.setdefault(c.header.replace("\n", " "), [])
    return [f"{name} ({', '.join(p)})" if len(p) > 1 else f"{name} {p[0]}" if p else name for name, p in parts.items()]


def format_table(columns: list[Column], rows: list[dict], fmt: str) -> str:
    """``rows`` as CSV, JSON or Markdown: every column, full precision (CSV, JSON), none left out.
    Where rows name runs, each run's ``path`` follows its label in CSV and JSON."""
    check_format(fmt, FORMATS[1:])
    keys = [c.key for c in columns]
    if "run" in keys and any("path" in row for row in rows):
        keys.insert(keys.index("run") + 1, "path")
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
    keys = [k for k in keys if k != "path"]  # markdown: for reading, the labels say which run
    numeric = {c.key: c.numeric for c in columns}

    def cell(v):
        return _fmt(v).replace("|", "\\|")

    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---:" if numeric[k] else "---" for k in keys) + "|"]
    lines += ["| " + " | ".join(cell(row.get(k)) for k in keys) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def check_format(fmt: str, formats: tuple[str, ...] = FORMATS) -> None:
    """One line unless ``fmt`` is one of ``formats``."""
    if fmt not in formats:
        raise ConfigError(f"--format {fmt!r}: unknown (allowed: {', '.join(formats)})")


def print_table(columns: list[Column], rows: list[dict], fmt: str = "table", title: str | None = None) -> None:
    """``rows`` on stdout: fitted to the terminal (``table``: :func:`render_table`, with ``title``),
    or whole as ``csv``, ``json`` or ``markdown`` (:func:`format_table`, nothing else printed)."""
    if fmt == "table":
        render_table(columns, rows, title=title)
    else:
        sys.stdout.write(format_table(columns, rows, fmt))
