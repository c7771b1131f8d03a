"""docs/reproductions/fedplus_table2/sweep.md, run as written: its bash block runs verbatim in an
empty directory in a clean environment (fresh HOME; on PATH only this Python's scripts and the
system's; PYTHONPATH only this checkout's src), with ROUNDS=2 — the knob the doc offers for a quick
check — and writes one CSV per point with a FedAvg+ and a FedGeoMed+ row."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

from doc_blocks import bash_blocks

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reproductions" / "fedplus_table2" / "sweep.md"


def test_the_sweep_commands_run_as_written(tmp_path):
    (block,) = bash_blocks(DOC, "Commands")
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
           "HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "src"), "LANG": "C.UTF-8", "ROUNDS": "2"}
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
    tables = sorted((tmp_path / "fedplus_sweep").glob("*.csv"))
    assert len(tables) == 13, tables
    for table in tables:
        rows = list(csv.DictReader(table.open()))
        assert sorted(r["algorithm"] for r in rows) == ["fedavg_plus", "fedgeomed_plus"], table
        assert all(r["rounds"] == "2" and float(r["personal_mse_final"]) > 0 for r in rows), table
