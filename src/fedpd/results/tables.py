"""Tables of runs: ``fedpd compare``'s columns and rows, printed to fit the terminal (the least
important columns left out, and named) or written whole as CSV, JSON or Markdown."""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
import sys
import textwrap
from dataclasses import dataclass, replace
from typing import Callable

from fedpd.errors import ConfigError
from fedpd.results.runs import X_AXES, Run, best, expand_runs, finite, group_labels, read_run, run_labels, seed_groups
from fedpd.results.stats import summarise

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
OWN_COLUMNS = ("round", "comm_rounds", "uplink_floats", "dp_epsilon", "sim_time_s")
#: the keys that name a private run's mechanism beside dp_epsilon (docs/privacy.md): settings, not metrics
MECHANISM_PREFIX = "dp_"
FORMATS = ("table", "csv", "json", "markdown")


@dataclass
class Column:
    key: str            # machine-readable name
    header: str         # terminal header (may hold a line break)
    numeric: bool = True
    priority: int = 0   # lower: kept first when the terminal is narrow
    spread: bool = False  # a row holds a group's mean here, and its sd and CI under SPREAD keys (:func:`spread_keys`)


#: the parts of a spread column beside its mean, in every machine-readable format
SPREAD = ("sd", "ci_low", "ci_high")


def spread_keys(key: str) -> list[str]:
    """The keys a spread column ``key`` fills in a row: the mean, the sample sd and the 95 % CI."""
    return [key, *(f"{key}_{part}" for part in SPREAD)]


@dataclass
class Measure:
    """One column of ``fedpd compare`` and how a run fills it: ``value(run)`` (None: the run has
    none). ``spread``: over a group of seeds the row gets the mean, the sd and the 95 % CI of the
    members' values; otherwise their common value (a number: their mean where they differ). A new
    column is one more Measure (:func:`compare_table`'s ``measures``)."""

    column: Column
    value: Callable[[Run], object]
    spread: bool = False


def _last(key: str) -> Callable[[Run], object]:
    return lambda run: run.records[-1].get(key)


def _final(key: str) -> Callable[[Run], object]:
    def value(run: Run):
        v = run.records[-1].get(key)
        return v if finite(v) else None
    return value


def _best(key: str) -> Callable[[Run], object]:
    return lambda run: best(run.records, key)


def compare_table(paths, metrics=None, labels: list[str] | None = None, group: bool = True,
                  measures: list[Measure] = ()) -> tuple[list[Column], list[dict]]:
    """The columns and the rows (raw values) of ``fedpd compare``: per run its label (default:
    what tells the runs apart), path, algorithm, its aggregator, attack and privacy where some run
    sets them, rounds, communication and the final and best value of each metric (``metrics``;
    default: every metric the runs recorded, :data:`COMPARE_METRICS` first), then the final
    value of each counter (:data:`COUNTERS`), then ``measures``. A folder of runs (``runs/``, a
    sweep's ``--out``) stands for every run inside it.

    ``group``: where some runs differ only in seeds (:func:`fedpd.results.runs.seed_groups`), one
    row per group instead — its label (the config that tells the groups apart, or what ``labels``
    share but the seed), ``n``, the members' ``paths``, and for each metric the mean, sd and 95 %
    t-interval over the seeds (:class:`Column` ``spread``); where no two runs do, the rows are the
    runs'."""
    runs = [read_run(p) for p in (paths if labels else expand_runs(paths))]
    given, labels = labels is not None, labels or run_labels(runs, skip_seeds=False)
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
    shown = [key for key, describe in SETTINGS.items() if any(describe(r.cfg) for r in runs)]  # where some run sets it
    table = [Measure(Column("algorithm", "algorithm", False, 1), lambda r: r.cfg.get("algorithm", {}).get("name", "?")),
             *[Measure(Column(key, key, False, 3), lambda r, d=SETTINGS[key]: d(r.cfg) or "-")  # after the first metric
               for key in shown],
             Measure(Column("rounds", "rounds", True, 20 + len(metrics)), _last("round")),
             Measure(Column("comm_rounds", "comm\nrounds", True, 3), _last("comm_rounds")),
             Measure(Column("uplink_floats", "uplink\nfloats", True, 21 + len(metrics)), _last("uplink_floats"))]
    if any("sim_time_s" in r.records[-1] for r in runs):  # [system]: when the final model exists, simulated
        table.append(Measure(Column("sim_time_s", "sim\ntime s", True, 3), _last("sim_time_s")))
    if any("dp_epsilon" in r.records[-1] for r in runs):  # [privacy]: the ε spent, at the run's delta
        table.append(Measure(Column("dp_epsilon", "ε\nspent", True, 3), _last("dp_epsilon")))
    for m in metrics:
        short = SHORT.get(m, m)
        kept = order[m] == 0 or m.endswith("_acc")  # the first metric and a classifier's accuracies: kept first
        table.append(Measure(Column(f"{m}_final", f"{short}\nfinal", True, 2 if kept else 4 + order[m]), _final(m),
                             spread=True))
        table.append(Measure(Column(f"{m}_best", f"{short}\nbest", True, 40 + order[m]), _best(m), spread=True))
    table += [Measure(Column(c, SHORT.get(c, c), True, 60 + i), _last(c)) for i, c in enumerate(counters)]
    table += list(measures)
    rows = [{"run": label, "path": str(run.path), **{m.column.key: m.value(run) for m in table}}
            for run, label in zip(runs, labels)]
    first = Column("run", "run", False, 0)
    units = _seed_units(runs, labels) if group else None
    if not units:
        return [first, *(m.column for m in table)], rows
    row_of = {id(run): row for run, row in zip(runs, rows)}
    label_of = {id(run): label for run, label in zip(runs, labels)}
    names = _unit_labels([[label_of[id(r)] for r in members] for members in units], units) if given else \
        group_labels(units)
    grouped = [_group_row(name, members, [row_of[id(r)] for r in members], table)
               for name, members in zip(names, units)]
    columns = [first, Column("n", "n", True, 1),
               *(replace(m.column, spread=True) if m.spread else m.column for m in table)]
    return columns, grouped


def _seed_units(runs: list[Run], labels: list[str]) -> list[list[Run]] | None:
    """The runs in groups of one config over seeds, or None when no group holds two runs."""
    units = seed_groups(runs)
    return units if any(len(u) > 1 for u in units) else None


#: a seed at the end of a run's label: fedavg/s3, fedpd-s0, run_seed2
_SEED_SUFFIX = re.compile(r"[-_./]?(seed|s)[-_=]?\d+$")


def _unit_labels(member_labels: list[list[str]], units: list[list[Run]]) -> list[str]:
    """A label per group from the labels given for its runs: what they share but their seed (a
    sweep's ``<config>`` of ``<config>/s<seed>``) where that tells the groups apart, else the
    groups' configs (:func:`fedpd.results.runs.group_labels`)."""
    shared = []
    for names in member_labels:
        bare = {_SEED_SUFFIX.sub("", n) for n in names}
        shared.append(bare.pop() if len(bare) == 1 and "" not in bare else None)
    if all(shared) and len(set(shared)) == len(shared):
        return shared
    return group_labels(units)


def _group_row(name: str, members: list[Run], rows: list[dict], table: list[Measure]) -> dict:
    """One row for the runs of one config over seeds (``rows``: theirs, in order)."""
    out = {"run": name, "n": len(members), "paths": [str(r.path) for r in members]}
    for m in table:
        key, values = m.column.key, [row[m.column.key] for row in rows]
        if m.spread:
            s = summarise(values)
            out.update(zip(spread_keys(key), (s.mean, s.sd, s.low, s.high)))
        elif all(v == values[0] for v in values):
            out[key] = values[0]
        else:  # a number that differs between seeds (FedPD's communication rounds, wall time): the mean
            out[key] = statistics.fmean(values) if all(finite(v) for v in values) else None
    return out


def recorded_metrics(runs) -> list[str]:
    """Every key the runs' records hold but those with columns of their own and the description of
    a private run's mechanism (``dp_*`` but ``dp_epsilon``: its settings, shown by the privacy
    column), in the order they first appear (a metric a run recorded only at some evaluations
    counts too)."""
    seen = dict.fromkeys(k for r in runs for rec in r.records for k in rec)
    return [k for k in seen if k not in OWN_COLUMNS and not k.startswith(MECHANISM_PREFIX)]


#: short names of the options a defence is read by (docs/algorithms.md writes them so)
OPTION_SYMBOLS = {"n_byzantine": "f", "bucket_size": "s"}


def _option(value) -> str:
    return f"{value:g}" if isinstance(value, float) else json.dumps(value) if not isinstance(value, str) else value


def _aggregator(cfg: dict) -> str:
    """The server's defence where it is not the plain mean ("" otherwise): the pre-aggregation
    steps in order, then the rule with the options the config gives it (the chain's ``n_byzantine``
    and ``bucket_size`` too, as f and s): ``arc→nnm→trimmed_mean(f=4, trim_ratio=0.1)``."""
    algorithm = cfg.get("algorithm", {})
    name, options = algorithm.get("aggregator"), dict(algorithm.get("aggregator_options") or {})
    pre = options.pop("pre", [])
    pre = [pre] if isinstance(pre, str) else list(pre)
    if name in (None, "mean") and not pre and not options:
        return ""
    named = sorted((OPTION_SYMBOLS.get(k, k), v) for k, v in options.items())
    given = ", ".join(f"{k}={_option(v)}" for k, v in named)
    rule = f"{name or 'mean'}({given})" if given else str(name or "mean")
    return "→".join([*map(str, pre), rule])


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
    """Client-level DP ([privacy]) where it is on: the clipping, the noise multiplier z and how ε
    was computed (the accountant, RDP or PLD, at the run's δ)."""
    privacy = cfg.get("privacy", {})
    clip = privacy.get("clip", "none")
    if clip == "none":
        return ""
    z, delta = privacy.get("noise_multiplier"), privacy.get("delta")
    parts = [f"{clip} clip"] + ([f"z={z:g}"] if isinstance(z, (int, float)) else [])
    accountant = str(privacy.get("accountant", "rdp")).upper()
    parts.append(f"ε by {accountant}" + (f" at δ={delta:g}" if isinstance(delta, (int, float)) else ""))
    return ", ".join(parts)


#: columns that name how a run was set up, shown where some run sets them
SETTINGS = {"aggregator": _aggregator, "attack": _attack, "privacy": _privacy}


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
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
    spread = any(c.spread for c in columns)
    columns, rows = _readable(columns, rows)
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
    notes = [SPREAD_NOTE] if spread else []
    dropped = [columns[i] for i in range(len(columns)) if i not in keep]
    if dropped:
        names = ", ".join(_named(dropped))
        notes.append(f"left out at {width} columns: {names} (all of them: --format csv, json or markdown)")
    for note in notes:
        console.print(textwrap.fill(note, width=width), markup=False)
    return [c.key for c in dropped]


#: the key of a spread column's CI as a person reads it
CI_SUFFIX = "_ci95"
#: under a table of groups of seeds: what its numbers are
SPREAD_NOTE = ("one row per config over its n seeds: mean ± sd (the sample standard deviation), CI the 95 % "
               "t-interval of the mean (n − 1 degrees of freedom); '-' where a seed has no finite value "
               "(--no-group: one row per run)")


def _spread_text(row: dict, key: str) -> tuple[str, str]:
    """A spread column's cells for reading: "mean ± sd" and "[low, high]" (the mean alone, and "-",
    below two seeds)."""
    mean, sd, low, high = (row.get(k) for k in spread_keys(key))
    if sd is None:
        return _fmt(mean), "-"
    return f"{_fmt(mean)} ± {sd:.2g}", f"[{_fmt(low)}, {_fmt(high)}]"  # the sd to two digits: its own error is larger


def _readable(columns: list[Column], rows: list[dict]) -> tuple[list[Column], list[dict]]:
    """The columns and rows as a person reads them: a spread column's mean ± sd in one cell, its CI
    in a column of its own beside it, kept only when the terminal is wide (priority +100)."""
    if not any(c.spread for c in columns):
        return columns, rows
    out_columns, out_rows = [], [dict(row) for row in rows]
    for c in columns:
        out_columns.append(c)
        if not c.spread:
            continue
        ci = f"{c.key}{CI_SUFFIX}"
        out_columns.append(Column(ci, f"{c.header}\n95% CI", c.numeric, c.priority + 100))
        for row, shown in zip(rows, out_rows):
            shown[c.key], shown[ci] = _spread_text(row, c.key)
    return out_columns, out_rows


def _named(columns: list[Column]) -> list[str]:
    """The headers of ``columns`` on one line each, a metric's final and best as one: "test loss
    (final, best)"; the confidence intervals last, as one: "95% CI of test loss (final, best)"."""
    ci = [c for c in columns if c.key.endswith(CI_SUFFIX)]
    parts: dict[str, list[str]] = {}
    for c in columns:
        if c in ci:
            continue
        name, _, part = c.header.rpartition("\n")
        if part in ("final", "best") and name:
            parts.setdefault(name.replace("\n", " "), []).append(part)
        else:
            parts.setdefault(c.header.replace("\n", " "), [])
    named = [f"{name} ({', '.join(p)})" if len(p) > 1 else f"{name} {p[0]}" if p else name for name, p in parts.items()]
    if ci:
        of = _named([replace(c, key=c.key[:-len(CI_SUFFIX)], header=c.header.rpartition("\n")[0]) for c in ci])
        named.append("95% CI of " + ", ".join(of))
    return named


def format_table(columns: list[Column], rows: list[dict], fmt: str) -> str:
    """``rows`` as CSV, JSON or Markdown: every column, full precision (CSV, JSON), none left out.
    Where rows name runs, each run's ``path`` (a group's ``paths``) follows its label in CSV and
    JSON; a spread column is its mean, ``_sd``, ``_ci_low`` and ``_ci_high`` there, and "mean ± sd
    [low, high]" in Markdown."""
    check_format(fmt, FORMATS[1:])
    keys = [k for c in columns for k in (spread_keys(c.key) if c.spread and fmt != "markdown" else [c.key])]
    where = next((k for k in ("path", "paths") if any(k in row for row in rows)), None)
    if "run" in keys and where:
        keys.insert(keys.index("run") + 1, where)
    if fmt == "json":
        return json.dumps([{k: row.get(k) for k in keys} for row in rows], indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(keys)
        for row in rows:
            writer.writerow([_csv_cell(row.get(k)) for k in keys])
        return buf.getvalue()
    keys = [k for k in keys if k not in ("path", "paths")]  # markdown: for reading, the labels say which run
    numeric = {c.key: c.numeric for c in columns}
    spread = {c.key for c in columns if c.spread}

    def cell(row, k):
        if k in spread:
            mean_sd, ci = _spread_text(row, k)
            text = mean_sd if ci == "-" else f"{mean_sd} {ci}"
        else:
            text = _fmt(row.get(k))
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---:" if numeric[k] else "---" for k in keys) + "|"]
    lines += ["| " + " | ".join(cell(row, k) for k in keys) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _csv_cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):  # a group's paths
        return ";".join(map(str, v))
    return v


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
