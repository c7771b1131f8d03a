"""Fed+ (Kundu, Yu, Wynter, Lim 2022, Alg. 1): Table 1's presets reproduce the standalone methods' iterates, and one
round of the Fed+ rule pinned by hand (θ_k by closed form, λ, σ, δ, per-party E_k, aggregation
over all parties or participants only, hybrid groups)."""

import functools
import math

import pytest
import torch

from fedpd.aggregators import coordinate_median, geometric_median
from fedpd.algorithms.base import expand
from helpers import context, ls_grad, server_context, simulation

DT = torch.float64
GD = {"name": "gd", "lr": 0.1, "local_steps": 3}
SGD = {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 2}
HALF = {"name": "uniform", "clients_per_round": 2}


def _trajectory(algorithm, *, solver=GD, sampler=None, rounds=4, personal=False, problem=None):
    sim = simulation(algorithm, solver=solver, sampler=sampler, problem=problem)
    out = []
    for _ in range(rounds):
        sim.step()
        if personal:
            out.append(sim.algorithm.personal_models(sim.server, sim.store, sim.problem).clone())
        else:
            out.append(sim.model().clone())
    return torch.stack(out)


# --- Table 1: derived presets == standalone implementations ---------------------------------
@pytest.mark.parametrize("solver", [GD, SGD], ids=["gd", "sgd"])
@pytest.mark.parametrize("sampler", [None, HALF], ids=["all", "uniform2"])
@pytest.mark.parametrize("preset, standalone", [
    ({"name": "fedplus_fedavg"}, {"name": "fedavg"}),
    ({"name": "fedplus_rfa"}, {"name": "fedavg", "aggregator": "geometric_median"}),
    ({"name": "fedplus_comed"}, {"name": "fedavg", "aggregator": "coordinate_median"}),
    ({"name": "fedplus_fedprox", "sigma": 0.3, "local_step": "explicit"}, {"name": "fedprox", "mu": 0.3}),
], ids=["fedavg", "rfa", "comed", "fedprox"])
def test_table1_server_presets_match_standalone(preset, standalone, sampler, solver):
    a = _trajectory(preset, solver=solver, sampler=sampler)
    b = _trajectory(standalone, solver=solver, sampler=sampler)
    assert not torch.allclose(a[0], a[-1])  # the model moves, so the comparison means something
    torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_table1_fedprox_preset_matches_fedprox_with_exact_solves():
    """With the exact solver Fed+'s sub-problem (eq. (12)) with θ = 0 is FedProx's local problem."""
    a = _trajectory({"name": "fedplus_fedprox", "sigma": 0.5}, solver={"name": "exact"})
    b = _trajectory({"name": "fedprox", "mu": 0.5}, solver={"name": "exact"})
    torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("solver", [GD, SGD], ids=["gd", "sgd"])
@pytest.mark.parametrize("sampler", [None, HALF], ids=["all", "uniform2"])
def test_table1_local_preset_matches_local_training(sampler, solver):
    a = _trajectory({"name": "fedplus_local"}, solver=solver, sampler=sampler, personal=True)
    b = _trajectory({"name": "local"}, solver=solver, sampler=sampler, personal=True)
    assert not torch.allclose(a[0], a[-1])
    torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    sim = simulation({"name": "fedplus_local"}, solver=GD)
    sim.step()
    assert sim.comm.state_dict()["uplink_floats"] == 0  # nothing is communicated


def test_fedprox_preset_implicit_step_is_the_proximal_step():
    """Fed+'s default step κ(w − ηg) + (1 − κ)w̃ (θ = 0, eq. (14)) differs from FedProx's explicit one."""
    a = _trajectory({"name": "fedplus_fedprox", "sigma": 0.3}, rounds=1)
    b = _trajectory({"name": "fedprox", "mu": 0.3}, rounds=1)
    assert (a - b).abs().max() > 1e-6


# --- one round of Fed+ by hand ----------------------------------------------------------------
def _prox(kind, v, delta):
    if kind == "sq_l2":
        return v / (1 + delta)
    if kind == "l2":
        n = v.norm(dim=-1, keepdim=True)
        return torch.clamp(1 - delta / n, min=0) * v
    if kind == "l1":
        return torch.sign(v) * torch.clamp(v.abs() - delta, min=0)
    raise AssertionError(kind)


def _setup(algorithm, solver=None, clients=4):
    sim = simulation(algorithm, solver=solver or {"name": "gd", "lr": 0.05, "local_steps": 2},
                     problem={"name": "least_squares", "clients": clients, "dim": 3, "samples_per_client": 6})
    g = torch.Generator().manual_seed(1)
    w = torch.randn(clients, 3, generator=g, dtype=DT)
    wt = torch.randn(3, generator=g, dtype=DT)
    return sim, w, wt


def _hand_local(sim, w, wt, kind, sigma, delta, lam, eta, steps):
    rows = []
    kappa = 1 / (1 + eta * sigma)
    for k in range(w.shape[0]):
        center = wt + _prox(kind, w[k] - wt, delta)  # Alg. 1 line 17
        x = (1 - lam) * w[k] + lam * wt  # line 18
        for _ in range(steps[k]):
            x = kappa * (x - eta * ls_grad(sim, k, x)) + (1 - kappa) * center  # eq. (14)
        rows.append(x)
    return torch.stack(rows)


@pytest.mark.parametrize("name, kind", [("fedavg_plus", "sq_l2"), ("fedgeomed_plus", "l2"),
                                        ("fedcomed_plus", "l1")])
def test_local_solve_by_hand(name, kind):
    sigma, delta, lam, eta = 2.0, 0.3, 0.25, 0.05
    steps = [1, 3, 0, 2]  # stragglers: per-party E_k
    sim, w, wt = _setup({"name": name, "sigma": sigma, "delta": delta, "lam": lam, "party_steps": steps})
    ids = torch.arange(4)
    uploads, clients = sim.algorithm.local({"x0": wt}, {"w": w}, context(sim, ids))
    expected = _hand_local(sim, w, wt, kind, sigma, delta, lam, eta, steps)
    torch.testing.assert_close(uploads["w"], expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(clients["w"], expected, rtol=0, atol=1e-12)
    # E_k = 0: only the λ mix happens
    torch.testing.assert_close(clients["w"][2], (1 - lam) * w[2] + lam * wt, rtol=0, atol=1e-14)


def test_explicit_local_step_by_hand():
    sigma, delta, eta = 2.0, 0.3, 0.05
    sim, w, wt = _setup({"name": "fedgeomed_plus", "sigma": sigma, "delta": delta, "local_step": "explicit"},
                        solver={"name": "gd", "lr": eta, "local_steps": 1})
    up, _ = sim.algorithm.local({"x0": wt}, {"w": w}, context(sim, torch.arange(4)))
    center = wt + _prox("l2", w - wt, delta)
    expected = torch.stack([w[k] - eta * (ls_grad(sim, k, w[k]) + sigma * (w[k] - center[k])) for k in range(4)])
    torch.testing.assert_close(up["w"], expected, rtol=0, atol=1e-12)


def test_aggregate_fedavg_plus_is_mean_over_all_parties_latest_models():
    """Alg. 1: the server keeps every party's last upload; absent parties count with it."""
    sim, w, wt = _setup({"name": "fedavg_plus", "sigma": 1.0, "delta": 0.1})
    alg = sim.algorithm
    server = alg.init_server(wt)
    ids = torch.tensor([0, 2])
    new, _ = alg.aggregate(server, {"w": w[ids]}, server_context(sim, ids))
    # first aggregation: absent parties still hold w̃⁰
    torch.testing.assert_close(new["x0"], (w[0] + w[2] + 2 * wt) / 4, rtol=0, atol=1e-13)
    ids2 = torch.tensor([1])
    newer, _ = alg.aggregate(new, {"w": w[ids2]}, server_context(sim, ids2))
    torch.testing.assert_close(newer["x0"], (w[0] + w[1] + w[2] + wt) / 4, rtol=0, atol=1e-13)
    torch.testing.assert_close(newer["W"][3], wt, rtol=0, atol=0)


def test_aggregate_over_participants_only():
    sim, w, wt = _setup({"name": "fedavg_plus", "sigma": 1.0, "delta": 0.1, "aggregate_over": "participants"})
    alg = sim.algorithm
    ids = torch.tensor([0, 2])
    new, _ = alg.aggregate(alg.init_server(wt), {"w": w[ids]}, server_context(sim, ids))
    torch.testing.assert_close(new["x0"], (w[0] + w[2]) / 2, rtol=0, atol=1e-13)
    assert "W" not in new


def test_aggregate_fedcomed_plus_small_delta_is_coordinate_median():
    """δ-coordinate-wise median (eq. (22)): for odd K and δ below the gaps, exactly the median."""
    sim, w, wt = _setup({"name": "fedcomed_plus", "sigma": 1.0, "delta": 1e-3, "aggregate_over": "participants",
                         "init": "median"}, clients=5)
    ids = torch.arange(5)
    new, _ = sim.algorithm.aggregate(sim.algorithm.init_server(wt), {"w": w}, server_context(sim, ids))
    torch.testing.assert_close(new["x0"], w.median(0).values, rtol=0, atol=1e-12)
    assert int(new["agg_iterations"]) >= 1 and int(new["agg_unconverged"]) == 0


def test_aggregate_fedgeomed_plus_is_the_eq25_fixed_point():
    """z = mean(w) − mean(prox_l2(w − z)) (eq. (25)); for small δ it is the geometric median."""
    delta = 0.05
    sim, w, wt = _setup({"name": "fedgeomed_plus", "sigma": 1.0, "delta": delta, "aggregate_over": "participants",
                         "tol": 1e-12, "max_iter": 100000, "init": "median"}, clients=5)
    new, _ = sim.algorithm.aggregate(sim.algorithm.init_server(wt), {"w": w}, server_context(sim, torch.arange(5)))
    z = new["x0"]
    torch.testing.assert_close(z, w.mean(0) - _prox("l2", w - z, delta).mean(0), rtol=0, atol=1e-10)
    gm, _ = geometric_median(w, tol=1e-14, max_iter=10000)
    assert float((z - gm).norm()) < 10 * delta
    assert sim.algorithm.diagnostics(new)["agg_iterations"] == int(new["agg_iterations"]) > 1


def test_agg_unconverged_counts_capped_rounds():
    sim, w, wt = _setup({"name": "fedgeomed_plus", "sigma": 1.0, "delta": 1e-4, "max_iter": 2,
                         "aggregate_over": "participants"})
    new, _ = sim.algorithm.aggregate(sim.algorithm.init_server(wt), {"w": w}, server_context(sim, torch.arange(4)))
    assert int(new["agg_iterations"]) == 2 and int(new["agg_unconverged"]) == 1


@pytest.mark.parametrize("init", ["previous", "median"])
def test_psi_zero_server_model_is_the_mean_of_the_parties_models(init):
    """Ψ = 0 leaves eq. (25) without a unique fixed point; the server model must still follow the
    parties (the mean of the latest models), not stay at its start (init = "previous")."""
    sim = simulation({"name": "fedplus", "psi": "zero", "sigma": 1.0, "init": init},
                     solver={"name": "gd", "lr": 0.05, "local_steps": 2})
    start = sim.model().clone()
    for _ in range(3):
        sim.step()
        torch.testing.assert_close(sim.model(), sim.store.full("w").mean(0), rtol=0, atol=1e-12)
    assert float((sim.model() - start).norm()) > 1e-3


# --- hybrid: a Ψ and δ per parameter group ----------------------------------------------------
SYNTH = {"name": "synthetic", "clients": 3, "dim": 4, "classes": 3, "max_client_samples": 12}


def test_hybrid_groups_theta_and_aggregation_by_hand():
    algo = {"name": "fedplus", "psi": "l1", "delta": 1e-3, "sigma": 1.0, "aggregate_over": "participants",
            "init": "median", "tol": 1e-13, "groups": [{"pattern": "*bias", "psi": "sq_l2", "delta": 0.5}]}
    sim = simulation(algo, problem=SYNTH, solver={"name": "gd", "lr": 0.1, "local_steps": 1})
    slices = sim.problem.model.slices()
    bias = next(sl for name, sl in slices.items() if name.endswith("bias"))
    rest = torch.ones(sim.problem.dim, dtype=torch.bool)
    rest[bias] = False
    g = torch.Generator().manual_seed(3)
    v = torch.randn(3, sim.problem.dim, generator=g, dtype=DT)
    theta = sim.algorithm.theta(v)
    torch.testing.assert_close(theta[:, bias], v[:, bias] / 1.5, rtol=0, atol=1e-14)  # sq_l2, δ = 0.5
    torch.testing.assert_close(theta[:, rest], _prox("l1", v[:, rest], 1e-3), rtol=0, atol=1e-14)
    # eq. (25) per block: the mean on the sq_l2 group, the coordinate median (K = 3) elsewhere
    new, _ = sim.algorithm.aggregate(sim.algorithm.init_server(v[0]), {"w": v}, server_context(sim, torch.arange(3)))
    torch.testing.assert_close(new["x0"][bias], v[:, bias].mean(0), rtol=0, atol=1e-12)
    torch.testing.assert_close(new["x0"][rest], coordinate_median(v[:, rest])[0], rtol=0, atol=1e-12)
    # one local step uses the hybrid centre w̃ + θ_k (eq. (14))
    wt = torch.randn(sim.problem.dim, generator=g, dtype=DT)
    ids = torch.arange(3)
    up, _ = sim.algorithm.local({"x0": wt}, {"w": v}, context(sim, ids))
    grad = sim.problem.gradients()(v, *sim.problem.train.padded(ids))
    kappa = 1 / (1 + 0.1)
    expected = kappa * (v - 0.1 * grad) + (1 - kappa) * (expand(wt, 3) + sim.algorithm.theta(v - wt))
    torch.testing.assert_close(up["w"], expected, rtol=0, atol=1e-12)


def test_bad_config_names_the_key():
    from fedpd.errors import ConfigError

    with pytest.raises(ConfigError, match="groups\\[0\\].pattern"):
        simulation({"name": "fedplus", "groups": [{"pattern": "nothing*"}]})
    with pytest.raises(ConfigError, match="party_steps"):
        simulation({"name": "fedavg_plus", "party_steps": [1, 2]}, solver=GD)


# --- §5.1's synthetic regression ---------------------------------------------------------------
def test_fedplus_regression_generator():
    from fedpd.problems.fedplus import fedplus_regression

    p = fedplus_regression(seed=3)
    n, d = 10, 1000
    assert p.num_clients == n and p.dim == d
    assert p.train.sizes.tolist() == [50] * n and p.test.sizes.tolist() == [50] * n  # 100 per party, 50/50
    assert p.train.x.shape == (n * 50, d) and p.info["outliers"] == [9]
    truth = p.info["truth"]  # w_k = w̄ + Laplace(0.5): variance 5 + 0.5, the outlier's 50 + 0.5
    regular, outlier = float(truth[:9].var()), float(truth[9].var())
    assert 5.0 < regular < 6.0 and 45 < outlier < 56 and 8 < outlier / regular < 11
    assert abs(float((truth[1] - truth[0]).var()) - 1.0) < 0.15  # two Laplace(0.5) draws: 2 · 2 · 0.25
    xs, ys, owner = [], [], []
    for split in (p.train, p.test):
        xs.append(split.x)
        ys.append(split.y)
        owner.append(split.owner)
    x, y, owner = torch.cat(xs), torch.cat(ys), torch.cat(owner)
    noise = y - (x * truth[owner]).sum(1)  # y = w_kᵀx + v, v ~ N(0, 2)
    assert abs(float(noise.var()) - 2.0) < 0.25 and abs(float(noise.mean())) < 0.15
    # Σ_jj = ((j − 1) mod 50 + 1)^(−1.1) (1-based j): variance about each party's own mean μ_k,
    # pooled over parties and over the 20 coordinates that share j mod 50
    centred = x - torch.stack([x[owner == k].mean(0) for k in range(n)])[owner]
    var = centred.pow(2).sum(0) / (len(x) - n)
    pooled = var.view(20, 50).mean(0)
    expected = torch.arange(1, 51, dtype=torch.float64).pow(-1.1)
    torch.testing.assert_close(pooled, expected, rtol=0.06, atol=0)
    assert pooled[0] > 30 * pooled[49]  # a decay, and coordinate 50 (index 49) is finite
    # seeded: the same seed gives the same problem, another seed another
    again, other = fedplus_regression(seed=3), fedplus_regression(seed=4)
    assert torch.equal(again.train.x, p.train.x) and torch.equal(again.test.y, p.test.y)
    assert not torch.equal(other.train.x, p.train.x)


# --- robustness acceptance (Fed+ §5.1 synthetic regression, fixed seeds) -----------------------
# N = 10, d = 1000, party 9 an outlier; full-batch GD (η = 0.003, below 2/L for this data), E = 20,
# 30 rounds, σ = 10 (κ ≈ 0.97, in the paper's recommended range). Figures in docs/fedplus.md.
ROBUST_RUN = {"problem": {"name": "fedplus_regression"}, "solver": {"name": "gd", "lr": 0.003, "local_steps": 20},
              "sampler": {"name": "all"}, "run": {"rounds": 30, "eval_every": 30, "personal_eval": "always"}}
ROBUST_ALGOS = {
    "fedavg": {"name": "fedavg"},
    "fedavg_plus": {"name": "fedavg_plus", "sigma": 10.0, "delta": 1.0},
    "fedgeomed_plus": {"name": "fedgeomed_plus", "sigma": 10.0, "delta": 2.0, "init": "previous"},
    "fedcomed_plus": {"name": "fedcomed_plus", "sigma": 10.0, "delta": 0.2, "init": "previous"},
}
ATTACKS = {
    "sign_flip": {"name": "sign_flip", "fraction": 0.2},  # parties 2 and 6 (the attack's seed 0), factor 1
    "scale": {"name": "scale", "fraction": 0.2, "factor": 20.0},  # the same parties, updates × 20
}
ROBUST_FACTOR = 1.15  # the median-based methods' error under attack stays within this factor of clean


@functools.cache
def _personal_mse(name, attack=None):
    from fedpd.runner import run

    cfg = {**ROBUST_RUN, "algorithm": ROBUST_ALGOS[name], **({"attack": ATTACKS[attack]} if attack else {})}
    return run(cfg).history[-1]["personal_mse"]


def _wrecked(attacked, clean, factor):
    """Degraded by more than ``factor`` (a diverged run's NaN / Inf counts as degraded)."""
    return not math.isfinite(attacked) or attacked > factor * clean


def test_robustness_median_methods_beat_mean_methods_clean():
    clean = {name: _personal_mse(name) for name in ROBUST_ALGOS}
    for robust in ("fedgeomed_plus", "fedcomed_plus"):
        assert clean[robust] < clean["fedavg_plus"] < clean["fedavg"], clean


def test_robustness_median_methods_survive_sign_flips():
    """FedAvg is wrecked by 20 % sign flips. (FedAvg+ survives them too, 720.8 → 795.5: a flipped
    update pulls its mean back, not away; the scale attack below separates mean from median.)"""
    for robust in ("fedgeomed_plus", "fedcomed_plus"):
        assert _personal_mse(robust, "sign_flip") < ROBUST_FACTOR * _personal_mse(robust), robust
    assert _wrecked(_personal_mse("fedavg", "sign_flip"), _personal_mse("fedavg"), 100)


def test_robustness_the_median_is_what_survives_scaled_updates():
    """Two of ten parties send r + 20(u − r): both mean-aggregating methods degrade by a large
    factor (FedAvg ≈ 10×, FedAvg+ diverges), both median methods stay within ROBUST_FACTOR."""
    for robust in ("fedgeomed_plus", "fedcomed_plus"):
        assert _personal_mse(robust, "scale") < ROBUST_FACTOR * _personal_mse(robust), robust
    assert _wrecked(_personal_mse("fedavg", "scale"), _personal_mse("fedavg"), 5)
    assert _wrecked(_personal_mse("fedavg_plus", "scale"), _personal_mse("fedavg_plus"), 1000)


def test_fedplus_state_resumes_exactly():
    """The server's [N, d] table of latest models and the attack stream are part of the checkpoint."""
    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    cfg = load_config({"problem": {"name": "least_squares", "clients": 4, "dim": 3, "samples_per_client": 6},
                       "algorithm": {"name": "fedgeomed_plus", "sigma": 2.0, "delta": 0.1},
                       "solver": SGD, "sampler": HALF, "run": {"rounds": 4},
                       "attack": {"name": "gaussian", "parties": [1], "std": 0.1, "probability": 0.5}})
    straight = Simulation(cfg)
    for _ in range(4):
        straight.step()
    first = Simulation(cfg)
    for _ in range(2):
        first.step()
    resumed = Simulation(cfg)
    resumed.load_state_dict(first.state_dict())
    for _ in range(2):
        resumed.step()
    torch.testing.assert_close(resumed.model(), straight.model(), rtol=0, atol=0)
    torch.testing.assert_close(resumed.store.full("w"), straight.store.full("w"), rtol=0, atol=0)
    torch.testing.assert_close(resumed.server["W"], straight.server["W"], rtol=0, atol=0)
