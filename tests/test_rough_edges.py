"""Rough edges a new user hit: each bad input is one line (exit 2, nothing written), folders of
runs are taken apart, and duplicate runs are not counted as seeds."""

from __future__ import annotations

import pytest

from helpers import ROOT, one_line_error, quick_run, run_cli

FEDAVG = ROOT / "examples" / "fedavg.toml"


def test_an_empty_checkpoint_is_one_line_not_a_traceback(tmp_path, capsys):
    quick_run(tmp_path / "r", capsys)
    (tmp_path / "r" / "checkpoint.pt").write_bytes(b"")  # e.g. a disk that filled up
    before = (tmp_path / "r" / "metrics.jsonl").read_bytes()
    line = one_line_error(*run_cli(["run", "--resume", tmp_path / "r", "--quiet"], capsys)[::2])
    assert "checkpoint.pt: damaged, cannot be read" in line
    assert (tmp_path / "r" / "metrics.jsonl").read_bytes() == before


def test_reason_survives_an_exception_without_text():
    from fedpd.errors import reason

    assert reason(EOFError()) == "EOFError"
    assert reason(IndexError("")) == "IndexError"
    assert reason(ValueError("bad\nsecond line")) == "ValueError: bad"


def test_an_out_folder_that_holds_runs_is_refused_and_nothing_is_written(tmp_path, capsys):
    runs = tmp_path / "runs"
    quick_run(runs / "a", capsys)
    quick_run(runs / "b", capsys)
    before = sorted(p.name for p in runs.iterdir())
    for flags in ([], ["--overwrite"]):
        code, _, err = run_cli(["run", FEDAVG, "--out", runs, "--quiet", *flags], capsys)
        line = one_line_error(code, err)
        assert "holds other runs" in line and str(runs / "a") in line
        assert sorted(p.name for p in runs.iterdir()) == before  # no config.toml, metrics.jsonl loose in it


def test_compare_takes_the_runs_inside_a_folder_of_runs(tmp_path, capsys):
    runs = tmp_path / "runs"
    quick_run(runs / "a", capsys)
    quick_run(runs / "deeper" / "b", capsys)
    code, out, err = run_cli(["compare", runs, "--format", "csv"], capsys)
    assert code == 0, err
    body = out.strip().splitlines()[1:]
    assert len(body) == 2 and {line.split(",")[0] for line in body} == {"a", "b"}


def test_plot_draws_duplicate_runs_once_and_says_so(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from fedpd.results.figures import runs_figure

    quick_run(tmp_path / "s0", capsys)
    quick_run(tmp_path / "s0-copy", capsys)  # the same config and seed: a duplicate, not a second seed
    quick_run(tmp_path / "s1", capsys, "--set", "run.seed=1")
    with pytest.warns(UserWarning, match="same config and seed: duplicates, drawn once"):
        fig = runs_figure([tmp_path / "s0", tmp_path / "s0-copy", tmp_path / "s1"], "train_loss")
    [legend] = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert "2 seeds" in legend


def test_a_directory_given_as_config_is_named_as_one(capsys):
    line = one_line_error(*run_cli(["run", ROOT / "examples", "--out", "/nonexistent/x"], capsys)[::2])
    assert "is a directory; give one .toml file" in line


def test_list_suggests_the_name_in_the_right_case(capsys):
    line = one_line_error(*run_cli(["list", "FedPD"], capsys)[::2])
    assert "did you mean fedpd" in line


def test_argument_errors_name_the_command_once(capsys):
    line = one_line_error(*run_cli(["run", "--threads", "x"], capsys)[::2])
    assert line.startswith("fedpd run: error: argument --threads")
    line = one_line_error(*run_cli(["compare"], capsys)[::2])
    assert line.startswith("fedpd compare: error:") and "fedpd: error" not in line
