"""Each algorithm's update rule pinned on a tiny least-squares problem, computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from helpers import Recorder, ls_grad, ls_hessian, simulation, use_solver

N = 4


def gd_by_hand(sim, i, x, steps, lr, extra=lambda x: 0.0):
    for _ in range(steps):
        x = x - lr * (ls_grad(sim, i, x) + extra(x))
    return x


def test_fedavg_one_round_is_mean_of_local_gd():
    sim = simulation({"name": "fedavg"}, solver={"name": "gd", "lr": 0.1, "local_steps": 3})
    x0 = sim.server["x0"].clone()
    sim.step()
    expected = torch.stack([gd_by_hand(sim, i, x0, 3, 0.1) for i in range(N)]).mean(0)
    torch.testing.assert_close(sim.server["x0"], expected, rtol=0, atol=1e-12)
    assert sim.comm.uplink_floats == N * 3 and sim.comm.downlink_floats == N * 3 and sim.comm.comm_rounds == 1


def test_fedprox_adds_the_proximal_gradient():
    sim = simulation({"name": "fedprox", "mu": 0.7}, solver={"name": "gd", "lr": 0.1, "local_steps": 4})
    sim.step()
    x0 = sim.server["x0"].clone()  # a nonzero anchor for the second round
    sim.step()
    expected = torch.stack([gd_by_hand(sim, i, x0, 4, 0.1, lambda x: 0.7 * (x - x0)) for i in range(N)]).mean(0)
    torch.testing.assert_close(sim.server["x0"], expected, rtol=0, atol=1e-12)


def test_scaffold_option_ii_two_rounds():
    lr, Q = 0.05, 3
    sim = simulation({"name": "scaffold"}, solver={"name": "gd", "lr": lr, "local_steps": Q})
    x0 = sim.server["x0"].clone()
    c, ci = torch.zeros(3, dtype=torch.float64), [torch.zeros(3, dtype=torch.float64) for _ in range(N)]
    for _ in range(2):
        sim.step()
        xs, dcs = [], []
        for i in range(N):
            x = gd_by_hand(sim, i, x0, Q, lr, lambda x, i=i: c - ci[i])
            ci_new = ci[i] - c + (x0 - x) / (Q * lr)
            xs.append(x)
            dcs.append(ci_new - ci[i])
            ci[i] = ci_new
        x0 = x0 + torch.stack(xs).sub(x0).mean(0)
        c = c + torch.stack(dcs).mean(0)  # |P| / N = 1
        torch.testing.assert_close(sim.server["x0"], x0, rtol=0, atol=1e-12)
        torch.testing.assert_close(sim.server["c"], c, rtol=0, atol=1e-12)
    assert sim.comm.uplink_floats == 2 * N * 6  # Δx and Δc: 2d floats per client per round


def test_fedpd_exact_rounds_use_the_new_dual():
    eta = 0.5
    sim = simulation({"name": "fedpd", "eta": eta})
    d = 3
    x0 = torch.zeros(d, dtype=torch.float64)
    lam = [torch.zeros(d, dtype=torch.float64) for _ in range(N)]
    for _ in range(3):
        sim.step()
        zs = []
        for i in range(N):
            H, g = ls_hessian(sim, i)
            x = torch.linalg.solve(H + torch.eye(d, dtype=torch.float64) / eta, g - lam[i] + x0 / eta)
            lam[i] = lam[i] + (x - x0) / eta
            zs.append(x + eta * lam[i])  # x0_i⁺ with the NEW λ_i (the MATLAB code's old-λ bug avoided)
        x0 = torch.stack(zs).mean(0)
        torch.testing.assert_close(sim.server["x0"], x0, rtol=0, atol=1e-10)
        torch.testing.assert_close(sim.store.get(torch.arange(N))["lam"], torch.stack(lam), rtol=0, atol=1e-10)


def test_fedpd_gd_warm_starts_from_the_local_model():
    eta, lr = 1.0, 0.1
    sim = simulation({"name": "fedpd", "eta": eta}, solver={"name": "gd", "lr": lr, "local_steps": 1})
    x0 = torch.zeros(3, dtype=torch.float64)
    x = [x0.clone() for _ in range(N)]
    lam = [torch.zeros(3, dtype=torch.float64) for _ in range(N)]
    for _ in range(3):
        sim.step()
        zs = []
        for i in range(N):
            x[i] = x[i] - lr * (ls_grad(sim, i, x[i]) + lam[i] + (x[i] - x0) / eta)  # from x_i, not x0
            lam[i] = lam[i] + (x[i] - x0) / eta
            zs.append(x[i] + eta * lam[i])
        x0 = torch.stack(zs).mean(0)
    torch.testing.assert_close(sim.server["x0"], x0, rtol=0, atol=1e-12)


def test_fedpd_skipped_rounds_keep_local_anchors_and_send_nothing():
    sim = simulation({"name": "fedpd", "eta": 1.0, "p": 0.5}, solver={"name": "gd", "lr": 0.1, "local_steps": 2})
    sent = []
    for _ in range(20):
        before = sim.comm.uplink_floats + sim.comm.downlink_floats
        sim.step()
        sent.append(sim.comm.uplink_floats + sim.comm.downlink_floats - before)
        anchors = sim.store.get(torch.arange(N))["x0"]
        if sent[-1] == 0:  # no communication: each client keeps its own x0_i⁺, the model is their mean
            assert not torch.allclose(anchors[0], anchors[1])
            torch.testing.assert_close(sim.model(), anchors.mean(0))
        else:
            assert sent[-1] == 2 * N * 3 and torch.equal(anchors[0], anchors[1])
    assert 0 < sim.comm.comm_rounds < 20 and sim.comm.comm_rounds == sum(s > 0 for s in sent)


def test_fedpd_periodic_skipping():
    sim = simulation(
        {"name": "fedpd", "p": 0.75, "skip": "periodic"}, solver={"name": "gd", "lr": 0.1, "local_steps": 1}
    )
    for _ in range(12):
        sim.step()
    assert sim.comm.comm_rounds == 3  # every 4th round


@pytest.mark.parametrize("p", [0.3, 0.5, 0.7, 0.75, 0.9, 0.35])
def test_fedpd_periodic_schedule_has_the_rate_one_minus_p(p):
    """The first T rounds communicate exactly ⌊T(1 − p)⌋ times for every p (a period of
    round(1/(1 − p)) never skipped at p = 0.3 and gave 20 of 60 at p = 0.7)."""
    sim = simulation({"name": "fedpd", "p": p, "skip": "periodic"}, solver={"name": "gd", "lr": 0.1, "local_steps": 1})
    for t in range(1, 61):
        sim.step()
        assert sim.comm.comm_rounds == math.floor(t * (1 - p) + 1e-9), t
    assert sim.comm.comm_rounds == {0.3: 42, 0.5: 30, 0.7: 18, 0.75: 15, 0.9: 6, 0.35: 39}[p]


def test_fedpd_local_criterion_stops_each_client_once_its_gradient_is_small():
    """Criterion (12) of the FedPD paper: a client's GD on L_i stops at the first iterate with
    ‖∇L_i‖² <= ε₁; other clients go on; steps are reported."""
    eta, lr, tol = 1.0, 0.2, 1e-4
    sim = simulation(
        {"name": "fedpd", "eta": eta, "local_tol": tol}, solver={"name": "gd", "lr": lr, "local_steps": 60}
    )
    x0 = sim.server["x0"].clone()
    sim.step()
    xs, steps = [], []
    for i in range(4):  # by hand: GD on L_i = f_i + ‖x − x0‖²/(2η) (λ = 0 in round 0)
        x, q = x0.clone(), 0
        while q < 60:
            g = ls_grad(sim, i, x) + (x - x0) / eta
            if float(g @ g) <= tol:
                break
            x, q = x - lr * g, q + 1
        xs.append(x)
        steps.append(q)
    assert len(set(steps)) > 1 and max(steps) < 60  # each client stopped on its own
    anchors = torch.stack(xs) + eta * (torch.stack(xs) - x0) / eta  # z_i = x_i + ηλ_i, λ_i = (x_i − x0)/η
    torch.testing.assert_close(sim.server["x0"], anchors.mean(0), rtol=0, atol=1e-12)
    assert sim.metrics()["local_steps"] == pytest.approx(sum(steps) / 4)
    # the gradients a stopped client no longer computes are not counted (one per step, plus the check)
    sizes = sim.problem.train.sizes.tolist()
    assert sim.engine.sample_grads == sum(n * min(q + 1, 60) for n, q in zip(sizes, steps))


@pytest.mark.parametrize("option, value", [("momentum", 0.5), ("weight_decay", 0.01), ("sam_radius", 0.1),
                                           ("straggler_fraction", 0.2)])
def test_fedpd_vr_refuses_solver_options_oracle_two_has_no_place_for(tmp_path, capsys, option, value):
    from fedpd.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text('[problem]\nname = "least_squares"\n[algorithm]\nname = "fedpd_vr"\n'
                   '[solver]\nname = "sgd"\nlr = 0.1\nbatch_size = 1\n[run]\nrounds = 2\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet", "--set", f"solver.{option}={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"solver.{option}" in err and "fedpd_vr" in err, err
    assert not (tmp_path / "r").exists()


def test_feddyn_partial_participation_one_round():
    eta, n = 2.0, 6
    sim = simulation({"name": "feddyn", "eta": eta}, problem={"name": "least_squares", "clients": n, "dim": 3},
                     sampler={"name": "uniform", "clients_per_round": 3})
    use_solver(sim, Recorder(sim.solver))
    x0 = sim.server["x0"].clone()
    sim.step()
    ids, xs = sim.solver.rounds[0]
    d = 3
    manual = []
    for i in ids.tolist():
        H, g = ls_hessian(sim, i)
        manual.append(torch.linalg.solve(H + torch.eye(d, dtype=torch.float64) / eta, g + x0 / eta))
    manual = torch.stack(manual)
    torch.testing.assert_close(xs, manual, rtol=0, atol=1e-10)
    h = (manual - x0).sum(0) / (eta * n)
    torch.testing.assert_close(sim.server["x0"], manual.mean(0) + eta * h, rtol=0, atol=1e-10)
    assert len(sim.store) == 3  # only participants have materialised state


def test_feddyn_equals_fedpd_under_full_participation():
    """Seed 000: full participation, p = 0, exact local solves, equal initial duals ⇒ identical
    x0 and x_i, here for 50 rounds on strongly convex least squares."""
    problem = {"name": "least_squares", "clients": 5, "dim": 4, "ridge": 0.1, "heterogeneity": 2.0}
    runs = {}
    for name in ("fedpd", "feddyn"):
        sim = simulation({"name": name, "eta": 0.3}, problem=problem)
        use_solver(sim, Recorder(sim.solver))
        x0s = []
        for _ in range(50):
            sim.step()
            x0s.append(sim.model().clone())
        runs[name] = (torch.stack(x0s), torch.stack([x for _, x in sim.solver.rounds]))
    (a0, ax), (b0, bx) = runs["fedpd"], runs["feddyn"]
    assert (a0 - b0).abs().max() < 1e-8
    assert (ax - bx).abs().max() < 1e-8
    assert (a0[-1] - a0[-2]).abs().max() < 1e-6  # and it has converged, so the check is not vacuous
