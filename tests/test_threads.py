"""The thread default (issue 16, item 1): 1 thread unless a local step is large, the environment's
choice when OMP_NUM_THREADS is set, an explicit run.threads always."""

from __future__ import annotations

import pytest
import torch

from fedpd import threads
from fedpd.build import build_problem
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


def test_step_flops_of_a_linear_model():
    c = cfg()
    problem = build_problem(c)
    assert threads.forward_flops(problem) == 2 * 60 * 10  # one Linear 60 -> 10 (bias aside)
    assert threads.samples_per_step(c, problem) == 3 * 10  # 3 participants x batch 10
    assert threads.step_flops(c, problem) == 3 * 30 * 1200


def test_small_runs_use_one_thread(monkeypatch):
    for var in threads.ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    torch.set_num_threads(2)
    sim = Simulation(cfg())
    assert sim.threads == 1 and torch.get_num_threads() == 1


def test_large_steps_use_the_idle_cores(monkeypatch):
    c = cfg()
    problem = build_problem(c)
    monkeypatch.setattr(threads, "PARALLEL_FLOPS", 1.0)  # every step counts as large
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    monkeypatch.setattr(threads, "idle_cores", lambda: 3.2)  # another job keeps one core busy
    assert threads.auto_threads(c, problem) == 3
    monkeypatch.setattr(threads, "idle_cores", lambda: -5.0)  # a machine busier than its cores
    assert threads.auto_threads(c, problem) == 1
    monkeypatch.setattr(threads, "idle_cores", lambda: 64.0)
    assert threads.auto_threads(c, problem) == 4


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
