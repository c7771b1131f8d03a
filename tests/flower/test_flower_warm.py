"""Warm SuperNodes: a SuperNode started with ``--isolation process`` and one
``fedpd flower clientapp`` process beside it, which serves every message of every run
(src/fedpd/flower/warm.py). Run after run on the same warm processes and store directories
(two FedDyn configs, then the first again), each run writes the metrics of its
in-process run, bit for bit (a client dual left in the store by an earlier run, or a run's built
problem or algorithm kept into the next, would show), and each run has its own folder in a
node's store; ``overwrite=true`` is tested on the loopback engine (tests/flower/test_node_runs.py), which
runs the same node code. The node's build cache holds one run's pieces at a time, keyed by the run; and
docs/deployment.md's warm section runs as written and leaves nothing running. Real deployments on
127.0.0.1 (tests/flower_deploy.py starts and stops every process by PID); slow."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from doc_blocks import bash_blocks
from helpers import ROOT
from fedpd.cli import main
from fedpd.remote import node
from fedpd.remote.filestore import MARK, RUNS

DOC = ROOT / "docs" / "deployment.md"
SECTION = "4. Warm SuperNodes"
DOC_ROUNDS, ROUNDS = "--set run.rounds=5", "--set run.rounds=1"

CONFIG = """
[problem]
name = "least_squares"
clients = 4
dim = 3
samples_per_client = 6
[algorithm]
name = "feddyn"
eta = 2.0
[solver]
name = "sgd"
lr = 0.05
local_steps = 2
batch_size = 3
[run]
rounds = 2
"""


def test_the_node_builds_a_run_once_and_keeps_no_other_runs_pieces():
    node._BUILT.clear()
    first = node._pieces(CONFIG, "run-a")
    assert node._pieces(CONFIG, "run-a") is first  # a warm process pays the build once per run
    second = node._pieces(CONFIG, "run-b")  # the same config, another run: built anew
    assert second is not first and second[1] is not first[1] and second[2] is not first[2]
    assert [key[0] for key in node._BUILT] == ["run-b"]  # run-a's pieces are gone
    assert node._pieces(CONFIG, "run-a") is not first
    node._BUILT.clear()


@pytest.mark.parametrize("argv, said", [
    (["--runtime-api-address", "127.0.0.1:9094"], "give --insecure"),
    (["--runtime-api-address", "127.0.0.1:9094", "--insecure", "--root-certificates", "ca.crt"], "one of them"),
    (["--runtime-api-address", "9094", "--insecure"], "expected HOST:PORT"),
    (["--runtime-api-address", "127.0.0.1:9094", "--root-certificates", "no-such-ca.crt"], "no such file"),
])
def test_bad_clientapp_options_are_one_line_errors(argv, said, capsys):
    assert main(["flower", "clientapp", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1, err


@pytest.mark.slow
def test_warm_nodes_serve_run_after_run_each_with_its_in_process_metrics(tmp_path):
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    from flower_deploy import Deployment, app, metrics

    apps, expected = {}, {}
    for name, eta in (("first", 2.0), ("second", 5.0), ("first-again", 2.0)):
        # one round each: a dual left from an earlier run would change the next run's first round
        # already, and a FedDyn round is two messages to a node (train, commit), the second served
        # from the run's built pieces (rounds after the first: tests/flower/test_flower_deploy.py)
        apps[name], _, expected[name] = app(tmp_path, rounds=1, algorithm="feddyn", eta=eta, name=name)
    with Deployment(tmp_path / "dep", tls=False, auth=False) as dep:
        dep.superlink()
        dep.supernode(0, "0-2", tmp_path / "store0", warm=True)
        dep.supernode(1, "3-5", tmp_path / "store1", warm=True)
        dep.wait_warm("supernode0"), dep.wait_warm("supernode1")
        for name in ("first", "second", "first-again"):
            done = dep.flwr_run(apps[name], timeout=600)
            run_dir = tmp_path / f"run-{name}"
            assert (run_dir / "metrics.jsonl").exists(), done.stdout[-3000:] + dep.log("supernode0-clientapp")
            assert metrics(run_dir) == expected[name], f"{name}: {done.stdout[-3000:]}"
        for k in (0, 1):  # one process served all three runs, and Flower started no ClientApp process
            served = dep.log(f"supernode{k}-clientapp")
            assert dep.procs[f"supernode{k}-clientapp"].poll() is None, served
            assert len(re.findall(r"serving run \d+", served)) == 3 and "failed" not in served, served
            assert "flwr-clientapp" not in dep.log(f"supernode{k}"), dep.log(f"supernode{k}")
    for store in ("store0", "store1"):  # one folder per run in a node's store, each naming its run directory
        marks = [json.loads(p.read_text()) for p in (tmp_path / store / RUNS).glob(f"*/{MARK}")]
        named = sorted(Path(m["run_dir"]).name for m in marks)
        assert named == ["run-first", "run-first-again", "run-second"], marks


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="follows the processes it starts through /proc")
def test_the_warm_section_runs_as_written_and_stops_what_it_started(tmp_path):
    """The section's bash blocks as one script (the rounds fewer through the doc's own --set), in
    a clean environment; every process it starts is followed through /proc and none may be left
    after the doc's stop."""
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    from flower_deploy import holding_ports, run_doc_script
    from flower_deploy import deployment_env

    blocks = bash_blocks(DOC, SECTION)
    text = "\n".join(blocks)
    assert text.count(DOC_ROUNDS) == 1
    assert len(re.findall(r"^flower-supernode .* --isolation process", text, re.M)) == 2, text
    assert len(re.findall(r"^fedpd flower clientapp --runtime-api-address", text, re.M)) == 2, text
    started = re.findall(r"^(\w+)=\$!$", text, re.M)
    assert text.count(" &\n") == len(started)  # every background process has its PID kept
    last = blocks[-1].strip().split()
    assert last[:2] == ["kill", "-TERM"] and sorted(last[2:]) == sorted(f"${p}" for p in started), last
    work = tmp_path / "work"
    shutil.copytree(ROOT / "examples", work / "examples")
    log = tmp_path / "out.log"
    with holding_ports((9192, 9194, 9195)) as ports:  # the doc's own, for the test's whole life
        returncode, left = run_doc_script("\n".join(blocks).replace(DOC_ROUNDS, ROUNDS), work,
                                          deployment_env(tmp_path / "home"), log, ports, timeout=900)
    said = log.read_text(errors="replace")
    assert returncode == 0, said[-6000:]
    assert not left, f"still running after the doc's stop: {left}\n{said[-3000:]}"
    assert "Exit Code" not in said, said[-6000:]
    records = [json.loads(line) for line in (work / "warm" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1]
    assert said.count("serving run") == 2, said[-3000:]  # each node's warm ClientApp served the run
