"""The thread default: 1 thread unless a local step is large, the environment's
choice when OMP_NUM_THREADS is set, an explicit run.threads always."""

from __future__ import annotations

import pytest
import torch

from fedpd import threads
from fedpd.build import build, build_problem, local_work
from fedpd.config import load_config
from fedpd.simulation import Simulation


@pytest.fixture(autouse=True)
def keep_torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def cfg(**run):
    return load_config({"problem": {"name": "synthetic", "clients": 6, "dim": 60, "classes": 10},
                        "algorithm": {"name": "fedavg"},
                        "solver": {"name": "sgd", "batch_size": 10, "lr": 0.05, "local_steps": 2},
                        "sampler": {"name": "uniform", "clients_per_round": 3}, "run": {"rounds": 1, **run}})


def work(c):
    problem = build_problem(c)
    _, _, sampler = build(c, problem)
    return local_work(c, problem, sampler)


def test_step_flops_of_a_linear_model():
    c = cfg()
    assert threads.forward_flops(build_problem(c)) == 2 * 60 * 10  # one Linear 60 -> 10 (bias aside)
    w = work(c)
    assert (w.participants, w.chunk, w.batch, w.steps) == (3, 3, 10, 2)  # 3 participants x batch 10, 2 steps
    assert w.step_flops == 3 * 30 * 1200
    assert w.round_flops == 3 * 30 * 1200 * 2
    assert work(cfg(client_chunk=2)).step_flops == 3 * 20 * 1200  # a chunk of 2 clients a step


def test_the_work_estimate_reads_the_sampler_not_its_name():
    """Participants come from what the sampler declares: its per_round, or a Bernoulli sampler's
    expected q·N (at least 1)."""
    base = {"problem": {"name": "synthetic", "clients": 6, "dim": 60, "classes": 10}, "algorithm": {"name": "fedavg"},
            "solver": {"name": "gd", "lr": 0.05, "local_steps": 3}, "run": {"rounds": 1}}
    assert work(load_config({**base, "sampler": {"name": "all"}})).participants == 6
    assert work(load_config({**base, "sampler": {"name": "bernoulli", "q": 0.5}})).participants == 3
    assert work(load_config({**base, "sampler": {"name": "bernoulli", "q": 0.01}})).participants == 1
    full = work(load_config({**base, "sampler": {"name": "uniform", "clients_per_round": 2}}))
    problem = build_problem(load_config(base))
    assert (full.participants, full.batch, full.steps) == (2, int(problem.train.sizes.max()), 3)  # gd: every sample


def test_the_model_is_not_run_for_an_estimate_nobody_reads(monkeypatch):
    """A run whose threads are given never needs the FLOP count (a forward pass of the model)."""
    import fedpd.build

    calls = []
    monkeypatch.setattr(fedpd.build, "forward_flops", lambda problem: calls.append(1) or 1200)
    Simulation(cfg(threads=1, workers=1))
    assert calls == []
    for var in threads.ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    Simulation(cfg())
    assert calls == [1]  # counted once, for the thread and the worker rules alike


def test_small_runs_use_one_thread(monkeypatch):
    for var in threads.ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    torch.set_num_threads(2)
    sim = Simulation(cfg())
    assert sim.threads == 1 and torch.get_num_threads() == 1


def test_large_steps_use_the_idle_cores(monkeypatch):
    w = work(cfg())
    monkeypatch.setattr(threads, "PARALLEL_FLOPS", 1.0)  # every step counts as large
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    monkeypatch.setattr(threads, "idle_cores", lambda: 3.2)  # another job keeps one core busy
    assert threads.auto_threads(w) == 3
    monkeypatch.setattr(threads, "idle_cores", lambda: -5.0)  # a machine busier than its cores
    assert threads.auto_threads(w) == 1
    monkeypatch.setattr(threads, "idle_cores", lambda: 64.0)
    assert threads.auto_threads(w) == 4


def test_environment_and_explicit_choices_win(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert Simulation(cfg()).threads == 2 and torch.get_num_threads() == 2
    assert Simulation(cfg(threads=1)).threads == 1 and torch.get_num_threads() == 1


def test_threads_change_no_result():
    """The same run with 1 and 2 threads gives the same metrics (to float64 rounding)."""
    import fedpd

    one = fedpd.run(cfg(threads=1, rounds=3, eval_every=1)).history
    two = fedpd.run(cfg(threads=2, rounds=3, eval_every=1)).history
    for a, b in zip(one, two):
        for key in ("train_loss", "grad_norm_sq", "test_acc"):
            assert a[key] == pytest.approx(b[key], rel=1e-12, abs=1e-15), key
