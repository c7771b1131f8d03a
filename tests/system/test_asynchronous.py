"""FedAsync and FedBuff pinned by hand on a tiny problem: staleness weights, the event order
(arrival time, then client id) and the server step, against a computation written out here.

Three least-squares clients solved exactly (x_k* = argmin f_k, whatever they start from), every
client in flight (C = N = 3), latencies 0.1, 0.2, 0.3 s and bandwidths so large that a message's
bytes take no microsecond: client k's exchange takes 2·latency_k."""

from __future__ import annotations

import math

import pytest
import torch

from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.simulation import Simulation

PROBLEM = {"name": "least_squares", "clients": 3, "dim": 3, "samples_per_client": 6}


def _profile(tmp_path) -> str:
    path = tmp_path / "fleet.csv"
    path.write_text("client,speed,uplink,downlink,latency\n0,1e9,1e15,1e15,0.1\n1,1e9,1e15,1e15,0.2\n"
                    "2,1e9,1e15,1e15,0.3\n")
    return str(path)


def _sim(tmp_path, asynchronous: dict, algorithm: str = "fedavg") -> Simulation:
    return Simulation(load_config({"problem": PROBLEM, "algorithm": {"name": algorithm},
                                   "solver": {"name": "exact"}, "run": {"rounds": 3},
                                   "system": {"profile": _profile(tmp_path)},
                                   "asynchronous": {"concurrency": 3, **asynchronous}}))


def _optima(sim: Simulation) -> list[torch.Tensor]:
    """x_k* by hand: the normal equations of each client's least squares."""
    out = []
    for k in range(3):
        a, b = int(sim.problem.train.offsets[k]), int(sim.problem.train.offsets[k + 1])
        A, y = sim.problem.train.x[a:b], sim.problem.train.y[a:b]
        out.append(torch.linalg.solve(A.T @ A, A.T @ y))
    return out


def _steps(sim: Simulation, n: int) -> list[tuple[torch.Tensor, float]]:
    out = []
    for _ in range(n):
        sim.step()
        out.append((sim.server["x0"].clone(), sim.metrics()["sim_time_s"]))
    return out


def test_fedbuff_buffers_staleness_weighted_updates_in_arrival_then_id_order(tmp_path):
    sim = _sim(tmp_path, {"name": "fedbuff", "buffer": 2})
    x0, (o0, o1, _) = sim.server["x0"].clone(), _optima(sim)
    (x1, t1), (x2, t2) = _steps(sim, 2)
    # t = 0.2: client 0 arrives (τ = 0), is sent again from version 0 and arrives at 0.4 with
    # client 1 — client 0 first (the lower id): the buffer is full, x1 = x0 − (Δ0 + Δ0)/2 = o0
    assert t1 == 0.4 and torch.allclose(x1, o0, atol=1e-12)
    # client 1 (from version 0, τ = 1, s = 1/√2) and client 0 again at 0.6 (from x1 = o0: Δ = 0)
    s = 1 / math.sqrt(2)
    assert t2 == 0.6 and torch.allclose(x2, x1 - (s * (x0 - o1) + (x1 - o0)) / 2, atol=1e-12)
    assert sim.metrics()["staleness"] == 0.5


def test_fedasync_mixes_each_arrival_with_its_staleness_weight(tmp_path):
    sim = _sim(tmp_path, {"name": "fedasync", "alpha": 0.5})
    x0, (o0, o1, _) = sim.server["x0"].clone(), _optima(sim)
    (x1, t1), (x2, t2), (x3, t3) = _steps(sim, 3)
    assert t1 == 0.2 and torch.allclose(x1, 0.5 * x0 + 0.5 * o0, atol=1e-12)
    assert t2 == 0.4 and torch.allclose(x2, 0.5 * x1 + 0.5 * o0, atol=1e-12)  # client 0 again, τ = 0, before client 1
    a = 0.5 * 3 ** -0.5  # client 1 started from version 0 and arrives after two updates: s(2) = (2 + 1)^-½
    assert t3 == 0.4 and torch.allclose(x3, (1 - a) * x2 + a * o1, atol=1e-12)


@pytest.mark.parametrize("staleness, tau, expected", [
    ({"staleness": "constant"}, 7, 1.0),
    ({"staleness": "polynomial", "a": 0.5}, 3, 0.5),
    ({"staleness": "hinge", "a": 2.0, "b": 1.0}, 1, 1.0),
    ({"staleness": "hinge", "a": 2.0, "b": 1.0}, 4, 1 / 7),
])
def test_staleness_functions_follow_xie_et_al(staleness, tau, expected):
    opts = load_config({"problem": PROBLEM, "algorithm": {"name": "fedavg"}, "system": {},
                        "asynchronous": {"name": "fedasync", **staleness}}).asynchronous
    assert opts.weight(tau) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("change, message", [
    ({"asynchronous": {"buffer": 11}}, "asynchronous.buffer: K = 11 uploads per update with C = 10"),
    ({"asynchronous": {"name": "fedasync", "buffer": 3}}, "asynchronous.buffer: is fedbuff's option"),
    ({"asynchronous": {"staleness": "constant", "a": 2.0}}, "asynchronous.a: staleness = \"constant\" does not read"),
    ({"algorithm": {"name": "feddyn"}}, "'feddyn' cannot run asynchronously"),
    ({"algorithm": {"name": "fedavg", "aggregator": "coordinate_median"}}, "cannot run asynchronously"),
    ({"sampler": {"name": "uniform", "clients_per_round": 3}},
     "sampler.name: 'uniform' is not used: the asynchronous server draws"),
    ({"asynchronous": {"concurrency": 30}}, "asynchronous.concurrency: 30 clients in flight of 20"),
    ({"system": None}, "asynchronous: needs the clock of a [system] section"),
    ({"solver": {"name": "sgd", "lr_decay": 0.9}}, "solver.lr_decay: decays the step size per round"),
])
def test_what_cannot_run_asynchronously_is_refused_in_one_line(change, message):
    cfg = {"problem": {"name": "synthetic", "clients": 20}, "algorithm": {"name": "fedavg"},
           "solver": {"name": "sgd"}, "system": {}, "asynchronous": {"concurrency": 10}}
    for key, value in change.items():
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = {**cfg.get(key, {}), **value} if key == "asynchronous" else value
    with pytest.raises(ConfigError) as err:
        Simulation(load_config(cfg))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_known_arrival_times_and_training_on_demand_give_the_same_run(monkeypatch):
    """FedAvg on plain SGD: every arrival is known when the client is sent (its sample gradients are
    Q × B), so clients train only when the server reads them; with the count unknown they train as
    soon as their arrival could come first. The event sequence, the models and the clock agree; only
    when the sample gradients are counted moves."""
    import fedpd.asynchronous as asynchronous
    from fedpd.runner import run

    cfg = {"problem": {"name": "synthetic", "clients": 30}, "algorithm": {"name": "fedadam"},
           "solver": {"name": "sgd", "lr": 0.05, "local_steps": 5, "batch_size": 10},
           "system": {"speed": {"dist": "lognormal", "median": 1e6, "sigma": 1.0}, "availability": "markov",
                      "mean_on_s": 3.0, "mean_off_s": 1.0},
           "asynchronous": {"concurrency": 8, "buffer": 4}, "run": {"rounds": 12, "eval_every": 3}}
    known = [{k: v for k, v in m.items() if k not in ("wall_s", "sample_grads")} for m in run(cfg).history]
    monkeypatch.setattr(asynchronous, "exact_work", lambda algorithm, solver: False)
    unknown = [{k: v for k, v in m.items() if k not in ("wall_s", "sample_grads")} for m in run(cfg).history]
    assert known == unknown and known[-1]["dropouts"] > 0
