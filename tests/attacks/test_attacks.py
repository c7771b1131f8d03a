"""Faults and attacks (fedpd.attacks): what each attack does to the data or to an upload, and the
upload screen (NaN/Inf or wrong-shaped rows rejected, counted in ``rejected_uploads``)."""

import pytest
import torch

from fedpd.attacks import make_attack
from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.problems.base import ClientSplit
from fedpd.problems.fedplus import outlier_parties
from fedpd.problems.poisoning import party_count, transform_parties
from fedpd.screen import screen
from helpers import ls_hessian, simulation

DT = torch.float64


def _bound(kind, parties=(1, 3), n=4, **kw):
    return make_attack(kind, parties=list(parties), **kw).bind(n)


def _corrupt(att, up, msg, ids, round=0, model_keys=(), update_keys=(), seed=0):
    return att.corrupt(up, msg, ids, round, seed, model_keys, update_keys)


def _upload(k=4, d=3):
    g = torch.Generator().manual_seed(5)
    return {"w": torch.randn(k, d, generator=g, dtype=DT), "metric_r": torch.arange(k, dtype=DT)}, \
        {"x0": torch.randn(d, generator=g, dtype=DT)}


# --- update attacks ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind, factor", [("sign_flip", 1.0), ("sign_flip", 3.0), ("scale", 10.0)])
def test_sign_flip_and_scale_act_on_the_update(kind, factor):
    up, msg = _upload()
    att = _bound(kind, factor=factor)
    ids = torch.arange(4)
    out, n = _corrupt(att, up, msg, ids, model_keys=("w",))
    r, u = msg["x0"], up["w"]
    sign = -1 if kind == "sign_flip" else 1
    assert n == 2
    for k in (1, 3):  # the chosen parties: u ← r ∓ factor·(u − r)
        torch.testing.assert_close(out["w"][k], r + sign * factor * (u[k] - r), rtol=0, atol=1e-14)
    for k in (0, 2):
        assert torch.equal(out["w"][k], u[k])
    assert torch.equal(out["metric_r"], up["metric_r"])  # diagnostics are never corrupted


def test_update_attack_on_update_uploads_uses_reference_zero_and_leaves_other_keys():
    up, msg = _upload()
    up["n"] = torch.full((4,), 6.0, dtype=DT)  # a sample count: not the update
    out, _ = _corrupt(_bound("sign_flip"), up, msg, torch.arange(4), update_keys=("w",))
    torch.testing.assert_close(out["w"][1], -up["w"][1], rtol=0, atol=0)
    assert torch.equal(out["n"], up["n"])


def test_gaussian_adds_noise_of_std_to_chosen_rows_only():
    up, msg = _upload(k=4, d=20000)
    out, _ = _corrupt(_bound("gaussian", std=0.5), up, msg, torch.arange(4), model_keys=("w",))
    noise = out["w"] - up["w"]
    assert torch.equal(noise[0], torch.zeros_like(noise[0])) and torch.equal(noise[2], torch.zeros_like(noise[2]))
    for k in (1, 3):
        assert abs(float(noise[k].std()) - 0.5) < 0.02 and abs(float(noise[k].mean())) < 0.02
    # a party's noise is its own: the same with other participants, or in another order
    alone, _ = _corrupt(_bound("gaussian", std=0.5), {"w": up["w"][[3]]}, msg, torch.tensor([3]), model_keys=("w",))
    assert torch.equal(alone["w"][0], out["w"][3])


@pytest.mark.parametrize("kind, value", [("nan", float("nan")), ("inf", float("inf"))])
def test_nan_inf_fill_chosen_rows(kind, value):
    up, msg = _upload(k=2)
    out, n = _corrupt(_bound(kind), up, msg, torch.tensor([1, 2]), model_keys=("w",))
    assert n == 1  # of participants 1 and 2 only party 1 is chosen
    assert torch.equal(out["w"][0].isnan() if kind == "nan" else out["w"][0] == value, torch.ones(3, dtype=torch.bool))
    assert torch.equal(out["w"][1], up["w"][1])


def test_start_round_and_probability():
    up, msg = _upload()
    att = _bound("scale", start_round=2, factor=2.0)
    assert _corrupt(att, up, msg, torch.arange(4), round=1, model_keys=("w",))[1] == 0
    assert _corrupt(att, up, msg, torch.arange(4), round=2, model_keys=("w",))[1] == 2
    rare = _bound("scale", parties=range(4), probability=0.3, factor=2.0)
    hits = sum(_corrupt(rare, up, msg, torch.arange(4), round=t, model_keys=("w",))[1] for t in range(500))
    assert 0.22 < hits / 2000 < 0.38  # each party's coin, each round: 600 ± 20 of 2000


def test_targets_fraction_is_seeded_and_explicit_parties_are_checked():
    a = make_attack("nan", fraction=0.2, seed=4).targets(10)
    assert a.numel() == 2 and torch.equal(a, make_attack("nan", fraction=0.2, seed=4).targets(10))
    with pytest.raises(ConfigError, match="attack.parties"):
        make_attack("nan", parties=[7]).targets(4)
    with pytest.raises(ConfigError, match="attack.name"):
        load_config({"problem": {"name": "least_squares"}, "algorithm": {"name": "fedavg"}, "attack": {"name": "evil"}})


@pytest.mark.parametrize("fraction, n, m", [
    (0.0, 10, 0), (0.01, 10, 1), (0.05, 10, 1),  # at least one party when fraction > 0
    (0.15, 10, 2), (0.25, 10, 3), (0.45, 10, 5),  # halves round up (Python's round: 2, 2, 4)
    (0.2, 10, 2), (0.1, 10, 1), (0.2, 50, 10), (0.1, 30, 3), (1.0, 7, 7),
])
def test_one_count_rule_for_attacks_and_mnist_robust_outliers(fraction, n, m):
    assert party_count(fraction, n) == m
    assert make_attack("nan", fraction=fraction).targets(n).numel() == m
    assert outlier_parties(n, fraction) == list(range(n - m, n))


# --- data attacks -----------------------------------------------------------------------------
def _split(y):
    x = torch.arange(12, dtype=DT).reshape(6, 2) + 1
    return ClientSplit.from_parts([x[:2], x[2:4], x[4:]], [y[:2], y[2:4], y[4:]])


def test_negate_inputs_only_the_chosen_parties():
    s = _split(torch.arange(6))
    out = transform_parties(s, torch.tensor([1]), "negate_inputs")
    assert torch.equal(out.x[2:4], -s.x[2:4])
    assert torch.equal(out.x[:2], s.x[:2]) and torch.equal(out.x[4:], s.x[4:])
    assert torch.equal(out.y, s.y)


def test_label_flip_classes_and_real_targets():
    s = _split(torch.tensor([0, 1, 2, 3, 0, 3]))
    out = transform_parties(s, torch.tensor([0, 2]), "label_flip", num_classes=4)
    assert out.y.tolist() == [3, 2, 2, 3, 3, 0]  # c ← C − 1 − c for parties 0 and 2
    r = _split(torch.tensor([1.0, -2.0, 3.0, 4.0, 5.0, -6.0], dtype=DT))
    assert transform_parties(r, torch.tensor([1]), "label_flip").y.tolist() == [1.0, -2.0, -3.0, -4.0, 5.0, -6.0]


@pytest.mark.parametrize("splits", ["train", "both"])
def test_data_attack_through_config_poisons_train_or_both(splits):
    problem = {"name": "least_squares", "clients": 4, "dim": 3, "samples_per_client": 6}
    from fedpd.build import build_problem
    from fedpd.config import load_config

    clean = simulation({"name": "fedavg"}, problem=problem)

    cfg = load_config({"problem": problem, "algorithm": {"name": "fedavg"}, "solver": {"name": "exact"},
                       "attack": {"name": "negate_inputs", "parties": [2], "splits": splits}})
    p = build_problem(cfg)
    hit = clean.problem.train.owner == 2
    assert torch.equal(p.train.x[hit], -clean.problem.train.x[hit])
    assert torch.equal(p.train.x[~hit], clean.problem.train.x[~hit])
    test_hit = clean.problem.test.owner == 2
    expected = -clean.problem.test.x[test_hit] if splits == "both" else clean.problem.test.x[test_hit]
    assert torch.equal(p.test.x[test_hit], expected)
    assert p.info["attacked_parties"] == [2]


# --- the screen: rejected uploads -------------------------------------------------------------
@pytest.mark.parametrize("algorithm", [{"name": "fedavg"}, {"name": "fedavg_plus", "sigma": 1.0, "delta": 0.1}])
def test_nan_party_never_changes_the_server_model_and_is_counted(algorithm):
    """Party 3 sends NaN every round: the server model is the aggregate of parties 0–2 alone."""
    attack = {"name": "nan", "parties": [3]}
    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    cfg = {"problem": {"name": "least_squares", "clients": 4, "dim": 3, "samples_per_client": 6},
           "algorithm": algorithm,
           "solver": {"name": "exact"}, "sampler": {"name": "all"}, "run": {"rounds": 3}, "attack": attack}
    sim = Simulation(load_config(cfg))
    sim.step()
    if algorithm["name"] == "fedavg":  # exact local solves: x0 = mean of the three minimisers, by hand
        sols = [torch.linalg.solve(*ls_hessian(sim, i)) for i in range(3)]
        torch.testing.assert_close(sim.model(), torch.stack(sols).mean(0), rtol=0, atol=1e-12)
    for _ in range(2):
        sim.step()
    assert torch.isfinite(sim.model()).all()
    if algorithm["name"] == "fedavg_plus":  # Alg. 1's table: party 3's row is still w̃⁰, never its NaN
        assert torch.equal(sim.server["W"][3], sim.problem.x_init)
        torch.testing.assert_close(sim.model(), sim.server["W"].mean(0), rtol=0, atol=1e-12)
    m = sim.metrics()
    assert m["rejected_uploads"] == 3  # one per round


def test_fedavg_nan_party_equals_run_without_that_party():
    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    base = {"algorithm": {"name": "fedavg"}, "solver": {"name": "gd", "lr": 0.1, "local_steps": 2},
            "sampler": {"name": "all"}, "run": {"rounds": 3}}
    prob = {"name": "least_squares", "clients": 4, "dim": 3, "samples_per_client": 6}
    sim = Simulation(load_config({**base, "problem": prob, "attack": {"name": "nan", "parties": [3]}}))
    ref = Simulation(load_config({**base, "problem": prob}))
    x0 = sim.model().clone()
    for _ in range(3):
        sim.step()
        # FedAvg-GD of the accepted parties, computed from the previous server model
        xs = []
        for i in range(3):
            x = x0.clone()
            H, g = ls_hessian(sim, i)
            for _ in range(2):
                x = x - 0.1 * (H @ x - g)
            xs.append(x)
        x0 = torch.stack(xs).mean(0)
        torch.testing.assert_close(sim.model(), x0, rtol=0, atol=1e-12)
    ref.step()
    assert not torch.allclose(ref.model(), sim.model())  # party 3 would have counted


def test_screen_rejects_wrong_shapes_missing_keys_and_nonfinite_rows():
    good = {"w": torch.zeros(2, 3, dtype=DT)}
    wrong_shape = {"w": torch.zeros(1, 4, dtype=DT)}
    missing = {"z": torch.zeros(1, 3, dtype=DT)}
    nan_row = {"w": torch.tensor([[1.0, float("nan"), 0.0], [1.0, 2.0, 3.0]], dtype=DT)}
    stacked, ok = screen([good, wrong_shape, missing, nan_row], [2, 1, 1, 2])
    assert ok.tolist() == [True, True, False, False, False, True]
    assert stacked["w"].shape == (6, 3)
    assert torch.isnan(stacked["w"][2]).all()  # the rejected chunk is padded, never used


def test_engine_rejects_a_wrong_shaped_upload_and_goes_on():
    """A client whose upload has the wrong shape is rejected and counted; the others aggregate."""
    from fedpd.algorithms.fedavg import FedAvg
    from fedpd.engine import InProcessEngine
    from fedpd.store import MemoryStore

    class Broken(FedAvg):
        def local(self, message, clients, ctx):
            up, cl = super().local(message, clients, ctx)
            if int(ctx.ids[0]) == 3:  # party 3 sends one float too many
                up = {"x": torch.cat([up["x"], torch.zeros(up["x"].shape[0], 1, dtype=DT)], 1)}
            return up, cl

    sim = simulation({"name": "fedavg"})
    alg = Broken()
    server = alg.init_server(sim.problem.x_init)
    store = MemoryStore(alg.init_client(sim.problem.x_init), 4)
    engine = InProcessEngine(alg, sim.problem, sim.solver, store, seed=0, chunk=1)
    server = engine.run_round(server, torch.arange(4), 0)
    sols = [torch.linalg.solve(*ls_hessian(sim, i)) for i in range(3)]  # exact solves of parties 0–2
    torch.testing.assert_close(server["x0"], torch.stack(sols).mean(0), rtol=0, atol=1e-12)
    assert engine.comm.rejected_uploads == 1


# --- attacks that see the honest uploads ------------------------------------------------------
def test_alie_sends_the_honest_mean_minus_z_standard_deviations():
    up, msg = _upload(k=5, d=4)
    out, n = _corrupt(_bound("alie", parties=(1, 3), n=5, z=1.5), up, msg, torch.arange(5), model_keys=("w",))
    r = msg["x0"]
    honest = up["w"][[0, 2, 4]] - r  # updates of the honest participants
    forged = r + honest.mean(0) - 1.5 * honest.std(0, unbiased=False)
    assert n == 2
    for k in (1, 3):
        torch.testing.assert_close(out["w"][k], forged, rtol=0, atol=1e-14)
    for k in (0, 2, 4):
        assert torch.equal(out["w"][k], up["w"][k])


def test_alie_default_z_is_baruch_et_al_z_max():
    from math import floor

    from fedpd.attacks import ALIE

    for n, f in [(50, 10), (10, 2), (20, 4)]:
        s = floor(n / 2 + 1) - f
        p = (n - s) / n
        z = ALIE().z_of(n, f)
        assert (
            abs(float(torch.distributions.Normal(0.0, 1.0).cdf(torch.tensor(z, dtype=torch.float64))) - p) < 1e-9
        )  # Φ(z) = (n − s)/n


@pytest.mark.parametrize("epsilon", [0.1, 100.0])
def test_ipm_sends_minus_epsilon_times_the_honest_mean_update(epsilon):
    up, msg = _upload(k=4, d=3)
    out, n = _corrupt(_bound("ipm", parties=(2,), epsilon=epsilon), up, msg, torch.arange(4), update_keys=("w",))
    honest = up["w"][[0, 1, 3]]
    torch.testing.assert_close(out["w"][2], -epsilon * honest.mean(0), rtol=0, atol=1e-12)
    assert n == 1 and torch.equal(out["w"][[0, 1, 3]], honest)


def test_ipm_with_large_epsilon_breaks_the_mean_but_not_the_median():
    """Through the config: 2 of 8 participants send −100 × the honest mean update each round."""
    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    def final_loss(aggregator):
        cfg = {"problem": {"name": "least_squares", "clients": 8, "dim": 3, "samples_per_client": 10},
               "algorithm": {"name": "fedavg", "aggregator": aggregator}, "solver": {"name": "gd", "lr": 0.1},
               "attack": {"name": "ipm", "parties": [1, 5], "epsilon": 100.0}, "run": {"rounds": 10}}
        sim = Simulation(load_config(cfg))
        start = sim.metrics()["train_loss"]
        for _ in range(10):
            sim.step()
        return start, sim.metrics()["train_loss"]

    start, mean_loss = final_loss("mean")
    _, median_loss = final_loss("coordinate_median")
    assert mean_loss > 100 * start and median_loss < start


@pytest.mark.parametrize("kind", ["alie", "ipm", "mimic"])
def test_a_forging_attack_leaves_a_round_without_honest_uploads_alone(kind):
    """Parties 1 and 3 of 4 misbehave and are the round's only participants: there is no honest
    update to forge from, so nothing is changed — while an attack on each row's own update
    (sign flip) changes both rows of the same round."""
    up, msg = _upload(k=2, d=3)
    ids = torch.tensor([1, 3])
    out, n = _corrupt(_bound(kind), up, msg, ids, model_keys=("w",))
    assert n == 0 and out is up
    flipped, n = _corrupt(_bound("sign_flip"), up, msg, ids, model_keys=("w",))
    assert n == 2 and torch.equal(flipped["w"], msg["x0"] - (up["w"] - msg["x0"]))


# the names fedpd.attacks exported when it was one module, and where the moved ones went
KEPT = ["ALIE", "ALIEOptions", "ATTACKS", "Attack", "Backdoor", "BackdoorOptions", "DEFAULT_FRACTION", "DataAttack",
        "DataAttackOptions", "Dropout", "Gaussian", "GaussianOptions", "IPM", "IPMOptions", "InfUpload", "LabelFlip",
        "Mimic", "MimicOptions", "NaNUpload", "NegateInputs", "OmniscientAttack", "OptimalALIE", "OptimalAttack",
        "OptimalIPM", "OptimalOptions", "RoundAttackOptions", "Scale", "ScaleOptions", "SignFlip", "SignFlipOptions",
        "State", "TargetOptions", "UpdateAttack", "line_search", "make_attack", "top_direction_row"]
MOVED = {"party_count": "fedpd.problems.poisoning", "num_classes": "fedpd.problems.poisoning",
         "transform_parties": "fedpd.problems.poisoning", "trigger_count": "fedpd.problems.poisoning",
         "apply_trigger": "fedpd.problems.poisoning", "poisoned_rows": "fedpd.problems.poisoning",
         "screen": "fedpd.screen", "finite_rows": "fedpd.screen"}


def test_every_name_fedpd_attacks_exported_still_imports_and_a_moved_one_says_where_it_went():
    import importlib
    import warnings

    import fedpd.attacks

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a kept name warns of nothing
        for name in KEPT:
            assert getattr(fedpd.attacks, name) is not None
    for name, module in MOVED.items():
        with pytest.warns(DeprecationWarning, match=rf"fedpd\.attacks\.{name} moved to {module}\.{name}"):
            old = getattr(fedpd.attacks, name)
        assert old is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        fedpd.attacks.nothing  # noqa: B018
