"""fedpd deployed on Flower, on 127.0.0.1: a SuperLink and two SuperNodes as separate processes
(tests/flower_deploy.py starts them, tracks their PIDs and stops them). With TLS and SuperNode
authentication the run writes the in-process metrics; a SuperNode whose key was never
registered is refused; a SuperNode killed with SIGKILL mid-run and restarted lets the run
finish with the same metrics. The nodes are warm (``--isolation process`` and a ``fedpd flower
clientapp`` beside each, docs/deployment.md section 4): the node code and the metrics are those of
Flower's default mode, a ClientApp process per message, which the docs' deployments run
(tests/flower/test_deployment_doc.py: TLS, node keys and a node killed and restarted; the extending
doc: a user's algorithm), at a fraction of the cost. Still slow: an idle SuperNode polls every
3 s."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")

import fedpd  # noqa: E402
from fedpd.cli import main  # noqa: E402

from flower_deploy import CONFIG, Deployment, app, metrics  # noqa: E402

pytestmark = pytest.mark.slow


def test_tls_and_node_auth_deployment_writes_the_in_process_metrics(tmp_path):
    appdir, run_dir, expected = app(tmp_path, rounds=2)  # a second round: the clients' states come back
    with Deployment(tmp_path / "dep", tls=True, auth=True) as dep:
        dep.superlink()
        dep.register(0), dep.register(1)
        dep.supernode(0, "0-2", tmp_path / "store0", key=0, warm=True)
        dep.supernode(1, "3-5", tmp_path / "store1", key=1, warm=True)
        dep.wait_warm("supernode0"), dep.wait_warm("supernode1")
        done = dep.flwr_run(appdir, timeout=600)
        assert (run_dir / "metrics.jsonl").exists(), done.stdout[-3000:] + dep.log("superlink")
        assert metrics(run_dir) == expected, done.stdout[-3000:]
        assert any((tmp_path / "store0").glob("runs/*/c*/v*.pt"))  # client state on the node's own disk, per run
        # an unregistered SuperNode is refused: it exits with an error, and the run was not affected
        refused = dep.supernode(2, "0-5", tmp_path / "store2", key=2, name="unregistered")
        assert refused.wait(60) != 0
        assert "Failed to activate SuperNode" in dep.log("unregistered") or "2004" in dep.log("unregistered")


def test_a_supernode_killed_mid_run_and_restarted_lets_the_run_finish_exactly(tmp_path):
    """Without node keys a restarted SuperNode joins at once under a new id (the dead one stays
    listed for a minute); the server learns that the new node hosts the same clients, sends the
    lost work again, and the node continues from the client states in its store directory. The
    node restarts on its old Runtime API port, where its warm ClientApp waited for it."""
    appdir, run_dir, expected = app(tmp_path, rounds=5)
    with Deployment(tmp_path / "dep", tls=False, auth=False) as dep:
        run = start_on_two_warm_nodes(dep, tmp_path, appdir, run_dir, records=3)  # until round 2's record
        assert run.poll() is None, "the run ended before the SuperNode could be killed"
        dep.kill("supernode1")  # SIGKILL, mid-run (its warm ClientApp, in a session of its own, lives on)
        dep.supernode(1, "3-5", tmp_path / "store1", name="supernode1-restarted", warm=True,
                      runtime=dep.runtime["supernode1"])
        out, _ = run.communicate(timeout=600)
        assert metrics(run_dir) == expected, out[-3000:]
        served = dep.log("supernode1-clientapp")  # the same warm process served the restarted node
        assert served.count("serving the SuperNode") >= 2 and "waiting" in served, served


def test_a_users_algorithm_runs_on_nodes_that_allow_it_and_a_node_that_does_not_is_rejected(tmp_path,
                                                                                       user_algorithms):
    """A user's algorithm with client state and a reply (tests/user_plugins.py), in a
    module the SuperLink's and the SuperNodes' Python path reach. With ``allowed-plugins`` naming
    it on both nodes the run writes the in-process metrics; a node restarted without it refuses
    (one line naming the module in the server's log) and its clients' uploads are counted as
    rejected, round after round, while the run goes on."""
    directory, module = user_algorithms
    cfg = directory / f"{module}_deploy.toml"  # beside the module: found there in process
    cfg.write_text(CONFIG.replace("ROUNDS", "2").replace("ETA", "2.0").replace("ALGORITHM", f"{module}:DualAverage"))
    expected = [{k: v for k, v in r.items() if k != "wall_s"} for r in fedpd.run(cfg).history]
    runs = []
    for name in ("allowed", "refused"):
        app = ["flower", "app", str(cfg), "--out", str(tmp_path / name), "--run-dir", str(tmp_path / f"run-{name}")]
        assert main(app) == 0
        runs.append((tmp_path / name, tmp_path / f"run-{name}"))
    allow = f"allowed-plugins='other,{module}'"
    with Deployment(tmp_path / "dep", tls=False, auth=False) as dep:
        dep.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(directory), dep.env.get("PYTHONPATH", "")) if p)
        dep.superlink()
        dep.supernode(0, "0-2", tmp_path / "store0", more=allow, warm=True)
        dep.supernode(1, "3-5", tmp_path / "store1", more=allow, warm=True)
        dep.wait_warm("supernode0"), dep.wait_warm("supernode1")
        done = dep.flwr_run(runs[0][0], timeout=600)
        assert (runs[0][1] / "metrics.jsonl").exists(), done.stdout[-3000:] + done.stderr[-2000:]
        assert metrics(runs[0][1]) == expected, done.stdout[-3000:]
        dep.kill("supernode1", signal.SIGTERM)  # graceful: the SuperLink frees the node at once
        dep.supernode(1, "3-5", tmp_path / "store1b", name="supernode1-refusing", more="allowed-plugins='other'",
                      warm=True, runtime=dep.runtime["supernode1"])  # its node config reaches the warm process
        done = dep.flwr_run(runs[1][0], timeout=600)
        refused = metrics(runs[1][1])
        assert [r["round"] for r in refused] == [0, 1, 2], done.stdout[-3000:]
        assert refused[-1]["rejected_uploads"] > 0 and refused[-1]["uplink_floats"] > 0
        said = done.stdout + dep.log("superlink")
        assert f"plug-in module '{module}' is not allowed on this node" in said, said[-3000:]


def test_a_node_that_leaves_for_good_is_not_waited_for_and_its_clients_come_back_with_it(tmp_path):
    """A SuperNode stopped after round 1 (Flower lists it offline at once) costs the
    later rounds no wait (run.node_timeout is 600 s): one line says it is gone, its clients count
    as dropouts, status.json records both and that the run finished. Started again with its
    clients and store, it is back for a resume with more rounds (from the rewritten app): its
    round-1 commit, still pending, is made first, and its clients train again (no new dropouts)."""
    import json

    appdir, run_dir, _ = app(tmp_path, rounds=2, algorithm="feddyn")
    with Deployment(tmp_path / "dep", tls=False, auth=False) as dep:
        run = start_on_two_warm_nodes(dep, tmp_path, appdir, run_dir, records=2)  # until round 1's record
        dep.kill("supernode1", signal.SIGTERM)  # it leaves (its warm ClientApp stays, for its return)
        left = time.time()
        out, _ = run.communicate(timeout=600)
        assert time.time() - left < 300, out[-3000:]  # not run.node_timeout for each later round
        records = metrics(run_dir)
        assert [r["round"] for r in records] == [0, 1, 2] and records[-1]["dropouts"] > 0, out[-3000:]
        assert out.count("(node id") and out.count(" is gone (") == 1, out[-3000:]
        status = json.loads((run_dir / "status.json").read_text())
        assert status["state"] == "finished" and any(" is gone (" in n["text"] for n in status["notices"]), status
        dep.supernode(1, "3-5", tmp_path / "store1", name="supernode1-back", warm=True,
                      runtime=dep.runtime["supernode1"])
        assert main(["flower", "app", str(tmp_path / "run.toml"), "--out", str(appdir), "--run-dir", str(run_dir),
                     "--set", "run.rounds=3", "--overwrite"]) == 0
        done = dep.flwr_run(appdir, timeout=600, run_config="resume=true")
        records = metrics(run_dir)
        assert [r["round"] for r in records] == [0, 1, 2, 3], done.stdout[-3000:]
        assert records[-1]["dropouts"] == records[2]["dropouts"], done.stdout[-3000:]  # back: nobody drops out
        assert any((tmp_path / "store1").glob("runs/*/c*/v1.pt"))  # its round-1 states, committed on its return
        assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
        assert main(["status", str(run_dir)]) == 0


def start_on_two_warm_nodes(dep: Deployment, tmp_path: Path, appdir: Path, run_dir: Path, records: int):
    """A SuperLink and two warm SuperNodes (clients 0-2 and 3-5, stores store0 and store1), the app's
    ``flwr run`` started, and a wait (at most 300 s) until the run has ``records`` records or ends."""
    import subprocess

    dep.superlink()
    dep.supernode(0, "0-2", tmp_path / "store0", warm=True)
    dep.supernode(1, "3-5", tmp_path / "store1", warm=True)
    dep.wait_warm("supernode0"), dep.wait_warm("supernode1")
    argv = [str(Path(dep.env["PATH"].split(":")[0]) / "flwr"), "run", str(appdir), "test", "--stream"]
    run = subprocess.Popen(argv, env=dep.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    dep.track("flwr-run", run)
    deadline = time.time() + 300
    while time.time() < deadline and run.poll() is None:
        if (run_dir / "metrics.jsonl").exists() and len(metrics(run_dir)) >= records:
            break
        time.sleep(0.5)
    return run
