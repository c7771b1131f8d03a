"""What fedpd prints fits the terminal: `fedpd list` shows the aggregators; every table
(compare, sweep, demo, reproduce --list) keeps each line within $COLUMNS, and --format csv, json
and markdown give every column in a form other programs parse."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

import fedpd
from fedpd.registry import AGGREGATORS
from fedpd.reproduce.core import listing_table
from fedpd.results.tables import compare_table, spread_keys
from helpers import SMALL_GD, run_cli as cli
from registry_checks import check_listing

WIDTHS = (60, 80, 200)
FORMATS = ("csv", "json", "markdown")


def widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def parse(out: str, fmt: str) -> tuple[list[str], list[dict]]:
    """(column keys, rows) of a --format output, read back by the csv and json modules (markdown:
    the header row and one line per row)."""
    if fmt == "csv":
        keys = next(csv.reader(io.StringIO(out)))
        return keys, list(csv.DictReader(io.StringIO(out)))
    if fmt == "json":
        rows = json.loads(out)
        return list(rows[0]), rows
    lines = out.strip().splitlines()
    keys = [k.strip() for k in lines[0].strip("|").split("|")]
    assert set(lines[1]) <= set("|-:")
    return keys, [dict(zip(keys, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


# --- fedpd list: the aggregators ------------------------------------------------------------------
def test_list_shows_the_aggregators_under_their_own_heading(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(["list"], capsys)
    assert code == 0 and widest(out) <= 80
    section = out.split("\naggregators:\n", 1)[1].split("\nsolvers:", 1)[0]
    check_listing(out)  # every registered rule, step and attack with its line (tests/registry_checks.py)
    assert "fedplus" not in AGGREGATORS and "fedplus  " not in section  # Fed+'s own is chosen by its psi
    assert "multi-Krum" in section
    code, out, _ = cli(["list", "aggregators"], capsys)
    assert code == 0 and out.startswith("aggregators:") and "krum" in out and "fedavg" not in out


@pytest.mark.parametrize("columns", WIDTHS)
def test_list_krum_shows_its_options_within_the_width(columns, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = cli(["list", "krum"], capsys)
    assert code == 0 and widest(out) <= columns
    assert out.startswith("aggregator krum:") and "algorithm.aggregator_options" in " ".join(out.split())
    assert "n_byzantine  (required)" in out and "  m = 1" in out
    code, out, _ = cli(["show", "aggregator", "trimmed_mean"], capsys)
    assert code == 0 and "trim_ratio  (required)" in out and widest(out) <= columns


# --- fedpd compare ----------------------------------------------------------------------------------
@pytest.fixture
def runs(tmp_path, capsys) -> list[Path]:
    dirs = []
    for algorithm in ("fedavg", "fedprox", "scaffold"):
        cfg = tmp_path / f"{algorithm}.toml"
        cfg.write_text(SMALL_GD.format(algorithm=algorithm))
        dirs.append(tmp_path / f"a-long-run-directory-name-for-{algorithm}")
        assert cli(["run", cfg, "--out", dirs[-1], "--quiet"], capsys)[0] == 0
    return dirs


@pytest.mark.parametrize("columns", (*WIDTHS, 300))
def test_compare_fits_every_width(runs, columns, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = cli(["compare", *runs], capsys)
    assert code == 0 and widest(out) <= columns, out
    assert ("left out at" in out) == (columns < 300)  # every recorded metric and counter: a wide table


@pytest.mark.parametrize("fmt", FORMATS)
def test_compare_formats_hold_every_column(runs, fmt, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal leaves nothing out of a format
    columns, _ = compare_table(runs)
    code, out, _ = cli(["compare", *runs, "--format", fmt], capsys)
    keys, rows = parse(out, fmt)
    assert code == 0 and len(rows) == 3
    expected = [c.key for c in columns]
    if fmt != "markdown":
        expected.insert(1, "path")
    assert keys == expected


# --- fedpd sweep ------------------------------------------------------------------------------------
@pytest.fixture
def sweep_args(tmp_path, capsys) -> list[str]:
    configs = []
    for algorithm in ("fedavg", "fedprox"):
        configs.append(tmp_path / f"{algorithm}.toml")
        configs[-1].write_text(SMALL_GD.format(algorithm=algorithm))
    args = ["sweep", *map(str, configs), "--seeds", "1,2", "--out", str(tmp_path / "sweep"), "--jobs", "1"]
    assert cli([*args, "--quiet"], capsys)[0] == 0  # the runs; the calls below find them complete
    return args


def test_sweep_table_fits_every_width_and_formats_hold_every_column(sweep_args, capsys, monkeypatch):
    for columns in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(columns))
        code, out, _ = cli(sweep_args, capsys)
        assert code == 0 and widest(out) <= columns, out
        assert "fedprox " in out and "fedprox/s2" not in out  # a row per config over its seeds
        code, out, _ = cli([*sweep_args, "--no-group"], capsys)
        assert code == 0 and widest(out) <= columns and "fedprox/s2" in out, out
    monkeypatch.setenv("COLUMNS", "60")
    dirs = sorted((Path(sweep_args[-3])).glob("*/s*"))
    labels = [f"{d.parent.name}/{d.name}" for d in dirs]
    for group, names, where in ((True, ["fedavg", "fedprox"], "paths"),
                                (False, ["fedavg/s1", "fedavg/s2", "fedprox/s1", "fedprox/s2"], "path")):
        columns, _ = compare_table(dirs, labels=labels, group=group)
        assert any(c.spread for c in columns) == group
        for fmt in FORMATS:
            code, out, _ = cli([*sweep_args, "--quiet", "--format", fmt, *([] if group else ["--no-group"])],
                               capsys)  # --quiet: the format still prints
            keys, rows = parse(out, fmt)
            assert code == 0 and sorted(r["run"] for r in rows) == names
            expected = [k for c in columns for k in (spread_keys(c.key) if c.spread and fmt != "markdown" else [c.key])]
            assert keys == expected[:1] + ([where] if fmt != "markdown" else []) + expected[1:]


# --- fedpd reproduce --list ---------------------------------------------------------------------------
@pytest.mark.parametrize("columns", (40, *WIDTHS))  # 40: the narrowest width fedpd assumes
def test_reproduce_list_fits_every_width_in_a_users_words(columns, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = cli(["reproduce", "--list"], capsys)
    assert code == 0 and widest(out) <= columns
    assert "\nfedpd_femnist\n    FedPD on FEMNIST" in out and "--budget reduced" in out
    assert "femnist, which must be in the data directory" in " ".join(out.split())
    for internal in ("REFERENCE_NOTES", "reference notes", "shared data", "ARCHITECTURE"):
        assert internal not in out


@pytest.mark.parametrize("fmt", FORMATS)
def test_reproduce_list_formats_hold_every_column(fmt, capsys):
    columns, expected = listing_table()
    code, out, _ = cli(["reproduce", "--list", "--format", fmt], capsys)
    keys, rows = parse(out, fmt)
    assert code == 0 and keys == [c.key for c in columns]
    assert [(r["experiment"], r["budget"]) for r in rows] == [(r["experiment"], r["budget"]) for r in expected]
    assert {str(r["runs"]) for r in rows} == {str(r["runs"]) for r in expected}
    assert "REFERENCE_NOTES" not in out and "shared data" not in out
    code, _, err = cli(["reproduce", "feddyn_fedpd", "--format", fmt], capsys)
    assert code == 2 and "--format applies to --list" in err


# --- fedpd demo -------------------------------------------------------------------------------------
def test_demo_table_fits_every_width_and_formats_hold_every_column(tmp_path, capsys, monkeypatch):
    demo = ["demo", "--out", str(tmp_path / "demo"), "--rounds", "10", "--quiet", "--threads", "1", "--overwrite"]
    for columns in (60, 200):  # 80: tests/run/test_cli_ux.py
        monkeypatch.setenv("COLUMNS", str(columns))
        code, out, err = cli(demo, capsys)
        assert code == 0, err
        table = "\n".join(line for line in out.splitlines() if str(tmp_path) not in line)  # the paths: one word
        assert widest(table) <= columns and "fedpd-gd-p0.5" in table
    monkeypatch.setenv("COLUMNS", "60")
    for fmt in FORMATS:
        code, out, err = cli([*demo, "--format", fmt], capsys)
        keys, rows = parse(out, fmt)  # nothing but the table on stdout
        assert code == 0 and [r["run"] for r in rows] == ["fedavg-gd", "fedprox", "fedpd-gd-p0", "fedpd-gd-p0.5"]
        assert "comm_to_fedavg" in keys and "grad_norm_sq_best" in keys and "test_acc_final" in keys
        assert ("path" in keys) == (fmt != "markdown")
        assert "figure:" in err and "Theorem 1" in err  # the other lines, on stderr


# --- fedpd data list ----------------------------------------------------------------------------------
@pytest.mark.parametrize("columns", WIDTHS)
def test_data_list_wraps_where_it_looked_within_the_width(columns, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = cli(["data", "list", "--data-dir", tmp_path], capsys)  # nothing there: every place looked in
    assert code == 0 and widest(out.split("\n", 1)[1]) <= columns  # the first line names the data dir, a path
    assert "leaf/data/shakespeare/data" in out  # wrapped between paths, never inside one


# --- a narrow compare table keeps a classifier's test accuracy --------------------------------
@pytest.mark.parametrize("columns", [66, 80])
def test_a_narrow_compare_table_keeps_test_accuracy(columns, tmp_path, monkeypatch, capsys):
    cfg = {"problem": {"name": "synthetic", "clients": 6, "max_client_samples": 40}, "run": {"rounds": 1}}
    for name in ("fedavg", "fedprox"):
        fedpd.run({**cfg, "algorithm": {"name": name}}, tmp_path / f"runs-of-{name}-with-a-long-name")
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, err = cli(["compare", *sorted(tmp_path.iterdir())], capsys)
    header = " ".join(out.splitlines()[:2])
    assert code == 0 and "test acc" in header and "train loss" in header, out
    assert max(len(line) for line in out.splitlines()) <= columns
