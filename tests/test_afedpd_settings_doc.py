"""docs/reproductions/afedpd_table2/settings.md, run as written: its bash block runs verbatim in an
empty directory in a clean environment (fresh HOME; on PATH only this Python's scripts and the
system's; PYTHONPATH only this checkout's src; FEDPD_DATA passed on) with ROUNDS=1, the knob the doc
offers for a quick check; every run must reach round 1 with its changed setting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from doc_blocks import bash_blocks

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reproductions" / "afedpd_table2" / "settings.md"


def test_the_settings_commands_run_as_written(tmp_path):
    data = os.environ.get("FEDPD_DATA")
    if not data or not (Path(data) / "cifar-10").is_dir():
        pytest.skip("needs CIFAR-10 under $FEDPD_DATA (fedpd data download cifar10)")
    (block,) = bash_blocks(DOC, "Commands")
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
           "HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "src"), "LANG": "C.UTF-8", "ROUNDS": "1",
           "FEDPD_DATA": data}
    proc = subprocess.Popen(["bash", "-e", "-c", block], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=1500)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # nothing of the block may outlive it
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 0, out[-3000:]
    for run, (key, value) in {"eta2": ("eta", 2.0), "x0": ("output", "server"), "feddyn-eta2": ("eta", 2.0)}.items():
        d = tmp_path / "afedpd_check" / run
        rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        assert rows[-1]["round"] == 1 and 0 <= rows[-1]["test_acc"] <= 1, rows[-1]
        assert f"{key} = {json.dumps(value)}" in (d / "config.toml").read_text()
