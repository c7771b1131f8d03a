"""What a new user met in a fresh clone (issue 33, part 4): each defect with a test that failed
before its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fedpd
from helpers import FEDAVG_LS
from helpers import run_cli as cli


def fedpd_process(args: list, cwd: Path, **kwargs) -> subprocess.Popen:
    """``python -m fedpd ARGS`` as its own process, importing this fedpd."""
    env = {**os.environ, "PYTHONPATH": str(Path(fedpd.__file__).resolve().parents[1])}
    return subprocess.Popen([sys.executable, "-m", "fedpd", *map(str, args)], cwd=cwd, env=env, **kwargs)


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


# --- 1: a reader that leaves the pipe stops nothing ---------------------------------------------
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sets a pipe's size (Linux fcntl)")
def test_a_run_whose_reader_leaves_the_pipe_runs_to_its_end(tmp_path):
    """``fedpd run CONFIG 2>&1 | grep -m1 round``: the reader takes one line and closes the pipe
    while the run still writes progress lines; the run goes on to its last round."""
    import fcntl

    (tmp_path / "c.toml").write_text(FEDAVG_LS.format(rounds=120))
    proc = fedpd_process(["run", "c.toml", "--out", "run"], tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    fcntl.fcntl(proc.stdout.fileno(), 1031, 4096)  # F_SETPIPE_SZ: the writer meets the closed pipe soon
    assert b"round 0/120" in proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=300) == 0
    assert [r["round"] for r in records(tmp_path / "run")] == list(range(121))


def test_a_closed_stdout_is_said_on_stderr_after_the_run_ends(tmp_path):
    (tmp_path / "c.toml").write_text(FEDAVG_LS.format(rounds=3))
    proc = fedpd_process(["run", "c.toml", "--out", "run", "--quiet"], tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader left before the final line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0 and "Traceback" not in err and "Exception ignored" not in err, err
    assert "the reader of stdout left before fedpd run ended; it ran to its end" in err
    assert records(tmp_path / "run")[-1]["round"] == 3


# --- 5: no --resume offered for, nor taken by, a run directory without a checkpoint -------------
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


# --- 8: a narrow compare table keeps a classifier's test accuracy --------------------------------
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
