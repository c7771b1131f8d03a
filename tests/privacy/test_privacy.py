"""Client-level differential privacy (``[privacy]``, :mod:`fedpd.privacy`): the clipped, noised sum
of DP-FedAvg and adaptive clipping as a wrapper around the algorithm's server step, its accountant
against dp-accounting called directly and against a published figure, the one-line refusals read
from what the algorithm declares, and the same numbers after a resume and on the loopback engine
(the noise comes from the run's counter-based streams)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import re
from pathlib import Path

import pytest
import torch

from fedpd.config import load_config
from fedpd.context import ServerContext
from fedpd.errors import ConfigError
from fedpd.privacy import PLD_INTERVAL, epsilon
from fedpd.checks import FedpdNotice
from fedpd.progress import summary
from fedpd.results.tables import compare_table, format_table, render_table
from fedpd.runner import run
from fedpd.simulation import Simulation
from fedpd.streams import ClientStreams
from helpers import ROOT

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting.pld import PLDAccountant  # noqa: E402
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
    alg, server = sim.aggregation, sim.server
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
    """Andrew et al. 2021, Alg. 1 with centred bits: S ← S·exp(−η_C(b̄ − γ)),
    b̄ = (Σ (1[‖Δ_i‖ ≤ S] − ½) + N(0, σ_b²))/m + ½, and the update noise z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)
    (their Thm. 1). Three uploads where m = K = 4 are expected: uncentred bits would give (2 + 2ξ)/4."""
    opts = {"clip": "adaptive", "clip_norm": 1.0, "noise_multiplier": 1.0, "quantile_noise": 2.0,
            "target_quantile": 0.5, "clip_lr": 0.2}
    sim = Simulation(load_config(config(privacy=opts)))
    alg, server = sim.aggregation, sim.server
    d = server["x0"].numel()
    x = server["x0"] + torch.ones(3, d, dtype=server["x0"].dtype) * torch.tensor([[0.01], [0.02], [10.0]])
    new, _ = alg.aggregate(server, {"x": x}, ServerContext(torch.tensor([0, 1, 3]), 0, 12))
    e = xi(5, 0, d + 1)
    below = ((2 - 1.5) + 2.0 * float(e[-1])) / 4 + 0.5  # two of three unclipped, centred
    assert float(new["dp_clip"]) == pytest.approx(math.exp(-0.2 * (below - 0.5)), rel=1e-12)
    z_update = (1.0 - (2 * 2.0) ** -2) ** -0.5
    delta = x - server["x0"]
    clipped = delta * torch.clamp(1.0 / delta.norm(dim=1), max=1.0)[:, None]
    expect = server["x0"] + (clipped.sum(0) + z_update * e[:d]) / 4
    torch.testing.assert_close(new["x0"], expect, rtol=1e-12, atol=1e-12)


def test_scaffold_clips_its_two_updates_jointly():
    """SCAFFOLD uploads (Δx, Δc): one vector for the clip, so the pair's sum has sensitivity S."""
    sim = Simulation(load_config(config(algorithm={"name": "scaffold"})))
    alg, server = sim.aggregation, sim.server
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


def fixed(sampling: str, z: float, delta: float, accountant: str = "rdp", **event) -> dict:
    """The ``dp_*`` keys of fixed clipping (no count) at noise multiplier z."""
    relation = "replace_one" if sampling == "without_replacement" else "add_or_remove_one"
    scale = 2.0 if relation == "replace_one" else 1.0
    return {"dp_accountant": accountant, "dp_delta": delta, "dp_sampling": sampling, "dp_neighbouring": relation,
            "dp_noise_update": z, "dp_update_sensitivity": scale, "dp_noise_count": 0.0, "dp_count_sensitivity": 0.0,
            **event}


def test_epsilon_is_the_libraries_for_each_sampler():
    G = dp_accounting.GaussianDpEvent
    poisson = _library(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.05, G(1.3)), 200), 1e-6)
    assert epsilon(fixed("poisson", 1.3, 1e-6, dp_q=0.05), 200) == pytest.approx(poisson, rel=1e-12)
    wor = _library(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(1000, 50, G(0.65)),
                                                     200), 1e-6, dp_accounting.NeighboringRelation.REPLACE_ONE)
    mech = fixed("without_replacement", 1.3, 1e-6, dp_sample_size=50, dp_population=1000)
    assert epsilon(mech, 200) == pytest.approx(wor, rel=1e-12)
    full = _library(dp_accounting.SelfComposedDpEvent(G(5.0), 30), 1e-5)
    assert epsilon(fixed("none", 5.0, 1e-5), 30) == pytest.approx(full, rel=1e-12)


def test_epsilon_within_abadi_et_al_2016_moments_accountant_figure():
    """Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar, Zhang, "Deep learning with differential
    privacy", CCS 2016, §3.1 (after Theorem 1): q = 0.01, σ = 4, δ = 1e-5, T = 10000 steps give
    ε ≈ 1.26 by the moments accountant (9.34 by the strong composition theorem). RDP (the moments
    accountant's successor, Mironov 2017) over finer orders can only be tighter, not far off, and
    the PLD tighter still."""
    rdp = epsilon(fixed("poisson", 4.0, 1e-5, dp_q=0.01), 10_000)
    pld = epsilon(fixed("poisson", 4.0, 1e-5, "pld", dp_q=0.01), 10_000)
    assert 0.9 < pld < rdp <= 1.26


# --- the mechanism as it runs, measured, against dp-accounting called directly -----------------
#: the three samplers on BASE's 12 clients: m, the expected participants, is 12, 4 and 4.8
SAMPLERS = {"all": {"name": "all"}, "uniform": {"name": "uniform", "clients_per_round": 4},
            "bernoulli": {"name": "bernoulli", "q": 0.4}}
CLIPS = {"fixed": {"clip": "fixed"}, "adaptive": {"clip": "adaptive", "quantile_noise": 1.0}}
GAMMA, ETA = 0.5, 0.2  # the defaults of target_quantile and clip_lr


def measure(sim) -> dict:
    """What one round of ``sim``'s mechanism releases, measured from its outputs (the new model
    and, through the new clip norm, the noised count), in units of the released mean — so the
    denominator m cancels from every ratio:

    * the noise scale of each part: the same uploads in rounds 0 and 1 differ only by their draws
      (the server's stream ("privacy", round): the update's first, the count's last);
    * each part's sensitivity: the same round (the same draws) with one client added (or, for
      ``replace``, one client's upload replaced by an opposite one), so the noise cancels and the
      difference is that of the noiseless sums.

    Clients 0-2 and 4 upload x0 + 1e-3 (unclipped: bit 1), client 3 a step of norm 100 along ±v
    (clipped to S: bit 0)."""
    alg, server = sim.aggregation, sim.server
    x0, S = server["x0"], float(server["dp_clip"])
    d = x0.numel()
    v = torch.linspace(-1, 1, d, dtype=x0.dtype)
    v = v / v.norm()
    small, far = x0 + 1e-3 * v, x0 + 100 * v

    def release(rows, ids, round, replaced=False):
        x = torch.stack(rows)
        if replaced:
            x[ids.index(3)] = x0 - 100 * v
        new, _ = alg.aggregate(server, {"x": x}, ServerContext(torch.tensor(ids), round, 12))
        below = GAMMA - math.log(float(new["dp_clip"]) / S) / ETA  # b̄, from S' = S·exp(−η(b̄ − γ))
        return new["x0"].double(), below, float(new["dp_clip"])

    base, base_ids = [small, small, small], [0, 1, 2]
    u0, b0, s0 = release(base, base_ids, 0)
    u1, b1, _ = release(base, base_ids, 1)
    e0, e1 = xi(5, 0, d + 1).double(), xi(5, 1, d + 1).double()
    scale = (u0 - u1) / (e0[:d] - e1[:d])
    torch.testing.assert_close(scale, scale.mean().expand(d), rtol=1e-9, atol=0)  # one std on every coordinate
    out = {"noise_update": float(scale.mean()), "count": s0 != S}
    with_far, b_far, _ = release(base + [far], base_ids + [3], 0)
    b_small = release(base + [small], base_ids + [4], 0)[1]
    replaced = release(base + [far], base_ids + [3], 0, replaced=True)[0]
    out["add_update"] = float((with_far - u0).norm())
    out["replace_update"] = float((replaced - with_far).norm())
    if out["count"]:
        out["noise_count"] = (b0 - b1) / float(e0[-1] - e1[-1])
        out["add_bit1"], out["add_bit0"] = b_small - b0, b_far - b0  # a client left unclipped, one clipped
        out["add_count"] = max(abs(out["add_bit1"]), abs(out["add_bit0"]))
        out["replace_count"] = abs(b_far - release(base + [small], base_ids + [3], 0)[1])  # bit 0 for bit 1
    return out


def _sampled(sampler: str, gaussian):
    if sampler == "bernoulli":
        return dp_accounting.PoissonSampledDpEvent(0.4, gaussian)
    if sampler == "uniform":
        return dp_accounting.SampledWithoutReplacementDpEvent(12, 4, gaussian)
    return gaussian


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("clip", list(CLIPS))
@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_the_reported_epsilon_is_dp_accountings_for_the_mechanism_as_it_runs(sampler, clip, accountant, tmp_path):
    """ε of a run against dp-accounting, composed here from the parts measured on the running
    mechanism (:func:`measure`): each part's noise over its sensitivity, under the sampler's
    relation — add or remove one client for ``bernoulli`` (Poisson sampling) and ``all``, replace
    one for ``uniform`` (sampling K of N without replacement)."""
    cfg = config(sampler=SAMPLERS[sampler], privacy={**CLIPS[clip], "accountant": accountant},
                 run={"rounds": 2, "eval_every": 2})
    if accountant == "pld" and sampler == "uniform":  # dp-accounting's PLD has no such event: refused, not faked
        with pytest.raises(ConfigError, match="privacy.accountant: dp-accounting's PLD accountant has no event"):
            Simulation(load_config(cfg))
        assert not PLDAccountant().supports(_sampled("uniform", dp_accounting.GaussianDpEvent(1.0)))
        return
    parts = measure(Simulation(load_config(cfg)))
    replace = sampler == "uniform"
    z_update = parts["noise_update"] / parts["replace_update" if replace else "add_update"]
    gaussians = [dp_accounting.GaussianDpEvent(z_update)]
    assert parts["count"] == (clip == "adaptive")  # fixed clipping releases no count
    if parts["count"]:
        gaussians.append(dp_accounting.GaussianDpEvent(parts["noise_count"] / parts["replace_count" if replace else
                                                                                      "add_count"]))
    relation = dp_accounting.NeighboringRelation.REPLACE_ONE if replace else \
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    last = run(cfg, tmp_path / "r").history[-1]
    T = last["dp_rounds"]
    assert T == last["round"] == 2
    # the two Gaussians as one (Andrew et al. Thm. 1): dp-accounting's RDP combines them itself, its
    # PLD takes one Gaussian per sampled event, so there the combination z⁻² = Σ z_j⁻² is made here
    one = dp_accounting.GaussianDpEvent(sum(g.noise_multiplier ** -2 for g in gaussians) ** -0.5)
    if accountant == "rdp":
        expect = _library(dp_accounting.SelfComposedDpEvent(
            _sampled(sampler, dp_accounting.ComposedDpEvent(gaussians)), T), 1e-5, relation)
        if sampler == "bernoulli":  # once is enough to show the combination is dp-accounting's own
            assert _library(dp_accounting.SelfComposedDpEvent(_sampled(sampler, one), T), 1e-5, relation) == \
                pytest.approx(expect, rel=1e-9)
    else:
        library = PLDAccountant(relation, value_discretization_interval=PLD_INTERVAL)
        library.compose(dp_accounting.SelfComposedDpEvent(_sampled(sampler, one), T))
        expect = library.get_epsilon(1e-5)
    assert last["dp_epsilon"] == pytest.approx(expect, rel=1e-9) and last["dp_accountant"] == accountant
    # and the record names those parts: each noise over its sensitivity is the one measured
    assert last["dp_noise_update"] / last["dp_update_sensitivity"] == pytest.approx(z_update, rel=1e-9)
    if parts["count"]:
        assert last["dp_noise_count"] / last["dp_count_sensitivity"] == pytest.approx(gaussians[1].noise_multiplier,
                                                                                       rel=1e-9)
    # docs/privacy.md's recomputation, as written but for the run it reads, gives the same ε
    assert recomputed(tmp_path / "r") == pytest.approx(last["dp_epsilon"], abs=5e-5)


def recompute_block() -> str:
    """docs/privacy.md's Python lines that recompute ε from a run's files, exactly as shown."""
    from doc_blocks import section

    text = section((ROOT / "docs" / "privacy.md").read_text(),
                   "Recomputing ε from a run's files")
    (block,) = re.findall(r"```python\n(.*?)```", text, re.S)
    return block


def recomputed(out: Path) -> float:
    """The ε the doc's lines print for the run in ``out`` (their ``run = Path(...)`` pointed there)."""
    block = recompute_block()
    line = 'run = Path("runs/fedavg-dp")\n'
    assert block.count(line) == 1
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(block.replace(line, f"run = Path({str(out)!r})\n"), {})
    found = re.fullmatch(r"ε = ([\d.]+) at δ = \S+ after \d+ rounds; the run reports ([\d.]+)\n", printed.getvalue())
    assert found and found.group(1) == found.group(2), printed.getvalue()
    return float(found.group(1))


@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_the_counts_sensitivity_measured_is_what_the_accounting_assumes(sampler):
    """Adding or removing one client moves the noiseless count Σ (b_i − ½) by ½ whether its update
    was clipped or not (uncentred bits would move it by 1 or 0), replacing one by up to 1; and the
    clipped sum by S and 2S. ``dp_count_sensitivity`` and ``dp_update_sensitivity`` (units of S)
    are what the accountant divides the noise by."""
    cfg = load_config(config(sampler=SAMPLERS[sampler], privacy=CLIPS["adaptive"]))
    sim = Simulation(cfg)
    m = {"all": 12, "uniform": 4, "bernoulli": 0.4 * 12}[sampler]
    S = cfg.options["privacy"].clip_norm
    parts = measure(sim)
    assert parts["add_bit1"] * m == pytest.approx(0.5, rel=1e-9) and parts["add_bit0"] * m == pytest.approx(
        -0.5, rel=1e-9
    )
    assert parts["add_count"] * m == pytest.approx(0.5, rel=1e-9)
    assert parts["replace_count"] * m == pytest.approx(1.0, rel=1e-9)
    assert parts["add_update"] * m == pytest.approx(S, rel=1e-9)
    assert parts["replace_update"] * m == pytest.approx(2 * S, rel=1e-9)
    mech = sim.privacy.dp.mechanism()
    assumed = "replace" if mech["dp_neighbouring"] == "replace_one" else "add"
    assert assumed == ("replace" if sampler == "uniform" else "add")
    assert mech["dp_count_sensitivity"] == pytest.approx(parts[f"{assumed}_count"] * m, rel=1e-9)
    assert mech["dp_update_sensitivity"] * S == pytest.approx(parts[f"{assumed}_update"] * m, rel=1e-9)


def test_the_run_reports_epsilon_says_where_the_target_stops_it_and_shows_epsilon_where_users_look(tmp_path):
    with pytest.warns(FedpdNotice, match=r"privacy.target_epsilon = 15: the run stops after round \d+ of 50"):
        result = run(config(privacy={"target_epsilon": 15.0}, run={"rounds": 50}), tmp_path / "r")
    eps = [r["dp_epsilon"] for r in result.history]
    assert eps[0] == 0.0 and all(a < b for a, b in zip(eps, eps[1:]))
    last = result.history[-1]
    limit = last["round"]
    assert 0 < limit < 50 and last["dp_epsilon"] <= 15.0
    mech = fixed("without_replacement", 1.0, 1e-5, dp_sample_size=4, dp_population=12)
    assert epsilon(mech, limit + 1) > 15.0
    assert last["dp_epsilon"] == pytest.approx(epsilon(mech, limit)) and last["dp_rounds"] == limit
    assert f"dp_epsilon={last['dp_epsilon']:.4g}" in summary(last)  # the progress line and the final one
    columns, rows = compare_table([tmp_path / "r"])
    assert "dp_epsilon" in [c.key for c in columns] and rows[0]["dp_epsilon"] == last["dp_epsilon"]
    shown = {fmt: format_table(columns, rows, fmt) for fmt in ("csv", "json", "markdown")}
    assert repr(last["dp_epsilon"]) in shown["csv"] and json.loads(shown["json"])[0]["dp_epsilon"] == last["dp_epsilon"]
    assert "dp_epsilon" in shown["markdown"].splitlines()[0] and f"{last['dp_epsilon']:.4g}" in shown["markdown"]
    table = io.StringIO()
    assert "dp_epsilon" not in render_table(columns, rows, width=80, file=table)  # kept at 80 columns
    assert "ε" in table.getvalue() and f"{last['dp_epsilon']:.4g}" in table.getvalue()


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
    ({"algorithm": {"name": "fednova"}, "solver": {**{k: v for k, v in BASE["solver"].items() if k != "local_steps"},
                                                   "local_epochs": 2}},
     "with local epochs it uploads each client's step count"),
    ({"privacy": {"clip": "adaptive"}}, "privacy.quantile_noise"),  # default σ_b = 4/20 < z/2
    # what the accountant cannot account for, refused before anything runs
    ({"privacy": {"noise_multiplier": 1e308}},
     "privacy.noise_multiplier: input should be less than or equal to 1000000"),
    ({"privacy": {"noise_multiplier": 1e-5}}, "privacy.noise_multiplier: 1e-05 gives no guarantee"),
    ({"privacy": {"target_epsilon": 0.01}}, "privacy.target_epsilon: 0.01 is less than one round spends (ε = "),
    ({"privacy": {"accountant": "pld"}},
     "privacy.accountant: dp-accounting's PLD accountant has no event for sampling"),
    ({"sampler": {"name": "all"}, "privacy": {"accountant": "pld", "noise_multiplier": 0.05}},
     "beyond the ε ≤ 100 the PLD accountant's grid is built for"),
    ({"sampler": {"name": "all"}, "privacy": {"accountant": "pld", "delta": 1e-100}},
     "privacy.delta: 1e-100 is below what the pld accountant resolves"),
    ({"sampler": {"name": "all"}, "privacy": {"accountant": "pld", "target_epsilon": 300}},
     "privacy.accountant: target_epsilon = 300 is beyond the ε ≤ 100"),
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


def test_a_target_under_pld_computes_no_epsilon_far_past_it():
    """10 000 rounds at z = 1 would spend ε ≈ 1 000 by RDP (refused under PLD without a target);
    with target 15 the search doubles the rounds from 1 until ε passes 15, then bisects."""
    cfg = config(sampler={"name": "all"}, privacy={"accountant": "pld", "target_epsilon": 15}, run={"rounds": 10_000})
    with pytest.raises(ConfigError, match="the run's 10000 rounds spend ε ≈"):
        Simulation(load_config(config(sampler={"name": "all"}, privacy={"accountant": "pld"}, run={"rounds": 10_000})))
    dp = Simulation(load_config(cfg)).privacy.dp
    limit = dp.round_limit(10_000)
    assert dp.epsilon(limit) <= 15 < dp.epsilon(limit + 1) and 1 < limit < 100
    assert max(dp._eps) <= 2 * limit and len(dp._eps) <= 2 * math.log2(limit) + 2


def test_a_refused_private_run_exits_2_in_one_line_and_writes_nothing(tmp_path, capsys):
    """``noise_multiplier = 1e308`` once reached the accountant mid-run (OverflowError, files left);
    a ``target_epsilon`` below one round's ε once finished "round 0" with exit 0 and no word why."""
    from fedpd.cli import main

    path = tmp_path / "dp.toml"
    path.write_text('[problem]\nname = "least_squares"\nclients = 5\n[algorithm]\nname = "fedavg"\n'
                    '[solver]\nname = "gd"\n[run]\nrounds = 3\n[privacy]\nclip = "fixed"\n')
    for change in ("privacy.noise_multiplier=1e308", "privacy.target_epsilon=0.5"):
        assert main(["run", str(path), "--out", str(tmp_path / "out"), "--set", change]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"fedpd: error: {change.partition('=')[0]}: ") and "\n" not in err
        assert not (tmp_path / "out").exists()


def test_a_plugin_algorithm_is_refused_for_its_own_reason(user_algorithms, monkeypatch):
    """Not ``means_only``; ``means_only`` with its own ``aggregate``; a broadcast without a model:
    each says so, none speaks of FedPD's anchors."""
    directory, module = user_algorithms
    monkeypatch.chdir(directory)
    (directory / f"{module}_bare.py").write_text(
        "from fedpd.algorithms import FedAvg\n\n\nclass Bare(FedAvg):\n    def broadcast(self, server):\n"
        "        return {'w': server['x0']}\n")
    for name, words in (("DualAverage", "(its means_only is False"),
                        ("ServerStep", "(ServerStep.aggregate overrides the step of a means_only rule)"),
                        ("CoinFedPD", "its broadcast holds no model 'x0' (it sends nothing; FedPD's clients keep their "
                                      "own anchors)"),
                        ("Bare", "its broadcast holds no model 'x0' (it sends 'w'), so its uploads are not relative")):
        where = f"{module}_bare" if name == "Bare" else module
        cfg = config(algorithm={"name": f"{where}:{name}"}, **({"sampler": {"name": "all"}} if name == "CoinFedPD"
                                                             else {}))
        with pytest.raises(ConfigError) as err:
            Simulation(load_config(cfg))
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)
        assert (name == "CoinFedPD") == ("anchors" in str(err.value))


def test_the_accountant_says_nothing_on_stderr(capfd, caplog):
    """Poisson sampling at q = 0.4 makes dp-accounting log a warning for each fractional RDP order
    whose series does not converge (in ``compose``); fedpd holds them back, and its own ε is the
    library's all the same."""
    mech = fixed("poisson", 1.0, 1e-5, dp_q=0.4)
    assert epsilon(mech, 10) == pytest.approx(_library(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.4, dp_accounting.GaussianDpEvent(1.0)), 10), 1e-5), rel=1e-12)
    capfd.readouterr()
    caplog.clear()
    epsilon(mech, 11)
    assert capfd.readouterr().err == "" and not [r for r in caplog.records if r.name == "absl"]


def test_privacy_off_leaves_the_resolved_config_as_before():
    off = load_config(config(privacy=None)).resolved()
    assert "privacy" not in off
    on = load_config(config()).resolved()
    assert on["privacy"]["clip"] == "fixed" and on["privacy"]["delta"] == 1e-5


# --- a wrapper around the server step, deciding from what the algorithm declares -----------------
@pytest.mark.parametrize("name", ["fedavg", "scaffold", "feddyn", "fedadam"])
def test_a_private_run_keeps_the_algorithms_own_class_and_wraps_its_server_step(name):
    """No class is replaced at run time: the run's algorithm is the one its class built, and the
    round takes its server step through the mechanism wrapped around it (Flower's DP strategies'
    shape), which the engine is handed too."""
    from fedpd import algorithms
    from fedpd.privacy import PrivateAggregation

    own = {"fedavg": algorithms.FedAvg, "scaffold": algorithms.Scaffold, "feddyn": algorithms.FedDyn,
           "fedadam": algorithms.FedAdam}[name]
    sim = Simulation(load_config(config(algorithm={"name": name})))
    assert type(sim.algorithm) is own and type(sim.algorithm).__mro__ == own.__mro__
    assert isinstance(sim.privacy, PrivateAggregation) and sim.privacy.algorithm is sim.algorithm
    assert sim.aggregation is sim.privacy and sim.engine.aggregation is sim.privacy
    sim.step()
    assert type(sim.algorithm) is own and int(sim.server["dp_rounds"]) == 1
    assert "dp_epsilon" in sim.metrics() and "dp_clip" in sim.server
    public = Simulation(load_config(config(algorithm={"name": name}, privacy=None)))
    assert public.privacy is None and public.aggregation is public.algorithm and public.engine.aggregation is None
    assert "dp_clip" not in public.server


#: each declaration of :class:`fedpd.Algorithm` [privacy] reads, set on a plain FedAvg, and the refusal it brings
DECLARED = [
    ({"weighs_by_samples": True}, {}, "weights = \"samples\" uploads each client's sample count unclipped"),
    ({"robust_aggregate": True}, {}, "a robust aggregator (or Fed+'s aggregate) reads every upload"),
    ({"means_only": False}, {}, "(its means_only is False"),
    ({"statistic_uploads": ("s",)}, {}, "it uploads 's', a per-client statistic"),
    ({"uploads_step_counts": True}, {"solver": {**BASE["solver"], "straggler_fraction": 0.5}}, "with stragglers"),
    ({"reads_participant_count": True}, {"sampler": {"name": "bernoulli", "q": 0.4}}, "how many clients took part"),
    ({"own_anchor": True, "broadcast": lambda self, server: {}}, {}, "it sends nothing; FedPD's clients keep their "
                                                                     "own anchors"),
]


@pytest.mark.parametrize("declared, change, words", DECLARED)
def test_what_privacy_refuses_is_what_the_algorithm_declares(declared, change, words):
    """The same FedAvg passes with the base's defaults and is refused, for that reason, once one
    declaration says otherwise — what a plug-in declares is what [privacy] reads."""
    from fedpd import Algorithm
    from fedpd.algorithms import FedAvg
    from fedpd.build import build, build_problem
    from fedpd.privacy import PrivateAggregation, private_aggregation

    cfg = load_config(config(**change))
    problem = build_problem(cfg)
    _, solver, sampler = build(cfg, problem)

    def wrap(algorithm):
        return private_aggregation(cfg.options["privacy"], algorithm, algorithm_name="declared",
                                   sampler_name=cfg.names["sampler"], sampler=sampler, num_clients=problem.num_clients,
                                   solver=solver, x0=problem.x_init, seed=5, rounds=6)

    assert isinstance(wrap(FedAvg()), PrivateAggregation)
    for key in declared:
        assert key in Algorithm.__doc__ and (key == "broadcast" or key in Algorithm.__annotations__), key
    with pytest.raises(ConfigError) as err:
        wrap(type("Declared", (FedAvg,), declared)())
    assert str(err.value).startswith("privacy.clip: algorithm 'declared': ") and words in str(err.value)


def test_privatise_is_a_deprecated_name_for_the_wrapper():
    from fedpd.algorithms import FedAvg
    from fedpd.build import build, build_problem
    from fedpd.privacy import PrivateAggregation, privatise

    cfg = load_config(config())
    problem = build_problem(cfg)
    algorithm, _, sampler = build(cfg, problem)
    with pytest.warns(DeprecationWarning, match="use fedpd.privacy.private_aggregation"):
        private = privatise(cfg, algorithm, sampler, problem.num_clients, problem.x_init)
    assert isinstance(private, PrivateAggregation) and private.algorithm is algorithm and type(algorithm) is FedAvg
    with pytest.warns(DeprecationWarning):
        assert privatise(load_config(config(privacy=None)), algorithm, sampler, 12, problem.x_init) is algorithm


def test_a_private_plugins_failing_hook_is_named_in_one_line(user_algorithms, monkeypatch):
    """A plug-in's hook that raises under [privacy] is the plug-in's error, named as without it
    (the probe of its broadcast, and its rounds, call it through fedpd.hooks)."""
    directory, module = user_algorithms
    monkeypatch.chdir(directory)
    (directory / f"{module}_boom.py").write_text(
        "from fedpd.algorithms import FedAvg\n\n\nclass Boom(FedAvg):\n    def init_server(self, x0):\n"
        "        raise ValueError('no server for you')\n\n\nclass LateBoom(FedAvg):\n"
        "    def local(self, message, clients, ctx):\n        raise ValueError('no training for you')\n")
    with pytest.raises(ConfigError) as err:
        Simulation(load_config(config(algorithm={"name": f"{module}_boom:Boom"})))
    assert f"the plug-in {module}_boom:Boom failed in its init_server hook" in str(err.value)
    assert "no server for you" in str(err.value) and "\n" not in str(err.value)
    sim = Simulation(load_config(config(algorithm={"name": f"{module}_boom:LateBoom"})))
    with pytest.raises(ConfigError, match=f"the plug-in {module}_boom:LateBoom failed in its local hook"):
        sim.step()

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
    import shutil
    import subprocess
    import sys

    from doc_blocks import bash_blocks, clean_env, run_script

    root = ROOT
    doc = root / "docs" / "privacy.md"
    [block] = bash_blocks(doc, "Worked example")
    work = tmp_path / "clone"
    shutil.copytree(root / "examples", work / "examples")
    done = run_script(block, work, clean_env(tmp_path / "home"))
    assert done.returncode == 0, done.stdout[-3000:]
    last = json.loads((work / "runs/fedavg-dp/metrics.jsonl").read_text().splitlines()[-1])
    assert last["round"] == 100
    assert last["dp_epsilon"] == pytest.approx(epsilon(fixed("poisson", 1.0, 1e-5, dp_q=0.05), 100))
    shown = float(re.search(r"spent ε = ([\d.]+) at δ = 1e-5", doc.read_text()).group(1))
    assert last["dp_epsilon"] == pytest.approx(shown, abs=0.005)
    assert "ε" in done.stdout and f"{last['dp_epsilon']:.4g}" in done.stdout  # the compare table's column
    private, public = map(float, re.search(r"train loss \(([\d.]+)\) is close to the non-private run's\s+\(([\d.]+)\)",
                                           doc.read_text()).groups())
    plain = json.loads((work / "runs/fedavg-nodp/metrics.jsonl").read_text().splitlines()[-1])
    assert round(last["train_loss"], 3) == private and round(plain["train_loss"], 3) == public
    # the page's recomputation from the run's files, verbatim, where the page's commands left them
    recompute = subprocess.run([sys.executable, "-c", recompute_block()], cwd=work, capture_output=True, text=True,
                               env=clean_env(tmp_path / "home"), timeout=300)
    assert recompute.returncode == 0, recompute.stderr[-3000:]
    said = f"ε = {last['dp_epsilon']:.4f} at δ = 1e-05 after 100 rounds; the run reports {last['dp_epsilon']:.4f}"
    assert recompute.stdout.strip() == said and said in doc.read_text()


def test_fedpd_show_and_list_show_privacy(capsys):
    from fedpd.cli import main

    assert main(["show", "privacy"]) == 0
    shown = capsys.readouterr().out
    assert 'accountant = "rdp"' in shown and "rdp | pld" in shown
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "\nprivacy:\n" in listed and "fedpd show privacy" in listed


def test_compare_shows_the_epsilon_not_the_mechanism_keys_as_metrics(tmp_path):
    """The dp_* keys every evaluation records name the mechanism (settings, shown by compare's
    privacy column); only dp_epsilon is a column of its own, and none is a metric's final / best."""
    cfg = {"problem": {"name": "least_squares", "clients": 10, "dim": 3, "samples_per_client": 5},
           "algorithm": {"name": "fedavg"}, "solver": {"name": "gd", "lr": 0.1, "local_steps": 1},
           "sampler": {"name": "bernoulli", "q": 0.5}, "run": {"rounds": 2, "eval_every": 1},
           "privacy": {"clip": "adaptive", "noise_multiplier": 1.0, "quantile_noise": 2.0}}
    run(cfg, tmp_path / "a")
    assert "dp_sampling" in json.loads((tmp_path / "a" / "metrics.jsonl").read_text().splitlines()[-1])
    columns, rows = compare_table([tmp_path / "a"])
    keys = [c.key for c in columns]
    assert "dp_epsilon" in keys and "privacy" in keys
    assert rows[0]["privacy"] == "adaptive clip, z=1, ε by RDP at δ=1e-05"
    assert not [k for k in keys if k.startswith("dp_") and k != "dp_epsilon"], keys
