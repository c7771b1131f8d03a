"""fedpd's Flower simulation on a Ray cluster of two nodes (``ray start --head`` and ``ray start
--address=…`` on this machine, as on two machines): the clients train on both nodes and the
metrics equal the in-process run. Its own module, so that no other Ray runs in this process
(tests/flower/test_flower.py's session is closed by then). Every process started is stopped by PID."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")

import fedpd  # noqa: E402
from fedpd.config import load_config  # noqa: E402

from engine_conformance import SGD, config, records  # noqa: E402

pytestmark = pytest.mark.slow

for key, value in {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0",
                   "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0"}.items():
    os.environ.setdefault(key, value)


@pytest.mark.parametrize("case", ["afedpd"])
def test_a_simulation_spread_over_a_two_node_ray_cluster(case, tmp_path, monkeypatch, ray_cluster):
    """``ray start --head`` and ``ray start --address=…`` (two Ray nodes on this machine, as on two
    machines), RAY_ADDRESS exported, then the run: clients trained on both Ray nodes and the
    metrics equal the in-process run. Every process started is stopped by PID."""
    from fedpd.flower.simulation import FlowerSession, backend_config

    monkeypatch.setenv("RAY_ADDRESS", ray_cluster)
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
