"""The command line: every bad input is one line on stderr and exit status 2; the commands work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedpd.cli import main

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


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


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
])
def test_bad_arguments_exit_2_with_one_line(args, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(args, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_exact_solver_needs_a_quadratic_problem(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[problem]\nname = "fedpd_logreg"\nclients = 3\n[algorithm]\nname = "fedavg"\n[solver]\nname = "exact"\n')
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
                          "--set", "algorithm.name=fedprox", "--set", "algorithm.mu=0.5"], capsys)
    assert code == 0
    resolved = (out / "config.toml").read_text()
    assert "rounds = 3" in resolved and "seed = 7" in resolved and 'name = "fedprox"' in resolved and "mu = 0.5" in resolved


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
    assert code == 0 and "scaffold" in out and "grad_norm_sq" in out
    png = tmp_path / "p.png"
    code, _, _ = run_cli(["plot", *dirs, "--metric", "grad_norm_sq", "--x", "uplink_floats", "-o", png], capsys)
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = run_cli(["plot", *dirs, "--metric", "nosuch", "-o", png], capsys)
    assert code == 2 and "nosuch" in err
    code, _, err = run_cli(["plot", *dirs, "--metric", "train_loss", "--x", "epoch", "-o", png], capsys)
    assert code == 2 and "--x" in err


def test_all_examples_validate():
    from fedpd.config import load_config

    examples = sorted((Path(__file__).parents[1] / "examples").glob("*.toml"))
    assert len(examples) >= 5
    for path in examples:
        load_config(path)
