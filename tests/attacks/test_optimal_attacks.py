"""The attacks aimed at robust rules on heterogeneous clients: mimic, and ALIE and
IPM with their strength searched against the defence in use — each rule by hand."""

from __future__ import annotations

import pytest
import torch

from fedpd.attacks import Mimic, OptimalALIE, OptimalIPM, line_search, make_attack, top_direction_row
from fedpd.defence import build_defence
from fedpd.errors import ConfigError
from fedpd.runner import run

T = lambda *rows: torch.tensor(rows, dtype=torch.float64)  # noqa: E731


def test_mimic_copies_the_honest_row_along_the_top_direction():
    # the honest rows spread along e1: rows 0 and 1 are farthest along it (a tie: the lower index)
    honest = T([1.0, 0.0], [-1.0, 0.0], [0.0, 0.1])
    assert top_direction_row(honest) == 0
    assert torch.equal(make_attack("mimic").forged(honest, 5, 2), honest[0])
    # along e2 now: row 2 is the farthest
    assert top_direction_row(T([0.1, 0.0], [0.0, -2.0], [0.0, 3.0])) == 2


def test_mimic_with_an_index_copies_that_honest_participant():
    honest = T([1.0], [2.0], [3.0])
    assert torch.equal(make_attack("mimic", index=1).forged(honest, 4, 1), honest[1])
    assert torch.equal(make_attack("mimic", index=4).forged(honest, 4, 1), honest[1])  # modulo the honest count


def test_line_search_expands_then_contracts_forward_only():
    calls = []

    def objective(t):
        calls.append(t)
        return -(t - 25.0) ** 2

    # 0 → 10 (gain, step 20) → 30 (gain, step 40) → 70 (loss: step 32, stop expanding); then 30 + 32,
    # 30 + 25.6, ... are all losses: 30 stays the best, and every evaluation is spent
    assert line_search(objective, 0.0, 10.0, 0.8, 20) == 30.0
    assert calls[:5] == [0.0, 10.0, 30.0, 70.0, 62.0] and len(calls) == 20


def _against(attack, **defence):
    return attack.against(build_defence(**defence))


def test_optimal_ipm_against_the_mean_takes_the_largest_strength_it_reaches():
    """Against the mean, ‖mean(honest ∪ f·(−ε μ)) − μ‖ = f(1 + ε)/(h + f)·‖μ‖ grows with ε: every
    step is a gain, so the 19 steps after the start double: ε = 10·(2^19 − 1)."""
    honest = T([1.0, 2.0], [3.0, 0.0], [2.0, 1.0])
    attack = _against(make_attack("optimal_ipm", fraction=0.4))
    forged = attack.forged(honest, 5, 2)
    torch.testing.assert_close(forged, -10.0 * (2**19 - 1) * honest.mean(0))


def test_optimal_alie_against_the_median_by_hand():
    """One coordinate, honest 0, 1, 2, 3 (μ = 1.5, σ = √1.25), f = 3 copies of μ − zσ, coordinate
    median of 7 rows: the 4th smallest. For z > 0 the forged rows are the 3 smallest once
    μ − zσ < 0, and the median is then the honest 0... so the distance to μ grows with z only up
    to z = μ/σ and stays 1.5 beyond: the search's first step, z = 10, already reaches it and no
    larger z gains (ties keep the smaller): z = 10."""
    honest = T([0.0], [1.0], [2.0], [3.0])
    attack = _against(make_attack("optimal_alie", fraction=0.4), aggregator="coordinate_median")
    assert attack.strength(honest, 3, None) == 10.0
    torch.testing.assert_close(attack.forged(honest, 7, 3), honest.mean(0) - 10.0 * honest.std(0, unbiased=False))


def test_the_searched_vectors_are_the_fixed_attacks_vectors_bit_for_bit():
    """The search builds the honest statistics once a round (``forgery``); every strength it tries
    must be the fixed attack's vector at that strength, to the bit."""
    from fedpd.attacks import ALIE

    honest = torch.randn(7, 50, generator=torch.Generator().manual_seed(1))
    alie, ipm = make_attack("optimal_alie").forgery(honest), make_attack("optimal_ipm").forgery(honest)
    assert torch.equal(alie(0.0), honest.mean(0)) and torch.equal(ipm(0.0), -0.0 * honest.mean(0))
    for t in (0.3, 10.0, 1e4):
        assert torch.equal(alie(t), ALIE.shifted(honest, t))
        assert torch.equal(ipm(t), make_attack("ipm", epsilon=t).forged(honest, 9, 2))


def test_optimal_attacks_simulate_the_chain_too():
    honest = torch.randn(8, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    plain = _against(make_attack("optimal_ipm"), aggregator="trimmed_mean", aggregator_options={"trim_ratio": 0.25})
    mixed = _against(make_attack("optimal_ipm"), aggregator="trimmed_mean",
                     aggregator_options={"trim_ratio": 0.25, "pre": "nnm", "n_byzantine": 3})
    assert plain.strength(honest, 3, None) != mixed.strength(honest, 3, None)


def test_optimal_attacks_refuse_an_algorithm_whose_server_step_takes_no_defence():
    cfg = {"problem": {"name": "least_squares", "clients": 5, "dim": 2, "samples_per_client": 3},
           "algorithm": {"name": "qffl"}, "attack": {"name": "optimal_alie", "fraction": 0.2}, "run": {"rounds": 1}}
    with pytest.raises(ConfigError, match="^attack.name: optimal_alie picks its strength against the defence in use"):
        run(cfg)
    cfg["algorithm"] = {"name": "feddyn"}  # handed FedDyn's defence, the plain mean of its uploads
    assert run(cfg).history
    assert isinstance(make_attack("optimal_alie"), OptimalALIE) and isinstance(make_attack("optimal_ipm"), OptimalIPM)
    assert isinstance(make_attack("mimic"), Mimic)


def test_the_attacks_run_in_a_round_and_count_their_rows():
    cfg = {"problem": {"name": "least_squares", "clients": 8, "dim": 3, "samples_per_client": 4},
           "algorithm": {"name": "fedavg", "aggregator": "trimmed_mean",
                         "aggregator_options": {"trim_ratio": 0.25, "pre": "bucketing"}},
           "solver": {"name": "gd", "lr": 0.05, "local_steps": 1}, "run": {"rounds": 2}}
    for name in ("mimic", "optimal_alie", "optimal_ipm"):
        first = run({**cfg, "attack": {"name": name, "fraction": 0.25, "evals": 4} if name != "mimic"
                     else {"name": name, "fraction": 0.25}}).history[-1]
        again = run({**cfg, "attack": {"name": name, "fraction": 0.25, "evals": 4} if name != "mimic"
                     else {"name": name, "fraction": 0.25}}).history[-1]
        assert first == {**again, "wall_s": first["wall_s"]}  # the same bits: nothing drawn outside the streams
