"""``fedpd reproduce --runs PATTERNS`` (part of a budget now, the rest later: records accumulate)
and ``--set run.KEY=VALUE`` (how the runs made now execute, e.g. run.device=cuda)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedpd.cli import main
from fedpd.errors import ConfigError
from fedpd.reproduce import core, records

from helpers import ROOT

NAME = "feddyn_fedpd"  # 9 smoke runs of a second or so: ls/... and logreg/...


def keys(name: str = NAME) -> list[str]:
    return [s.key for s in core.get(name).runs(core.get(name).budgets["smoke"])]


def test_a_pattern_matches_the_key_or_its_last_parts():
    specs = core.get(NAME).runs(core.get(NAME).budgets["smoke"])
    pick = lambda runs: [s.key for s in core.select(specs, runs, NAME)]  # noqa: E731
    assert pick(None) == keys()
    assert pick("ls/feddyn*/s0") == ["ls/feddyn/s0", "ls/feddyn-k10/s0", "ls/feddyn-k4/s0", "ls/feddyn-k2/s0"]
    assert pick("feddyn/s0") == ["ls/feddyn/s0", "logreg/feddyn/s0"]  # the key's last parts
    assert pick("logreg/*, ls/fedpd/s0") == ["ls/fedpd/s0", "logreg/fedpd/s0", "logreg/feddyn/s0",
                                              "logreg/feddyn-k4/s0"]  # several, in the experiment's order
    assert pick("*") == keys()
    assert pick("fedpd/*") == ["ls/fedpd/s0", "logreg/fedpd/s0"]  # a whole part, not a prefix of one
    for bad in ("dir0.1/*", "ls/*,nothing", " , "):
        with pytest.raises(ConfigError):
            pick(bad)


def test_a_subset_runs_only_its_runs_and_the_complement_completes_the_report(tmp_path, capsys):
    out = tmp_path / "rep"
    args = ["reproduce", NAME, "--budget", "smoke", "--out", str(out), "--jobs", "1"]
    assert main(args + ["--runs", "ls/feddyn*/s0,logreg/fedpd/*"]) == 0
    first = ["ls/feddyn/s0", "ls/feddyn-k10/s0", "ls/feddyn-k4/s0", "ls/feddyn-k2/s0", "logreg/fedpd/s0"]
    assert sorted(records.load(out / "records")) == sorted(first)
    assert sorted(p.relative_to(out / "runs").as_posix() for p in (out / "runs").glob("*/*/s0")) == sorted(first)
    err = capsys.readouterr().err
    assert "5 runs to do" in err
    readme = (out / "README.md").read_text()
    rest = [k for k in keys() if k not in first]
    assert f"**{len(rest)} of the 9 runs are not recorded yet**" in readme
    assert all(f"`{k}`" in readme for k in rest)
    # the same command without --runs runs exactly the rest, and the report is whole
    before = {k: r.provenance["finished"] for k, r in records.load(out / "records").items()}
    assert main(args) == 0
    assert f"{len(rest)} runs to do" in capsys.readouterr().err
    held = records.load(out / "records")
    assert sorted(held) == sorted(keys()) and all(held[k].provenance["finished"] == before[k] for k in first)
    assert "Every one of the 9 runs is recorded." in (out / "README.md").read_text()
    # and it is the report the records give
    assert main(["reproduce", NAME, "--report-only", "--out", str(out)]) == 0


def test_a_pattern_that_matches_nothing_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["reproduce", NAME, "--budget", "smoke", "--out", str(out), "--runs", "ls/*,dir0.1/*"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'dir0.1/*' matches none of the 9 runs" in err and "ls/fedpd/s0" in err, err
    assert not out.exists()
    for extra in (["--report-only"], ["--configs-only"]):
        assert main(["reproduce", NAME, "--budget", "smoke", "--out", str(out), "--runs", "ls/*", *extra]) == 2
        assert "--runs" in capsys.readouterr().err


def test_estimate_and_verify_take_the_pattern(tmp_path, capsys):
    assert main(["reproduce", NAME, "--budget", "smoke", "--estimate", "1", "--quiet", "--runs", "logreg/*"]) == 0
    assert capsys.readouterr().out.startswith(f"{NAME} --budget smoke: 3 runs, about ")
    assert main(["reproduce", NAME, "--budget", "smoke", "--estimate", "1", "--runs", "nothing/*"]) == 2
    out = tmp_path / "rep"
    assert main(["reproduce", NAME, "--budget", "smoke", "--out", str(out), "--jobs", "1", "--quiet",
                 "--runs", "logreg/fedpd/*"]) == 0
    capsys.readouterr()
    assert main(["reproduce", NAME, "--out", str(out), "--verify", "5", "--runs", "logreg/*"]) == 0
    assert capsys.readouterr().out.startswith("1 of 1 records agree")
    assert main(["reproduce", NAME, "--out", str(out), "--verify", "1", "--set", "run.device=cpu"]) == 2
    assert "--set applies to runs made now" in capsys.readouterr().err


def test_set_changes_how_runs_execute_and_their_records_count_as_the_experiments(tmp_path, capsys):
    out = tmp_path / "rep"
    args = ["reproduce", NAME, "--budget", "smoke", "--out", str(out), "--jobs", "1", "--quiet"]
    assert main(args + ["--runs", "ls/fedpd/*", "--set", "run.device=cpu", "--set", "run.threads=2"]) == 0
    raw = json.loads(gzip.decompress((out / "records" / "ls" / "fedpd" / "s0.json.gz").read_bytes()))
    assert raw["config"]["run"]["threads"] == 2 and raw["provenance"]["machine"]["threads"] == 2
    assert "--set run.threads=2" in raw["provenance"]["command"]
    configs = (out / "configs" / "ls" / "fedpd.toml").read_text()
    assert "threads = 2" not in configs  # the report's configs are the experiment's
    assert main(args + ["--runs", "ls/fedpd/*"]) == 0  # recorded: not run again without the option
    assert records.load(out / "records")["ls/fedpd/s0"].provenance["command"] == raw["provenance"]["command"]
    for bad, allowed in (("solver.lr=1", "run.device"), ("run.rounds=5", "run.device"),
                         ("run.device", "run.KEY=VALUE")):
        assert main(args + ["--set", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and allowed in err and "run.rounds," not in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal cannot happen here")
def test_a_device_the_machine_lacks_is_refused_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["reproduce", NAME, "--budget", "smoke", "--out", str(out), "--set", "run.device=cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'cuda' is not present" in err, err
    assert not (out / "records").exists()


def test_the_readme_section_runs_as_written(tmp_path):
    """docs/reproductions/README.md, "Part of a budget": its bash block, verbatim, in an empty
    directory with a clean environment."""
    from doc_blocks import bash_blocks

    blocks = bash_blocks(ROOT / "docs" / "reproductions" / "README.md", "Part of a budget")
    assert len(blocks) == 1 and "--runs" in blocks[0]
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
           "HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT / "src"), "LANG": "C.UTF-8", "COLUMNS": "120"}
    done = subprocess.run(["bash", "-e", "-c", blocks[0]], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(records.load(tmp_path / "feddyn_part" / "records")) == 9
    assert "Every one of the 9 runs is recorded." in (tmp_path / "feddyn_part" / "README.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the record would re-run there")
def test_a_record_made_on_a_gpu_is_verified_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["reproduce", NAME, "--budget", "smoke", "--out", str(out), "--jobs", "1", "--quiet",
                 "--runs", "logreg/fedpd/*"]) == 0
    path = records.path_of(out / "records", "logreg/fedpd/s0")
    raw = json.loads(gzip.decompress(path.read_bytes()))
    raw["config"]["run"]["device"] = "cuda"  # as a GPU machine writes it (run.device is how, not what)
    path.write_bytes(gzip.compress(json.dumps(raw).encode()))
    capsys.readouterr()
    assert main(["reproduce", NAME, "--out", str(out), "--verify", "1"]) == 0
    assert capsys.readouterr().out.startswith("1 of 1 records agree")
    raw["metrics"]["train_loss"] = [v * 1.01 for v in raw["metrics"]["train_loss"]]  # and a changed number fails
    path.write_bytes(gzip.compress(json.dumps(raw).encode()))
    assert main(["reproduce", NAME, "--out", str(out), "--verify", "1"]) == 1
