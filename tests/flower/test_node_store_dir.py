"""A node's store-dir is its own: a second node started on a folder another live node holds is
refused in one line naming the holder (a stale lock of a process that is gone is taken over, with
a notice); two nodes never stage a round under the same file name; and a resume refuses, naming
the clients, when a hosted client's state the node's journal says was written is not there —
while a client that never trained (lazy initialisation) resumes from its initial state, exactly.
On loopback nodes in this process (a SuperNode runs the same node code), as the deployment's
fault was met: node 1 started on node 0's store-dir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fedpd
from fedpd.errors import ConfigError
from fedpd.remote.engine import LoopbackTransport
from fedpd.remote.filestore import JOURNAL, RUNS, VersionedStore, open_run, run_key
from fedpd.remote.messages import Envelope
from fedpd.remote.node import NodeRuntime
from fedpd.remote.storelock import LOCK, holder, hold

CFG = {"problem": {"name": "least_squares", "clients": 6, "dim": 3, "samples_per_client": 8},
       "algorithm": {"name": "feddyn", "eta": 2.0},
       "solver": {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 4},
       "sampler": {"name": "uniform", "clients_per_round": 2},
       "run": {"rounds": 2, "eval_every": 1, "seed": 4, "checkpoint_every": 1}}
A = run_key("a" * 16, "1" * 16)
INIT = {"lam": torch.zeros(2)}


def records(history) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in history]


def expected(rounds: int) -> list[dict]:
    return records(fedpd.run({**CFG, "run": {**CFG["run"], "rounds": rounds}}).history)


def node(hosted, root, lock=True, **holder_of) -> NodeRuntime:
    return NodeRuntime(hosted, root, durable=False, holder=holder(hosted, **holder_of) if lock else None)


def dead_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


# --- the lock ---------------------------------------------------------------------------------

def test_a_second_node_on_a_store_dir_a_live_node_holds_is_refused_naming_the_holder(tmp_path, capsys):
    first, second = node([0, 1, 2], tmp_path, node="11"), node([3, 4, 5], tmp_path, node="12")
    assert "error" not in first.handle(Envelope("hello")).config
    reply = second.handle(Envelope("hello"))
    error = reply.config["error"]
    assert f"store-dir {str(tmp_path)!r} is held by the node of clients 0-2 (pid " in error
    assert "node id 11), which is running: this node (clients 3-5) needs a store-dir of its own" in error
    assert "\n" not in error
    assert "fedpd node (clients 3-5): hello refused: ValueError: store-dir" in capsys.readouterr().err
    about = json.loads((tmp_path / LOCK).read_text())  # the lock still names the first node
    assert (about["clients"], about["node"]) == ("0-2", "11")
    assert "error" not in first.handle(Envelope("hello")).config  # which goes on using it


def test_the_same_node_under_a_new_id_keeps_its_lock(tmp_path, capsys):
    assert hold(tmp_path, holder([0, 1, 2], node="11")) == ""
    assert hold(tmp_path, holder([0, 1, 2], node="12")) == ""  # a restarted SuperNode, the same process
    assert json.loads((tmp_path / LOCK).read_text())["node"] == "12"


def test_a_stale_lock_of_a_process_that_is_gone_is_taken_over_with_a_notice(tmp_path, capsys):
    gone = dead_pid()
    assert hold(tmp_path, holder([0, 1, 2], node="11", pid=gone)) == ""
    runtime = node([0, 1, 2], tmp_path, node="21")  # the node restarted: a new process
    assert "error" not in runtime.handle(Envelope("hello")).config
    err = capsys.readouterr().err
    assert (f"fedpd node (clients 0-2): store-dir {str(tmp_path)!r}: took over the lock of the node of clients 0-2 "
            f"(pid {gone} on ") in err and "no longer running" in err
    assert json.loads((tmp_path / LOCK).read_text())["node"] == "21"


def test_a_warm_process_that_stops_releases_only_its_own_locks(tmp_path):
    from fedpd.remote.storelock import release

    hold(tmp_path / "mine", holder([0, 1, 2]))
    hold(tmp_path / "theirs", holder([3, 4, 5], pid=dead_pid()))  # written here, naming another process
    release()
    assert not (tmp_path / "mine" / LOCK).exists() and (tmp_path / "theirs" / LOCK).exists()


def test_a_lock_written_on_another_machine_is_refused_with_how_to_move_it(tmp_path):
    other = holder([0, 1, 2], node="11")
    (tmp_path / LOCK).write_text(json.dumps({**other.__dict__, "host": "elsewhere"}))
    with pytest.raises(ValueError, match="held by the node of clients 0-2 .* on elsewhere.*remove .*node.lock") as err:
        hold(tmp_path, holder([3, 4, 5]))
    assert "\n" not in str(err.value)


def test_a_store_dir_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    reply = node([0, 1, 2], tmp_path / "file").handle(Envelope("hello"))
    assert reply.config["error"].startswith(f"ValueError: store-dir {str(tmp_path / 'file')!r}: ")
    assert "a directory of its own that it can write" in reply.config["error"]


def test_two_nodes_on_one_store_dir_are_refused_before_the_first_round(tmp_path):
    """The deployment's fault, on loopback nodes: node 1 given node 0's store-dir. Refused in one
    line naming the holder, before anything is trained."""
    transport = LoopbackTransport({0: node([0, 1, 2], tmp_path / "store0", node="0"),
                                   1: node([3, 4, 5], tmp_path / "store0", node="1")})
    with pytest.raises(ConfigError, match="node 1: ValueError: store-dir .* is held by the node of clients 0-2") as err:
        fedpd.run(CFG, tmp_path / "run", transport=transport)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "store0" / RUNS).exists()


# --- staged files -----------------------------------------------------------------------------

def test_two_nodes_never_stage_a_round_under_the_same_file_name(tmp_path):
    folder = open_run(tmp_path, A, create=True)
    zero, one = VersionedStore(folder, INIT, [0, 1, 2], durable=False), VersionedStore(folder, INIT, [3, 4, 5],
                                                                                       durable=False)
    zero.stage(2, [0, 1], {"lam": torch.ones(2, 2)})
    one.stage(2, [3, 4, 5], {"lam": torch.full((3, 2), 2.0)})
    assert zero.staged(2)[0] == [0, 1] and one.staged(2)[0] == [3, 4, 5]
    zero.commit(2, [0, 1], zero.staged(2)[1])
    assert zero.staged(2) is None and one.staged(2)[0] == [3, 4, 5]  # a commit takes only its own
    zero.rollback(3)
    assert one.staged(2)[0] == [3, 4, 5]  # and so does a roll-back


# --- a resume with a client state missing ---------------------------------------------------

def two_nodes(tmp_path, root1: str = "store1", lock: bool = True) -> LoopbackTransport:
    return LoopbackTransport({0: node([0, 1, 2], tmp_path / "store0", lock, node="0"),
                              1: node([3, 4, 5], tmp_path / root1, lock, node="1")})


def trained(tmp_path) -> list[int]:
    """Node 1's clients with a state after the first run's 2 rounds."""
    return sorted(int(p.parent.name[1:]) for p in (tmp_path / "store1" / RUNS).glob("*/c*/v*.pt"))


def test_a_resume_with_a_client_state_removed_is_refused_naming_the_client(tmp_path):
    fedpd.run(CFG, tmp_path / "run", transport=two_nodes(tmp_path))
    have = trained(tmp_path)
    assert have, "node 1's clients were not sampled in 2 rounds (change the seed)"
    for path in (tmp_path / "store1" / RUNS).glob(f"*/c{have[0]}/v*.pt"):
        path.unlink()
    with pytest.raises(ConfigError, match=rf"restore failed: ValueError: the states of clients {have[0]} are missing "
                                          r"from .*journal says they were written.*overwrite") as err:
        fedpd.run(resume=tmp_path / "run", overrides=["run.rounds=4"], transport=two_nodes(tmp_path))
    assert "\n" not in str(err.value)


def test_a_resume_on_another_nodes_store_dir_is_refused_naming_the_clients(tmp_path):
    """Node 1 restarted on node 0's store-dir once node 0 was gone (no live lock to refuse it):
    node 0's folder of the run holds clients 0-2, not node 1's, whose states are elsewhere."""
    fedpd.run(CFG, tmp_path / "run", transport=two_nodes(tmp_path))
    assert trained(tmp_path)
    with pytest.raises(ConfigError, match=r"restore failed: ValueError: store-dir .*store0'?: its folder of run .* "
                                          r"holds the states of clients 0-2, not of this node's clients 3-5") as err:
        fedpd.run(resume=tmp_path / "run", overrides=["run.rounds=4"],
                  transport=two_nodes(tmp_path, root1="store0", lock=False))
    assert "\n" not in str(err.value)


def test_clients_that_never_trained_resume_from_their_initial_states_exactly(tmp_path):
    """Lazy initialisation: a client never sampled has no state file, and none is missing."""
    fedpd.run(CFG, tmp_path / "run", transport=two_nodes(tmp_path))
    assert len(trained(tmp_path)) < 3, "every client of node 1 trained (change the seed)"
    got = fedpd.run(resume=tmp_path / "run", overrides=["run.rounds=4"], transport=two_nodes(tmp_path)).history
    assert records(got) == expected(4)


def test_a_state_read_mid_run_whose_file_is_gone_is_refused_not_restarted(tmp_path):
    store = VersionedStore(open_run(tmp_path, A, create=True, hosted=[0, 1]), INIT, [0, 1], durable=False)
    store.commit(0, [0, 1], {"lam": torch.ones(2, 2)})
    (store.root / "c1" / "v1.pt").unlink()
    with pytest.raises(ValueError, match="states of clients 1 are missing"):
        store.get([0, 1])
    assert float(store.get([0])["lam"][0, 0]) == 1.0


def test_the_journal_follows_prune_and_rollback_and_catches_a_pruned_state(tmp_path):
    store = VersionedStore(open_run(tmp_path, A, create=True), INIT, [0, 1], durable=False)
    for r in range(4):
        store.commit(r, [0] if r else [0, 1], {"lam": torch.full((1 if r else 2, 2), float(r + 1))})
    store.prune(3)  # the checkpoint of 3 rounds: v1 and v2 of client 0 go, client 1 keeps its v1
    assert sorted(p.name for p in (store.root / "c0").iterdir()) == ["v3.pt", "v4.pt"]
    assert (store.root / JOURNAL).read_text() == "v1 0-1\nv3 0\nv4 0\n"
    store.rollback(3)
    assert store.missing() == [] and float(store.get([0, 1])["lam"][1, 0]) == 1.0
    store.rollback(2)  # an older checkpoint than the one the node pruned for: client 0's v2 is gone
    assert store.missing() == [0]


# --- on Flower: two cold SuperNodes on one store-dir ------------------------------------------

def superexecs(parents: set[int]) -> dict[int, str]:
    """The SuperExec helpers of SuperNodes ``parents`` (they put themselves in sessions of their
    own): pid -> start time."""
    from fedpd.remote.storelock import _start_time

    found = {}
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if b"--parent-pid" in args and int(args[args.index(b"--parent-pid") + 1]) in parents:
            found[int(entry.name)] = _start_time(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="follows Flower's helpers through /proc")
def test_two_cold_supernodes_on_one_store_dir_the_second_is_refused_before_the_first_round(tmp_path):
    """Flower's default mode, a ClientApp process per message: the lock names the SuperNode (not
    the ClientApp process of one message), so the second node's messages find a live holder, and
    the run is refused in one line naming it, before any round. Every process the test starts is
    stopped by PID (tests/flower_deploy.py), and the SuperExec helpers the SuperNodes started end
    with them, or are killed here by PID."""
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    import os
    import signal
    import time

    from flower_deploy import Deployment, app

    from fedpd.remote.storelock import alive

    appdir, run_dir, _ = app(tmp_path, rounds=1, algorithm="feddyn")
    store = tmp_path / "store0"
    helpers: dict[int, str] = {}
    try:
        with Deployment(tmp_path / "dep", tls=False, auth=False) as dep:
            dep.superlink()
            nodes = {"0-2": dep.supernode(0, "0-2", store).pid, "3-5": dep.supernode(1, "3-5", store).pid}
            done = dep.flwr_run(appdir, timeout=300)
            helpers.update(superexecs(set(nodes.values())))
            assert len(helpers) == 2, helpers  # one SuperExec per SuperNode (followed to the end below)
            lock = json.loads((store / LOCK).read_text())
            assert lock["pid"] == nodes[lock["clients"]], (lock, nodes)  # the SuperNode of the clients it names
        status = json.loads((run_dir / "status.json").read_text())
        assert status["state"] in ("refused", "failed"), status
        other = "3-5" if lock["clients"] == "0-2" else "0-2"
        assert (f"ValueError: store-dir {str(store)!r} is held by the node of clients {lock['clients']}"
                in status["error"]), (status, done.stdout[-3000:])
        assert f"which is running: this node (clients {other}) needs a store-dir of its own" in status["error"]
        assert "\n" not in status["error"]
        assert not (store / RUNS).exists()  # nothing was trained or written there
    finally:
        deadline = time.time() + 30
        while any(alive(pid, started) for pid, started in helpers.items()) and time.time() < deadline:
            time.sleep(0.5)
        left = [pid for pid, started in helpers.items() if alive(pid, started)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"Flower's SuperExec helpers {left} outlived their SuperNodes"
