"""A run killed with SIGKILL at any point and resumed writes the same metrics.jsonl (wall_s aside)
as the run that never stopped: every random stream and all state are in the checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fedpd.cli import main
from helpers import FEDAVG_LS
from helpers import run_cli as cli
from resume_runs import CONFIGS, kill_when, metrics_without_wall


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sigkill_and_resume_gives_identical_metrics(name, tmp_path, capsys):
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(CONFIGS[name])
    assert main(["run", str(cfg), "--out", str(tmp_path / "straight"), "--quiet"]) == 0
    expected = metrics_without_wall(tmp_path / "straight" / "metrics.jsonl")

    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "fedpd", "run", str(cfg), "--out", str(out), "--quiet"]
    killed = 0
    for lines in (4, 25):  # kill twice: early, then again after the first resume
        proc = subprocess.Popen(
            cmd if killed == 0 else [sys.executable, "-m", "fedpd", "run", "--resume", str(out), "--quiet"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        kill_when(out, lines, proc)
        killed += proc.returncode == -signal.SIGKILL
    assert killed == 2, "the run finished before it could be killed: make it longer"
    partial = metrics_without_wall(out / "metrics.jsonl")
    assert 0 < len(partial) < len(expected)
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert metrics_without_wall(out / "metrics.jsonl") == expected
    assert not list(out.glob(".*.tmp"))  # no temporary files left behind


def test_resume_of_a_finished_run_changes_nothing(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIGS["fedpd"].replace("rounds = 400", "rounds = 10"))
    out = tmp_path / "r"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    before = metrics_without_wall(out / "metrics.jsonl")
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert metrics_without_wall(out / "metrics.jsonl") == before


SMALL = """
[problem]
name = "synthetic"
clients = 6
max_client_samples = 40
[algorithm]
name = "scaffold"
[solver]
name = "sgd"
lr = 0.05
local_steps = 3
batch_size = 4
[sampler]
name = "uniform"
clients_per_round = 3
[run]
rounds = 10
eval_every = 7
checkpoint_every = 5
"""


def small_run(tmp_path: Path, name: str, rounds: int) -> Path:
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL)
    out = tmp_path / name
    assert main(["run", str(cfg), "--out", str(out), "--quiet", "--set", f"run.rounds={rounds}"]) == 0
    return out


def test_resume_with_more_rounds_continues_like_an_uninterrupted_run(tmp_path):
    straight = small_run(tmp_path, "straight", 20)
    out = small_run(tmp_path, "extended", 10)
    assert main(["run", "--resume", str(out), "--quiet", "--set", "run.rounds=20"]) == 0
    # the old target's final record (round 10) is gone: the directory is now a 20-round run
    assert [r["round"] for r in metrics_without_wall(out / "metrics.jsonl")] == [0, 7, 14, 20]
    assert metrics_without_wall(out / "metrics.jsonl") == metrics_without_wall(straight / "metrics.jsonl")
    assert (out / "config.toml").read_text() == (straight / "config.toml").read_text()  # says rounds = 20


def test_resume_to_the_checkpoint_round_evaluates_there(tmp_path):
    out = small_run(tmp_path, "r", 10)
    expected = metrics_without_wall(out / "metrics.jsonl")
    # the state of a 20-round run killed after its round-10 checkpoint: no record at round 10
    (out / "config.toml").write_text((out / "config.toml").read_text().replace("rounds = 10", "rounds = 20"))
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    assert main(["run", "--resume", str(out), "--quiet", "--set", "run.rounds=10"]) == 0
    assert metrics_without_wall(out / "metrics.jsonl") == expected


@pytest.mark.parametrize("override,needle", [
    ("problem.dim=7", "problem.dim"),  # the checkpoint belongs to d = 60
    ("algorithm.server_lr=0.5", "algorithm.server_lr"),
    ("run.eval_every=3", "run.eval_every"),  # would mix two evaluation schedules in metrics.jsonl
    ("run.seed=1", "run.seed"),
    ("run.rounds=9", "below the checkpoint's round 10"),
])
def test_resume_changes_nothing_but_the_target_round(tmp_path, capsys, override, needle):
    out = small_run(tmp_path, "r", 10)
    before = {p: (out / p).read_bytes() for p in ("config.toml", "metrics.jsonl", "checkpoint.pt")}
    capsys.readouterr()
    assert main(["run", "--resume", str(out), "--quiet", "--set", override]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert {p: (out / p).read_bytes() for p in before} == before


def test_python_api_resume_rejects_other_overrides(tmp_path):
    import fedpd
    from fedpd.errors import ConfigError

    out = small_run(tmp_path, "r", 10)
    with pytest.raises(ConfigError, match="a resume may change only run.rounds"):
        fedpd.run(resume=out, overrides=["problem.dim=7"])


# --- no --resume offered for, nor taken by, a run directory without a checkpoint -------------
def test_a_run_that_crashed_before_its_first_checkpoint_offers_no_resume(tmp_path, monkeypatch, capsys):
    (tmp_path / "crashing.py").write_text("from fedpd.algorithms import FedAvg\n\n\nclass Crash(FedAvg):\n"
                                          "    def aggregate(self, server, uploads, ctx):\n"
                                          "        raise RuntimeError('a bug in my hook')\n")
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.toml"
    config.write_text(FEDAVG_LS.format(rounds=3).replace('"fedavg"', '"crashing:Crash"'))
    with pytest.raises(RuntimeError, match="a bug in my hook"):
        cli(["run", config, "--out", "run", "--quiet"], capsys)
    assert (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "checkpoint.pt").exists()
    code, _, err = cli(["run", config, "--out", "run", "--quiet"], capsys)
    assert code == 2 and "no checkpoint" in err and "--resume" not in err and "--overwrite" in err, err
    before = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    code, out, err = cli(["run", "--resume", "run"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "no checkpoint.pt there" in lines[0] and "nothing to resume" in lines[0]
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == before  # nothing started from round 0
