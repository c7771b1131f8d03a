"""The FedOpt family (FedAvgM, FedAdagrad, FedAdam, FedYogi): two rounds computed by hand.

On heterogeneous least squares with the exact local solver, FedAvg's client i returns the
minimiser x_i* of f_i whatever it starts from, so the server's pseudo-gradient is
Δ_t = mean_{S_t} x_i* − x_t and each rule's two steps are written out below in NumPy, from the
equations of Reddi et al. (ICLR 2021) Algorithm 2 and Hsu et al. (2019), independently of
fedpd's code. The module is checked to import only fedpd's public names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fedpd
import fedpd.algorithms
from fedpd.cli import main
from helpers import fedpd_imports, is_public, ls_hessian, simulation

PROBLEM = {"name": "least_squares", "clients": 5, "dim": 3, "samples_per_client": 6, "seed": 3}
SAMPLER = {"name": "uniform", "clients_per_round": 3}


def minimisers(sim) -> dict[int, np.ndarray]:
    """x_i* = argmin f_i = H_i⁻¹ g_i (f_i = 1/(2n)‖A x − b‖²) of every client, in float64."""
    out = {}
    for i in range(sim.num_clients):
        H, g = ls_hessian(sim, i)
        out[i] = np.linalg.solve(H.numpy(), g.numpy())
    return out


def two_rounds(name: str, options: dict):
    """(fedpd's x0 after rounds 1 and 2, the same by hand)."""
    sim = simulation({"name": name, **options}, problem=PROBLEM, sampler=SAMPLER, solver={"name": "exact"})
    star = minimisers(sim)
    x = sim.server["x0"].numpy().copy()
    eta, tau = options["eta"], options.get("tau")
    b1, b2, beta = options.get("beta1"), options.get("beta2"), options.get("beta")
    m = np.zeros_like(x)
    v = np.full_like(x, tau * tau) if tau is not None else None
    ours, hand = [], []
    for t in range(2):
        delta = np.mean([star[i] for i in sim.participants(t).tolist()], axis=0) - x
        if name == "fedavgm":
            m = beta * m + delta
            x = x + eta * m
        else:
            m = b1 * m + (1 - b1) * delta
            if name == "fedadagrad":
                v = v + delta ** 2
            elif name == "fedadam":
                v = b2 * v + (1 - b2) * delta ** 2
            else:  # fedyogi
                v = v - (1 - b2) * delta ** 2 * np.sign(v - delta ** 2)
            x = x + eta * m / (np.sqrt(v) + tau)
        sim.step()
        ours.append(sim.server["x0"].numpy().copy())
        hand.append(x.copy())
    return ours, hand


CASES = {
    "fedavgm": {"eta": 0.7, "beta": 0.9},
    "fedadagrad": {"eta": 0.3, "beta1": 0.5, "tau": 0.01},
    "fedadam": {"eta": 0.3, "beta1": 0.9, "beta2": 0.99, "tau": 0.01},
    "fedyogi": {"eta": 0.3, "beta1": 0.9, "beta2": 0.99, "tau": 0.01},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_two_rounds_equal_the_hand_computation(name):
    ours, hand = two_rounds(name, CASES[name])
    for a, b in zip(ours, hand):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert not np.allclose(ours[0], ours[1])  # the second round moved the model again


def test_yogi_second_moment_shrinks_where_the_pseudo_gradient_is_small():
    """Yogi's v moves towards Δ² additively: down where v > Δ² (unlike Adagrad's, which only grows)."""
    sim = simulation({"name": "fedyogi", "tau": 10.0}, problem=PROBLEM, sampler=SAMPLER, solver={"name": "exact"})
    v_before = sim.server["v"].clone()  # τ² = 100, far above every Δ²
    sim.step()
    assert (sim.server["v"] < v_before).all()


def test_fedavgm_without_momentum_is_fedavg():
    plain = fedpd.run({"problem": PROBLEM, "algorithm": {"name": "fedavg"}, "sampler": SAMPLER,
                       "solver": {"name": "gd", "lr": 0.1, "local_steps": 3}, "run": {"rounds": 3}})
    same = fedpd.run({"problem": PROBLEM, "algorithm": {"name": "fedavgm", "eta": 1.0, "beta": 0.0},
                      "sampler": SAMPLER, "solver": {"name": "gd", "lr": 0.1, "local_steps": 3}, "run": {"rounds": 3}})
    assert [r["train_loss"] for r in plain.history] == [r["train_loss"] for r in same.history]


@pytest.mark.parametrize("name", ["fedadam", "fedavgm"])
def test_the_pseudo_gradient_uses_the_configured_aggregator(name):
    """With coordinate_median the first step's Δ is the median of the participants' x_i* − x0."""
    options = {**CASES[name], "aggregator": "coordinate_median"}
    sim = simulation({"name": name, **options}, problem=PROBLEM, sampler=SAMPLER, solver={"name": "exact"})
    star, x = minimisers(sim), sim.server["x0"].numpy().copy()
    delta = np.median([star[i] for i in sim.participants(0).tolist()], axis=0) - x
    if name == "fedavgm":
        expected = x + options["eta"] * delta
    else:
        tau, b2 = options["tau"], options["beta2"]
        v = b2 * tau * tau + (1 - b2) * delta ** 2
        expected = x + options["eta"] * (1 - options["beta1"]) * delta / (np.sqrt(v) + tau)
    sim.step()
    np.testing.assert_allclose(sim.server["x0"].numpy(), expected, rtol=1e-12, atol=1e-12)


def test_the_family_is_listed(capsys):
    assert main(["list", "algorithms"]) == 0
    listed = capsys.readouterr().out
    for name in CASES:
        assert f"  {name} " in listed


def test_fedopt_imports_only_public_names():
    """The module is written as a user's would be: every fedpd name it imports is a public one — one
    that fedpd or fedpd.algorithms exports (from the module that defines it: the package exports
    this family too, so it cannot import the package)."""
    path = Path(fedpd.algorithms.__file__).parent / "fedopt.py"
    imported = fedpd_imports(path)
    assert imported and all(is_public(module, name) for module, name in imported), imported
