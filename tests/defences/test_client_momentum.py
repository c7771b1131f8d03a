"""Client momentum: a client's momentum by hand, kept in the store across the rounds it misses,
refused where uploads are not updates; and with centered clipping under IPM with a large ε, worked
out by hand on two honest clients and one attacker in 2-D, against fedpd's own momentum, attack and
rule, and against ByzFL's centered clipping, which keeps the paper's centre (its last output).

What goes wrong is a property of the method, not a bug in fedpd's reference point. Each forged row
farther than τ from the centre moves centered clipping's aggregate by τ/n, however small the honest
rows are. Zero-started momenta are (1 − β^t) times the updates, so in the first rounds the honest
pull is smaller than the attacker's f·τ/n and the aggregate momentum points away from the honest
mean. That already happens in round 0, where v = 0 and the reference is the server model x0 with or
without momentum. Starting each momentum at its first update (client_momentum_start = "update"), or
a τ on the momenta's own scale, makes the same rounds go forward."""

from __future__ import annotations

import math

import pytest
import torch

from fedpd.algorithms import FedAvg
from fedpd.attacks import IPM
from fedpd.config import load_config
from fedpd.context import ServerContext
from fedpd.defence import build_defence
from fedpd.errors import ConfigError
from helpers import context, server_context, simulation

G = ((0.9, 0.3), (0.9, -0.3))  # the two honest clients' updates, the same every round: their mean is (0.9, 0)
TAU, EPS, N = 1.0, 100.0, 3  # centered clipping's radius; IPM's ε; two honest clients and one attacker


# --- the computation by hand: plain floats, one CC iteration a round ------------------------------
def add(a, b):
    return (a[0] + b[0], a[1] + b[1])


def scaled(c, a):
    return (c * a[0], c * a[1])


def clipped(a, tau):
    norm = math.hypot(*a)
    return a if norm <= tau else scaled(tau / norm, a)


def by_hand(rounds: int, beta: float, start: str = "zero", tau: float = TAU, centre: str = "last aggregate"):
    """The server's step v_t in each round: each client's momentum m_i (from 0 or from its first update;
    with β = 0 the update itself), the attacker's −ε·mean(m_i), then
    v_t = c + (1/3) Σ_rows clip_τ(row − c). c is the last aggregate momentum v_{t−1} (the paper's
    centre, and fedpd's with momentum), or the server model x0 when ``centre`` is "x0"."""
    m, v, steps = [(0.0, 0.0)] * 2, (0.0, 0.0), []
    for t in range(rounds):
        if beta == 0 or (start == "update" and t == 0):
            m = list(G)
        else:
            m = [add(scaled(1 - beta, g), scaled(beta, mi)) for g, mi in zip(G, m)]
        attacker = scaled(-EPS / 2, add(*m))
        c = v if centre == "last aggregate" and beta > 0 else (0.0, 0.0)
        pull = (0.0, 0.0)
        for row in (*m, attacker):
            pull = add(pull, clipped(add(row, scaled(-1, c)), tau))
        v = add(c, scaled(1 / N, pull))
        steps.append(v)
    return steps


# --- the same rounds through fedpd: FedAvg's momentum, the IPM attack, centered clipping ----------
def by_fedpd(rounds: int, beta: float, start: str = "zero", tau: float = TAU) -> list[torch.Tensor]:
    """fedpd's server step x0' − x0 in each round: each client's with_momentum of the update x0 + g_i,
    IPM's corrupt on the uploads (client 2 is the attacker), FedAvg's aggregate with centered clipping."""
    momentum = {"client_momentum": beta} if beta > 0 else {}
    if start != "zero":
        momentum["client_momentum_start"] = start
    algorithm = FedAvg(build_defence("centered_clipping", {"tau": tau, "iterations": 1}, **momentum))
    x0 = torch.zeros(2, dtype=torch.float64)
    server = algorithm.init_server(x0)
    clients = {k: torch.stack([v] * N) for k, v in algorithm.init_client(x0).items()}
    attack = IPM(parties=[2], epsilon=EPS).bind(N)
    ids = torch.arange(N)
    updates = torch.tensor([*G, (0.0, 0.0)], dtype=torch.float64)  # the attacker's own update is overwritten
    steps = []
    for t in range(rounds):
        message = algorithm.broadcast(server)
        upload, clients = algorithm.with_momentum({"x": message["x0"] + updates}, message, clients, clients)
        upload, forged = attack.corrupt(upload, message, ids, t, 0, model_keys=("x",))
        assert forged == 1
        new, _ = algorithm.aggregate(server, upload, ServerContext(ids, t, N, 0))
        steps.append(new["x0"] - server["x0"])
        server = {**server, **new}
    return steps


def forward(step) -> float:
    """The step's component along the honest updates' mean direction (1, 0)."""
    return float(step[0])


@pytest.mark.parametrize(("beta", "start", "tau"), [(0.0, "zero", TAU), (0.9, "zero", TAU), (0.9, "update", TAU),
                                                    (0.9, "zero", TAU * 0.1)])
def test_fedpds_steps_are_the_ones_written_out_by_hand(beta, start, tau):
    """fedpd's momentum, attack and centered clipping about x0 + v are the ones written out above, step
    for step. A bug in how momentum composes with the reference point would fail this."""
    ours, hand = by_fedpd(6, beta, start, tau), by_hand(6, beta, start, tau)
    for t, (a, b) in enumerate(zip(ours, hand)):
        torch.testing.assert_close(a, torch.tensor(b, dtype=torch.float64), msg=f"round {t}")


def test_the_centre_is_byzfls_centered_clipping_which_starts_each_call_from_its_last_output():
    """ByzFL's CenteredClipping keeps its last output and starts the next call from it — the paper's
    centre. Fed the same momenta (and the forged row) each round, it gives fedpd's steps."""
    from helpers import import_byzfl

    theirs = import_byzfl().CenteredClipping(tau=TAU, L=1)
    beta, m = 0.9, torch.zeros(2, 2, dtype=torch.float64)
    g = torch.tensor(G, dtype=torch.float64)
    for t, ours in enumerate(by_fedpd(6, beta)):
        m = (1 - beta) * g + beta * m
        rows = torch.cat([m, -EPS * m.mean(0, keepdim=True)])
        their = theirs(rows)  # ByzFL computes in float32
        torch.testing.assert_close(ours, their.to(ours.dtype), atol=1e-6, rtol=1e-6, msg=f"round {t}")


def test_zero_started_momentum_turns_centered_clippings_first_steps_backwards():
    # without momentum: rows g1, g2 (within τ) and the attacker clipped to τ: (1/3)(1.8 − 1) = +0.267
    assert forward(by_hand(1, 0.0)[0]) == pytest.approx((1.8 - 1) / 3)
    # with zero-started momentum (β = 0.9): rows 0.1·g_i, the attacker still clipped to τ: (1/3)(0.18 − 1)
    steps = by_hand(10, 0.9)
    assert forward(steps[0]) == pytest.approx((0.18 - 1) / 3)
    # the aggregate goes backwards while the honest momenta (1 − 0.9^t)·0.9 are too small for the pull τ/3
    backwards = [t for t, s in enumerate(steps) if forward(s) < 0]
    assert backwards == list(range(len(backwards))) and len(backwards) >= 5
    # in round 0 the centre is 0 (x0) for every placement, so the centre cannot be the cause: centring
    # each round at x0 instead of the last aggregate momentum leaves round 0 as it is and still goes back
    at_x0 = by_hand(10, 0.9, centre="x0")
    assert at_x0[0] == steps[0] and all(forward(s) < 0 for s in at_x0[:5])


def test_the_attackers_pull_is_f_tau_over_n_whatever_the_rows_scale():
    """The explanation in one line: with the honest rows within τ of the centre c, one iteration gives
    c + (1/n) Σ_honest (m_i − c) − (f/n) τ u. Scaling every row by s scales the honest part, not the
    attacker's: the step turns backwards exactly when s·|mean g|·(n − f)/n < f τ/n."""
    for s in (1.0, 0.6, 0.56, 0.55, 0.3, 0.1):
        g = [scaled(s, gi) for gi in G]
        attacker = scaled(-EPS * s / 2, add(*g))
        step = scaled(1 / N, add(add(clipped(g[0], TAU), clipped(g[1], TAU)), clipped(attacker, TAU)))
        assert (step[0] < 0) == (s * 0.9 * 2 < TAU), s  # the threshold is s = 1/1.8 = 0.556


def test_starting_the_momentum_at_the_first_update_or_tau_on_its_scale_goes_forward():
    plain = by_hand(10, 0.0)
    started = by_hand(10, 0.9, start="update")
    assert started[0] == plain[0]  # the first round is the momentum-free one
    assert all(forward(s) > 0 for s in started)
    # Karimireddy et al.'s fixed τ on their heavy-ball momenta is τ(1 − β) on these: forward too
    assert all(forward(s) > 0 for s in by_hand(10, 0.9, tau=TAU * 0.1))


# --- client_momentum_start = "update": the option itself ---------------------------------------------
LS = {"name": "least_squares", "clients": 4, "dim": 3, "samples_per_client": 5}
GD = {"name": "gd", "lr": 0.1, "local_steps": 2}


def test_started_at_the_first_update_the_momentum_is_torch_sgds_buffer_with_dampening_beta():
    """torch.optim.SGD(momentum=β, dampening=β) starts its buffer at the first gradient and then keeps
    β·buf + (1 − β)·g: fed the updates as gradients, its buffer is the momentum the client uploads."""
    beta = 0.8
    algorithm = FedAvg(build_defence("trimmed_mean", {"trim_ratio": 0.2}, client_momentum=beta,
                                     client_momentum_start="update"))
    x0 = torch.zeros(5, dtype=torch.float64)
    state = {k: v.unsqueeze(0) for k, v in algorithm.init_client(x0).items()}
    p = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    sgd = torch.optim.SGD([p], lr=0.1, momentum=beta, dampening=beta)
    gen = torch.Generator().manual_seed(4)
    for _ in range(4):
        delta = torch.randn(1, 5, dtype=torch.float64, generator=gen)
        p.grad = delta[0].clone()
        sgd.step()
        upload, state = algorithm.with_momentum({"x": x0 + delta}, {"x0": x0}, state, state)
        torch.testing.assert_close(upload["x"][0] - x0, sgd.state[p]["momentum_buffer"])
        assert float(state["m_started"]) == 1.0


def test_a_client_starts_its_momentum_at_its_own_first_update_under_partial_participation():
    beta = 0.5
    sim = simulation({"name": "fedavg", "client_momentum": beta, "client_momentum_start": "update"}, problem=LS,
                     solver=GD, sampler={"name": "uniform", "clients_per_round": 2})
    plain = simulation({"name": "fedavg"}, problem=LS, solver=GD)  # its local models: the clients' x_i
    assert torch.equal(sim.store.full("m_started"), torch.zeros(4, 1, dtype=sim.store.full("m").dtype))
    started: set[int] = set()
    for _ in range(4):
        ids = sim.participants(sim.round)
        message = sim.algorithm.broadcast(sim.server)
        x, _ = plain.algorithm.local(message, plain.store.get(ids), context(plain, ids, round=sim.round))
        delta = x["x"] - message["x0"]
        before = sim.store.full("m").clone()
        sim.step()
        m = sim.store.full("m")
        for row, i in enumerate(ids.tolist()):
            expected = (1 - beta) * delta[row] + beta * before[i] if i in started else delta[row]
            torch.testing.assert_close(m[i], expected)  # the first upload: the update itself, not (1 − β) of it
        for i in set(range(4)) - set(ids.tolist()):
            assert torch.equal(m[i], before[i])  # waiting, unchanged
        started |= set(ids.tolist())
        flags = sim.store.full("m_started").flatten().tolist()
        assert [i for i in range(4) if flags[i] == 1] == sorted(started)
    assert 2 < len(started)


def test_client_momentum_start_without_client_momentum_is_refused():
    with pytest.raises(ConfigError, match=r"^algorithm.client_momentum_start: where client momentum starts, and "
                                          r"client_momentum = 0 keeps none"):
        load_config({"problem": LS, "algorithm": {"name": "fedavg", "client_momentum_start": "update"}})
    with pytest.raises(ConfigError, match="^algorithm.client_momentum_start"):
        load_config({"problem": LS, "algorithm": {"name": "fedavg", "client_momentum": 0.5,
                                                  "client_momentum_start": "first"}})


# --- a client's momentum by hand, kept in the store across the rounds it misses ---------------------
def test_client_momentum_uploads_x0_plus_the_momentum_and_keeps_it():
    beta = 0.75
    sim = simulation({"name": "fedavg", "client_momentum": beta}, problem=LS, solver=GD)
    plain = simulation({"name": "fedavg"}, problem=LS, solver=GD)
    ids = torch.arange(4)
    message = sim.algorithm.broadcast(sim.server)
    clients = sim.store.get(ids)
    assert torch.equal(clients["m"], torch.zeros(4, 3, dtype=clients["m"].dtype))
    m_before = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    up, state = sim.algorithm.local(message, {**clients, "m": m_before}, context(sim, ids))
    x, _ = plain.algorithm.local(message, plain.store.get(ids), context(plain, ids))
    m = (1 - beta) * (x["x"] - message["x0"]) + beta * m_before  # by hand
    torch.testing.assert_close(state["m"], m)
    torch.testing.assert_close(up["x"], message["x0"] + m)


def test_a_clients_momentum_waits_in_the_store_for_its_next_round():
    sim = simulation({"name": "fedavg", "client_momentum": 0.5}, problem=LS, solver=GD,
                     sampler={"name": "uniform", "clients_per_round": 2})
    seen = set()
    for _ in range(3):
        before = sim.store.full("m").clone()
        took = set(sim.participants(sim.round).tolist())
        sim.step()
        after = sim.store.full("m")
        for i in range(4):
            if i in took:
                assert not torch.equal(after[i], before[i])
            else:  # not taking part: the momentum is kept as it was, not reset or decayed
                assert torch.equal(after[i], before[i])
        seen |= took
    assert len(seen) > 2


def test_centered_clipping_with_momentum_starts_from_the_last_aggregate_momentum():
    sim = simulation({"name": "fedavg", "client_momentum": 0.9, "aggregator": "centered_clipping",
                      "aggregator_options": {"tau": 1e-3}}, problem=LS, solver=GD)
    assert torch.equal(sim.server["v"], torch.zeros(3, dtype=sim.server["v"].dtype))
    ids = torch.arange(4)
    v = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    server = {**sim.server, "v": v}
    rows = server["x0"] + v + torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    up, _ = sim.algorithm.local(sim.algorithm.broadcast(server), sim.store.get(ids), context(sim, ids))
    new, _ = sim.algorithm.aggregate(server, {**up, "x": rows}, server_context(sim, ids))
    # τ tiny: one iteration moves v by at most τ, so the aggregate stays by x0 + v (not by x0)
    assert float((new["x0"] - (server["x0"] + v)).norm()) <= 1e-3 + 1e-12
    torch.testing.assert_close(new["v"], new["x0"] - server["x0"])


def test_client_momentum_is_refused_where_uploads_are_not_updates():
    with pytest.raises(ConfigError, match="^algorithm.client_momentum: unknown key"):
        load_config({"problem": LS, "algorithm": {"name": "feddyn", "client_momentum": 0.5}})
    with pytest.raises(ConfigError, match="^algorithm.client_momentum: input should be less than 1"):
        load_config({"problem": LS, "algorithm": {"name": "fedavg", "client_momentum": 1.0}})
