"""fedpd's FedDyn against an independent FedDyn written here from the FedDyn paper.

The FedDyn ≡ FedPD reproduction (docs/reproductions/feddyn_fedpd) compares two presets of one class,
``fedpd.algorithms.primal_dual.PrimalDual``: a self-consistency check, which a mistake shared by both
presets would pass. This test writes FedDyn again in plain torch, in the FedDyn paper's own notation and
signs — Acar, Zhao, Matas, Mattina, Whatmough, Saligrama, "Federated learning based on dynamic
regularization", ICLR 2021, Algorithm 1:

    θ_k^t = argmin_θ L_k(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + (α/2)‖θ − θ^{t−1}‖²      (k ∈ P_t)
    ∇L_k(θ_k^t) = ∇L_k(θ_k^{t−1}) − α(θ_k^t − θ^{t−1})                        (k ∈ P_t; others keep theirs)
    h^t = h^{t−1} − (α/m) Σ_{k∈P_t} (θ_k^t − θ^{t−1})
    θ^t = (1/|P_t|) Σ_{k∈P_t} θ_k^t − h^t/α

with ∇L_k(θ_k^0) = 0 and h^0 = 0 — and compares its server model θ^t with fedpd's FedDyn (``eta`` = 1/α)
after every round, to 1e-12, on least squares L_k(θ) = 1/(2 n_k)‖A_k θ − b_k‖², whose local problem the
reference solves in closed form: (H_k + αI)θ = c_k + ∇L_k(θ_k^{t−1}) + αθ^{t−1}, H_k = A_kᵀA_k/n_k,
c_k = A_kᵀb_k/n_k. Nothing of fedpd's algorithm code is used: from fedpd come only the data (A_k, b_k) and,
under partial participation, which clients each round draws (the sampler is not what is tested).
"""

from __future__ import annotations

import pytest
import torch

from helpers import client_data, simulation

F64 = torch.float64


def feddyn_round(theta: torch.Tensor, grads: torch.Tensor, h: torch.Tensor, data: list, alpha: float, ids: list[int]):
    """One round of Acar et al.'s Algorithm 1: returns (θ^t, the clients' ∇L_k states, h^t)."""
    m, d = grads.shape
    grads = grads.clone()
    local = []
    for k in ids:
        A, b = data[k]
        H, c = A.T @ A / len(b), A.T @ b / len(b)
        theta_k = torch.linalg.solve(H + alpha * torch.eye(d, dtype=F64), c + grads[k] + alpha * theta)
        grads[k] = grads[k] - alpha * (theta_k - theta)
        local.append(theta_k)
    local = torch.stack(local)
    h = h - alpha / m * (local - theta).sum(0)
    return local.mean(0) - h / alpha, grads, h


@pytest.mark.parametrize("sampler", [{"name": "all"}, {"name": "uniform", "clients_per_round": 2}],
                         ids=["full participation", "2 of 5 per round"])
def test_fedpd_feddyn_equals_the_papers_algorithm(sampler):
    n, d, alpha = 5, 3, 2.0
    sim = simulation({"name": "feddyn", "eta": 1 / alpha},
                     problem={"name": "least_squares", "clients": n, "dim": d, "heterogeneity": 2.0}, sampler=sampler)
    data = [client_data(sim, k) for k in range(n)]
    theta, grads, h = torch.zeros(d, dtype=F64), torch.zeros(n, d, dtype=F64), torch.zeros(d, dtype=F64)
    drawn = set()
    for _ in range(8):
        ids = sim.participants(sim.round).tolist()  # the clients fedpd's sampler draws this round
        drawn |= set(ids)
        theta, grads, h = feddyn_round(theta, grads, h, data, alpha, ids)
        sim.step()
        torch.testing.assert_close(sim.model(), theta, rtol=0, atol=1e-12)
    # fedpd keeps λ_k = −∇L_k(θ_k) (the signs of Zhang & Hong's notation): the client states agree too
    every = torch.arange(n)
    torch.testing.assert_close(sim.store.get(every)["lam"], -grads, rtol=0, atol=1e-12)
    assert theta.norm() > 0.5 and h.norm() > 0.01  # the comparison is not vacuous: both moved
    if sampler["name"] == "uniform":
        assert len(drawn) == n  # every client took part at some point, and not always together


def test_the_reference_is_not_fedpds_fedadmm():
    """The comparison can fail: under partial participation FedADMM (the duals of the participants
    only) leaves the reference, by far more than the tolerance."""
    n, d, alpha = 5, 3, 2.0
    sim = simulation({"name": "fedadmm", "eta": 1 / alpha},
                     problem={"name": "least_squares", "clients": n, "dim": d, "heterogeneity": 2.0},
                     sampler={"name": "uniform", "clients_per_round": 2})
    data = [client_data(sim, k) for k in range(n)]
    theta, grads, h = torch.zeros(d, dtype=F64), torch.zeros(n, d, dtype=F64), torch.zeros(d, dtype=F64)
    gap = 0.0
    for _ in range(4):
        theta, grads, h = feddyn_round(theta, grads, h, data, alpha, sim.participants(sim.round).tolist())
        sim.step()
        gap = max(gap, float((sim.model() - theta).norm()))
    assert gap > 1e-3
