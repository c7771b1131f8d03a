"""Client-level differential privacy (``[privacy]``, :mod:`fedpd.privacy`; issue 32): the clipped,
noised sum of DP-FedAvg and adaptive clipping, its accountant against dp-accounting called
directly and against a published figure, the one-line refusals, and the same numbers after a
resume and on the loopback engine (the noise comes from the run's counter-based streams)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from fedpd.config import load_config
from fedpd.context import ServerContext
from fedpd.errors import ConfigError
from fedpd.privacy import epsilon
from fedpd.results.tables import compare_table
from fedpd.runner import run
from fedpd.simulation import Simulation
from fedpd.streams import ClientStreams

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting.rdp import RdpAccountant  # noqa: E402

BASE = {
    "problem": {"name": "synthetic", "clients": 12, "max_client_samples": 40},
    "algorithm": {"name": "fedavg"},
    "solver": {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 5},
    "sampler": {"name": "uniform", "clients_per_round": 4},
    "run": {"rounds": 6, "eval_every": 2, "seed": 5},
    "privacy": {"clip": "fixed", "clip_norm": 0.3, "noise_multiplier": 1.0},
}


def config(**sections) -> dict:
    cfg = copy.deepcopy(BASE)
    for name, values in sections.items():
        if values is None:
            cfg.pop(name, None)
        else:
            cfg[name] = values if name in ("algorithm", "sampler") else {**cfg.get(name, {}), **values}
    return cfg


def xi(seed: int, round: int, n: int) -> torch.Tensor:
    """The standard normals the mechanism draws in ``round``: the server's stream ("privacy", round)."""
    return ClientStreams.of(seed, "privacy", round, torch.zeros(1, dtype=torch.int64)).normal(n)[0]


# --- the mechanism ------------------------------------------------------------------------------
def test_fixed_clipping_noises_the_sum_of_the_clipped_updates():
    """McMahan et al. 2018, Alg. 1: x0 + (Σ_i Δ_i·min(1, S/‖Δ_i‖) + N(0, z²S²I)) / m."""
    sim = Simulation(load_config(config(privacy={"clip_norm": 1.0, "noise_multiplier": 0.7})))
    alg, server = sim.algorithm, sim.server
    d = server["x0"].numel()
    gen = torch.Generator().manual_seed(0)
    x = server["x0"] + torch.randn(3, d, generator=gen, dtype=server["x0"].dtype) * torch.tensor([[0.1], [2.0], [5.0]])
    new, _ = alg.aggregate(server, {"x": x}, ServerContext(torch.tensor([1, 4, 7]), 3, 12))
    delta = x - server["x0"]
    clipped = delta * torch.clamp(1.0 / delta.norm(dim=1), max=1.0)[:, None]
    expect = server["x0"] + (clipped.sum(0) + 0.7 * 1.0 * xi(5, 3, d + 1)[:d]) / 4  # m = K = 4
    torch.testing.assert_close(new["x0"], expect, rtol=1e-12, atol=1e-12)
    assert float(new["dp_clip"]) == 1.0 and int(new["dp_rounds"]) == 4


def test_adaptive_clipping_steps_toward_the_target_quantile():
    """Andrew et al. 2021, Alg. 1: S ← S·exp(−η_C(b̄ − γ)), b̄ = (Σ 1[‖Δ_i‖ ≤ S] + N(0, σ_b²))/m,
    and the update noise z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) (their Thm. 1)."""
    opts = {"clip": "adaptive", "clip_norm": 1.0, "noise_multiplier": 1.0, "quantile_noise": 2.0,
            "target_quantile": 0.5, "clip_lr": 0.2}
    sim = Simulation(load_config(config(privacy=opts)))
    alg, server = sim.algorithm, sim.server
    d = server["x0"].numel()
    x = server["x0"] + torch.ones(4, d, dtype=server["x0"].dtype) * torch.tensor([[0.01], [0.02], [0.03], [10.0]])
    new, _ = alg.aggregate(server, {"x": x}, ServerContext(torch.tensor([0, 1, 2, 3]), 0, 12))
    e = xi(5, 0, d + 1)
    below = (3 + 2.0 * float(e[-1])) / 4
    assert float(new["dp_clip"]) == pytest.approx(math.exp(-0.2 * (below - 0.5)), rel=1e-12)
    z_update = (1.0 - (2 * 2.0) ** -2) ** -0.5
    delta = x - server["x0"]
    clipped = delta * torch.clamp(1.0 / delta.norm(dim=1), max=1.0)[:, None]
    expect = server["x0"] + (clipped.sum(0) + z_update * e[:d]) / 4
    torch.testing.assert_close(new["x0"], expect, rtol=1e-12, atol=1e-12)


def test_scaffold_clips_its_two_updates_jointly():
    """SCAFFOLD uploads (Δx, Δc): one vector for the clip, so the pair's sum has sensitivity S."""
    sim = Simulation(load_config(config(algorithm={"name": "scaffold"})))
    alg, server = sim.algorithm, sim.server
    d = server["x0"].numel()
    dx, dc = torch.full((1, d), 3.0, dtype=torch.float64), torch.full((1, d), 4.0, dtype=torch.float64)
    new, _ = alg.aggregate(server, {"dx": dx, "dc": dc}, ServerContext(torch.tensor([2]), 0, 12))
    scale = 0.3 / (5.0 * math.sqrt(d))
    e = xi(5, 0, 2 * d + 1)
    torch.testing.assert_close(new["x0"], server["x0"] + (dx[0] * scale + 0.3 * e[:d]) / 4)
    torch.testing.assert_close(new["c"], server["c"] + (1 / 12) * (dc[0] * scale + 0.3 * e[d:2 * d]) / 4)


# --- the accountant -----------------------------------------------------------------------------
def _library(event, delta, relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE) -> float:
    accountant = RdpAccountant(neighboring_relation=relation)
    accountant.compose(event)
    return accountant.get_epsilon(delta)


def test_epsilon_is_the_libraries_for_each_sampler():
    G = dp_accounting.GaussianDpEvent
    poisson = _library(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.05, G(1.3)), 200), 1e-6)
    assert epsilon("bernoulli", 1.3, 200, 1e-6, num_clients=1000, q=0.05) == pytest.approx(poisson, rel=1e-12)
    wor = _library(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(1000, 50, G(0.65)),
                                                     200), 1e-6, dp_accounting.NeighboringRelation.REPLACE_ONE)
    assert epsilon("uniform", 1.3, 200, 1e-6, num_clients=1000, k=50) == pytest.approx(wor, rel=1e-12)
    full = _library(dp_accounting.SelfComposedDpEvent(G(5.0), 30), 1e-5)
    assert epsilon("all", 5.0, 30, 1e-5, num_clients=10) == pytest.approx(full, rel=1e-12)


def test_epsilon_within_abadi_et_al_2016_moments_accountant_figure():
    """Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar, Zhang, "Deep learning with differential
    privacy", CCS 2016, §3.1 (after Theorem 1): q = 0.01, σ = 4, δ = 1e-5, T = 10000 steps give
    ε ≈ 1.26 by the moments accountant (9.34 by the strong composition theorem). RDP (the moments
    accountant's successor, Mironov 2017) over finer orders can only be tighter, not far off."""
    eps = epsilon("bernoulli", 4.0, 10_000, 1e-5, num_clients=60_000, q=0.01)
    assert 0.9 < eps <= 1.26


def test_the_run_reports_epsilon_and_stops_at_the_target(tmp_path):
    result = run(config(privacy={"target_epsilon": 15.0}, run={"rounds": 50}), tmp_path / "r")
    eps = [r["dp_epsilon"] for r in result.history]
    assert eps[0] == 0.0 and all(a < b for a, b in zip(eps, eps[1:]))
    last = result.history[-1]
    limit = last["round"]
    assert 0 < limit < 50 and last["dp_epsilon"] <= 15.0
    assert epsilon("uniform", 1.0, limit + 1, 1e-5, num_clients=12, k=4) > 15.0
    assert last["dp_epsilon"] == pytest.approx(epsilon("uniform", 1.0, limit, 1e-5, num_clients=12, k=4))
    columns, rows = compare_table([tmp_path / "r"])
    assert "dp_epsilon" in [c.key for c in columns] and rows[0]["dp_epsilon"] == last["dp_epsilon"]


# --- refusals -----------------------------------------------------------------------------------
@pytest.mark.parametrize("change, words", [
    ({"privacy": {"noise_multiplier": 0}}, "privacy.noise_multiplier: 0 adds no noise"),
    ({"sampler": {"name": "all"}, "privacy": {"noise_multiplier": 0.0}}, "privacy.noise_multiplier: 0 adds no noise"),
    ({"algorithm": {"name": "fedpd"}, "sampler": None}, "not relative to a model the server sent"),
    ({"algorithm": {"name": "fedplus"}}, "reads every upload"),
    ({"algorithm": {"name": "fedavg", "aggregator": "coordinate_median"}}, "robust aggregator"),
    ({"algorithm": {"name": "fedavg", "weights": "samples"}}, "sample count unclipped"),
    ({"algorithm": {"name": "feddyn"}, "sampler": {"name": "bernoulli", "q": 0.3}}, "how many clients took part"),
    ({"algorithm": {"name": "qffl"}}, "'h', a per-client statistic that is neither a model nor an update"),
    ({"algorithm": {"name": "fednova"}, "solver": {**BASE["solver"], "straggler_fraction": 0.5}}, "with stragglers"),
    ({"algorithm": {"name": "fednova"}, "solver": {**BASE["solver"], "local_epochs": 2}},
     "with local epochs it uploads each client's step count"),
    ({"privacy": {"clip": "adaptive"}}, "privacy.quantile_noise"),  # default σ_b = 4/20 < z/2
])
def test_a_combination_without_a_guarantee_is_refused_in_one_line(change, words):
    cfg = copy.deepcopy(BASE)
    for section, values in change.items():
        if values is None:
            cfg.pop(section)
        elif section == "algorithm":
            cfg[section] = values
        else:
            cfg[section] = {**(cfg.get(section) or {}), **values} if section == "privacy" else values
    with pytest.raises(ConfigError) as err:
        Simulation(load_config(cfg))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_privacy_off_leaves_the_resolved_config_as_before():
    off = load_config(config(privacy=None)).resolved()
    assert "privacy" not in off
    on = load_config(config()).resolved()
    assert on["privacy"]["clip"] == "fixed" and on["privacy"]["delta"] == 1e-5


# --- the same numbers everywhere ----------------------------------------------------------------
def _metrics(history):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in history]


ADAPTIVE = {"privacy": {"clip": "adaptive", "quantile_noise": 1.0, "clip_norm": 0.2},
            "sampler": {"name": "bernoulli", "q": 0.4}, "run": {"rounds": 8, "checkpoint_every": 2}}


def test_a_resumed_private_run_writes_the_same_metrics(tmp_path):
    whole = run(config(**ADAPTIVE), tmp_path / "whole")
    cut = copy.deepcopy(ADAPTIVE)
    cut["run"] = {**cut["run"], "rounds": 4}
    run(config(**cut), tmp_path / "cut")
    resumed = run(resume=tmp_path / "cut", overrides=["run.rounds=8"])
    assert _metrics(resumed.history) == _metrics(whole.history)
    assert len({r["dp_clip_norm"] for r in whole.history}) > 2  # the clip norm moved


def test_the_loopback_engine_gives_the_in_process_numbers():
    inprocess = run(config(**ADAPTIVE))
    loopback = run(config(**ADAPTIVE), overrides=["run.engine=loopback", "run.nodes=2"])
    assert _metrics(loopback.history) == _metrics(inprocess.history)


# --- docs/privacy.md's worked example, run as written -------------------------------------------
def test_the_worked_example_runs_as_written_and_spends_the_epsilon_the_page_shows(tmp_path):
    import json
    import re
    import shutil
    from pathlib import Path

    from doc_blocks import bash_blocks, clean_env, run_script

    root = Path(__file__).resolve().parents[1]
    doc = root / "docs" / "privacy.md"
    [block] = bash_blocks(doc, "Worked example")
    work = tmp_path / "clone"
    shutil.copytree(root / "examples", work / "examples")
    done = run_script(block, work, clean_env(tmp_path / "home"))
    assert done.returncode == 0, done.stdout[-3000:]
    last = json.loads((work / "runs/fedavg-dp/metrics.jsonl").read_text().splitlines()[-1])
    assert last["round"] == 100
    assert last["dp_epsilon"] == pytest.approx(epsilon("bernoulli", 1.0, 100, 1e-5, num_clients=1000, q=0.05))
    shown = float(re.search(r"spent ε = ([\d.]+) at δ = 1e-5", doc.read_text()).group(1))
    assert last["dp_epsilon"] == pytest.approx(shown, abs=0.005)
    assert "ε" in done.stdout and f"{last['dp_epsilon']:.4g}" in done.stdout  # the compare table's column


def test_fedpd_show_privacy_lists_the_options():
    from fedpd.cli import main

    assert main(["show", "privacy"]) == 0
