"""``fedpd sweep --ray`` and ``fedpd reproduce --ray``: every run a Ray task on a
two-node cluster started on this machine (tests/ray_cluster.py), the run directories sent back to
the head; the metrics and the compare table equal the local sweep's, an interrupted sweep resumes
its runs from the checkpoints it had received, and bad input (an address that does not answer, a
missing Ray, options that do not fit) is one line."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fedpd.cli import main
from fedpd.errors import ConfigError
from fedpd.reproduce import cluster
from helpers import run_records as records
from helpers import sweep_configs
from ray_cluster import free_port


def configs(tmp_path: Path) -> list[str]:
    return [str(p) for p in sweep_configs(tmp_path)]  # fedavg and scaffold, 4 rounds


def run_dirs(out: Path) -> list[Path]:
    return sorted(p.parent for p in out.rglob("metrics.jsonl"))


# --- bad input: no cluster needed --------------------------------------------------------------
def test_an_address_that_does_not_answer_is_one_line_within_30_s(tmp_path, capsys):
    t0 = time.perf_counter()
    code = main(["sweep", *configs(tmp_path), "--out", str(tmp_path / "s"), "--ray", f"127.0.0.1:{free_port()}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and time.perf_counter() - t0 < 30
    assert len(err) == 1 and err[0].startswith("fedpd: error: --ray 127.0.0.1:") and "nothing answers there" in err[0]
    assert not (tmp_path / "s" / "fedavg" / "s0" / "metrics.jsonl").exists()


@pytest.mark.parametrize("argv, fragment", [
    (["--ray"], "--ray: no ADDRESS given and RAY_ADDRESS is not set"),
    (["--ray", "127.0.0.1:1", "--jobs", "2"], "give --jobs or --ray, not both"),
    (["--cpus-per-run", "2"], "--cpus-per-run / --gpus-per-run: they apply to runs on a Ray cluster"),
    (["--ray", "127.0.0.1:1", "--cpus-per-run", "0"], "--cpus-per-run 0: allowed: more than 0"),
    (["--ray", "nowhere"], "expected HOST:PORT"),
])
def test_cluster_options_that_do_not_fit_are_one_line(argv, fragment, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["sweep", *configs(tmp_path), "--out", str(tmp_path / "s"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0]


def test_reproduce_takes_the_cluster_options_too(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{free_port()}")  # --ray alone: this one
    assert main(["reproduce", "feddyn_fedpd", "--budget", "smoke", "--out", str(tmp_path / "r"), "--ray"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing answers there" in err[0]


def test_without_ray_installed_it_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    with pytest.raises(ConfigError, match=r'pip install "fedpd\[flower\]"'):
        cluster.import_ray()


# --- a task's stream of files, without Ray ---------------------------------------------------
def test_a_task_streams_its_run_directory_and_resumes_from_the_files_it_is_given(tmp_path, monkeypatch):
    """run_task (what a Ray task runs) sends the run directory after checkpoints and at the end;
    landed on the head they make the run's directory; a task given a partial directory (an
    interrupted run) resumes it; a complete run's deleted checkpoint is deleted on the head."""
    from fedpd.config import apply_overrides, load_toml
    from fedpd.runner import run

    monkeypatch.setattr(cluster, "SNAPSHOT_SECONDS", 0)  # every checkpoint, however long reading the files
    monkeypatch.setattr(cluster, "SNAPSHOT_SPACING", 0)  # took (on a loaded machine: longer than a round)
    config = apply_overrides(load_toml(configs(tmp_path)[0]), ["run.rounds=6"])
    items = list(cluster.run_task("a/s0", config, "new", False, True, {}, {}))
    assert [i[0] for i in items] == ["files"] * (len(items) - 1) + ["done"] and len(items) >= 4
    assert items[-1][1][0] == "a/s0" and items[-1][1][2] == ""
    head, received = tmp_path / "head", set()
    for _, files, names in items[:-1]:
        cluster.land(head, files, names, received)
    reference = tmp_path / "reference"
    run(config, reference)
    assert records(head) == records(reference)
    assert sorted(p.name for p in head.iterdir()) == ["checkpoint.pt", "config.toml", "metrics.jsonl"]

    partial = tmp_path / "partial"  # the head's directory of a run interrupted after its round-2 checkpoint
    first = items[0]
    cluster.land(partial, first[1], first[2], set())
    assert json.loads((partial / "metrics.jsonl").read_text().splitlines()[-1])["round"] == 2
    files = cluster.read_files(partial)[0]
    resumed = list(cluster.run_task("a/s0", config, "resume", False, False, files, {}))
    received = set(files)
    for _, files, names in resumed[:-1]:
        cluster.land(partial, files, names, received)
    assert records(partial) == records(reference)
    assert not (partial / "checkpoint.pt").exists()  # keep_checkpoints=False: deleted there, so here


# --- on a two-node cluster ---------------------------------------------------------------------
@pytest.fixture
def address(ray_cluster):
    return ray_cluster  # tests/conftest.py: one cluster for this module and test_flower_ray.py


@pytest.mark.slow
def test_a_sweep_on_the_cluster_equals_the_local_sweep(address, tmp_path, capsys):
    cfgs = configs(tmp_path)
    assert main(["sweep", *cfgs, "--seeds", "1,2", "--out", str(tmp_path / "local"), "--jobs", "1", "--quiet",
                 "--format", "csv"]) == 0
    local = capsys.readouterr().out
    assert main(["sweep", *cfgs, "--seeds", "1,2", "--out", str(tmp_path / "ray"), "--ray", address, "--quiet",
                 "--format", "csv"]) == 0
    remote = capsys.readouterr().out
    dirs = run_dirs(tmp_path / "local")
    assert len(dirs) == 4 and [d.relative_to(tmp_path / "local") for d in dirs] == \
        [d.relative_to(tmp_path / "ray") for d in run_dirs(tmp_path / "ray")]
    for d in dirs:
        there = tmp_path / "ray" / d.relative_to(tmp_path / "local")
        assert records(there) == records(d)
        assert sorted(p.name for p in there.iterdir()) == sorted(p.name for p in d.iterdir())  # checkpoint kept
    assert without_wall_clock(local.replace(str(tmp_path / "local"), "OUT")) == \
        without_wall_clock(remote.replace(str(tmp_path / "ray"), "OUT"))


def without_wall_clock(table_csv: str) -> list[dict]:
    """The compare table's rows but its ``wall_s`` column: seconds differ from run to run."""
    rows = list(csv.DictReader(io.StringIO(table_csv)))
    assert rows and "wall_s" in rows[0]
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


@pytest.mark.slow
def test_an_interrupted_sweep_resumes_its_runs_from_the_checkpoints_it_received(address, tmp_path):
    """Ctrl-C the head once a checkpoint of a run has come back: that run's directory holds it,
    and the same command again resumes it (the records before the checkpoint are kept as they
    were, wall_s included) to the metrics of the run made locally in one go."""
    # ~10 s a run alone (the first checkpoint comes back after 5 s); longer if both runs ended before
    # the Ctrl-C took (a fast or a loaded machine)
    for rounds in (6_000, 20_000, 80_000):
        cfgs = [*configs(tmp_path)[:1], "--set", f"run.rounds={rounds}", "--set", f"run.eval_every={rounds // 40}",
                "--set", "run.checkpoint_every=100"]
        out = tmp_path / f"ray{rounds}"
        argv = [sys.executable, "-m", "fedpd", "sweep", *cfgs, "--seeds", "1,2", "--out", str(out), "--ray",
                address, "--quiet"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        # Ctrl-C must reach it even where this test runs with SIGINT ignored (a background job of a
        # script inherits that, and Python then installs no KeyboardInterrupt handler)
        head = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        kept: dict[Path, list[str]] = {}
        deadline = time.time() + 240
        while time.time() < deadline and head.poll() is None and not kept:
            for d in run_dirs(out):
                lines = (d / "metrics.jsonl").read_text().splitlines()
                if (d / "checkpoint.pt").exists() and 1 < len(lines) and json.loads(lines[-1])["round"] < rounds:
                    kept[d] = lines
            time.sleep(0.2)
        assert head.poll() is None, head.stderr.read()
        head.send_signal(signal.SIGINT)
        code = head.wait(60)
        if code == 0 and all(json.loads(lines[-1])["round"] == rounds for lines in
                             ((d / "metrics.jsonl").read_text().splitlines() for d in run_dirs(out))):
            continue  # every run had finished: nothing was interrupted, try again with longer runs
        assert code == 130
        break
    assert kept
    assert main(argv[3:]) == 0  # the same command (in this process)
    for d, lines in kept.items():
        assert (d / "metrics.jsonl").read_text().splitlines()[:len(lines)] == lines  # resumed, not started again
    assert not list(Path(tempfile.gettempdir()).glob(f"{cluster.TEMP_PREFIX}*"))  # the stopped tasks' too
    local = tmp_path / "local"
    assert main(["sweep", *cfgs, "--seeds", "1,2", "--out", str(local), "--jobs", "2", "--quiet"]) == 0
    for d in run_dirs(local):
        assert records(out / d.relative_to(local)) == records(d)


@pytest.mark.slow
def test_a_reproduction_on_the_cluster_writes_the_same_results(address, tmp_path):
    from fedpd.reproduce import core

    local = core.reproduce("feddyn_fedpd", budget="smoke", out=tmp_path / "local", jobs=1, progress=False)
    remote = core.reproduce("feddyn_fedpd", budget="smoke", out=tmp_path / "ray", progress=False,
                            cluster=cluster.Cluster(address))
    strip = lambda text: [",".join(c for i, c in enumerate(row.split(",")) if i not in drop)  # noqa: E731
                          for row in text.splitlines()]
    header = (tmp_path / "local" / "results.csv").read_text().splitlines()[0].split(",")
    drop = {i for i, name in enumerate(header) if "wall" in name}
    assert strip((tmp_path / "ray" / "results.csv").read_text()) == strip(
        (tmp_path / "local" / "results.csv").read_text()
    )
    from fedpd.reproduce import records

    held = records.load(tmp_path / "ray" / "records")  # each run recorded as it came back, with the node's machine
    assert (
        sorted(held) == sorted(records.load(tmp_path / "local" / "records"))
        and local.name == remote.name == "README.md"
    )
    assert all(r.provenance["machine"]["threads"] == 1 and r.provenance["elapsed_s"] > 0 for r in held.values())
