"""Node state is run-scoped: long-lived nodes serve run after run, and each run reads
only its own clients' states — a new run starts from the initial states, a resume rolls back
within its own run, ``overwrite`` starts afresh, and old runs' folders are cleaned up by the
keep-runs rule. The store on its own first, then whole runs on the same loopback nodes and store
directories, each equal to its in-process run (FedDyn: the duals would leak otherwise)."""

from __future__ import annotations

import os
import time

import pytest
import torch

import fedpd
from fedpd.errors import ConfigError
from fedpd.remote.engine import LoopbackTransport
from fedpd.remote.filestore import IN_PROGRESS_S, MARK, RUNS, VersionedStore, cleanup, open_run, run_key
from fedpd.remote.node import NodeRuntime

INIT = {"lam": torch.zeros(2)}
A, B = run_key("a" * 16, "1" * 16), run_key("b" * 16, "1" * 16)


def commit(store: VersionedStore, round: int, value: float) -> None:
    store.commit(round, [0], {"lam": torch.full((1, 2), value)})


def value(store: VersionedStore) -> float:
    return float(store.get([0])["lam"][0, 0])


# --- the store on its own ---------------------------------------------------------------------

def test_two_runs_on_one_node_never_see_each_others_states(tmp_path):
    a = VersionedStore(open_run(tmp_path, A, create=True), INIT, [0, 1], durable=False)
    commit(a, 0, 1.0), commit(a, 1, 2.0)
    b = VersionedStore(open_run(tmp_path, B, create=True), INIT, [0, 1], durable=False)
    assert value(b) == 0.0 and b.touched() == []  # a new run starts from the initial state
    commit(b, 0, 5.0)
    assert (value(a), a.version(0)) == (2.0, 2) and (value(b), b.version(0)) == (5.0, 1)
    assert sorted(p.name for p in (tmp_path / RUNS).iterdir()) == [A, B]
    assert (tmp_path / RUNS / A / "c0" / "v2.pt").is_file()


def test_a_resume_rolls_back_within_its_own_run_only(tmp_path):
    a = VersionedStore(open_run(tmp_path, A, create=True), INIT, [0], durable=False)
    for r in range(3):
        commit(a, r, float(r + 1))
    b = VersionedStore(open_run(tmp_path, B, create=True), INIT, [0], durable=False)
    commit(b, 0, 9.0), commit(b, 1, 10.0)
    again = VersionedStore(open_run(tmp_path, A, create=False), INIT, [0], durable=False)
    again.rollback(1)
    assert (value(again), again.version(0)) == (1.0, 1)
    assert (value(b), b.version(0)) == (10.0, 2)  # the other run kept every version


def test_a_resume_whose_states_are_gone_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="not in .*keep-runs rule.*overwrite") as err:
        open_run(tmp_path, A, create=False)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key", ["../../etc", "a" * 16, "", "A" * 16 + "-" + "1" * 16, "a" * 16 + "-1/../x"])
def test_a_run_key_that_is_not_token_hash_is_refused(tmp_path, key):
    with pytest.raises(ValueError, match="run-key"):
        open_run(tmp_path, key, create=True)
    assert not (tmp_path / RUNS).exists() or list((tmp_path / RUNS).iterdir()) == []


def age(folder, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(folder / MARK, (t, t))


def test_cleanup_keeps_the_most_recently_used_runs_and_any_in_progress(tmp_path):
    keys = [run_key(f"{k:016x}", "2" * 16) for k in range(6)]
    for k, key in enumerate(keys[:5]):  # run k last used (5 - k) hours ago ...
        age(open_run(tmp_path, key, create=True, keep_runs=10), (5 - k) * IN_PROGRESS_S + 60)
    age(tmp_path / RUNS / keys[0], 60)  # ... except run 0, used a minute ago: in progress
    open_run(tmp_path, keys[5], create=True, keep_runs=3)  # a new run: the 3 most recent stay
    left = sorted(p.name for p in (tmp_path / RUNS).iterdir())
    assert left == sorted([keys[0], keys[4], keys[5]])  # by last use: runs 1, 2 and 3 went
    # keep-runs 1: neither the run in progress nor the run that starts is removed
    assert cleanup(tmp_path / RUNS, 1, current=keys[5]) == [keys[4]]
    assert sorted(p.name for p in (tmp_path / RUNS).iterdir()) == sorted([keys[0], keys[5]])


def test_using_a_run_marks_it_recent(tmp_path):
    open_run(tmp_path, A, create=True)
    age(tmp_path / RUNS / A, 2 * IN_PROGRESS_S)
    open_run(tmp_path, A, create=False)  # a resume (or any message of the run) uses it
    assert time.time() - (tmp_path / RUNS / A / MARK).stat().st_mtime < 60


# --- whole runs on the same nodes -------------------------------------------------------------

def config(**algorithm) -> dict:
    return {"problem": {"name": "least_squares", "clients": 6, "dim": 3, "samples_per_client": 8},
            "algorithm": {"name": "feddyn", "eta": 2.0, **algorithm},
            "solver": {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 4},
            "sampler": {"name": "uniform", "clients_per_round": 4},
            "run": {"rounds": 3, "eval_every": 1, "seed": 4}}


def records(history) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in history]


def expected(cfg: dict) -> list[dict]:
    return records(fedpd.run(cfg).history)


@pytest.fixture
def nodes(tmp_path):
    """Two long-lived nodes with their own store directories, as two SuperNodes."""
    def make(keep_runs: int = 3) -> LoopbackTransport:
        return LoopbackTransport({0: NodeRuntime([0, 1, 2], tmp_path / "store0", durable=False, keep_runs=keep_runs),
                                  1: NodeRuntime([3, 4, 5], tmp_path / "store1", durable=False, keep_runs=keep_runs)})
    return make


def test_two_configs_then_the_first_again_on_the_same_nodes_each_equal_its_in_process_run(tmp_path, nodes):
    transport = nodes()
    first, second = config(), config(eta=5.0)
    for k, cfg in enumerate([first, second, first]):
        got = fedpd.run(cfg, tmp_path / f"run{k}", transport=transport).history
        assert records(got) == expected(cfg), f"run {k}"
    assert len(list((tmp_path / "store0" / RUNS).iterdir())) == 3  # one folder per run
    # overwrite: the first run's directory started over, from the initial states, under a new key
    got = fedpd.run(first, tmp_path / "run0", transport=transport, overwrite=True).history
    assert records(got) == expected(first)


def test_a_resume_after_another_run_on_the_same_nodes_continues_its_own_states(tmp_path, nodes):
    transport = nodes()
    first = config()
    fedpd.run({**first, "run": {**first["run"], "rounds": 2}}, tmp_path / "a", transport=transport)
    fedpd.run(config(eta=5.0), tmp_path / "b", transport=transport)  # its clients' states after 3 rounds
    got = fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=4"], transport=transport).history
    assert records(got) == expected({**first, "run": {**first["run"], "rounds": 4}})


def test_a_resume_whose_node_states_were_cleaned_up_is_one_line(tmp_path, nodes, monkeypatch):
    import fedpd.remote.filestore as filestore

    monkeypatch.setattr(filestore, "IN_PROGRESS_S", -1)  # no run counts as in progress: keep-runs alone
    transport = nodes(keep_runs=1)
    fedpd.run(config(), tmp_path / "a", transport=transport)
    fedpd.run(config(eta=5.0), tmp_path / "b", transport=transport)  # keep-runs=1: run a's folders go
    assert len(list((tmp_path / "store0" / RUNS).iterdir())) == 1
    with pytest.raises(ConfigError, match="restore failed.*keep-runs rule") as err:
        fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=4"], transport=transport)
    assert "\n" not in str(err.value)


def test_a_checkpoint_without_a_run_token_is_refused_in_one_line(tmp_path, nodes):
    transport = nodes()
    fedpd.run(config(), tmp_path / "a", transport=transport)
    sd = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    del sd["engine"]["run"]  # as written before node state was kept per run
    torch.save(sd, tmp_path / "a" / "checkpoint.pt")
    with pytest.raises(ConfigError, match="no run token.*--overwrite") as err:
        fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=4"], transport=transport)
    assert "\n" not in str(err.value)


def test_stateless_clients_need_no_run_folder_and_resume_exactly(tmp_path, nodes):
    transport = nodes()
    fedavg = {**config(), "algorithm": {"name": "fedavg"}}
    fedpd.run(fedavg, tmp_path / "a", transport=transport)
    assert not (tmp_path / "store0" / RUNS).exists()  # nothing kept, no message to start the run
    got = fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=4"], transport=transport).history
    assert records(got) == expected({**fedavg, "run": {**fedavg["run"], "rounds": 4}})


def test_a_supernodes_keep_runs_comes_from_its_node_config(tmp_path):
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    from types import SimpleNamespace

    from fedpd.flower.clientapp import node_runtime
    from fedpd.remote.filestore import KEEP_RUNS
    from fedpd.remote.messages import Envelope

    def runtime(**more):
        context = SimpleNamespace(node_config={"hosted-clients": "0-2", "store-dir": str(tmp_path), **more})
        return node_runtime(context, Envelope("hello"))

    assert runtime().keep_runs == KEEP_RUNS == 3
    assert runtime(**{"keep-runs": 5}).keep_runs == 5
    for bad in ("0", "-1", "all"):
        with pytest.raises(ValueError, match="keep-runs .*at least 1"):
            runtime(**{"keep-runs": bad})


def test_a_node_without_work_in_the_first_round_still_starts_the_run_and_a_resume_finds_it(tmp_path, nodes):
    """One client per round: in round 0 one node trains and the other gets the start message in
    the same exchange; both hold the run's folder, so the resume's roll-back finds it on both."""
    transport = nodes()
    one = {**config(), "sampler": {"name": "uniform", "clients_per_round": 1}}
    fedpd.run({**one, "run": {**one["run"], "rounds": 1}}, tmp_path / "a", transport=transport)
    assert [len(list((tmp_path / s / RUNS).iterdir())) for s in ("store0", "store1")] == [1, 1]
    assert sum(any((tmp_path / s / RUNS).glob("*/c*/v1.pt")) for s in ("store0", "store1")) == 1
    got = fedpd.run(resume=tmp_path / "a", overrides=["run.rounds=4"], transport=transport).history
    assert records(got) == expected({**one, "run": {**one["run"], "rounds": 4}})
