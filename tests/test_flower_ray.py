"""fedpd's Flower simulation on a Ray cluster of two nodes (``ray start --head`` and ``ray start
--address=…`` on this machine, as on two machines): the clients train on both nodes and the
metrics equal the in-process run. Its own module, so that no other Ray runs in this process
(tests/test_flower.py's session is closed by then). Every process started is stopped by PID."""

from __future__ import annotations

import os
import subprocess

import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")

import fedpd  # noqa: E402
from fedpd.config import load_config  # noqa: E402

from engine_conformance import SGD, config, records  # noqa: E402

pytestmark = pytest.mark.slow

for key, value in {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0",
                   "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0"}.items():
    os.environ.setdefault(key, value)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM (``ray start --block`` tears its processes down), then SIGKILL of the group."""
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.mark.parametrize("case", ["afedpd"])
def test_a_simulation_spread_over_a_two_node_ray_cluster(case, tmp_path, monkeypatch):
    """``ray start --head`` and ``ray start --address=…`` (two Ray nodes on this machine, as on two
    machines), RAY_ADDRESS exported, then the run: clients trained on both Ray nodes and the
    metrics equal the in-process run. Every process started is stopped by PID."""
    import shutil
    import socket
    import time

    from fedpd.flower.simulation import FlowerSession, backend_config

    ray = shutil.which("ray", path=os.path.dirname(os.sys.executable))
    assert ray, "the ray command comes with flwr[simulation]"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import tempfile

    stale = os.path.exists("/tmp/ray/ray_current_cluster")
    temp = tempfile.mkdtemp(prefix="fpray", dir="/tmp")  # Ray's socket paths must stay short
    common = ["--block", "--num-cpus=1", "--disable-usage-stats", f"--temp-dir={temp}"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen([ray, "start", "--head", f"--port={port}", "--include-dashboard=false", *common],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    worker = None
    try:
        time.sleep(4)
        worker = subprocess.Popen([ray, "start", f"--address=127.0.0.1:{port}", *common], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.time() + 60
        status = ""
        while time.time() < deadline:
            status = subprocess.run([ray, "status", f"--address=127.0.0.1:{port}"], capture_output=True, text=True,
                                    env=env).stdout
            if status.count("node_") >= 2 and "/2.0 CPU" in status:  # both nodes joined with their CPU
                break
            time.sleep(1)
        assert status.count("node_") >= 2 and "/2.0 CPU" in status, status
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        # Flower's actor pool hands a job to the last actor that became idle: jobs of a few
        # milliseconds, arriving one by one on a loaded machine, would all go to one actor. Local
        # work long enough for a round's jobs to overlap lets both actors (one per node) train.
        cfg = config(case, rounds=4, solver={**SGD, "local_steps": 1500})
        reference = records(fedpd.run(cfg))
        nodes = 4
        with FlowerSession(nodes, backend_config(load_config(cfg, ["run.engine=flower"]))) as session:
            sim_cfg = load_config(cfg, ["run.engine=flower"])
            result = fedpd.run(sim_cfg, tmp_path / "run", transport=session.transport)
        assert records(result) == reference
        ray_nodes = {h.split("/", 1)[1] for h in result.simulation.engine.hosts_seen if "/" in h}
        assert len(ray_nodes) == 2, result.simulation.engine.hosts_seen  # clients ran on both Ray nodes
    finally:
        for proc in (worker, head):
            if proc is not None:
                _stop(proc)
        if not stale and os.path.exists("/tmp/ray/ray_current_cluster"):
            os.remove("/tmp/ray/ray_current_cluster")
        shutil.rmtree(temp, ignore_errors=True)
