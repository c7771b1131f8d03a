"""A-FedPD's server model is an extrapolation of the participants' means (docs/reproductions/afedpd_table2/settings.md).

With the virtual update every client's dual moves each round, so the dual mean moves by
(x̄^{t+1} − x0^t)/η; with x0^t = x̄^t + ηλ̄^t this gives ηλ̄^{t+1} = x̄^{t+1} − x̄^t and
x0^{t+1} = 2x̄^{t+1} − x̄^t for every η (Alg. 1 lines 9–12 of the A-FedPD paper). FedDyn's dual
mean moves by only |P|/N of that step. The test computes the rounds by hand (exact local solves)
and checks both the identity and the code.
"""

from __future__ import annotations

import pytest
import torch

from helpers import ls_hessian, simulation

F64 = torch.float64


def _exact(sim, i, lam, x0, eta):
    H, g = ls_hessian(sim, i)
    return torch.linalg.solve(H + torch.eye(len(x0), dtype=F64) / eta, g - lam + x0 / eta)


@pytest.mark.parametrize("eta", [0.3, 10.0])
def test_afedpd_server_model_is_two_means_minus_the_last(eta):
    n, d = 8, 3
    sim = simulation({"name": "afedpd", "eta": eta, "output": "average"},
                     problem={"name": "least_squares", "clients": n, "dim": d, "heterogeneity": 2.0},
                     sampler={"name": "uniform", "clients_per_round": 2})
    lam = torch.zeros(n, d, dtype=F64)
    x0 = torch.zeros(d, dtype=F64)
    x_bar_prev = x0.clone()  # x̄^0 := x^0 (λ̄^0 = 0)
    for _ in range(6):
        ids = sim.participants(sim.round)
        xs = torch.stack([_exact(sim, i, lam[i], x0, eta) for i in ids.tolist()])
        x_bar = xs.mean(0)
        absent = torch.ones(n, dtype=torch.bool)
        absent[ids] = False
        lam[absent] += (x_bar - x0) / eta
        lam[ids] += (xs - x0) / eta
        x0 = x_bar + eta * lam.mean(0)  # Alg. 1 line 12
        sim.step()
        torch.testing.assert_close(sim.server["x0"], x0, rtol=0, atol=1e-10)
        torch.testing.assert_close(sim.model(), x_bar, rtol=0, atol=1e-10)  # output = "average"
        # the identity: the server model extrapolates the last move of x̄ by its full length
        torch.testing.assert_close(x0, 2 * x_bar - x_bar_prev, rtol=0, atol=1e-10)
        torch.testing.assert_close(eta * sim.server["lam_mean"], x_bar - x_bar_prev, rtol=0, atol=1e-10)
        assert (x_bar - x_bar_prev).norm() > 1e-3  # not vacuous: x̄ moves
        x_bar_prev = x_bar


def test_feddyn_server_model_moves_its_offset_by_a_fraction():
    """FedDyn (no virtual update): ηλ̄ moves by |P|/N · (x̄ − x0), not by x̄ − x̄_prev."""
    n, d, eta = 8, 3, 2.0
    sim = simulation({"name": "feddyn", "eta": eta},
                     problem={"name": "least_squares", "clients": n, "dim": d, "heterogeneity": 2.0},
                     sampler={"name": "uniform", "clients_per_round": 2})
    x0 = sim.server["x0"].clone()
    offset = torch.zeros(d, dtype=F64)
    for _ in range(4):
        sim.step()
        x_new = sim.server["x0"]
        x_bar = x_new - eta * sim.server["lam_mean"]
        torch.testing.assert_close(eta * sim.server["lam_mean"], offset + 2 / n * (x_bar - x0), rtol=0, atol=1e-10)
        offset, x0 = eta * sim.server["lam_mean"], x_new.clone()


@pytest.mark.parametrize("name", ["afedpdsam", "fedspeed"])
def test_sam_presets_evaluate_where_their_base_does(name):
    """A-FedPDSAM / FedSpeed take ``output`` like A-FedPD / FedDyn: "average" evaluates x̄ =
    x0 − η·λ̄ and trains exactly as "server" does."""
    common = dict(problem={"name": "least_squares", "clients": 6, "dim": 3}, solver={"name": "gd", "lr": 0.1,
                  "local_steps": 3}, sampler={"name": "uniform", "clients_per_round": 2})
    avg = simulation({"name": name, "eta": 2.0, "sam_radius": 0.1, "output": "average"}, **common)
    srv = simulation({"name": name, "eta": 2.0, "sam_radius": 0.1}, **common)
    for _ in range(3):
        avg.step()
        srv.step()
    torch.testing.assert_close(avg.server["x0"], srv.server["x0"], rtol=0, atol=0)
    torch.testing.assert_close(srv.model(), srv.server["x0"], rtol=0, atol=0)
    torch.testing.assert_close(avg.model(), avg.server["x0"] - 2.0 * avg.server["lam_mean"], rtol=0, atol=1e-12)
    assert (avg.model() - srv.model()).norm() > 1e-3
