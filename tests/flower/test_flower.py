"""fedpd on Flower's simulation runtime (Ray): the engine conformance suite, the same metrics as
in process for one algorithm of each family, and the same floats counted.

One Flower simulation (a :class:`~fedpd.flower.simulation.FlowerSession` with 3 virtual
SuperNodes on a private local Ray) serves every test of this module; it is shut down at the end
and leaves no Ray process behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
import tomli_w

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")

import fedpd  # noqa: E402
from fedpd.config import load_config  # noqa: E402
from fedpd.simulation import Simulation  # noqa: E402

from engine_conformance import EngineConformance, config, records  # noqa: E402
from user_plugins import cases  # noqa: E402

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
    mine = re.compile(rf"session_\S*_{os.getpid()}\b")  # Ray names a session's folder after its driver's pid

    def raylets() -> str:  # of the sessions this process started (other Ray sessions may run beside it)
        lines = subprocess.run(["pgrep", "-af", "raylet"], capture_output=True, text=True).stdout.splitlines()
        return "\n".join(line for line in lines if mine.search(line))

    with FlowerSession(3, backend_config(cfg)) as s:
        yield s
        # (Ray starts with the first round)
        assert raylets(), "the session's raylet is not found by its session folder: the check below would pass blindly"
    # the session's Ray is gone
    for _ in range(20):
        left = raylets()
        if not left:
            break
        time.sleep(0.5)
    assert not left.strip(), f"Ray processes left running: {left[:300]}"


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


class TestFlowerSimulationEngineOnUserAlgorithms(TestFlowerSimulationEngine):
    """The suite on a user's algorithms (tests/user_plugins.py) in a module outside the repository:
    the virtual SuperNodes, Ray actors in other processes, import it from the run's plug-in path."""

    @pytest.fixture(autouse=True)
    def _user_code(self, user_algorithms, monkeypatch):
        directory, module = user_algorithms
        monkeypatch.chdir(directory)
        self.CASES = cases(module)


def test_a_users_fedavg_subclass_gives_fedavgs_metrics_in_process_and_on_flower(session, user_algorithms, tmp_path,
                                                                              monkeypatch):
    """FedAvg subclassed in the user's own file, named by its import path in a config
    file beside it, run from another directory: the virtual SuperNodes import it from the run's
    plug-in path."""
    directory, module = user_algorithms
    builtin = config("fedavg", rounds=4)
    path = directory / f"{module}.toml"
    path.write_text(tomli_w.dumps({**builtin, "algorithm": {"name": f"{module}:MyFedAvg"}}))
    monkeypatch.chdir(tmp_path)
    expected = records(fedpd.run(builtin))
    assert records(fedpd.run(path)) == expected
    flower = fedpd.run(path, tmp_path / "flower", overrides=["run.engine=flower"], transport=session.transport)
    assert records(flower) == expected  # float64, every field bit for bit, the counted floats included
    assert expected[-1]["uplink_floats"] > 0


FAMILIES = {  # one of each family: FedAvg, SCAFFOLD, FedPD p = 0.5, FedDyn, A-FedPD, one Fed+
    "fedavg": {"name": "fedavg"}, "scaffold": {"name": "scaffold"}, "fedpd": {"name": "fedpd", "p": 0.5},
    "feddyn": {"name": "feddyn"}, "afedpd": {"name": "afedpd"}, "fedgeomed_plus": {"name": "fedgeomed_plus"},
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_flower_writes_the_in_process_metrics(name, session, tmp_path):
    algorithm = FAMILIES[name]
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
    # the nodes' client stores, beside the run (FedAvg's clients keep nothing: no store)
    assert (tmp_path / "flower" / "nodes").is_dir() == (name != "fedavg")
