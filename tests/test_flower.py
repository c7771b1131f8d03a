"""fedpd on Flower's simulation runtime (Ray): the engine conformance suite, the same metrics as
in process for the algorithms of the Flower issue, and the same floats counted.

One Flower simulation (a :class:`~fedpd.flower.simulation.FlowerSession` with 3 virtual
SuperNodes on a private local Ray) serves every test of this module; it is shut down at the end
and leaves no Ray process behind."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")

import fedpd  # noqa: E402
from fedpd.config import load_config  # noqa: E402
from fedpd.runner import Simulation  # noqa: E402

from engine_conformance import CASES, EngineConformance, config, records  # noqa: E402

pytestmark = pytest.mark.slow

for key, value in {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0",
                   "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0"}.items():
    os.environ.setdefault(key, value)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    from fedpd.flower.simulation import FlowerSession, backend_config

    os.environ.setdefault("FLWR_HOME", str(tmp_path_factory.mktemp("flwr_home")))
    cfg = load_config({"problem": {"name": "least_squares"}, "algorithm": {"name": "fedavg"},
                       "run": {"engine": "flower", "nodes": 3}})
    with FlowerSession(3, backend_config(cfg)) as s:
        yield s
    left = subprocess.run(["pgrep", "-f", f"ray::.*|raylet.*{os.getpid()}"], capture_output=True, text=True).stdout
    assert "raylet" not in left


class TestFlowerSimulationEngine(EngineConformance):
    """Every conformance test, with the clients on Flower's virtual SuperNodes."""

    @pytest.fixture
    def engine(self, session, tmp_path) -> list[str]:
        self.session, self.tmp = session, tmp_path
        return ["run.engine=flower"]

    def run(self, cfg, engine=None, **kw):
        transport = self.session.transport if engine else None
        return fedpd.run(cfg, overrides=engine or [], transport=transport, **kw)

    def resume(self, out, overrides):
        return fedpd.run(resume=out, overrides=overrides, transport=self.session.transport)

    def simulation(self, cfg, engine):
        return Simulation(load_config(cfg, engine), workdir=self.tmp, transport=self.session.transport)


ISSUE_ALGORITHMS = {  # the Flower issue's list: FedAvg, SCAFFOLD, FedPD p = 0.5, FedDyn, A-FedPD, one Fed+
    "fedavg": {"name": "fedavg"}, "scaffold": {"name": "scaffold"}, "fedpd": {"name": "fedpd", "p": 0.5},
    "feddyn": {"name": "feddyn"}, "afedpd": {"name": "afedpd"}, "fedgeomed_plus": {"name": "fedgeomed_plus"},
}


@pytest.mark.parametrize("name", sorted(ISSUE_ALGORITHMS))
def test_flower_writes_the_in_process_metrics(name, session, tmp_path):
    algorithm = ISSUE_ALGORITHMS[name]
    sampler = {"name": "all"} if name == "fedpd" else {"name": "uniform", "clients_per_round": 5}
    cfg = config("fedavg", rounds=4, algorithm=algorithm, sampler=sampler)
    fedpd.run(cfg, tmp_path / "inprocess")
    fedpd.run(cfg, tmp_path / "flower", overrides=["run.engine=flower"], transport=session.transport)

    def lines(path):
        return [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
                for line in (path / "metrics.jsonl").read_text().splitlines()]

    flower, inprocess = lines(tmp_path / "flower"), lines(tmp_path / "inprocess")
    assert flower == inprocess  # float64: every field bit for bit, the counted floats included
    assert flower[-1]["uplink_floats"] > 0 and flower[-1]["round"] == 4
    assert (tmp_path / "flower" / "nodes").is_dir()  # the nodes' client stores, beside the run


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
            if status.count("node_") >= 2:
                break
            time.sleep(1)
        assert status.count("node_") >= 2, status
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        cfg = config(case, rounds=4)
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
