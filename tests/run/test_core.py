"""The simulator's core, each piece against an independent computation: samplers, the local
solver against torch.optim.SGD, stragglers, communication counting, metrics, the client store
and the flat-parameter adapter."""

from __future__ import annotations

import math

import pytest
import torch

from fedpd.flat import FlatModel
from fedpd.sampling import Bernoulli, UniformK
from fedpd.store import MemoryStore
from fedpd.streams import ClientStreams
from helpers import BASE, client_data, context, ls_grad, simulation

# --- samplers ------------------------------------------------------------------------------


@pytest.mark.parametrize("n,k", [(30, 10), (100_000, 10)])  # both of UniformK's code paths
def test_uniform_sampler_is_seeded_without_replacement_and_uniform(n, k):
    sampler = UniformK(n, k)
    draws = [sampler.sample(t, torch.Generator().manual_seed(5)) for t in range(2)]
    assert torch.equal(draws[0], draws[1])  # the same seed, the same clients
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(n)
    rounds = 3000 if n == 30 else 50
    for t in range(rounds):
        ids = sampler.sample(t, g)
        assert ids.numel() == k and ids.unique().numel() == k  # without replacement
        assert 0 <= int(ids.min()) and int(ids.max()) < n
        counts[ids] += 1
    if n == 30:  # each client in about K/N of the rounds: 1000 ± 4 std
        expected = rounds * k / n
        std = math.sqrt(rounds * (k / n) * (1 - k / n))
        assert (counts - expected).abs().max() < 4 * std


def test_bernoulli_sampler_includes_each_client_with_probability_q():
    sampler, g = Bernoulli(200, 0.1), torch.Generator().manual_seed(1)
    sizes = [sampler.sample(t, g).numel() for t in range(500)]
    assert abs(sum(sizes) / 500 - 20) < 1.0  # mean 20, std of the mean 0.19
    assert len(set(sizes)) > 5  # the number of participants varies


def test_bernoulli_round_without_participants_counts_nothing():
    sim = simulation({"name": "fedavg"}, sampler={"name": "bernoulli", "q": 0.01})
    x0 = sim.server["x0"].clone()
    sim.sampler.sample = lambda t, g: torch.empty(0, dtype=torch.int64)
    sim.step()
    assert torch.equal(sim.server["x0"], x0)
    assert sim.comm.comm_rounds == sim.comm.uplink_floats == sim.comm.downlink_floats == 0


# --- the local solver ----------------------------------------------------------------------


def torch_sgd(sim, i, x, steps, lr, momentum, weight_decay):
    """The same full-batch steps with torch.optim.SGD on f_i (an independent implementation)."""
    A, b = client_data(sim, i)
    w = torch.nn.Parameter(x.clone())
    opt = torch.optim.SGD([w], lr=lr, momentum=momentum, weight_decay=weight_decay)
    for _ in range(steps):
        opt.zero_grad()
        (0.5 * ((A @ w - b) ** 2).mean()).backward()
        opt.step()
    return w.detach()


def test_gd_with_momentum_weight_decay_and_lr_decay_matches_torch_sgd():
    lr, decay = 0.1, 0.5
    solver = {"name": "gd", "lr": lr, "local_steps": 5, "momentum": 0.9, "weight_decay": 0.01, "lr_decay": decay}
    sim = simulation({"name": "fedavg"}, solver=solver)
    for t in range(2):  # round 1 uses lr·decay, with a fresh momentum buffer
        x0 = sim.server["x0"].clone()
        sim.step()
        expected = torch.stack([torch_sgd(sim, i, x0, 5, lr * decay**t, 0.9, 0.01) for i in range(4)]).mean(0)
        torch.testing.assert_close(sim.server["x0"], expected, rtol=0, atol=1e-12)


def simulator_step(sim, i, x, steps, lr, weight_decay, clip, linear=None, mu=0.0, center=None):
    """FL-Simulator's local step (client/feddyn.py; client/client.py without the terms), written
    with torch: loss f_i(w) + ⟨w, v − μc⟩, clip_grad_norm_ to ``clip``, then SGD with weight decay
    ``weight_decay + μ`` (the μw part of the penalty's gradient added after the clip)."""
    A, b = client_data(sim, i)
    w = torch.nn.Parameter(x.clone())
    opt = torch.optim.SGD([w], lr=lr, weight_decay=weight_decay + mu)
    for _ in range(steps):
        opt.zero_grad()
        loss = 0.5 * ((A @ w - b) ** 2).mean()
        if linear is not None:
            loss = loss + (w * (linear - mu * center)).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([w], max_norm=clip)
        opt.step()
    return w.detach()


def test_clip_norm_clips_what_the_authors_simulator_clips():
    """solver.clip_norm: FedDyn's local objective f_i + ⟨λ_i, x⟩ + (μ/2)‖x − x0‖² stepped as the
    simulator does (∇f_i + λ_i − μx0 clipped, then μx and weight decay), per client; FedAvg: the
    loss gradient clipped. The clip is active (a small norm) and changes the result."""
    from fedpd.solvers import LocalObjective

    lr, clip, wd, mu = 0.1, 0.05, 0.01, 0.5
    solver = {"name": "gd", "lr": lr, "local_steps": 4, "weight_decay": wd, "clip_norm": clip}
    sim = simulation({"name": "feddyn", "eta": 1 / mu}, solver=solver)
    ids = torch.arange(4)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, generator=g, dtype=torch.float64)
    lam, center = (
        torch.randn(4, 3, generator=g, dtype=torch.float64),
        torch.randn(4, 3, generator=g, dtype=torch.float64),
    )
    res = sim.solver.solve(context(sim, ids), x, LocalObjective(linear=lam, mu=mu, center=center))
    expected = torch.stack([simulator_step(sim, i, x[i], 4, lr, wd, clip, lam[i], mu, center[i]) for i in range(4)])
    torch.testing.assert_close(res.x, expected, rtol=0, atol=1e-12)
    unclipped = sim.solver.with_options(clip_norm=0.0).solve(context(sim, ids), x, LocalObjective(lam, mu, center))
    assert not torch.allclose(unclipped.x, res.x)
    # FedAvg: clip(∇f_i), then weight decay, in every round (lr decay applied)
    fedavg = simulation({"name": "fedavg"}, solver={**solver, "lr_decay": 0.5})
    for t in range(2):
        x0 = fedavg.server["x0"].clone()
        fedavg.step()
        expected = torch.stack([simulator_step(fedavg, i, x0, 4, lr * 0.5**t, wd, clip) for i in range(4)]).mean(0)
        torch.testing.assert_close(fedavg.server["x0"], expected, rtol=0, atol=1e-12)


def test_fedcm_clips_its_mixed_direction():
    """FedCM with clip_norm c: each step x ← x − η1·clip(α∇f_i + (1 − α)Δ, c), as FL-Simulator's
    client/fedcm.py clips the gradient of α·loss + (1 − α)⟨θ, Δ⟩."""
    a, lr, clip = 0.3, 0.1, 0.05
    sim = simulation(
        {"name": "fedcm", "alpha": a}, solver={"name": "gd", "lr": lr, "local_steps": 3, "clip_norm": clip}
    )
    sim.step()  # round 0: Δ = 0
    x0, delta = sim.server["x0"].clone(), sim.server["delta"].clone()
    assert delta.norm() > 0
    sim.step()
    ends = []
    for i in range(4):
        x = x0.clone()
        for _ in range(3):
            v = a * ls_grad(sim, i, x) + (1 - a) * delta
            x = x - lr * v * min(1.0, clip / (float(v.norm()) + 1e-6))
        ends.append(x)
    # equal up to the 1e-6 guard of the norm (fedpd clips v/α to c/α: the guard scales by α)
    torch.testing.assert_close(sim.server["x0"], torch.stack(ends).mean(0), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("algorithm", [{"name": "fedpd_vr"}, {"name": "fedavg_plus"}, {"name": "apfl"}])
def test_own_loops_refuse_clip_norm(algorithm):
    from fedpd.errors import ConfigError

    with pytest.raises(ConfigError, match="solver.clip_norm") as e:
        simulation(algorithm, solver={"name": "sgd", "lr": 0.1, "batch_size": 2, "clip_norm": 10.0})
    assert "\n" not in str(e.value)


def test_sgd_minibatches_are_seeded_and_differ_from_full_batch():
    cfg = dict(solver={"name": "sgd", "lr": 0.1, "local_steps": 5, "batch_size": 2}, run={"seed": 3})
    a, b = simulation({"name": "fedavg"}, **cfg), simulation({"name": "fedavg"}, **cfg)
    a.step(), b.step()
    assert torch.equal(a.server["x0"], b.server["x0"])
    full = simulation({"name": "fedavg"}, solver={"name": "gd", "lr": 0.1, "local_steps": 5})
    full.step()
    assert not torch.allclose(a.server["x0"], full.server["x0"])


def test_stragglers_take_fewer_steps_and_keep_their_partial_work():
    solver = {"name": "gd", "lr": 0.1, "local_steps": 6, "straggler_fraction": 1.0}
    sim = simulation({"name": "fedavg"}, solver=solver)
    steps = sim.solver.step_counts(ClientStreams.of(0, "stragglers", 0, torch.arange(4)))
    assert ((1 <= steps) & (steps <= 6)).all()
    counts = sim.solver.step_counts(ClientStreams.of(0, "stragglers", 0, torch.arange(3000)))
    assert set(counts.tolist()) == set(range(1, 7))  # uniform on [1, Q]
    for k in range(1, 7):  # each count about 1/6 of the time: 500 ± 4 std (std ≈ 20)
        assert abs(int((counts == k).sum()) - 500) < 4 * 20.5
    # each client's local model is exactly its own number of GD steps
    x = torch.zeros(3, dtype=torch.float64)
    ids = torch.arange(4)
    from fedpd.solvers import LocalObjective

    res = sim.solver.solve(context(sim, ids, seed=9), x.expand(4, 3), LocalObjective())
    assert res.steps.unique().numel() > 1  # the clients straggle differently
    for i in range(4):
        xi = x.clone()
        for _ in range(int(res.steps[i])):
            xi = xi - 0.1 * ls_grad(sim, i, xi)
        torch.testing.assert_close(res.x[i], xi, rtol=0, atol=1e-12)


def test_local_epochs_give_each_client_e_passes_worth_of_steps():
    """solver.local_epochs = E: client k takes E·⌈n_k / B⌉ SGD steps (FedAvg's and FedProx's E),
    exactly the steps local_steps = that count would take on it alone; FedNova then sends ‖a_i‖₁."""
    from fedpd.solvers import LocalObjective

    problem = {"name": "synthetic", "clients": 4, "dim": 3, "classes": 3, "max_client_samples": 120, "seed": 3}
    sgd = {"name": "sgd", "lr": 0.05, "batch_size": 10, "local_epochs": 2}
    sim = simulation({"name": "fedavg"}, problem=problem, solver=sgd)
    ids = torch.arange(4)
    sizes = sim.problem.train.sizes
    assert sizes.unique().numel() > 1  # the power-law sizes differ
    x0 = torch.zeros(4, sim.problem.x_init.numel(), dtype=sim.problem.x_init.dtype)
    res = sim.solver.solve(context(sim, ids, seed=9), x0, LocalObjective())
    assert res.steps.tolist() == [2 * math.ceil(int(n) / 10) for n in sizes]
    for i in (int(res.steps.argmin()), int(res.steps.argmax())):  # its own count of steps, on its own streams, alone
        alone = simulation({"name": "fedavg"}, problem=problem,
                           solver={**sgd, "local_epochs": 0, "local_steps": int(res.steps[i])})
        one = alone.solver.solve(context(alone, ids[i:i + 1], seed=9), x0[:1], LocalObjective())
        torch.testing.assert_close(res.x[i], one.x[0], rtol=0, atol=1e-12)
    nova = simulation({"name": "fednova"}, problem=problem, solver=sgd)
    nova.step()
    d = sim.problem.x_init.numel()
    assert nova.comm.uplink_floats == 4 * (d + 1)  # x_i and ‖a_i‖₁: the clients' τ_i differ


# --- communication and metrics -------------------------------------------------------------


@pytest.mark.parametrize("name,per_client", [("fedavg", 1), ("fedprox", 1), ("scaffold", 2)])
def test_floats_are_counted_per_message(name, per_client):
    d, k = 3, 2
    sim = simulation({"name": name}, solver={"name": "gd", "lr": 0.1, "local_steps": 2},
                     sampler={"name": "uniform", "clients_per_round": k})
    for _ in range(5):
        sim.step()
    # each participant receives the model (and SCAFFOLD's c) and sends its model (and Δc_i)
    assert sim.comm.downlink_floats == sim.comm.uplink_floats == 5 * k * d * per_client
    assert sim.comm.comm_rounds == 5


def test_metrics_keys_and_closed_form_gradient():
    sim = simulation({"name": "fedavg"}, solver={"name": "gd", "lr": 0.1, "local_steps": 2})
    sim.step()
    m = sim.metrics()
    for key in ("round", "comm_rounds", "uplink_floats", "downlink_floats", "train_loss", "grad_norm_sq",
                "test_loss", "wall_s"):
        assert key in m
    x = sim.model()
    # f = (1/N) Σ f_i: every client weighs the same, whatever its size
    grad = torch.stack([ls_grad(sim, i, x) for i in range(4)]).mean(0)
    loss = sum(0.5 * ((client_data(sim, i)[0] @ x - client_data(sim, i)[1]) ** 2).mean() for i in range(4)) / 4
    assert m["grad_norm_sq"] == pytest.approx(float(grad @ grad), rel=1e-10)
    assert m["train_loss"] == pytest.approx(float(loss), rel=1e-10)


def test_classification_problems_report_test_accuracy():
    sim = simulation({"name": "fedavg"}, problem={"name": "synthetic", "clients": 5, "max_client_samples": 50},
                     solver={"name": "gd", "lr": 0.1, "local_steps": 2})
    m = sim.metrics()
    assert 0.0 <= m["test_acc"] <= 1.0 and m["test_loss"] == pytest.approx(math.log(10), rel=1e-6)


# --- client store and flat parameters -------------------------------------------------------


def test_store_materialises_only_clients_that_participated():
    store = MemoryStore({"lam": torch.zeros(4)}, num_clients=10**6)
    assert len(store) == 0 and store.mean("lam").abs().sum() == 0
    ids = torch.tensor([7, 999_999])
    store.put(ids, {"lam": torch.ones(2, 4)})
    assert len(store) == 2
    assert torch.equal(store.get(torch.tensor([999_999, 3]))["lam"], torch.tensor([[1.0] * 4, [0.0] * 4]))
    assert len(store) == 2  # reading client 3 materialised nothing
    torch.testing.assert_close(store.mean("lam"), torch.full((4,), 2 / 10**6))
    again = MemoryStore.from_state_dict(store.state_dict())
    assert torch.equal(again.get(ids)["lam"], store.get(ids)["lam"]) and len(again) == 2


def test_flat_model_matches_the_module():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    flat = FlatModel(module)
    x = flat.initial()
    assert x.numel() == flat.dim == 4 * 5 + 5 + 5 * 2 + 2
    inputs = torch.randn(7, 4)
    torch.testing.assert_close(flat(x, inputs), module(inputs))
    # the gradient with respect to the flat vector is the module's gradients, concatenated
    x = x.requires_grad_(True)
    flat(x, inputs).square().sum().backward()
    module(inputs).square().sum().backward()
    torch.testing.assert_close(x.grad, torch.cat([p.grad.reshape(-1) for p in module.parameters()]))
    # a vector of another model (e.g. a checkpoint of another problem) is refused, not reshaped
    with pytest.raises(ValueError, match="shape \\(36,\\); the model has 37 parameters"):
        flat(torch.zeros(36), inputs)
    batched = torch.func.vmap(flat, in_dims=(0, None))(torch.stack([x.detach()] * 3), inputs)  # [d] per client
    torch.testing.assert_close(batched[1], module(inputs).detach())


def test_scaffold_refuses_the_exact_solver():
    from fedpd.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^solver.name: .*\(allowed: gd, sgd\)$"):
        simulation({"name": "scaffold"}, solver={"name": "exact"})
    simulation({"name": "scaffold"}, solver={"name": "gd", "lr": 0.1})  # gradient steps are fine


def test_tensorboard_without_a_run_directory_is_refused_not_dropped():
    """fedpd.run without out= writes nothing: TensorBoard's scalars would be lost in silence, so the option is
    refused in one line; checkpoint_every (set by the examples for the CLI) just has nothing to do."""
    import fedpd
    from fedpd.errors import ConfigError

    cfg = {**BASE, "run": {"rounds": 1, "tensorboard": True}}
    with pytest.raises(ConfigError, match=r"^run.tensorboard: writes its scalars into the run directory"):
        fedpd.run(cfg)
    assert fedpd.run({**BASE, "run": {"rounds": 1, "checkpoint_every": 1}}).history[-1]["round"] == 1
