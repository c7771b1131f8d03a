"""docs/reproductions/fedplus_table2/sweep.md, run as written: its bash block runs verbatim in an
empty directory in a clean environment (fresh HOME; on PATH only this Python's scripts and the
system's; PYTHONPATH only this checkout's src), with ROUNDS=2 — the knob the doc offers for a quick
check — and writes one CSV per point with a FedAvg+ and a FedGeoMed+ row."""

from __future__ import annotations

import csv
from pathlib import Path

from doc_blocks import bash_blocks, clean_env, run_script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reproductions" / "fedplus_table2" / "sweep.md"


def test_the_sweep_commands_run_as_written(tmp_path):
    (block,) = bash_blocks(DOC, "Commands")
    done = run_script(block, tmp_path, clean_env(tmp_path, ROUNDS="2"), timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:]
    tables = sorted((tmp_path / "fedplus_sweep").glob("*.csv"))
    assert len(tables) == 13, tables
    for table in tables:
        rows = list(csv.DictReader(table.open()))
        assert sorted(r["algorithm"] for r in rows) == ["fedavg_plus", "fedgeomed_plus"], table
        assert all(r["rounds"] == "2" and float(r["personal_mse_final"]) > 0 for r in rows), table
