"""Run after run on the same Flower SuperNodes and store directories (issue 24): two FedDyn
configs, then the first again — each writes the metrics of its in-process run, bit for bit (a
leaked client dual would change them); ``overwrite=true`` is tested on the loopback engine
(tests/test_node_runs.py), which runs the same node code. A real deployment
on 127.0.0.1 (tests/flower_deploy.py starts and stops every process by PID); slow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")

from fedpd.remote.filestore import MARK, RUNS  # noqa: E402

from flower_deploy import Deployment, app, metrics  # noqa: E402

pytestmark = pytest.mark.slow


def test_two_configs_then_the_first_again_on_the_same_supernodes_each_equal_its_in_process_run(tmp_path):
    apps, expected = {}, {}
    for name, eta in (("first", 2.0), ("second", 5.0), ("first-again", 2.0)):
        # one round each: a client's dual left over from an earlier run would change the next run's
        # first round already (the node keeping states across a run's rounds: tests/test_flower_deploy.py)
        apps[name], _, expected[name] = app(tmp_path, rounds=1, algorithm="feddyn", eta=eta, name=name)
    assert expected["first"] != expected["second"]
    with Deployment(tmp_path / "dep", tls=False, auth=False) as dep:
        dep.superlink()
        dep.supernode(0, "0-2", tmp_path / "store0")
        dep.supernode(1, "3-5", tmp_path / "store1")
        for name in ("first", "second", "first-again"):
            done = dep.flwr_run(apps[name], timeout=600)
            run_dir = tmp_path / f"run-{name}"
            assert (run_dir / "metrics.jsonl").exists(), done.stdout[-3000:] + dep.log("superlink")
            assert metrics(run_dir) == expected[name], f"{name}: {done.stdout[-3000:]}"
    for store in ("store0", "store1"):  # one folder per run, each naming its run directory
        marks = [json.loads(p.read_text()) for p in (tmp_path / store / RUNS).glob(f"*/{MARK}")]
        named = sorted(Path(m["run_dir"]).name for m in marks)
        assert named == ["run-first", "run-first-again", "run-second"], marks
