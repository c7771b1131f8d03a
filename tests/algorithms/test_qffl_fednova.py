"""q-FFL (q-FedAvg; Li, Sanjabi, Beirami, Smith, ICLR 2020, Alg. 2) and FedNova (Wang, Liu,
Liang, Joshi, Poor, NeurIPS 2020): rounds computed by hand on least squares with local GD, from
the papers' equations and independently of fedpd's code; the special cases that reduce to FedAvg;
what they send and compute; and that both modules import fedpd's public names only."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fedpd
import fedpd.algorithms
from fedpd.errors import ConfigError
from helpers import client_data, fedpd_imports, ls_grad, simulation, streams

F64 = torch.float64
N, D = 4, 3  # the helper's least squares: 4 clients, d = 3, 6 samples each
LR, Q = 0.1, 3


def f(sim, i: int, x: torch.Tensor) -> torch.Tensor:
    """f_i(x) = 1/(2n)‖A x − b‖²."""
    A, b = client_data(sim, i)
    r = A @ x - b
    return 0.5 * (r @ r) / len(b)


def local_gd(sim, i: int, x0: torch.Tensor, steps: int, momentum: float = 0.0, mu: float = 0.0) -> torch.Tensor:
    """``steps`` GD steps on f_i (+ (μ/2)‖x − x0‖²) from x0, heavy-ball momentum as torch's SGD."""
    x, buf = x0.clone(), None
    for _ in range(steps):
        g = ls_grad(sim, i, x) + mu * (x - x0)
        buf = g if buf is None else momentum * buf + g
        x = x - LR * (buf if momentum else g)
    return x


def run_pair(a: dict, b: dict, solver: dict, rounds: int = 3):
    problem = {"name": "least_squares", "clients": N, "dim": D, "samples_per_client": 6, "seed": 2}
    cfg = {"problem": problem, "solver": solver, "sampler": {"name": "uniform", "clients_per_round": 3},
           "run": {"rounds": rounds, "eval_every": 1}}
    return fedpd.run({**cfg, "algorithm": a}).history, fedpd.run({**cfg, "algorithm": b}).history


# --- q-FFL ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("q, lipschitz", [(2.0, 0.0), (0.5, 4.0)])
def test_qffl_two_rounds_by_hand(q, lipschitz):
    """Δw_k = L(w − w̄_k), Δ_k = F_k^q(w)Δw_k, h_k = qF_k^{q−1}(w)‖Δw_k‖² + L F_k^q(w),
    w ← w − Σ_k Δ_k / Σ_k h_k over the round's participants; L = 1/η unless given."""
    solver = {"name": "gd", "lr": LR, "local_steps": Q}
    sim = simulation({"name": "qffl", "q": q, "lipschitz": lipschitz}, solver=solver,
                     sampler={"name": "uniform", "clients_per_round": 3})
    L = lipschitz or 1 / LR
    w = sim.server["x0"].clone()
    for t in range(2):
        deltas, hs = [], []
        for i in sim.participants(t).tolist():
            F = f(sim, i, w)
            dw = L * (w - local_gd(sim, i, w, Q))
            deltas.append(F ** q * dw)
            hs.append(q * F ** (q - 1) * (dw @ dw) + L * F ** q)
        w = w - torch.stack(deltas).sum(0) / torch.stack(hs).sum()
        sim.step()
        torch.testing.assert_close(sim.server["x0"], w, rtol=0, atol=1e-12)
    assert sim.comm.uplink_floats == 2 * 3 * (D + 1)  # Δ_k and h_k
    assert sim.comm.downlink_floats == 2 * 3 * D


def test_qffl_with_q_zero_is_fedavg():
    """q = 0: Δ_k = L(w − w̄_k), h_k = L, so w ← mean_k w̄_k (to rounding: L(·)/L)."""
    qffl, fedavg = run_pair({"name": "qffl", "q": 0.0}, {"name": "fedavg"}, {"name": "gd", "lr": LR, "local_steps": Q})
    for a, b in zip(qffl, fedavg):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-12)
    assert qffl[-1]["train_loss"] < qffl[0]["train_loss"]


def test_qffl_trades_mean_loss_for_the_worst_clients_loss():
    """The paper's fairness: at its fixed point, a larger q gives a lower loss on the worst client
    and a higher mean loss (every client every round, 100 rounds: stationary to 3 digits)."""
    worst, mean = [], []
    for q in (0.0, 1.0, 5.0):
        sim = simulation({"name": "qffl", "q": q}, solver={"name": "gd", "lr": LR, "local_steps": Q})
        for _ in range(100):
            sim.step()
        losses = [float(f(sim, i, sim.server["x0"])) for i in range(N)]
        worst.append(max(losses))
        mean.append(sum(losses) / N)
    assert worst[0] > worst[1] > worst[2] and mean[0] < mean[1] < mean[2]


def test_qffl_counts_its_loss_evaluation_as_computation():
    """Each participant reads F_k(w) on its n samples, then Q full-batch gradient steps."""
    sim = simulation({"name": "qffl"}, solver={"name": "gd", "lr": LR, "local_steps": Q})
    sim.step()
    assert int(sim.engine.sample_grads) == N * 6 * (Q + 1)


# --- FedNova -------------------------------------------------------------------------------------
def test_fednova_without_stragglers_is_fedavg_and_sends_what_it_sends():
    """Every τ_i = Q: τ_eff / ‖a_i‖₁ = 1, the same numbers as FedAvg, bit for bit, and no ‖a_i‖₁ sent."""
    for solver in ({"name": "gd", "lr": LR, "local_steps": Q},
                   {"name": "sgd", "lr": LR, "local_steps": Q, "batch_size": 2, "momentum": 0.5}):
        nova, fedavg = run_pair({"name": "fednova"}, {"name": "fedavg"}, solver)
        assert [{k: v for k, v in r.items() if k != "wall_s"} for r in nova] == \
            [{k: v for k, v in r.items() if k != "wall_s"} for r in fedavg]


@pytest.mark.parametrize("momentum, mu", [(0.0, 0.0), (0.6, 0.0), (0.0, 2.0)])
def test_fednova_with_stragglers_two_rounds_by_hand(momentum, mu):
    """Straggler i takes τ_i steps; its update Δ_i = x_i − x is −η Σ_k a_{i,k} g_k with a_{i,k} the
    weight its k-th gradient gets from (S)GD (1), heavy ball ((1 − ρ^{τ_i−k})/(1 − ρ)) or the
    proximal step ((1 − ημ)^{τ_i−1−k}); ‖a_i‖₁ is summed here term by term. Then
    x ← x + (mean_i ‖a_i‖₁) · mean_i Δ_i/‖a_i‖₁."""
    q = 5
    solver = {"name": "gd", "lr": LR, "local_steps": q, "straggler_fraction": 1.0, "momentum": momentum}
    sim = simulation({"name": "fednova", "mu": mu}, solver=solver)
    x = sim.server["x0"].clone()
    for _ in range(2):
        steps = sim.solver.step_counts(streams(sim, torch.arange(N), "stragglers"))  # the round's draw
        sim.step()
        updates, norms = [], []
        for i in range(N):
            tau = int(steps[i])
            if momentum:
                a = [(1 - momentum ** (tau - k)) / (1 - momentum) for k in range(tau)]
            else:
                a = [(1 - LR * mu) ** (tau - 1 - k) for k in range(tau)]
            updates.append(local_gd(sim, i, x, tau, momentum, mu) - x)
            norms.append(sum(a))
        norms = torch.tensor(norms, dtype=F64)
        fedavg = x + torch.stack(updates).mean(0)
        x = x + norms.mean() * (torch.stack(updates) / norms[:, None]).mean(0)
        torch.testing.assert_close(sim.server["x0"], x, rtol=0, atol=1e-12)
        assert not torch.allclose(x, fedavg)  # normalising changed the step
    assert steps.min() < steps.max()  # the clients' τ_i differ
    assert sim.comm.uplink_floats == 2 * N * (D + 1)  # x_i and ‖a_i‖₁


def test_fednova_refuses_momentum_with_the_proximal_term():
    with pytest.raises(ConfigError, match=r"algorithm.mu = 0.1 with solver.momentum = 0.5: .*allowed: one of them 0"):
        simulation({"name": "fednova", "mu": 0.1}, solver={"name": "gd", "momentum": 0.5})


# --- both ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", ["qffl.py", "fednova.py"])
def test_written_with_public_names_only(module):
    """Written as a user's algorithm would be: every fedpd name imported is a public one — what fedpd
    or fedpd.algorithms exports, imported from the module that defines it (fedpd.algorithms exports
    these algorithms too, so they cannot import the package)."""
    from helpers import is_public

    path = Path(fedpd.algorithms.__file__).parent / module
    imported = fedpd_imports(path)
    assert imported and all(is_public(m, name) for m, name in imported), imported
