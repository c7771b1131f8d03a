"""docs/reproductions/afedpd_table2/settings.md, run as written: its bash block runs verbatim in an
empty directory in a clean environment (fresh HOME; on PATH only this Python's scripts and the
system's; PYTHONPATH only this checkout's src; FEDPD_DATA passed on) with ROUNDS=1 SAMPLES=2000 WORKERS=1,
the knobs the doc offers for a quick check (HOME holds the session's decoded-archive cache:
doc_blocks.share_decoded_cache); every run must reach round 1 with its changed setting and the
sizes the knobs set (so a knob the commands ignore fails here)."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from doc_blocks import bash_blocks, clean_env, run_script, share_decoded_cache
from helpers import ROOT

DOC = ROOT / "docs" / "reproductions" / "afedpd_table2" / "settings.md"


def test_the_settings_commands_run_as_written(tmp_path):
    data = os.environ.get("FEDPD_DATA")
    if not data or not (Path(data) / "cifar-10").is_dir():
        pytest.skip("needs CIFAR-10 under $FEDPD_DATA (fedpd data download cifar10)")
    (block,) = bash_blocks(DOC, "Commands")
    env = clean_env(tmp_path, ROUNDS="1", SAMPLES="2000", WORKERS="1", FEDPD_DATA=data)
    share_decoded_cache(tmp_path)
    done = run_script(block, tmp_path, env, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:]
    for run, (key, value) in {"eta2": ("eta", 2.0), "x0": ("output", "server"), "feddyn-eta2": ("eta", 2.0)}.items():
        d = tmp_path / "afedpd_check" / run
        rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        assert rows[-1]["round"] == 1 and 0 <= rows[-1]["test_acc"] <= 1, rows[-1]
        config = tomllib.loads((d / "config.toml").read_text())
        assert config["algorithm"][key] == value
        assert (config["run"]["rounds"], config["problem"]["max_samples"], config["run"]["workers"]) == (1, 2000, 1)
