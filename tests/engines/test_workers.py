"""Parallel clients inside one run (``run.workers``): what happens when a worker dies,
hangs or cannot build the run, exact resume of a killed run, the ``auto`` rule and bad input.
The numbers themselves are the engine conformance suite's (tests/engines/test_engine_conformance.py,
TestWorkerProcesses) and the executor-independence test's, with 2 workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fedpd
from fedpd import workers
from fedpd.cli import main
from fedpd.config import load_config
from fedpd.errors import ConfigError, FedpdError
from fedpd.simulation import Simulation

from engine_conformance import config, records
from resume_runs import CONFIGS, kill_when, metrics_without_wall


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone(pids, within: float = 30.0) -> bool:
    deadline = time.time() + within
    while time.time() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def pool_pids(monkeypatch):
    """The pids of every worker process started in this test (to check that none is left)."""
    started: list[int] = []
    original = workers._Worker.__init__

    def init(self, *args, **kw):
        original(self, *args, **kw)
        started.append(self.process.pid)

    monkeypatch.setattr(workers._Worker, "__init__", init)
    return started


def kill_on_train(monkeypatch, times: int) -> list[int]:
    """SIGKILL the worker a round's work was just sent to, the first ``times`` times."""
    killed: list[int] = []
    send = workers._Worker.send

    def send_and_kill(self, obj):
        ok = send(self, obj)
        if obj is not None and obj[0] == "train" and len(killed) < times:
            os.kill(self.process.pid, signal.SIGKILL)
            killed.append(self.process.pid)
        return ok

    monkeypatch.setattr(workers._Worker, "send", send_and_kill)
    return killed


@pytest.mark.slow
def test_a_worker_killed_mid_round_is_started_again_and_the_round_redone(monkeypatch, capfd, pool_pids):
    reference = records(fedpd.run(config("afedpd")))
    killed = kill_on_train(monkeypatch, times=1)
    result = fedpd.run(config("afedpd"), overrides=["run.workers=2"])
    assert len(killed) == 1 and len(pool_pids) == 3  # two workers, and the one started again
    assert records(result) == reference
    err = capfd.readouterr().err
    # round 0, or the next if the killed worker had answered before the signal landed
    assert "fedpd: a worker process died in round " in err and "training its clients again" in err
    assert gone(pool_pids)


@pytest.mark.slow
def test_a_worker_that_dies_twice_in_a_round_stops_the_run_with_one_line(monkeypatch, tmp_path, capsys, pool_pids):
    cfg = tmp_path / "c.toml"
    cfg.write_text(load_config(config("afedpd")).to_toml())
    kill_on_train(monkeypatch, times=10)
    code = main(["run", str(cfg), "--quiet", "--set", "run.workers=2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("fedpd: error: a worker process (run.workers) died twice in round 0")
    assert "Traceback" not in "\n".join(err)
    assert gone(pool_pids)


@pytest.mark.slow
def test_a_worker_that_does_not_answer_stops_the_run_within_the_timeout(monkeypatch, pool_pids):
    """A stopped (hung) worker: one line after run.node_timeout, every worker stopped; no hang."""
    send = workers._Worker.send

    def send_and_stop(self, obj):
        ok = send(self, obj)
        if obj is not None and obj[0] == "train":
            os.kill(self.process.pid, signal.SIGSTOP)
        return ok

    sim = Simulation(load_config(config("afedpd"), ["run.workers=2", "run.node_timeout=3"]))
    pool = sim.engine.pool
    pool.timeout = 300
    pool._await_ready(range(2), 0)  # started (however loaded the machine): the 3 s below are the round's
    pool.timeout = 3
    monkeypatch.setattr(workers._Worker, "send", send_and_stop)
    t0 = time.perf_counter()
    with pytest.raises(FedpdError, match=r"has not answered in 3 s in round 0; the run stops"):
        sim.step()
    assert 3 <= time.perf_counter() - t0 < 20
    assert gone(pool_pids)


def test_a_worker_that_cannot_build_the_run_is_one_line(tmp_path, pool_pids):
    bad = load_config(config("fedavg")).to_toml().replace('name = "synthetic"', 'name = "no_such_problem"')
    pool = workers.WorkerPool(bad, 2, 1, timeout=60)
    import torch

    with pytest.raises(FedpdError, match=r"could not build the run: ConfigError: problem.name: unknown problem "
                                         r"'no_such_problem'"):
        pool.train({}, [(torch.tensor([0]), {}), (torch.tensor([1]), {})], 0)
    assert gone(pool_pids)


@pytest.mark.slow
def test_workers_stop_when_the_run_ends(pool_pids):
    result = fedpd.run(config("fedavg", rounds=2), overrides=["run.workers=2"])
    assert len(pool_pids) == 2 and gone(pool_pids, within=10)
    result.simulation.step()  # a later round starts them again
    assert len(pool_pids) == 4
    result.simulation.close()
    assert gone(pool_pids, within=10)


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def descendants(pid: int) -> list[int]:
    return [d for c in children(pid) for d in (c, *descendants(c))]


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_workers_are_forked_by_one_zygote_in_the_runs_environment_and_a_dead_zygote_is_replaced(monkeypatch,
                                                                                              pool_pids):
    reference = records(fedpd.run(config("afedpd")))
    assert records(fedpd.run(config("afedpd"), overrides=["run.workers=2"])) == reference
    zygote = workers._Zygote._current.process
    assert zygote.poll() is None  # it outlives the run: the next run's workers cost a fork
    # a worker is the zygote's child, with the environment of the run's process when it is forked
    monkeypatch.setenv("FEDPD_DATA", "/no/such/fedpd-probe")
    mnist = {**config("fedavg"), "problem": {"name": "dataset", "dataset": "mnist", "clients": 4}}
    worker = workers._Worker(load_config(mnist).to_toml(), 1)
    assert parent(worker.process.pid) == zygote.pid
    reply = worker.recv()
    assert reply[0] == "error" and "/no/such/fedpd-probe/mnist" in reply[1], reply
    worker.stop()
    assert worker.process.returncode == 0
    monkeypatch.undo()
    # a zygote that died is started again; the metrics do not change
    zygote.kill()
    zygote.wait()
    assert records(fedpd.run(config("afedpd"), overrides=["run.workers=2"])) == reference
    assert workers._Zygote._current.process.pid != zygote.pid
    assert gone(pool_pids)


@pytest.mark.slow
def test_a_run_killed_with_its_workers_resumes_exactly(tmp_path):
    """SIGKILL the run's process mid-run: its workers (forked by its zygote, the run's one child
    process) and the zygote exit (they see their sockets close), and --resume (here with
    run.workers = 1: it may change) writes the uninterrupted metrics."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIGS["scaffold"])
    assert main(["run", str(cfg), "--out", str(tmp_path / "straight"), "--quiet"]) == 0
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "fedpd", "run", str(cfg), "--out", str(out), "--quiet", "--set",
                             "run.workers=2"], stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while len(descendants(proc.pid)) < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    pids = descendants(proc.pid)
    kill_when(out, 4, proc)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed: make it longer"
    assert len(pids) == 3 and gone(pids)  # the zygote and two workers: none orphaned
    assert main(["run", "--resume", str(out), "--quiet", "--set", "run.workers=1"]) == 0
    assert metrics_without_wall(out / "metrics.jsonl") == metrics_without_wall(tmp_path / "straight" / "metrics.jsonl")


# --- run.workers = "auto" and bad input -------------------------------------------------------
def plan(overrides, **sections):
    sim_cfg = load_config(config("fedavg", **sections), overrides)
    from fedpd.build import build, build_problem, local_work

    problem = build_problem(sim_cfg)
    work = local_work(sim_cfg, problem, build(sim_cfg, problem)[2])
    return workers.plan_workers(sim_cfg.run.workers, sim_cfg.run.threads, work, problem.device)


def test_auto_trains_a_small_round_in_the_run_process(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(workers, "available_cores", lambda: 8)
    assert plan([]) == (1, 0)  # the synthetic problem's round: far below PARALLEL_ROUND_FLOPS


def test_auto_takes_every_usable_core_for_a_large_round_at_most_one_per_participant(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(workers, "PARALLEL_ROUND_FLOPS", 0)
    monkeypatch.setattr(workers, "available_cores", lambda: 4)
    assert plan([]) == (4, 1)  # 4 cores, 5 participants
    monkeypatch.setattr(workers, "available_cores", lambda: 16)
    assert plan([]) == (5, 3)  # 5 participants: 5 workers of 3 threads
    assert plan(["run.threads=2"]) == (5, 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the run's share of the cores (a sweep's job): one
    assert plan([]) == (1, 0)


def test_more_workers_than_usable_cores_is_a_warning_and_the_usable_count(monkeypatch, capsys):
    monkeypatch.setattr(workers, "available_cores", lambda: 2)
    assert plan(["run.workers=3"]) == (2, 1)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fedpd: run.workers: 3 is more than the 2 usable cores of this machine; using 2"]


@pytest.mark.parametrize("overrides, message", [
    (["run.engine=flower", "run.workers=2"], "run.workers: worker processes are the inprocess engine's; "
                                             "run.engine = \"flower\" runs clients on its nodes"),
    (["run.engine=loopback", "run.workers=1"], "run.workers: worker processes are the inprocess engine's"),
    (["run.workers=0"], 'run.workers: expected "auto" or a number of processes, 1 or more \\(got 0\\)'),
    (["run.workers=many"], 'run.workers: expected "auto" or a number of processes, 1 or more'),
])
def test_bad_workers_are_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(config("fedavg"), overrides)
    assert "\n" not in str(err.value)


def test_workers_with_flower_exit_2_from_the_cli(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(load_config(config("fedavg")).to_toml())
    assert main(["run", str(cfg), "--set", "run.engine=flower", "--set", "run.workers=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Flower: its own backend options" in err[0]


def test_workers_may_change_on_resume(tmp_path):
    out = tmp_path / "run"
    fedpd.run(config("fedavg", rounds=2), out)
    result = fedpd.run(resume=out, overrides=["run.workers=2", "run.rounds=4"])
    assert result.history[-1]["round"] == 4
