"""Norm bounding and centered clipping (fedpd.aggregators): each against numbers worked out by
hand, about the reference (the server model) the algorithms hand it, and a clipping server that
moves the model by at most the bound (their options and registry entries: test_rules.py)."""

from __future__ import annotations

import pytest
import torch

from fedpd.aggregators import centered_clipping, norm_bounding

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


@pytest.mark.parametrize("algorithm", [
    {"name": "fedavg", "aggregator": "norm_bounding", "aggregator_options": {"max_norm": 0.05}},
    {"name": "fedplus", "aggregator": "centered_clipping", "aggregator_options": {"tau": 0.05, "iterations": 2}},
])
def test_a_clipping_server_moves_the_model_by_at_most_the_bound(algorithm):
    """Each round the server model moves by at most the bound (a mean of updates clipped to it),
    for FedAvg and for Fed+ (which hands its robust aggregator its w̃ as the reference)."""
    from helpers import simulation

    sim = simulation(algorithm, solver={"name": "gd", "lr": 0.1, "local_steps": 2}, run={"rounds": 3})
    bound = algorithm["aggregator_options"].get("max_norm") or algorithm["aggregator_options"]["tau"] * 2
    for _ in range(3):
        before = sim.server["x0"].clone()
        sim.step()
        moved = float(torch.linalg.vector_norm(sim.server["x0"] - before))
        assert 0 < moved <= bound + 1e-12
