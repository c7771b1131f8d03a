"""``run.device``: cpu (default), cuda, cuda:N, mps or auto. A device the machine lacks is a
one-line config error before anything is written; data, model and every state live on the
chosen device; checkpoints hold CPU tensors (tests/run/test_safe_loading.py resumes one written on
another device)."""

from __future__ import annotations

import pytest
import torch

from fedpd.build import resolve_device
from fedpd.cli import main
from fedpd.config import load_config
from fedpd.simulation import Simulation

CFG = """
[problem]
name = "least_squares"
clients = 3
[algorithm]
name = "feddyn"
[run]
rounds = 2
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal cannot happen here")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_cuda_is_one_line_and_writes_nothing(tmp_path, capsys, device):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CFG)
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--quiet", "--set", f"run.device={device}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run.device" in err and "not present" in err, err
    assert not out.exists()


def test_an_unknown_device_names_the_choices(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CFG)
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--quiet", "--set", "run.device=tpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run.device" in err and "cpu, cuda, cuda:N, mps, auto" in err, err


def test_auto_picks_a_present_device():
    device = resolve_device("auto")
    expected = "cuda" if torch.cuda.is_available() else None
    assert device.type == expected or device.type in ("mps", "cpu")


def test_data_model_and_states_live_on_the_run_device():
    sim = Simulation(load_config({"problem": {"name": "least_squares", "clients": 3}, "algorithm": {"name": "afedpd"},
                                  "solver": {"name": "sgd", "lr": 0.05, "local_steps": 2, "batch_size": 2},
                                  "run": {"device": "auto"}}))
    sim.step()
    where = {t.device for t in (sim.problem.train.x, sim.problem.x_init, *sim.server.values(),
                                *sim.store.get(torch.arange(3)).values())}
    assert where == {sim.device}
    # a checkpoint is device-independent: every tensor in it is on the CPU
    sd = sim.state_dict()

    def devices(obj):
        if isinstance(obj, torch.Tensor):
            yield obj.device
        elif isinstance(obj, dict):
            for v in obj.values():
                yield from devices(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                yield from devices(v)

    assert set(devices(sd)) == {torch.device("cpu")}
