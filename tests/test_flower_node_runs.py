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

import fedpd  # noqa: E402
from fedpd.cli import main  # noqa: E402
from fedpd.remote.filestore import MARK, RUNS  # noqa: E402

from flower_deploy import Deployment  # noqa: E402

pytestmark = pytest.mark.slow

CONFIG = """
[problem]
name = "least_squares"
clients = 6
dim = 3
samples_per_client = 8
[algorithm]
name = "feddyn"
eta = ETA
[solver]
name = "sgd"
lr = 0.05
local_steps = 3
batch_size = 4
[sampler]
name = "uniform"
clients_per_round = 4
[run]
rounds = 2
eval_every = 1
seed = 4
"""


def metrics(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_two_configs_then_the_first_again_on_the_same_supernodes_each_equal_its_in_process_run(tmp_path):
    apps, expected = {}, {}
    for name, eta in (("first", "2.0"), ("second", "5.0"), ("first-again", "2.0")):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(CONFIG.replace("ETA", eta))
        expected[name] = [{k: v for k, v in r.items() if k != "wall_s"} for r in fedpd.run(cfg).history]
        assert main(["flower", "app", str(cfg), "--out", str(tmp_path / f"app-{name}"),
                     "--run-dir", str(tmp_path / f"run-{name}")]) == 0
        apps[name] = tmp_path / f"app-{name}"
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
