"""A reader that leaves fedpd's output early stops nothing: ``fedpd run ... | grep -m1 round``
lets the run go on to its last round, and a closed stdout is said on stderr once the run ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fedpd
from helpers import FEDAVG_LS


def fedpd_process(args: list, cwd: Path, **kwargs) -> subprocess.Popen:
    """``python -m fedpd ARGS`` as its own process, importing this fedpd."""
    env = {**os.environ, "PYTHONPATH": str(Path(fedpd.__file__).resolve().parents[1])}
    return subprocess.Popen([sys.executable, "-m", "fedpd", *map(str, args)], cwd=cwd, env=env, **kwargs)


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


# --- a reader that leaves the pipe stops nothing ---------------------------------------------
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
