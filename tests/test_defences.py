"""The defences of issue 32 as aggregators (fedpd.aggregators): centered clipping, Bulyan, norm
bounding — each against numbers worked out by hand, its option errors, its registry entry, and
the reference (the server model) the algorithms hand it."""

import pytest
import torch

from fedpd.aggregators import AGGREGATORS, bulyan, centered_clipping, make_aggregator, min_rows, norm_bounding
from fedpd.errors import ConfigError
from fedpd.registry import AGGREGATORS as LISTED

DT = torch.float64


def _t(rows):
    return torch.tensor(rows, dtype=DT)


# --- norm bounding ---------------------------------------------------------------------------
def test_norm_bounding_by_hand():
    # updates (3, 4) of norm 5 and (0, 1) of norm 1; M = 2.5 clips the first to (1.5, 2)
    agg, info = norm_bounding(_t([[3, 4], [0, 1]]), max_norm=2.5)
    torch.testing.assert_close(agg, _t([0.75, 1.5]), rtol=0, atol=1e-15)
    assert info["clipped"] == 1
    # about a reference (1, 1): the same updates, moved by it
    agg, _ = norm_bounding(_t([[4, 5], [1, 2]]), max_norm=2.5, reference=_t([1, 1]))
    torch.testing.assert_close(agg, _t([1.75, 2.5]), rtol=0, atol=1e-15)
    # weights 3:1: (3·(1.5, 2) + (0, 1)) / 4
    agg, _ = norm_bounding(_t([[3, 4], [0, 1]]), max_norm=2.5, weights=_t([3, 1]))
    torch.testing.assert_close(agg, _t([1.125, 1.75]), rtol=0, atol=1e-15)
    # a large bound is the mean; a zero update stays zero
    w = _t([[3, 4], [0, 0]])
    torch.testing.assert_close(norm_bounding(w, max_norm=100.0)[0], w.mean(0), rtol=0, atol=0)


# --- centered clipping -----------------------------------------------------------------------
def test_centered_clipping_by_hand():
    w = _t([[10], [0], [0]])
    # v0 = 0, τ = 1: the 10 is clipped to 1, the zeros enter as they are: v1 = 1/3
    v, info = centered_clipping(w, tau=1.0)
    torch.testing.assert_close(v, _t([1 / 3]), rtol=0, atol=1e-15)
    assert info["iterations"] == 1 and info["clipped"] == 1
    # L = 2: from 1/3, 29/3 → 1 and −1/3 twice: v2 = 1/3 + (1 − 2/3)/3 = 4/9
    v, info = centered_clipping(w, tau=1.0, iterations=2)
    torch.testing.assert_close(v, _t([4 / 9]), rtol=0, atol=1e-15)
    assert info["iterations"] == 2
    # from the reference 1: 9 → 1, −1, −1: v1 = 1 − 1/3 = 2/3
    v, _ = centered_clipping(w, tau=1.0, reference=_t([1]))
    torch.testing.assert_close(v, _t([2 / 3]), rtol=0, atol=1e-15)
    # weights 2:1:1: (2·1 + 0 + 0)/4
    v, _ = centered_clipping(w, tau=1.0, weights=_t([2, 1, 1]))
    torch.testing.assert_close(v, _t([0.5]), rtol=0, atol=1e-15)
    # 2-D: (3, 4) is clipped to the unit vector (0.6, 0.8); (0, ±1) have norm τ and stay
    v, info = centered_clipping(_t([[3, 4], [0, 1], [0, -1]]), tau=1.0)
    torch.testing.assert_close(v, _t([0.2, 0.8 / 3]), rtol=0, atol=1e-15)
    assert info["clipped"] == 1


def test_centered_clipping_converges_to_the_mean_when_nothing_is_clipped():
    w = _t([[1, 2], [3, 0], [2, 1]])
    v, info = centered_clipping(w, tau=1e6, reference=_t([50, -7]))
    torch.testing.assert_close(v, w.mean(0), rtol=0, atol=1e-13)  # one step: v0 + mean(x − v0)
    assert info["clipped"] == 0


# --- Bulyan ----------------------------------------------------------------------------------
def test_bulyan_selection_by_hand():
    # n = 7, f = 1: θ = 5 rows by repeated Krum. Values 0, 1, 2, 3, 4, 100, −50.
    # r=7 (4 nearest): scores 30, 15, 10, 15, 30, … → 2; r=6 (3 nearest): 0:26, 1:14, 3:14, 4:26 → 1
    # (tie, lower index); r=5 (2 nearest): 0:25, 3:10, 4:17 → 3; r=4 (1 nearest): 0:16, 4:16 → 0;
    # r=3 (1 nearest): 4: 54² = 2916, 100: 96², −50: 54² → 4 (tie with −50, lower index).
    w = _t([[0], [1], [2], [3], [4], [100], [-50]])
    agg, info = bulyan(w, n_byzantine=1)
    assert info["selected"] == [2, 1, 3, 0, 4]
    # β = θ − 2f = 3 nearest the median 2 of {0..4}: 1, 2, 3
    torch.testing.assert_close(agg, _t([2.0]), rtol=0, atol=0)


def test_bulyan_averages_the_values_nearest_the_median_not_a_symmetric_trim():
    # five honest rows and two far outliers at indices 5, 6: the selection is the five honest rows.
    # coordinate 1: 0, 1, 2, 10, 11 → median 2, nearest three 0, 1, 2 → 1 (a trimmed mean gives 13/3)
    # coordinate 2: 5, 5, 6, 7, −3 → median 5, nearest three 5, 5, 6 → 16/3
    w = _t([[0, 5], [1, 5], [2, 6], [10, 7], [11, -3], [1000, 0], [0, -1000]])
    agg, info = bulyan(w, n_byzantine=1)
    assert sorted(info["selected"]) == [0, 1, 2, 3, 4]
    torch.testing.assert_close(agg, _t([1.0, 16 / 3]), rtol=0, atol=1e-15)
    # f = 0: every row selected, β = n: the mean
    torch.testing.assert_close(bulyan(w, n_byzantine=0)[0], w.mean(0), rtol=0, atol=1e-12)


def test_bulyan_refuses_fewer_than_4f_plus_3_rows():
    w = _t([[0.0]] * 6)
    with pytest.raises(ConfigError, match=r"bulyan needs K >= 4\*n_byzantine \+ 3; got K=6, n_byzantine=1 "
                                          r"\(allowed: n_byzantine <= 0\)") as err:
        bulyan(w, n_byzantine=1)
    assert "\n" not in str(err.value)
    assert min_rows("bulyan", {"n_byzantine": 2}) == 11


# --- registry, options, the reference the algorithms pass --------------------------------------
@pytest.mark.parametrize("name, options", [("centered_clipping", {"tau": 1.0, "iterations": 3}),
                                           ("norm_bounding", {"max_norm": 1.0}), ("bulyan", {"n_byzantine": 1})])
def test_registered_with_their_options(name, options):
    assert name in AGGREGATORS and name in LISTED
    entry = LISTED[name]
    assert set(options) <= set(entry.options.model_fields) and "\n" not in entry.description
    w = torch.randn(7, 3, generator=torch.Generator().manual_seed(0), dtype=DT)
    agg, _ = make_aggregator(name, **options)(w, reference=torch.zeros(3, dtype=DT))
    assert agg.shape == (3,)


@pytest.mark.parametrize("name, options, message", [
    ("centered_clipping", {}, "aggregator_options.tau: missing"),
    ("centered_clipping", {"tau": -1.0}, "aggregator_options.tau"),
    ("centered_clipping", {"tau": 1.0, "iterations": 0}, "aggregator_options.iterations"),
    ("centered_clipping", {"tau": 1.0, "radius": 2}, "aggregator_options.radius"),
    ("norm_bounding", {}, "aggregator_options.max_norm: missing"),
    ("norm_bounding", {"max_norm": 0}, "aggregator_options.max_norm"),
    ("bulyan", {}, "aggregator_options.n_byzantine: missing"),
    ("bulyan", {"n_byzantine": -1}, "aggregator_options.n_byzantine"),
])
def test_bad_options_give_one_line(name, options, message):
    with pytest.raises(ConfigError) as err:
        make_aggregator(name, **options)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_fedpd_list_shows_them(capsys):
    from fedpd.cli import main

    for name, option in (("centered_clipping", "tau"), ("bulyan", "n_byzantine"), ("norm_bounding", "max_norm")):
        main(["list", name])
        out = capsys.readouterr().out
        assert f'algorithm.aggregator = "{name}"' in out and option in out


def test_fedavg_clips_about_the_server_model():
    """FedAvg hands the server model x0 to norm bounding: one round equals x0 + mean of the
    clipped updates of the uploads."""
    from fedpd.algorithms.fedavg import FedAvg
    from fedpd.defence import build_defence

    alg = FedAvg(build_defence("norm_bounding", {"max_norm": 1.0}))
    x0 = _t([1.0, -2.0])
    server = alg.init_server(x0)
    uploads = {"x": x0 + _t([[3, 4], [0, 0.5], [-6, 8]])}
    agg, counts = alg.average(server, uploads)
    torch.testing.assert_close(agg, x0 + (_t([0.6, 0.8]) + _t([0, 0.5]) + _t([-0.6, 0.8])) / 3, rtol=0, atol=1e-15)
    alg = FedAvg(build_defence("centered_clipping", {"tau": 1.0}))
    agg, _ = alg.average(alg.init_server(x0), uploads)  # one step from x0: the same numbers
    torch.testing.assert_close(agg, x0 + _t([0.0, 2.1 / 3]), rtol=0, atol=1e-15)


def test_one_step_of_centered_clipping_about_the_reference_is_norm_bounding():
    w = torch.randn(6, 4, generator=torch.Generator().manual_seed(1), dtype=DT)
    ref = torch.randn(4, generator=torch.Generator().manual_seed(2), dtype=DT)
    torch.testing.assert_close(centered_clipping(w, tau=0.7, reference=ref)[0],
                               norm_bounding(w, max_norm=0.7, reference=ref)[0], rtol=0, atol=1e-14)
    assert not torch.allclose(centered_clipping(w, tau=0.7, iterations=3, reference=ref)[0],
                              norm_bounding(w, max_norm=0.7, reference=ref)[0])


def test_config_refuses_bulyan_with_too_few_participants():
    from fedpd.build import build, build_problem
    from fedpd.config import load_config

    cfg = load_config({"problem": {"name": "least_squares", "clients": 6, "dim": 3, "samples_per_client": 4},
                       "algorithm": {"name": "fedavg", "aggregator": "bulyan",
                                     "aggregator_options": {"n_byzantine": 1}},
                       "solver": {"name": "exact"}})
    with pytest.raises(ConfigError, match="needs at least 7 uploads per round") as err:
        build(cfg, build_problem(cfg))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("algorithm", [
    {"name": "fedavg", "aggregator": "norm_bounding", "aggregator_options": {"max_norm": 0.05}},
    {"name": "fedplus", "aggregator": "centered_clipping", "aggregator_options": {"tau": 0.05, "iterations": 2}},
])
def test_a_clipping_server_moves_the_model_by_at_most_the_bound(algorithm):
    """Each round the server model moves by at most the bound (a mean of updates clipped to it),
    for FedAvg and for Fed+ (which hands its robust aggregator its w̃ as the reference)."""
    from tests.helpers import simulation

    sim = simulation(algorithm, solver={"name": "gd", "lr": 0.1, "local_steps": 2}, run={"rounds": 3})
    bound = algorithm["aggregator_options"].get("max_norm") or algorithm["aggregator_options"]["tau"] * 2
    for _ in range(3):
        before = sim.server["x0"].clone()
        sim.step()
        moved = float(torch.linalg.vector_norm(sim.server["x0"] - before))
        assert 0 < moved <= bound + 1e-12


# --- the one defence object a run builds -------------------------------------------------------------
def test_a_run_reads_aggregator_options_once_into_the_defence_it_hands_the_algorithm_and_the_attack(monkeypatch):
    import warnings

    from fedpd import defence as defence_module
    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    reads = []
    real = defence_module.pipeline
    monkeypatch.setattr(defence_module, "pipeline", lambda *a, **k: reads.append(a) or real(*a, **k))
    cfg = load_config({"problem": {"name": "least_squares", "clients": 10, "dim": 3, "samples_per_client": 4},
                       "algorithm": {"name": "fedavg", "aggregator": "krum", "client_momentum": 0.5,
                                     "aggregator_options": {"n_byzantine": 1, "m": 2, "pre": ["arc", "nnm"]}},
                       "attack": {"name": "optimal_ipm", "fraction": 0.2, "evals": 3},
                       "run": {"rounds": 2, "store": "memory"}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the attack is handed the defence, not the algorithm
        sim = Simulation(cfg)
    sim.step()
    assert len(reads) == 1  # checked with the config, built from it, simulated by the attack: one reading
    defence = cfg.options["algorithm"].defence()
    assert sim.algorithm.defence is defence and sim.engine.attack.simulate.__self__ is defence
    assert defence.describe() == "ARC → NNM → krum" and defence.momentum.beta == 0.5
    assert [type(s).__name__ for s in defence.pipeline.steps] == ["ARC", "NNM"] and defence.min_rows == 5


def test_each_step_has_its_own_options_and_declared_rows():
    from fedpd.aggregators import pipeline

    chain = pipeline("krum", {"n_byzantine": 2, "pre": ["bucketing", "nnm"], "bucket_size": 3})
    bucketing, nnm = chain.steps
    assert bucketing.options == {"bucket_size": 3} and nnm.options == {"n_byzantine": 2}
    # Krum (f = 2) takes 7 rows; NNM leaves as many as it gets and needs 5; bucketing leaves ⌈K/3⌉ ≥ 7
    assert chain.rule.min_rows == 7 and nnm.rows_needed(7) == 7 and bucketing.rows_needed(7) == 19
    assert chain.min_rows == 19 == min_rows("krum", {"n_byzantine": 2, "pre": ["bucketing", "nnm"], "bucket_size": 3})
    assert pipeline("trimmed_mean", {"trim_ratio": 0.1, "pre": "nnm", "n_byzantine": 4}).min_rows == 9  # K > 2f
