"""A run killed with SIGKILL at any point and resumed writes the same metrics.jsonl (wall_s aside)
as the run that never stopped: every random stream and all state are in the checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedpd.cli import main

CONFIGS = {
    # FedPD's coin flips, minibatch SGD and stragglers all draw from the checkpointed streams
    "fedpd": """
[problem]
name = "fedpd_logreg"
clients = 20
samples_per_client = 50
[algorithm]
name = "fedpd"
eta = 1.0
p = 0.5
[solver]
name = "sgd"
lr = 0.1
local_steps = 10
batch_size = 5
straggler_fraction = 0.3
[run]
rounds = 400
eval_every = 7
checkpoint_every = 5
""",
    "scaffold": """
[problem]
name = "synthetic"
clients = 20
max_client_samples = 100
[algorithm]
name = "scaffold"
[solver]
name = "sgd"
lr = 0.05
local_steps = 10
batch_size = 5
momentum = 0.5
[sampler]
name = "uniform"
clients_per_round = 5
[run]
rounds = 400
eval_every = 7
checkpoint_every = 5
seed = 3
""",
}


def metrics_without_wall(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        r.pop("wall_s")
    return records


def kill_when(out: Path, min_checkpoint_lines: int, proc: subprocess.Popen) -> None:
    """SIGKILL the run once some metrics are written after a checkpoint exists."""
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        metrics = out / "metrics.jsonl"
        if (out / "checkpoint.pt").exists() and metrics.exists() and len(metrics.read_text().splitlines()) >= min_checkpoint_lines:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


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
        proc = subprocess.Popen(cmd if killed == 0 else [sys.executable, "-m", "fedpd", "run", "--resume", str(out), "--quiet"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
