"""The disk-backed client store: the memory store's contract and numbers, exact resume
after ``kill -9`` at every point of its write path, and one line for a store it cannot use."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fedpd
from fedpd.cli import main
from fedpd.disk_store import DiskStore
from fedpd.disk_store import system as disk_store  # where the store meets the OS
from fedpd.store import MemoryStore

from helpers import TESTS


# --- the contract, against the memory store ---------------------------------------------------
def both(init, n):
    return MemoryStore(init, n), DiskStore(init, n)


def test_same_states_means_and_rows_as_the_memory_store():
    g = torch.Generator().manual_seed(0)
    init = {"lam": torch.randn(5, generator=g, dtype=torch.float64), "D": torch.zeros(2, 3, dtype=torch.float32),
            "c": torch.tensor(0.5, dtype=torch.float64)}
    mem, disk = both(init, 40)
    untouched = torch.tensor([3, 39, 0])
    for key in init:  # untouched clients read their initial state and are not materialised
        assert torch.equal(mem.get(untouched)[key], disk.get(untouched)[key])
    assert len(disk) == 0
    for t in range(30):
        ids = torch.randperm(40, generator=g)[: 1 + t % 7]
        state = {"lam": torch.randn(ids.numel(), 5, generator=g, dtype=torch.float64),
                 "D": torch.randn(ids.numel(), 2, 3, generator=g, dtype=torch.float64),  # stored as float32
                 "c": torch.randn(ids.numel(), generator=g, dtype=torch.float64)}
        mem.put(ids, state)
        disk.put(ids, state)
        probe = torch.randperm(40, generator=g)[:9]
        for key in init:
            assert torch.equal(mem.get(probe)[key], disk.get(probe)[key])
    assert len(mem) == len(disk) > 20
    for key in init:
        assert torch.equal(mem.mean(key), disk.mean(key))
        assert torch.equal(mem.full(key), disk.full(key))
        assert disk.get(probe)[key].dtype == init[key].dtype
    disk.close()


def test_the_mean_is_summed_in_the_same_chunks_for_large_states(monkeypatch):
    monkeypatch.setattr("fedpd.store.MEAN_CHUNK_BYTES", 3 * 8 * 4)  # 3 rows of 4 floats per chunk
    init = {"x": torch.zeros(4, dtype=torch.float64)}
    mem, disk = both(init, 20)
    g = torch.Generator().manual_seed(1)
    ids = torch.tensor([7, 2, 19, 11, 5, 3, 14, 0])
    state = {"x": torch.randn(8, 4, generator=g, dtype=torch.float64) * 1e8}
    mem.put(ids, state)
    disk.put(ids, state)
    assert torch.equal(mem.mean("x"), disk.mean("x"))
    disk.close()


def test_rows_grow_with_participants_not_with_clients(tmp_path):
    d = 1000
    store = DiskStore({"lam": torch.zeros(d, dtype=torch.float32)}, 10**6)
    store.attach(tmp_path / "s", run_dir=tmp_path, resume=False)
    ids = torch.tensor([999_999, 5, 123_456])
    store.put(ids, {"lam": torch.ones(3, d)})
    assert len(store) == 3
    assert (tmp_path / "s" / "data-lam.bin").stat().st_size == 3 * d * 4
    assert torch.equal(store.get(torch.tensor([5, 6]))["lam"][:, 0], torch.tensor([1.0, 0.0]))
    assert float(store.mean("lam")[0]) == pytest.approx(3e-6)
    store.close()


# --- runs: the same metrics as the memory store -------------------------------------------------
PROBLEM = {"name": "synthetic", "clients": 8, "dim": 4, "classes": 3, "max_client_samples": 20, "seed": 2}
SGD = {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 4, "straggler_fraction": 0.3}


def run_config(algorithm: dict, rounds: int = 8, sampler=None, **run) -> dict:
    return {"problem": PROBLEM, "solver": SGD, "algorithm": algorithm,
            "sampler": sampler or {"name": "uniform", "clients_per_round": 3},
            "run": {"rounds": rounds, "eval_every": 2, "checkpoint_every": 3, "seed": 5, "dtype": "float64", **run}}


def metrics(path: Path) -> list[dict]:
    out = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for r in out:
        r.pop("wall_s")
    return out


@pytest.mark.parametrize("algorithm", [{"name": "afedpd", "eta": 10.0}, {"name": "feddyn"}, {"name": "scaffold"},
                                       {"name": "ditto"}])
def test_disk_store_run_is_bit_identical_to_the_memory_store(algorithm, tmp_path):
    cfg = run_config(algorithm)
    fedpd.run(cfg, tmp_path / "mem", overrides=["run.store=memory"])
    fedpd.run(cfg, tmp_path / "disk", overrides=["run.store=disk"])
    assert metrics(tmp_path / "mem") == metrics(tmp_path / "disk")
    assert (tmp_path / "disk" / "store" / "store.json").exists()
    assert "store = \"disk\"" in (tmp_path / "disk" / "config.toml").read_text()
    # the checkpoint holds no rows: a few numbers and the initial state
    sd = torch.load(tmp_path / "disk" / "checkpoint.pt", weights_only=True)
    assert sd["engine"]["store"]["kind"] == "disk" and "data" not in sd["engine"]["store"]


def test_fedpd_mean_of_anchors_and_resume_in_process(tmp_path):
    cfg = run_config({"name": "fedpd", "eta": 1.0, "p": 0.5}, rounds=9, sampler={"name": "all"})
    straight = fedpd.run(cfg, tmp_path / "straight", overrides=["run.store=memory"])
    out = tmp_path / "cut"
    fedpd.run(cfg, out, overrides=["run.store=disk", "run.rounds=4"])
    fedpd.run(resume=out, overrides=["run.rounds=9"])
    assert metrics(out) == metrics(tmp_path / "straight")
    assert straight.final("train_loss") is not None


def test_auto_picks_the_disk_for_large_states_and_says_so(tmp_path, capsys, monkeypatch):
    cfg = run_config({"name": "feddyn"}, rounds=2)
    fedpd.run(cfg, tmp_path / "small")
    assert 'store = "memory"' in (tmp_path / "small" / "config.toml").read_text()
    assert "disk store" not in capsys.readouterr().err
    monkeypatch.setattr(disk_store, "mem_available", lambda: 4000)  # 720 bytes of states > 4000 / 8
    fedpd.run(cfg, tmp_path / "big")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.store = auto chose the disk store" in err[0], err
    assert 'store = "disk"' in (tmp_path / "big" / "config.toml").read_text()
    assert metrics(tmp_path / "big") == metrics(tmp_path / "small")


# --- exact resume after kill -9 at every point of the write path -------------------------------
KILL_CONFIG = """
[problem]
name = "synthetic"
clients = 8
dim = 4
classes = 3
max_client_samples = 20
seed = 2
[algorithm]
name = "afedpd"
eta = 10.0
[solver]
name = "sgd"
lr = 0.05
local_steps = 3
batch_size = 4
[sampler]
name = "uniform"
clients_per_round = 3
[run]
rounds = 60
eval_every = 2
checkpoint_every = 3
seed = 5
store = "disk"
"""

#: (point, n-th time): each process of the chain is killed there, the next one resumes
CHAIN = [("undo", 4), ("rollback", 1), ("write", 7), ("state-dict", 2), ("ckpt-write", 2), ("saved", 2),
         ("drop", 2), ("new-row", 1)]


def killed_at(point: str, nth: int, args: list[str]) -> int:
    proc = subprocess.run([sys.executable, str(TESTS / "disk_store_kill.py"), point, str(nth), "--", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    assert proc.returncode == -signal.SIGKILL, (point, nth, proc.returncode, proc.stderr.decode()[-2000:])
    return proc.returncode


@pytest.mark.slow
def test_kill_9_at_every_point_of_the_disk_store_resumes_to_identical_metrics(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(KILL_CONFIG)
    assert main(["run", str(cfg), "--out", str(tmp_path / "straight"), "--quiet", "--set", "run.store=memory"]) == 0
    expected = metrics(tmp_path / "straight")
    out = tmp_path / "killed"
    for i, (point, nth) in enumerate(CHAIN):
        args = ["run", str(cfg), "--out", str(out), "--quiet"] if i == 0 else ["run", "--resume", str(out), "--quiet"]
        killed_at(point, nth, args)
        done = metrics(out)
        assert len(done) < len(expected), f"the run finished before the kill at {point}"
        assert done == expected[: len(done)]
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert metrics(out) == expected
    assert not list(out.glob(".*.tmp")) and not list((out / "store").glob(".*.tmp"))


def test_an_undo_log_puts_back_the_checkpoint_rows(tmp_path):
    """Unit-level: overwrite committed rows after a checkpoint, 'crash', reopen from the checkpoint."""
    init = {"a": torch.zeros(3, dtype=torch.float64), "b": torch.zeros(2, dtype=torch.float32)}
    s = DiskStore(init, 10)
    s.attach(tmp_path / "s", run_dir=tmp_path, resume=False)
    s.put(torch.tensor([1, 4, 7]), {"a": torch.ones(3, 3), "b": torch.ones(3, 2)})
    sd = s.state_dict()
    s.checkpoint_saved()
    at_checkpoint = s.get(torch.arange(10))
    s.put(torch.tensor([4, 9]), {"a": torch.full((2, 3), 5.0), "b": torch.full((2, 2), 5.0)})
    s.put(torch.tensor([4, 1]), {"a": torch.full((2, 3), 6.0), "b": torch.full((2, 2), 6.0)})
    assert (tmp_path / "s" / "undo-1.log").stat().st_size > 0
    s._close()  # as if killed: nothing else happens
    again = DiskStore(init, 10)
    again.attach(tmp_path / "s", run_dir=tmp_path, resume=True)
    again.load_state_dict(sd)
    back = again.get(torch.arange(10))
    assert len(again) == 3
    for k in init:
        assert torch.equal(back[k], at_checkpoint[k])
    assert not list((tmp_path / "s").glob("undo-*.log"))
    again.close()


# --- bad input: one line before any round -------------------------------------------------------
CONFIG = """
[problem]
name = "synthetic"
clients = 8
dim = 4
classes = 3
max_client_samples = 20
[algorithm]
name = "feddyn"
[solver]
name = "sgd"
lr = 0.05
local_steps = 2
batch_size = 3
[sampler]
name = "uniform"
clients_per_round = 3
[run]
rounds = 6
eval_every = 2
store = "disk"
"""


def one_line(capsys, argv, *needles) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def write_config(tmp_path: Path, text: str = CONFIG) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    return cfg


def test_a_store_of_another_run_is_refused_on_resume(tmp_path, capsys):
    cfg = write_config(tmp_path)
    for name in ("a", "b"):
        assert main(["run", str(cfg), "--out", str(tmp_path / name), "--quiet", "--set", "run.rounds=4"]) == 0
    (tmp_path / "a" / "store").rename(tmp_path / "a-store")
    (tmp_path / "b" / "store").rename(tmp_path / "a" / "store")
    one_line(capsys, ["run", "--resume", str(tmp_path / "a"), "--quiet", "--set", "run.rounds=6"],
             "another run", "token")
    assert [r["round"] for r in metrics(tmp_path / "a")] == [0, 2, 4]


def test_a_fresh_run_refuses_a_store_dir_of_another_run(tmp_path, capsys):
    cfg = write_config(tmp_path)
    shared = tmp_path / "shared-store"
    assert main(["run", str(cfg), "--out", str(tmp_path / "a"), "--quiet", "--set", f"run.store_dir={shared}"]) == 0
    before = {p.name: p.read_bytes() for p in shared.iterdir()}
    one_line(capsys, ["run", str(cfg), "--out", str(tmp_path / "b"), "--quiet", "--set", f"run.store_dir={shared}"],
             "run.store_dir", "another run")
    assert {p.name: p.read_bytes() for p in shared.iterdir()} == before
    assert not (tmp_path / "b" / "metrics.jsonl").exists()


def test_a_missing_store_is_refused_on_resume(tmp_path, capsys):
    cfg = write_config(tmp_path)
    assert main(["run", str(cfg), "--out", str(tmp_path / "a"), "--quiet", "--set", "run.rounds=4"]) == 0
    (tmp_path / "a" / "store" / "store.json").unlink()
    one_line(capsys, ["run", "--resume", str(tmp_path / "a"), "--quiet", "--set", "run.rounds=6"], "store.json missing")


def test_a_full_disk_is_refused_before_any_round(tmp_path, capsys, monkeypatch):
    cfg = write_config(tmp_path)
    monkeypatch.setattr(disk_store.shutil, "disk_usage", lambda p: type("U", (), {"free": 1000})())
    one_line(capsys, ["run", str(cfg), "--out", str(tmp_path / "a"), "--quiet"], "run.store_dir", "free",
             "may need")
    assert not (tmp_path / "a" / "metrics.jsonl").exists()


def test_a_read_only_store_dir_is_refused_before_any_round(tmp_path, capsys, monkeypatch):
    cfg = write_config(tmp_path)

    def read_only(*a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(disk_store.tempfile, "mkstemp", read_only)
    one_line(capsys, ["run", str(cfg), "--out", str(tmp_path / "a"), "--quiet"], "run.store_dir", "Read-only")
    assert not (tmp_path / "a" / "metrics.jsonl").exists()


def test_running_out_of_space_mid_run_is_one_line_and_the_checkpoint_resumes(tmp_path, capsys, monkeypatch):
    cfg = write_config(
        tmp_path,
        CONFIG.replace("rounds = 6", "rounds = 12").replace("eval_every = 2", "eval_every = 2\ncheckpoint_every = 3"),
    )
    assert main(["run", str(cfg), "--out", str(tmp_path / "straight"), "--quiet"]) == 0
    calls = {"n": 0}
    real = disk_store._pwrite_full

    def fills_up(fd, data, offset):
        calls["n"] += 1
        if calls["n"] > 25:
            raise OSError(28, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(disk_store, "_pwrite_full", fills_up)
    one_line(capsys, ["run", str(cfg), "--out", str(tmp_path / "a"), "--quiet"], "No space left on device",
             "last checkpoint is intact")
    monkeypatch.setattr(disk_store, "_pwrite_full", real)
    assert 0 < len(metrics(tmp_path / "a")) < len(metrics(tmp_path / "straight"))
    assert main(["run", "--resume", str(tmp_path / "a"), "--quiet"]) == 0
    assert metrics(tmp_path / "a") == metrics(tmp_path / "straight")


def test_memory_store_that_cannot_hold_the_states_is_one_line(tmp_path, capsys, monkeypatch):
    cfg = write_config(tmp_path, CONFIG.replace('store = "disk"', 'store = "memory"'))
    monkeypatch.setattr(disk_store, "mem_available", lambda: 1500)  # 18 clients can take part: 18 x 120 bytes
    one_line(capsys, ["run", str(cfg), "--out", str(tmp_path / "a"), "--quiet", "--set", "problem.clients=40"],
             "run.store", "cannot hold")


def test_a_round_whose_participants_do_not_fit_in_memory_is_one_line(tmp_path, capsys, monkeypatch):
    cfg = write_config(tmp_path)
    monkeypatch.setattr(disk_store, "mem_available", lambda: 500)  # 3 participants x 3 x 120 bytes
    one_line(capsys, ["run", str(cfg), "--out", str(tmp_path / "a"), "--quiet"], "sampler", "participants")


def test_too_many_clients_for_the_disk_index_is_one_line(tmp_path, capsys, monkeypatch):
    cfg = write_config(tmp_path)
    monkeypatch.setattr(disk_store, "mem_available", lambda: 2000)  # 200 clients x 8 bytes > 2000 / 2
    one_line(capsys, ["run", str(cfg), "--out", str(tmp_path / "a"), "--quiet", "--set", "problem.clients=200"],
             "problem.clients", "index")


def test_the_store_cannot_be_changed_on_resume(tmp_path, capsys):
    cfg = write_config(tmp_path)
    assert main(["run", str(cfg), "--out", str(tmp_path / "a"), "--quiet", "--set", "run.rounds=4"]) == 0
    one_line(capsys, ["run", "--resume", str(tmp_path / "a"), "--quiet", "--set", "run.store=memory"],
             "a resume may change only")


def test_store_from_an_older_checkpoint_is_refused(tmp_path, capsys):
    cfg = write_config(tmp_path, CONFIG.replace("eval_every = 2", "eval_every = 2\ncheckpoint_every = 2"))
    out = tmp_path / "a"
    assert main(["run", str(cfg), "--out", str(out), "--quiet", "--set", "run.rounds=2"]) == 0
    old = (out / "checkpoint.pt").read_bytes()
    assert main(["run", "--resume", str(out), "--quiet", "--set", "run.rounds=6"]) == 0
    (out / "checkpoint.pt").write_bytes(old)  # a backup of round 2 put back: its undo logs are gone
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")
    one_line(capsys, ["run", "--resume", str(out), "--quiet", "--set", "run.rounds=6"], "older")
