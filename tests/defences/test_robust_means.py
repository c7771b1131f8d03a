"""The defence in place of a server step's means of the uploads — the primal-dual family, SCAFFOLD and
FedCM (fedpd.algorithms.robust.RobustMeans): for each family one server step with three clients'
uploads chosen by hand, its coordinate median worked out in the test and the step's equations applied
to it; the plain mean keeps the streamed, means-only round; the algorithms whose step needs exact
means refuse a rule in one line that says why."""

from __future__ import annotations

import pytest
import torch

from fedpd.algorithms.base import streams_means, unused_server_step
from fedpd.algorithms.robust import RobustMeans
from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.registry import ALGORITHMS
from helpers import ROOT, context, server_context, simulation

T = lambda *rows: torch.tensor(rows, dtype=torch.float64)  # noqa: E731

LS = {"name": "least_squares", "clients": 5, "dim": 2, "samples_per_client": 4}
THREE = {"name": "uniform", "clients_per_round": 3}
GD = {"name": "gd", "lr": 0.1, "local_steps": 2}
MEDIAN = {"aggregator": "coordinate_median"}
#: three clients' rows; their coordinate median is (2, 0), their mean (2, 1/3)
ROWS = T([1.0, 0.0], [3.0, 5.0], [2.0, -4.0])
ROWS_MEDIAN = T(2.0, 0.0)


def one_step(algorithm: dict, replace: dict, server: dict | None = None, sampler=THREE, problem=LS):
    """(the algorithm, the state before, its new server state and reply) of one server step whose
    uploads ``replace`` names are set by hand (the others are the clients' own, from ``local``)."""
    sim = simulation(algorithm, problem=problem, solver=GD, sampler=sampler)
    alg = sim.algorithm
    before = {**sim.server, **(server or {})}
    ids = torch.arange(ROWS.shape[0]) * (2 if sampler is THREE else 1)  # senders 0, 2, 4 (or 0, 1, 2)
    up, _ = alg.local(alg.broadcast(before), sim.store.get(ids), context(sim, ids))
    new, reply = alg.aggregate(before, {**up, **replace}, server_context(sim, ids))
    return alg, before, new, reply


@pytest.mark.parametrize("name", ["feddyn", "fedspeed"])
def test_feddyns_primal_mean_is_the_median_where_the_step_reads_it(name):
    """x̃ = median of the x_i; h ← h + (|P|/(ηN))(x̃ − x0); x0 ← x̃ + ηh (η = 2, |P| = 3, N = 5)."""
    x0, h = T(1.0, -1.0), T(0.2, 0.1)
    alg, _, new, _ = one_step({"name": name, "eta": 2.0, **MEDIAN}, {"x": ROWS}, {"x0": x0, "lam_mean": h})
    h_new = h + 3 / (2.0 * 5) * (ROWS_MEDIAN - x0)  # (0.5, 0.4)
    torch.testing.assert_close(new["lam_mean"], h_new, rtol=0, atol=1e-15)
    torch.testing.assert_close(new["x0"], ROWS_MEDIAN + 2.0 * h_new, rtol=0, atol=1e-15)  # (3, 0.8)
    assert not alg.means_only and alg.diagnostics(new)["agg_iterations"] == 0


def test_afedpds_virtual_dual_update_takes_the_median_too():
    """A-FedPD: D ← D + (x̃ − x0)/η for the absent clients, and the dual mean adds their share."""
    x0, h = T(1.0, -1.0), T(0.2, 0.1)
    _, _, new, reply = one_step({"name": "afedpd", "eta": 2.0, **MEDIAN}, {"x": ROWS}, {"x0": x0, "lam_mean": h})
    step = (ROWS_MEDIAN - x0) / 2.0  # (0.5, 0.5)
    torch.testing.assert_close(new["D"], step, rtol=0, atol=1e-15)
    lam = h + 3 / 5 * step + 2 / 5 * step  # the participants' (x̃ − x0)/(ηN) each, the 2 absent the virtual one
    torch.testing.assert_close(new["lam_mean"], lam, rtol=0, atol=1e-15)
    torch.testing.assert_close(new["x0"], ROWS_MEDIAN + 2.0 * lam, rtol=0, atol=1e-15)
    assert torch.equal(reply["D"], new["D"])


@pytest.mark.parametrize("name, sampler", [("fedadmm", THREE), ("fedpd", {"name": "all"})])
def test_the_anchor_mean_is_the_median_of_the_anchors(name, sampler):
    """FedADMM and FedPD: x0 = median of the z_i = x_i + ηλ_i (FedPD sends it back as every anchor)."""
    problem = {**LS, "clients": 3} if sampler["name"] == "all" else LS
    _, _, new, reply = one_step({"name": name, **MEDIAN}, {"z": ROWS}, sampler=sampler, problem=problem)
    torch.testing.assert_close(new["x0"], ROWS_MEDIAN, rtol=0, atol=0)
    if name == "fedpd":
        torch.testing.assert_close(reply["x0"], ROWS_MEDIAN, rtol=0, atol=0)


def test_scaffolds_two_means_are_each_a_median():
    """x0 ← x0 + η_g·median(Δx), c ← c + (|P|/N)·median(Δc)."""
    dc = ROWS / 10
    x0, c = T(1.0, -1.0), T(0.5, 0.5)
    alg, _, new, _ = one_step({"name": "scaffold", "server_lr": 0.5, **MEDIAN}, {"dx": ROWS, "dc": dc},
                              {"x0": x0, "c": c})
    torch.testing.assert_close(new["x0"], x0 + 0.5 * ROWS_MEDIAN, rtol=0, atol=1e-15)
    torch.testing.assert_close(new["c"], c + 3 / 5 * ROWS_MEDIAN / 10, rtol=0, atol=1e-15)
    # the diagnostic stays the exact mean of ‖Δx_i‖²
    torch.testing.assert_close(new["primal_residual"], (ROWS ** 2).sum(1).mean(), rtol=0, atol=1e-15)


def test_fedcms_model_and_direction_are_each_a_median():
    """x0 ← x0 + η_g(median(x) − x0), Δ ← median((x0 − x_i)/Q)/η1 (Q = 2, η1 = 0.1)."""
    x0 = T(1.0, -1.0)
    _, _, new, _ = one_step({"name": "fedcm", "server_lr": 0.5, **MEDIAN}, {"x": ROWS}, {"x0": x0})
    torch.testing.assert_close(new["x0"], x0 + 0.5 * (ROWS_MEDIAN - x0), rtol=0, atol=1e-15)
    drift = ((x0 - ROWS) / 2).sort(0).values[1]  # the median of three: the middle value per coordinate
    torch.testing.assert_close(new["delta"], drift / 0.1, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", [n for n, entry in ALGORITHMS.items() if issubclass(entry.build, RobustMeans)])
def test_without_a_rule_the_step_is_the_papers_and_streams(name):
    """The plain mean: means only, streamed, no counters, the resolved config as before the key existed."""
    sampler = {"name": "all"} if ALGORITHMS[name].build.participation == "all" else THREE
    sim = simulation({"name": name}, problem=LS, solver=GD, sampler=sampler)
    assert sim.algorithm.means_only and streams_means(sim.algorithm) and "agg_unconverged" not in sim.server
    assert "aggregator" not in sim.cfg.resolved()["algorithm"]
    robust = simulation({"name": name, **MEDIAN}, problem=LS, solver=GD, sampler=sampler)
    assert not robust.algorithm.means_only and robust.algorithm.robust_aggregate


def test_a_subclasss_own_server_step_is_taken_under_a_robust_rule():
    """An aggregate_means override below FedDyn (docs/extending.md's damped FedDyn) runs with the rule too."""
    from fedpd.algorithms import FedDyn

    class Halved(FedDyn):
        def aggregate_means(self, server, means, ctx):
            new, reply = super().aggregate_means(server, means, ctx)
            return {**new, "x0": new["x0"] / 2}, reply

    from fedpd.defence import build_defence

    algorithm = Halved(defence=build_defence("coordinate_median"))
    assert unused_server_step(algorithm) == ""


@pytest.mark.parametrize("name, invariant", [
    ("qffl", "a ratio of two sums"), ("fednova", "objective consistency"), ("parallel_saga", "y = Σ_j y_j"),
    ("stochastic_admm", "Σ_i y_i = 0"),
])
def test_a_step_that_needs_exact_means_refuses_a_rule_and_says_why(name, invariant):
    for key, value in (("aggregator", "coordinate_median"), ("aggregator_options", {"trim_ratio": 0.2})):
        cfg = {"problem": LS, "algorithm": {"name": name, key: value}}
        with pytest.raises(ConfigError) as err:
            load_config(cfg)
        line = str(err.value)
        assert line.startswith(f"algorithm.{key}: ") and invariant in line and "\n" not in line, line


def test_every_algorithm_takes_a_rule_or_refuses_it_in_one_line():
    """Over the registry: a robust rule is the algorithm's defence, or a one-line refusal."""
    for name, entry in ALGORITHMS.items():
        cfg = {"problem": LS, "algorithm": {"name": name, "aggregator": "coordinate_median"}}
        try:
            options = load_config(cfg).options["algorithm"]
        except ConfigError as err:
            assert str(err).startswith("algorithm.aggregator: ") and "\n" not in str(err), name
            continue
        assert options.defence().name == "coordinate_median", name


@pytest.mark.slow
def test_the_docs_feddyn_under_ipm_runs_as_written_and_gives_the_tables_row(tmp_path):
    """docs/algorithms.md's two commands — FedDyn under IPM, without and with ARC → NNM → trimmed mean —
    run as written in a clean environment, and end at the IPM row of the page's table."""
    import json
    import re
    import shutil

    from doc_blocks import bash_blocks, clean_env, run_script

    root = ROOT
    doc = root / "docs" / "algorithms.md"
    [block] = bash_blocks(doc, "The defence in a means-only server step")
    (tmp_path / "examples").mkdir()
    shutil.copy(root / "examples" / "feddyn.toml", tmp_path / "examples")
    done = run_script(block, tmp_path, clean_env(tmp_path / "home"))
    assert done.returncode == 0, done.stdout[-3000:]
    last = {run: json.loads((tmp_path / "runs" / run / "metrics.jsonl").read_text().splitlines()[-1])
            for run in ("feddyn-ipm", "feddyn-ipm-defended")}
    row = re.search(r"^\| IPM ε = 100 \| 2\.36 × 10⁵, ([\d.]+) % \| ([\d.]+), ([\d.]+) % \|", doc.read_text(), re.M)
    assert row, "the table's IPM row"
    assert last["feddyn-ipm"]["train_loss"] == pytest.approx(2.36e5, rel=5e-3)
    assert 100 * last["feddyn-ipm"]["test_acc"] == pytest.approx(float(row.group(1)), abs=0.05)
    assert last["feddyn-ipm-defended"]["train_loss"] == pytest.approx(float(row.group(2)), abs=5e-4)
    assert 100 * last["feddyn-ipm-defended"]["test_acc"] == pytest.approx(float(row.group(3)), abs=0.05)
