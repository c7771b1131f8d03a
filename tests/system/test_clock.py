"""The simulated clock of synchronous rounds, pinned by hand: a round lasts until its slowest kept
upload; a deadline drops later uploads and is waited out; over-selection keeps the first K to
arrive; an exchange that outlives its client's available period is lost, and
an unavailable client is not selected; equal arrivals are ordered by a seeded draw, each exchange
may have its own duration, an empty message costs nothing. Without [system] nothing changes."""

from __future__ import annotations

import json

import pytest
import torch

from fedpd.cli import main
from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.runner import run
from fedpd.simulation import Simulation

PROBLEM = {"name": "least_squares", "clients": 3, "dim": 3, "samples_per_client": 6}
Q, F = 4, 1000.0  # local steps, FLOPs per sample gradient
#: client: (speed FLOP/s, uplink B/s, downlink B/s, latency s)
FLEET = {0: (1e5, 1e3, 2e3, 0.01), 1: (2e5, 4e2, 1e3, 0.02), 2: (1e4, 1e3, 1e3, 0.05)}


def _profile(tmp_path, fleet=FLEET, name: str = "fleet.csv") -> str:
    path = tmp_path / name
    path.write_text("client,speed,uplink,downlink,latency\n" +
                    "".join(f"{k},{s},{u},{d},{lat}\n" for k, (s, u, d, lat) in fleet.items()))
    return str(path)


def _cfg(tmp_path, system: dict | None = None, sampler: dict | None = None, solver: dict | None = None) -> dict:
    return {"problem": PROBLEM, "algorithm": {"name": "fedavg"},
            "solver": solver or {"name": "gd", "lr": 0.01, "local_steps": Q},
            "sampler": sampler or {"name": "all"}, "run": {"rounds": 2, "eval_every": 1},
            "system": {"profile": _profile(tmp_path), "flops_per_sample": F, **(system or {})}}


def _exchange(k: int, d: int = 3, n: int = 6, fleet=FLEET) -> float:
    """Client k's round by hand: the model down (d float64s), Q full-batch steps over its n samples, x up."""
    speed, up, down, latency = fleet[k]
    return (latency + 8 * d / down) + Q * n * F / speed + (latency + 8 * d / up)


def test_a_round_lasts_until_its_slowest_upload(tmp_path):
    history = run(_cfg(tmp_path)).history
    slowest = max(_exchange(k) for k in FLEET)
    assert [m["sim_time_s"] for m in history] == [0.0, round(slowest, 6), round(2 * slowest, 6)]
    assert all(m["dropouts"] == 0 for m in history)


def test_the_clock_reads_each_clients_own_counted_work():
    # clients of different sizes on one device each: GD's Q full-batch steps count each client's own n_k
    cfg = {"problem": {"name": "synthetic", "clients": 5, "max_client_samples": 1000}, "algorithm": {"name": "fedavg"},
           "solver": {"name": "gd", "lr": 0.01, "local_steps": Q}, "run": {"rounds": 1},
           "system": {"speed": 1e6, "uplink": 1e12, "downlink": 1e12, "latency": 0.0, "flops_per_sample": F}}
    sim = Simulation(load_config(cfg))
    sizes = sim.problem.train.sizes.tolist()
    assert len(set(sizes)) > 1
    sim.step()
    assert sim.metrics()["sim_time_s"] == round(Q * max(sizes) * F / 1e6, 6)
    cfg["sampler"] = {"name": "uniform", "clients_per_round": 1}  # one client: the round is its own time
    sim = Simulation(load_config(cfg))
    who = int(sim.participants(0)[0])
    sim.step()
    assert sim.metrics()["sim_time_s"] == round(Q * sizes[who] * F / 1e6, 6)


def test_a_deadline_drops_later_uploads_and_is_waited_out(tmp_path):
    times = sorted(_exchange(k) for k in FLEET)
    deadline = (times[1] + times[2]) / 2  # client 2, the slowest, misses it
    sim = Simulation(load_config(_cfg(tmp_path, {"deadline_s": round(deadline, 3)})))
    x0 = sim.server["x0"].clone()
    sim.step()
    m = sim.metrics()
    assert m["dropouts"] == 1 and m["sim_time_s"] == round(deadline, 3)
    # the server averaged clients 0 and 1 only: their local models from x0, through the same solver
    assert torch.allclose(sim.server["x0"], _local_models(sim, x0, [0, 1]).mean(0), atol=1e-12)


def _local_models(sim: Simulation, x0: torch.Tensor, ids: list[int]) -> torch.Tensor:
    from fedpd.context import ClientContext
    from fedpd.problems.base import ClientData

    part = torch.tensor(ids)
    ctx = ClientContext(part, 0, ClientData(sim.problem, part), sim.solver, sim.cfg.run.seed)
    up, _ = sim.algorithm.local(sim.algorithm.broadcast({"x0": x0}), {}, ctx)
    return up["x"]


def test_over_selection_keeps_the_first_k_to_arrive(tmp_path):
    cfg = _cfg(tmp_path, {"overselect": 1.5}, sampler={"name": "uniform", "clients_per_round": 2})
    history = run(cfg).history
    second = sorted(_exchange(k) for k in FLEET)[1]
    assert history[1]["dropouts"] == 1 and history[1]["sim_time_s"] == round(second, 6)
    assert history[1]["uplink_floats"] == 2 * 3  # the third upload is not read


def test_an_exchange_that_outlives_availability_is_lost_and_the_client_not_selected(tmp_path):
    avail = tmp_path / "on.csv"
    first_round = max(_exchange(k) for k in (0, 1))  # client 2 is gone before its upload, and at round 1
    avail.write_text(f"client,start_s,end_s\n0,0,1e9\n1,0,1e9\n2,0,{first_round / 2}\n")
    history = run(_cfg(tmp_path, {"availability": "file", "availability_file": str(avail)},
                       sampler={"name": "bernoulli", "q": 1.0})).history
    assert history[1]["dropouts"] == 1  # client 2 went away before its upload arrived
    assert history[2]["dropouts"] == 1 and history[2]["downlink_floats"] - history[1]["downlink_floats"] == 2 * 3


def test_without_system_the_records_are_the_same_and_with_it_only_time_is_added(tmp_path):
    cfg = _cfg(tmp_path)
    plain = json.loads(json.dumps(cfg))
    del plain["system"]
    a = [{k: v for k, v in m.items() if k != "wall_s"} for m in run(plain).history]
    b = [{k: v for k, v in m.items() if k not in ("wall_s", "sim_time_s")} for m in run(cfg).history]
    assert a == b and "sim_time_s" not in run(plain).history[0]
    assert "system" not in load_config(plain).resolved()


@pytest.mark.parametrize("rows, message", [
    ("0,1e9,1e3,1e3,0.01\n1,1e9,1e3,1e3,0.01\n", "has no row for client 2"),
    ("0,1e9,1e3,1e3,0.01\n0,1e9,1e3,1e3,0.01\n1,1,1,1,0\n2,1,1,1,0\n", "line 3: client 0 appears twice"),
    ("0,-5,1e3,1e3,0.01\n1,1,1,1,0\n2,1,1,1,0\n", "line 2, speed is '-5'"),
    ("0,1e9,nan,1e3,0.01\n1,1,1,1,0\n2,1,1,1,0\n", "line 2, uplink is 'nan'"),
    ("0,1e9,1e3,1e3\n", "line 2 has 4 cells"),
    ("7,1,1,1,0\n", "client '7' (allowed: the ids 0 to 2)"),
    ("²,1,1,1,0\n", "client '²' (allowed: the ids 0 to 2)"),  # a digit to str.isdigit, not to int()
])
def test_a_bad_profile_is_refused_in_one_line_naming_the_row(tmp_path, rows, message, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("client,speed,uplink,downlink,latency\n" + rows)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[problem]\nname = "least_squares"\nclients = 3\n[algorithm]\nname = "fedavg"\n'
                   f'[system]\nprofile = "{path}"\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("system, message", [
    ({"availability": "file", "availability_file": "INTERVALS"}, "ends at 1 s, before it starts at 2 s"),
    ({"deadline_s": 0.001}, "system.deadline_s: 0.001 s is shorter than the fastest client's download and upload"),
    ({"speed": -1.0}, "system.speed: -1 is not allowed"),
    ({"speed": {"dist": "lognormal", "median": 1e9}},
     "system.speed: sigma: dist = \"lognormal\" needs median and sigma"),
    ({"speed": {"dist": "classes", "values": [1e9, 2e9], "shares": [0.5, 0.6]}}, "sum to 1"),
    ({"mean_on_s": 10.0}, "system.mean_on_s: is availability = \"markov\"'s"),
    ({"overselect": 1.3}, "system.overselect: selects 1.3 × K and keeps the first K, which needs a K"),
    ({"deadline_s": 1e13}, "system.deadline_s: input should be less than or equal to 1000000000000"),
    ({"availability": "markov", "mean_on_s": 1e21}, "system.mean_on_s: input should be less than or equal to"),
    ({"availability": "file", "availability_file": "LATIN1"}, "cannot read"),
])
def test_bad_system_options_are_refused_in_one_line(tmp_path, system, message):
    if system.get("availability_file") == "INTERVALS":
        path = tmp_path / "on.csv"
        path.write_text("client,start_s,end_s\n0,2,1\n1,0,1\n2,0,1\n")
        system = {**system, "availability_file": str(path)}
    if system.get("availability_file") == "LATIN1":  # not UTF-8: one line, not a UnicodeDecodeError
        path = tmp_path / "on.csv"
        path.write_bytes("client,start_s,end_s\n0,0,1 \xe9t\xe9\n".encode("latin-1"))
        system = {**system, "availability_file": str(path)}
    cfg = {"problem": PROBLEM, "algorithm": {"name": "fedavg"}, "system": {"uplink": 1e3, "downlink": 1e3, **system}}
    with pytest.raises(ConfigError) as err:
        Simulation(load_config(cfg))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_over_selection_breaks_equal_arrivals_by_a_seeded_draw_not_by_id(tmp_path):
    """Equal devices finish at the same tick: keeping the lowest ids would bias every round toward
    them; a seeded draw per (round, client) orders them instead — the same on every run."""
    same = {k: (1e5, 1e3, 1e3, 0.01) for k in range(3)}
    cfg = _cfg(tmp_path, {"overselect": 3.0, "profile": _profile(tmp_path, same, "same.csv")},
               sampler={"name": "uniform", "clients_per_round": 1})
    cfg["run"]["rounds"] = 12
    kept = []
    sim = Simulation(load_config(cfg))
    for _ in range(12):
        x0 = sim.server["x0"].clone()
        sim.step()
        models = _local_models(sim, x0, [0, 1, 2])
        kept.append(next(k for k in range(3) if torch.allclose(sim.server["x0"], models[k], atol=1e-12)))
    assert len(set(kept)) > 1  # not always client 0
    again = Simulation(load_config(cfg))
    for _ in range(12):
        again.step()
    assert torch.equal(again.server["x0"], sim.server["x0"])


def test_jitter_gives_each_exchange_its_own_duration(tmp_path):
    plain = run(_cfg(tmp_path)).history
    slowest = max(_exchange(k) for k in FLEET)
    cfg = _cfg(tmp_path, {"jitter": 0.5})
    cfg["run"]["rounds"] = 4
    history = run(cfg).history
    lengths = [b["sim_time_s"] - a["sim_time_s"] for a, b in zip(history, history[1:])]
    assert len(set(round(x, 6) for x in lengths)) == len(lengths)  # every round its own length
    assert plain[1]["sim_time_s"] == round(slowest, 6) != history[1]["sim_time_s"]
    assert [m["sim_time_s"] for m in run(cfg).history] == [m["sim_time_s"] for m in history]  # seeded


def test_a_round_that_sends_nothing_costs_no_transfer_time():
    """FedPD's skipped rounds broadcast nothing and upload nothing: only the local work takes time."""
    cfg = {"problem": {"name": "least_squares", "clients": 3, "dim": 3, "samples_per_client": 6},
           "algorithm": {"name": "fedpd", "p": 0.5, "eta": 1.0}, "solver": {"name": "gd", "lr": 0.01, "local_steps": Q},
           "run": {"rounds": 10}, "system": {"speed": 1e5, "latency": 0.5, "flops_per_sample": F}}
    sim = Simulation(load_config(cfg))
    skipped = []
    for _ in range(10):
        before, t0 = sim.comm.comm_rounds, sim.fleet.now
        sim.step()
        if sim.comm.comm_rounds == before:
            skipped.append(sim.fleet.now - t0)
    assert 0 < len(skipped) < 10 and set(skipped) == {round(Q * 6 * F / 1e5 * 1e6)}  # ticks of the local work


@pytest.mark.parametrize("system, extra, message", [
    ({"classes_by": "label"}, {}, "system.classes_by: places a client in a 'classes' distribution, and no quantity"),
    ({"overselect": 1.5}, {"asynchronous": {}}, "system.overselect: over-selection closes a synchronous round"),
])
def test_options_the_fleet_would_not_read_are_refused(system, extra, message):
    cfg = {"problem": PROBLEM, "algorithm": {"name": "fedavg"}, "system": system, **extra}
    with pytest.raises(ConfigError) as err:
        Simulation(load_config(cfg))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_over_selection_selects_the_ceiling_of_the_product_as_written():
    """⌈1.1 × 50⌉ is 55 (the product is a hair above 55 in floating point), ⌈1.3 × 3⌉ is 4."""
    from fedpd.sampling import UniformK
    from fedpd.system import draw

    for overselect, k, n, chosen in [(1.1, 50, 100, 55), (1.3, 3, 10, 4), (1.5, 2, 3, 3)]:
        cfg = load_config({"problem": {**PROBLEM, "clients": n}, "algorithm": {"name": "fedavg"},
                           "sampler": {"name": "uniform", "clients_per_round": k},
                           "system": {"overselect": overselect}})
        sim = Simulation(cfg)
        ids = draw(sim.fleet, UniformK(n, k), 0, torch.Generator().manual_seed(0))
        assert ids.numel() == chosen, (overselect, k, ids.numel())
