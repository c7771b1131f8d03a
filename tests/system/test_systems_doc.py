"""docs/systems.md as written: its commands run in a fresh directory and a clean environment, and
the figures its prose quotes are what they print; a deployment refuses [system]."""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from doc_blocks import bash_blocks, clean_env, run_script
from fedpd.build import build, build_problem
from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.system import build_fleet

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "systems.md"


@pytest.mark.slow
def test_the_pages_commands_run_as_written_and_print_what_it_says(tmp_path):
    [block] = bash_blocks(DOC, "Systems and time")[:1]
    work = tmp_path / "clone"
    shutil.copytree(ROOT / "examples", work / "examples")
    done = run_script(block, work, clean_env(tmp_path / "home"))
    assert done.returncode == 0, done.stdout[-3000:]
    assert (work / "runs" / "time.png").stat().st_size > 0
    table = subprocess.run([sys.executable, "-m", "fedpd", "compare", "runs/fedbuff", "runs/fleet", "--target",
                            "test_acc=0.6", "--format", "csv"], cwd=work, env=clean_env(tmp_path / "home"),
                           capture_output=True, text=True, timeout=120)
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(table.stdout))}
    text = " ".join(DOC.read_text().split())
    said = re.search(r"FedBuff reaches 60 % test accuracy at ([\d.]+) simulated seconds \((\d+) updates\), "
                     r"synchronous FedAvg at ([\d.]+) s \((\d+) rounds\)", text)
    assert said, "the page's measured sentence"
    fedbuff, fleet = rows["fedbuff"], rows["fleet"]
    assert f"{float(fedbuff['test_acc>=0.6 sim_time_s']):.1f}" == said.group(1)
    assert fedbuff["test_acc>=0.6 rounds"] == said.group(2)
    assert f"{float(fleet['test_acc>=0.6 sim_time_s']):.1f}" == said.group(3)
    assert fleet["test_acc>=0.6 rounds"] == said.group(4)


def test_a_deployment_refuses_system_in_one_line():
    cfg = load_config({"problem": {"name": "least_squares"}, "algorithm": {"name": "fedavg"}, "system": {}})
    problem = build_problem(cfg)
    algorithm, _, sampler = build(cfg, problem)
    with pytest.raises(ConfigError) as err:
        build_fleet(cfg, problem, sampler, algorithm, transport=SimpleNamespace(deployed=True))
    assert "records measured wall time" in str(err.value) and "\n" not in str(err.value)
