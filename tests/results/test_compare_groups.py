"""`fedpd compare` over seeds: runs that differ only in seeds are one row with n, the mean, the
sample standard deviation and the 95 % t-interval of each metric, in every format; `--no-group`
keeps a row per run; a group is named by its config, in the table and in a plot's legend.

The run directories here are written by hand (a config.toml and a metrics.jsonl are all `fedpd
compare` reads), so the expected numbers are known exactly."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path

import pytest
import tomli_w

from helpers import quick_run, run_cli
from helpers import run_cli as cli

#: Student's t quantiles t_{0.975, df}, from tables
T975 = {1: 12.706204736174705, 2: 4.302652729749464}


def fake_run(path: Path, lr: float, seed: int, test_acc: list, algorithm: str = "fedavg") -> Path:
    """A run directory of FedAvg at ``lr`` and ``seed`` whose evaluations recorded ``test_acc``."""
    path.mkdir(parents=True)
    cfg = {"problem": {"name": "synthetic", "seed": 0}, "algorithm": {"name": algorithm},
           "solver": {"name": "sgd", "lr": lr}, "run": {"rounds": 10 * (len(test_acc) - 1), "seed": seed}}
    (path / "config.toml").write_text(tomli_w.dumps(cfg))
    records = [{"round": 10 * i, "comm_rounds": 10 * i, "uplink_floats": 100 * i, "test_acc": a, "wall_s": 0.1 * i}
               for i, a in enumerate(test_acc)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def seeds(tmp_path) -> list[Path]:
    """Three seeds at lr = 0.1 (final accuracies 0.5, 0.6, 0.9), two at lr = 0.05 (0.7, 0.8), in
    folders whose names say nothing of the config."""
    finals = {("a0", 0.1, 0): 0.5, ("a1", 0.1, 1): 0.6, ("a2", 0.1, 2): 0.9, ("b0", 0.05, 0): 0.7, ("b1", 0.05, 1): 0.8}
    return [fake_run(tmp_path / name, lr, seed, [0.1, final]) for (name, lr, seed), final in finals.items()]


def expected(values: list[float]) -> tuple[float, float, float, float]:
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = T975[len(values) - 1] * sd / math.sqrt(len(values))
    return mean, sd, mean - half, mean + half


def test_runs_that_differ_only_in_seed_are_one_row_with_mean_sd_n_and_ci(seeds, capsys):
    code, out, err = cli(["compare", *seeds, "--format", "json"], capsys)
    rows = {r["run"]: r for r in json.loads(out)}
    assert code == 0 and sorted(rows) == ["lr=0.05", "lr=0.1"], (out, err)  # named by what differs, not by folder
    for name, values, members in (("lr=0.1", [0.5, 0.6, 0.9], seeds[:3]), ("lr=0.05", [0.7, 0.8], seeds[3:])):
        row = rows[name]
        assert row["n"] == len(values) and row["paths"] == [str(p) for p in members]
        got = [row[f"test_acc_final{part}"] for part in ("", "_sd", "_ci_low", "_ci_high")]
        assert got == pytest.approx(expected(values), rel=1e-12)
        assert row["rounds"] == 10 and row["algorithm"] == "fedavg"


def test_every_format_holds_the_spread(seeds, capsys, monkeypatch):
    mean, sd, low, high = expected([0.5, 0.6, 0.9])
    code, out, _ = cli(["compare", *seeds, "--format", "csv"], capsys)
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(out))}
    assert code == 0 and float(rows["lr=0.1"]["test_acc_final_ci_high"]) == pytest.approx(high)
    assert rows["lr=0.1"]["n"] == "3" and rows["lr=0.1"]["paths"].split(";") == [str(p) for p in seeds[:3]]
    code, out, _ = cli(["compare", *seeds, "--format", "markdown", "--metrics", "test_acc"], capsys)
    assert code == 0 and f"| {mean:.4g} ± {sd:.2g} [{low:.4g}, {high:.4g}] |" in out, out
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli(["compare", *seeds, "--metrics", "test_acc"], capsys)
    [line] = [line for line in out.splitlines() if line.lstrip().startswith("lr=0.1")]
    assert code == 0 and f"{mean:.4g} ± {sd:.2g}" in line and f"[{low:.4g}, {high:.4g}]" in line, out
    assert "95 % t-interval" in out  # the note says what the numbers are


def test_no_group_keeps_one_row_per_run(seeds, capsys):
    code, out, _ = cli(["compare", *seeds, "--no-group", "--format", "json"], capsys)
    rows = json.loads(out)
    assert code == 0 and [r["run"] for r in rows] == ["a0", "a1", "a2", "b0", "b1"]
    assert [r["test_acc_final"] for r in rows] == [0.5, 0.6, 0.9, 0.7, 0.8] and "n" not in rows[0]


def test_a_seed_without_a_finite_value_leaves_the_mean_undefined(tmp_path, capsys):
    runs = [fake_run(tmp_path / f"s{s}", 0.1, s, [0.1, v]) for s, v in enumerate([0.5, None, 0.9])]
    code, out, _ = cli(["compare", *runs, "--format", "json"], capsys)
    [row] = json.loads(out)
    assert code == 0 and row["n"] == 3 and row["test_acc_final"] is None and row["test_acc_final_sd"] is None
    assert row["test_acc_best"] == pytest.approx(statistics.fmean([0.5, 0.1, 0.9]))  # each run's best is finite


def test_a_copy_of_a_run_is_counted_once_with_a_note(seeds, tmp_path, capsys):
    import shutil

    shutil.copytree(seeds[0], tmp_path / "a0-copy")
    code, out, err = cli(["compare", *seeds, tmp_path / "a0-copy", "--format", "json"], capsys)
    rows = {r["run"]: r for r in json.loads(out)}
    assert code == 0 and rows["lr=0.1"]["n"] == 3 and "a0-copy" in err and "duplicates, counted once" in err


def test_runs_of_different_configs_only_stay_one_row_each(tmp_path, capsys):
    runs = [fake_run(tmp_path / "fast", 0.1, 0, [0.1, 0.5]), fake_run(tmp_path / "slow", 0.05, 0, [0.1, 0.7])]
    code, out, _ = cli(["compare", *runs, "--format", "json"], capsys)
    rows = json.loads(out)
    assert code == 0 and [r["run"] for r in rows] == ["fast", "slow"] and "test_acc_final_sd" not in rows[0]


def test_a_group_is_named_by_the_algorithm_first(tmp_path, capsys):
    runs = [fake_run(tmp_path / f"x{s}", 0.1, s, [0.1, 0.5 + s / 10]) for s in range(2)]
    runs += [fake_run(tmp_path / f"y{s}", 0.1, s, [0.1, 0.4], algorithm="scaffold") for s in range(2)]
    code, out, _ = cli(["compare", *runs, "--format", "json"], capsys)
    assert code == 0 and [r["run"] for r in json.loads(out)] == ["fedavg", "scaffold"]


def test_the_plot_legend_names_a_group_by_its_config(seeds):
    pytest.importorskip("matplotlib")
    from fedpd.results.figures import runs_figure

    ax = runs_figure(seeds, "test_acc").axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lr=0.1 (mean ± std, 3 seeds)",
                                                                  "lr=0.05 (mean ± std, 2 seeds)"]


def test_compare_takes_the_runs_inside_a_folder_of_runs(tmp_path, capsys):
    runs = tmp_path / "runs"
    quick_run(runs / "a", capsys)
    quick_run(runs / "deeper" / "b", capsys)
    code, out, err = run_cli(["compare", runs, "--format", "csv"], capsys)
    assert code == 0, err
    body = out.strip().splitlines()[1:]
    assert len(body) == 2 and {line.split(",")[0] for line in body} == {"a", "b"}
