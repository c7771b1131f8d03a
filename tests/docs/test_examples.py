"""Every example config runs (2 rounds, metrics at every round), and the floats-per-round column
of docs/algorithms.md is what the communication counter counts."""

from __future__ import annotations

import math
import re
import tomllib

import pytest
import torch

import fedpd
from fedpd.data.loaders import resolve_data_dir
from fedpd.errors import ConfigError
from fedpd.registry import ALGORITHMS
from helpers import ROOT, simulation

EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))
REQUIRED = ("round", "comm_rounds", "uplink_floats", "downlink_floats", "train_loss", "grad_norm_sq", "wall_s")
#: algorithms whose clients train a local model, and the primal-dual family (docs/algorithms.md)
PRIMAL_RESIDUAL = {"fedavg", "fedprox", "scaffold", "fedsam", "fedcm", "parallel_admm", "stochastic_admm"}
DUAL_DRIFT = {"fedpd", "feddyn", "fedadmm", "afedpd", "primal_dual", "afedpdsam", "fedspeed", "fedpd_vr"}
#: algorithms that never communicate (local training without federation): nothing up, nothing down
NO_COMMUNICATION = {"local", "fedplus_local"}
#: problems that read a real dataset, and the dataset they read by default
DATA_PROBLEMS = {"dataset": None, "fedplus_mnist": "mnist"}


#: the data directory the real-data examples read: $FEDPD_DATA, else fedpd's default (as fedpd reads it)
DATA_DIR = str(resolve_data_dir(None))


def missing_data(problem: dict) -> str | None:
    """Why this problem cannot run here (its dataset is not in the data directory), or None."""
    if problem.get("name") not in DATA_PROBLEMS:
        return None
    from fedpd.data.loaders import dataset_status

    name = problem.get("dataset", DATA_PROBLEMS[problem["name"]])
    status = dataset_status(name, problem.get("data_dir") or DATA_DIR)
    return None if status.state == "present" else f"dataset {name!r} is {status.state} in the data directory"


def test_there_is_an_example_per_issue3_algorithm():
    names = {tomllib.loads(p.read_text())["algorithm"]["name"] for p in EXAMPLES}
    assert DUAL_DRIFT | PRIMAL_RESIDUAL | {"parallel_saga", "stochastic_saga"} <= names


def test_there_are_fedplus_local_and_hybrid_examples():
    """Local training (nothing sent) and Fed+'s per-layer groups each have an example that runs
    below; Fed+ refuses a group pattern that matches no parameter, so running it checks them."""
    algos = [tomllib.loads(p.read_text())["algorithm"] for p in EXAMPLES]
    assert any(a["name"] == "fedplus_local" for a in algos)
    assert any(a["name"] == "fedplus" and len(a.get("groups", [])) >= 2 for a in algos)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_two_rounds(path, tmp_path):
    raw = tomllib.loads(path.read_text())
    reason = missing_data(raw["problem"])
    if reason:
        pytest.skip(f"{path.name}: {reason}")
    overrides = ["run.rounds=2", "run.eval_every=1"]
    if raw["problem"]["name"] in DATA_PROBLEMS and "data_dir" not in raw["problem"]:
        overrides.append(f"problem.data_dir={DATA_DIR}")
    result = fedpd.run(path, out=tmp_path / "run", overrides=overrides)
    assert [m["round"] for m in result.history] == [0, 1, 2]
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 3
    last = result.history[-1]
    algo = raw["algorithm"]["name"]
    keys = REQUIRED + (("primal_residual",) if algo in PRIMAL_RESIDUAL | DUAL_DRIFT else ()) \
        + (("dual_drift",) if algo in DUAL_DRIFT else ())
    for key in keys:
        assert key in last, (path.name, key)
    for m in result.history:
        for key, value in m.items():
            if isinstance(value, float):
                assert math.isfinite(value), (path.name, m["round"], key, value)
    if algo in NO_COMMUNICATION:
        assert last["uplink_floats"] == last["downlink_floats"] == 0, path.name
    else:
        assert last["uplink_floats"] > 0 and last["downlink_floats"] > 0
    assert last["train_loss"] < result.history[0]["train_loss"] + 1.0  # not blown up in 2 rounds


# --- docs/algorithms.md: floats per round -------------------------------------------------------
def documented_floats() -> dict[str, tuple[int, int, int]]:
    """{algorithm: (up, down, extra up) per participant} from the "All algorithms" table: up and down
    in units of d, extra up in floats ("d + 1 / d": q-FFL's h_i)."""
    text = (ROOT / "docs" / "algorithms.md").read_text()
    table = text.split("## All algorithms", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.fullmatch(r"`(\w+)`", cells[0])
        if name:
            counts = re.match(r"(\d*d|0)(?: \+ (\d+))? / (\d*d|0)", cells[5])
            assert counts, line
            up, extra, down = counts.groups()
            out[name.group(1)] = (*(0 if c == "0" else int(c[:-1] or 1) for c in (up, down)), int(extra or 0))
    return out


def test_docs_table_lists_every_algorithm():
    assert set(documented_floats()) == set(ALGORITHMS)


@pytest.mark.parametrize("name", sorted(documented_floats()))
def test_docs_floats_per_round_match_the_counter(name):
    n, k, d = 4, 2, 3
    problem = {"name": "least_squares", "clients": n, "dim": d, "samples_per_client": 6}
    solver = {"name": "gd", "lr": 0.1, "local_steps": 2} if ALGORITHMS[name].build.uses_solver else None
    try:
        sim = simulation({"name": name}, problem=problem, solver=solver,
                         sampler={"name": "uniform", "clients_per_round": k})
    except ConfigError:  # FedPD, FedPD-VR, Parallel ADMM: every client every round
        sim, k = simulation({"name": name}, problem=problem, solver=solver), n
    sim.step()  # round 0 may differ (Parallel SAGA's initial pass over every client): count round 1
    up0, down0 = sim.comm.uplink_floats, sim.comm.downlink_floats
    sim.step()
    up, down, extra = documented_floats()[name]
    assert sim.comm.comm_rounds == (2 if (up, down) != (0, 0) else 0)
    assert (sim.comm.uplink_floats - up0, sim.comm.downlink_floats - down0) == (up * k * d + extra * k, down * k * d)


@pytest.mark.parametrize("name", ["fedavg", "ditto", "fedavg_plus", "fedplus_fedavg"])
def test_weighting_by_samples_sends_each_clients_count(name):
    """weights = "samples": one float more up per participant (its n_i); the server weighs by
    what it was sent (equal sizes here: the same model as the plain mean)."""
    n, k, d = 4, 2, 3
    problem = {"name": "least_squares", "clients": n, "dim": d, "samples_per_client": 6}
    solver = {"name": "gd", "lr": 0.1, "local_steps": 2}
    sampler = {"name": "uniform", "clients_per_round": k}
    plain = simulation({"name": name}, problem=problem, solver=solver, sampler=sampler)
    weighted = simulation({"name": name, "weights": "samples"}, problem=problem, solver=solver, sampler=sampler)
    plain.step(), weighted.step()
    assert weighted.comm.uplink_floats == plain.comm.uplink_floats + k
    assert weighted.comm.downlink_floats == plain.comm.downlink_floats
    if "sizes" in weighted.server:  # Fed+ over all parties: those never heard from weigh 0
        heard = weighted.participants(0)
        assert weighted.server["sizes"][heard].tolist() == [6.0] * k and int((weighted.server["sizes"] > 0).sum()) == k
    else:
        assert torch.allclose(weighted.model(), plain.model(), rtol=0, atol=1e-12)
