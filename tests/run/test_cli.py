"""The command line: every bad input is one line on stderr and exit status 2; the commands work."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import ROOT, one_line_error, quick_run, run_cli

GOOD = """
[problem]
name = "least_squares"
clients = 4
[algorithm]
name = "fedavg"
[solver]
name = "gd"
lr = 0.1
local_steps = 2
[run]
rounds = 4
eval_every = 2
"""


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "good.toml"
    path.write_text(GOOD)
    return path


BAD = [
    # (extra args, text the one-line message must contain)
    (["--set", "solver.lr=-1"], "solver.lr"),
    (["--set", "solver.lr=0"], "solver.lr"),
    (["--set", "algorithm.name=fedpd", "--set", "algorithm.p=1.0"], "algorithm.p"),
    (["--set", "algorithm.name=fedpd", "--set", "algorithm.p=-0.1"], "algorithm.p"),
    (["--set", "algorithm.name=nosuch"], "algorithm.name"),
    (["--set", "run.roundz=3"], "run.roundz"),
    (["--set", "run.rounds=abc"], "run.rounds"),
    (["--set", "run.rounds=0"], "run.rounds"),
    (["--set", "sampler.name=uniform", "--set", "sampler.clients_per_round=9"], "sampler.clients_per_round"),
    (["--set", "solver.batch_size=10"], "solver.batch_size"),  # gd is full batch: no such key
    (["--set", "problem.name=nosuch"], "problem.name"),
    (["--set", "nosection.key=1"], "nosection"),
    (["--set", "solver.momentum=1.5"], "solver.momentum"),
    (["--set", "algorithm.name=fedpd", "--set", "sampler.name=uniform", "--set", "sampler.clients_per_round=2"],
     "sampler.name"),
    (["--set", "run.dtype=float16"], "run.dtype"),
    (["--set", "problem.non_iid=strong"], "problem.non_iid"),  # not an option of least_squares
    (["--set", "solver.name=exact"], "solver.lr"),  # the exact solver takes no step size
    (["--set", "lr=0.1"], "section.key=value"),
    (["--set", "solver.lr=inf"], "solver.lr"),  # gt=0 alone lets infinity through
    (["--set", "solver.lr=nan"], "solver.lr"),
    (["--set", "model.foo=1"], "model.foo"),  # least_squares has a fixed model: no [model] keys
    (["--set", "model.name=mlp"], "model.name"),
]


@pytest.mark.parametrize("extra,needle", BAD, ids=[b[1] for b in BAD])
def test_bad_config_values_exit_2_with_one_line(config, tmp_path, capsys, extra, needle):
    code, out, err = run_cli(["run", config, "--out", tmp_path / "o", "--quiet", *extra], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("args,needle", [
    (["run", "missing.toml"], "missing.toml"),
    (["run"], "CONFIG"),
    (["nosuchcommand"], "invalid choice"),
    (["plot", "nodir", "--metric", "train_loss"], "nodir"),
    (["compare", "nodir"], "nodir"),
    (["run", "--resume", "nodir"], "nodir"),
    (["run", "--resume", "nodir", "--out", "o"], "--out"),
    (["run", "--resume", "nodir", "--overwrite"], "--overwrite"),
    (["run", "good.toml", "--out", "a_file"], "a_file"),
    (["run", "good.toml", "--out", "a_file/run"], "a_file/run"),  # the OS refuses: OSError, one line
    (["plot", "norun", "--metric", "train_loss", "-o", "nodir/p.png"], "-o 'nodir/p.png'"),  # before any work
    (["plot", "norun", "--metric", "train_loss", "-o", "."], "is a directory"),
    (["plot", "norun", "--metric", "train_loss", "-o", "p.xyz"], "'.xyz'"),
    (["plot", "norun", "--metric", "train_loss", "-o", "p"], "no suffix"),
    (["plot", "norun", "-o", "p.png"], "--metric"),
    (["plot", "a", "b", "--split"], "one run directory"),
    (["plot", "norun", "--split"], "norun"),
    (["demo", "--rounds", "0", "--out", "demo"], "run.rounds"),
])
def test_bad_arguments_exit_2_with_one_line(args, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.toml").write_text(GOOD)
    (tmp_path / "a_file").write_text("")
    code, out, err = run_cli(args, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "good.toml"]  # nothing written


def test_exact_solver_needs_a_quadratic_problem(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[problem]\nname = "fedpd_logreg"\nclients = 3\n[algorithm]\nname = "fedavg"\n[solver]\nname = "exact"\n'
    )
    code, _, err = run_cli(["run", cfg, "--out", tmp_path / "o", "--quiet"], capsys)
    assert code == 2 and "solver.name" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "metrics.jsonl").exists()


def test_invalid_toml_and_wrong_table(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\nrounds = 3")
    code, _, err = run_cli(["run", bad], capsys)
    assert code == 2 and "not valid TOML" in err
    bad.write_text("run = 5\n" + GOOD.split("[run]")[0])
    code, _, err = run_cli(["run", bad, "--out", tmp_path / "o"], capsys)
    assert code == 2 and "run: must be a table" in err


def test_run_writes_directory_and_refuses_to_overwrite(config, tmp_path, capsys):
    out = tmp_path / "run1"
    code, stdout, _ = run_cli(["run", config, "--out", out, "--quiet"], capsys)
    assert code == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 2, 4]
    for key in ("round", "comm_rounds", "uplink_floats", "downlink_floats", "train_loss", "grad_norm_sq",
                "test_loss", "wall_s"):
        assert key in records[-1]
    assert (out / "checkpoint.pt").exists() and "[algorithm]" in (out / "config.toml").read_text()
    umask = os.umask(0)
    os.umask(umask)
    for name in ("config.toml", "checkpoint.pt", "metrics.jsonl"):  # atomic writes too: not mkstemp's 0600
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~umask, name
    before = (out / "metrics.jsonl").read_bytes()
    code, _, err = run_cli(["run", config, "--out", out, "--quiet"], capsys)
    assert code == 2 and "already holds results" in err
    assert (out / "metrics.jsonl").read_bytes() == before
    code, _, _ = run_cli(["run", config, "--out", out, "--quiet", "--overwrite", "--set", "run.rounds=2"], capsys)
    assert code == 0 and len((out / "metrics.jsonl").read_text().splitlines()) == 2


def test_set_overrides_every_run_key(config, tmp_path, capsys):
    out = tmp_path / "r"
    code, _, _ = run_cli(["run", config, "--out", out, "--quiet", "--set", "run.rounds=3", "--set", "run.seed=7",
                          "--set", "run.eval_every=3", "--set", "run.checkpoint_every=1",
                          "--set", "algorithm.name=fedprox", "--set", "algorithm.mu=0.5",
                          "--set", "model.name=auto"], capsys)  # the one [model] key a fixed model takes
    assert code == 0
    resolved = (out / "config.toml").read_text()
    assert (
        "rounds = 3" in resolved
        and "seed = 7" in resolved
        and 'name = "fedprox"' in resolved
        and "mu = 0.5" in resolved
    )


def test_list_compare_and_plot(config, tmp_path, capsys):
    code, out, _ = run_cli(["list"], capsys)
    assert code == 0
    for name in ("fedavg", "fedprox", "scaffold", "fedpd", "feddyn", "fedpd_logreg", "synthetic", "least_squares",
                 "gd", "sgd", "exact", "uniform", "bernoulli"):
        assert f"  {name} " in out
    dirs = []
    for algo in ("fedavg", "scaffold"):
        dirs.append(tmp_path / algo)
        assert run_cli(["run", config, "--out", dirs[-1], "--quiet", "--set", f"algorithm.name={algo}"], capsys)[0] == 0
    code, out, _ = run_cli(["compare", *dirs], capsys)
    assert code == 0 and "scaffold" in out and "‖∇f‖²" in out  # grad_norm_sq, abbreviated to fit
    png = tmp_path / "p.png"
    code, _, _ = run_cli(["plot", *dirs, "--metric", "grad_norm_sq", "--x", "uplink_floats", "-o", png], capsys)
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name, magic in (("p.jpg", b"\xff\xd8\xff"), ("p.PDF", b"%PDF"), ("p.svg", b"<?xml")):  # format from suffix
        assert run_cli(["plot", *dirs, "--metric", "train_loss", "-o", tmp_path / name], capsys)[0] == 0
        assert (tmp_path / name).read_bytes().startswith(magic), name
    code, _, err = run_cli(["plot", *dirs, "--metric", "nosuch", "-o", png], capsys)
    assert code == 2 and "nosuch" in err
    code, _, err = run_cli(["plot", *dirs, "--metric", "train_loss", "--x", "epoch", "-o", png], capsys)
    assert code == 2 and "--x" in err


def test_all_examples_validate():
    from fedpd.config import load_config

    examples = sorted((ROOT / "examples").glob("*.toml"))
    assert len(examples) >= 5
    for path in examples:
        load_config(path)


def test_plot_split_draws_the_label_matrix_of_a_run(config, tmp_path, capsys):
    from fedpd.build import build_problem
    from fedpd.config import load_config
    from fedpd.results.figures import label_counts

    cfg = tmp_path / "s.toml"
    cfg.write_text('[problem]\nname = "synthetic"\nclients = 6\nmax_client_samples = 40\n'
                   '[algorithm]\nname = "fedavg"\n[run]\nrounds = 1\n')
    out = tmp_path / "run"
    assert run_cli(["run", cfg, "--out", out, "--quiet"], capsys)[0] == 0
    png = tmp_path / "split.png"
    code, stdout, err = run_cli(["plot", out, "--split", "-o", png], capsys)
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", err
    assert stdout.strip() == f"wrote {png}"  # not "wrote None"

    train = build_problem(load_config(out / "config.toml")).train
    counts, labels = label_counts(train, 10)
    assert counts.shape == (6, 10) and labels == list(range(10))
    for i in range(6):  # row i: client i's training labels, counted independently
        y = train.y[train.offsets[i]:train.offsets[i + 1]].tolist()
        assert counts[i].tolist() == [y.count(c) for c in range(10)]
    assert (counts > 0).sum(1).min() < 10  # non-iid: some client lacks some class

    ls = tmp_path / "ls"  # least squares: labels are not classes
    assert run_cli(["run", config, "--out", ls, "--quiet"], capsys)[0] == 0
    code, _, err = run_cli(["plot", ls, "--split", "-o", tmp_path / "ls.png"], capsys)
    assert code == 2 and "does not classify" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ls.png").exists()


def test_label_counts_of_pm1_labels_number_them_in_sorted_order():
    import torch

    from fedpd.problems.base import ClientSplit
    from fedpd.results.figures import label_counts

    split = ClientSplit.from_parts([torch.zeros(3, 1), torch.zeros(2, 1)],
                                   [torch.tensor([1.0, -1.0, 1.0]), torch.tensor([-1.0, -1.0])])
    counts, labels = label_counts(split)
    assert labels == [-1.0, 1.0] and counts.tolist() == [[1, 2], [2, 0]]


FEDAVG = ROOT / "examples" / "fedavg.toml"


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
