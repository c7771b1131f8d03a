"""A resume on another engine or another number of nodes: the clients' states move
with the run (:mod:`fedpd.handover`), and the resumed run writes the metrics an uninterrupted run
writes (the state does not depend on the engine: tests/engines/test_executor_independence.py). FedDyn:
its clients keep duals, so a state left behind would show in the numbers."""

from __future__ import annotations

import json

import pytest

import fedpd
from fedpd.cli import main
from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.remote.engine import LoopbackTransport
from fedpd.remote.filestore import RUNS
from fedpd.remote.node import NodeRuntime


def config(rounds: int, **run) -> dict:
    return {"problem": {"name": "least_squares", "clients": 6, "dim": 3, "samples_per_client": 8},
            "algorithm": {"name": "feddyn", "eta": 2.0},
            "solver": {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 4},
            "sampler": {"name": "uniform", "clients_per_round": 4},
            "run": {"rounds": rounds, "eval_every": 1, "seed": 4, **run}}


def records(path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "wall_s"} for line in open(path / "metrics.jsonl")]


def uninterrupted(tmp_path, rounds: int, **run) -> list[dict]:
    fedpd.run(config(rounds, **run), tmp_path / "whole")
    return records(tmp_path / "whole")


def test_in_process_to_loopback_and_back_equals_an_uninterrupted_run(tmp_path):
    fedpd.run(config(2), tmp_path / "a")
    fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=4", "run.engine=loopback", "run.nodes=2"])
    assert len(list((tmp_path / "a" / "nodes" / "node0" / RUNS).iterdir())) == 1  # seeded under one new key
    whole = uninterrupted(tmp_path, 6)  # = the uninterrupted loopback run (test_executor_independence)
    assert records(tmp_path / "a") == whole[:5]
    fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=6", "run.engine=inprocess"])
    assert records(tmp_path / "a") == whole
    assert not list((tmp_path / "a" / "nodes").glob(f"*/{RUNS}/*"))  # the checkpoint no longer needs them


def test_another_number_of_loopback_nodes_moves_the_states(tmp_path):
    """3 -> 2 nodes: node 0 now hosts clients 0-2, and would read client 2's initial state if the
    states stayed where they were; 2 -> 3: node 2 has no folder of the run at all."""
    fedpd.run(config(2, engine="loopback", nodes=3), tmp_path / "a")
    for k, n in enumerate([2, 3]):
        fedpd.run(resume=tmp_path / "a", overrides=[f"run.rounds={3 + k}", f"run.nodes={n}"])
        folders = list((tmp_path / "a" / "nodes").glob(f"*/{RUNS}/*"))
        assert len({f.name for f in folders}) == 1 and len(folders) == n  # the old key's folders went
    assert records(tmp_path / "a") == uninterrupted(tmp_path, 4)


def test_a_disk_store_moves_to_loopback_and_back(tmp_path):
    fedpd.run(config(2, store="disk"), tmp_path / "a")
    fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=3", "run.engine=loopback"])
    fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=4", "run.engine=inprocess"])
    assert records(tmp_path / "a") == uninterrupted(tmp_path, 4, store="disk")


def test_the_cli_resumes_a_loopback_run_in_process_without_a_word_about_run_store(tmp_path, capsys):
    """run.store, never set, was 'auto' on loopback and 'memory' in process: a resume says nothing of it."""
    path = tmp_path / "c.toml"
    path.write_text(load_config(config(2, engine="loopback")).to_toml())
    assert main(["run", str(path), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    assert main(["run", "--resume", str(tmp_path / "a"), "--set", "run.rounds=3", "--set", "run.engine=inprocess",
                 "--quiet"]) == 0
    assert "error" not in capsys.readouterr().err
    assert records(tmp_path / "a") == uninterrupted(tmp_path, 3)


def test_states_on_a_deployments_nodes_cannot_move_and_say_so_in_one_line(tmp_path):
    """SuperNodes keep the states in their own store-dir: resumed on nodes hosting other clients,
    the run is refused before anything changes."""
    def nodes(*blocks) -> LoopbackTransport:
        return LoopbackTransport({k: NodeRuntime(b, tmp_path / f"store{k}", durable=False)
                                  for k, b in enumerate(blocks)})

    fedpd.run(config(2), tmp_path / "a", transport=nodes([0, 1, 2], [3, 4, 5]))
    before = (tmp_path / "a" / "checkpoint.pt").read_bytes(), records(tmp_path / "a")
    with pytest.raises(ConfigError, match="on its nodes.*SuperNodes.*same clients") as err:
        fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=4"], transport=nodes([0, 1], [2, 3], [4, 5]))
    assert "\n" not in str(err.value)
    assert ((tmp_path / "a" / "checkpoint.pt").read_bytes(), records(tmp_path / "a")) == before
    fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=4"], transport=nodes([0, 1, 2], [3, 4, 5]))
    assert records(tmp_path / "a") == uninterrupted(tmp_path, 4)


@pytest.mark.slow  # starts Flower's simulation runtime (Ray)
def test_in_process_to_flower_and_back_equals_an_uninterrupted_run(tmp_path):
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    fedpd.run(config(1), tmp_path / "a")
    fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=2", "run.engine=flower", "run.nodes=2"])
    fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=3", "run.engine=inprocess"])
    assert records(tmp_path / "a") == uninterrupted(tmp_path, 3)
