"""benchmarks/gpu_afedpd.py (A-FedPD's methods timed on a GPU, then the screen's runs) and what a
GPU run needs: its --smoke mode runs the same code path on the CPU; on a machine with CUDA the
medium budget's A-FedPD configs run on it and agree with the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import tarfile

import pytest
import torch

from fedpd.build import exact_float32
from fedpd.reproduce import records

from helpers import ROOT

needs_cifar = pytest.mark.skipif(not os.environ.get("FEDPD_DATA"), reason="needs CIFAR-10 in $FEDPD_DATA")


def script():
    spec = importlib.util.spec_from_file_location("gpu_afedpd", ROOT / "benchmarks" / "gpu_afedpd.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cuda_runs_float32_without_tf32():
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        exact_float32(torch.device("cpu"))
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32  # the CPU: untouched
        exact_float32(torch.device("cuda"))
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_the_screen_is_the_main_claims_runs():
    from fedpd.reproduce import core

    exp = core.get("afedpd_table2")
    picked = core.select(exp.runs(exp.budgets["medium"]), script().SCREEN, "afedpd_table2")
    assert len(picked) == 9
    assert {(s.labels["split"], s.labels["method"]) for s in picked} == {("dir0.1", m) for m in ("fedavg", "feddyn",
                                                                                                   "afedpd")}
    assert {s.seed for s in picked} == {0, 1, 2} and all(s.config["problem"]["balanced"] for s in picked)


@needs_cifar
def test_smoke_mode_times_both_executions_and_records_the_screen(tmp_path):
    out = tmp_path / "results"
    assert script().main(["--smoke", "--results", str(out)]) == 0
    timed = json.loads((out / "timing.json").read_text())
    assert {(r["method"], r["device"], r["execution"]) for r in timed["rows"]} == {
        ("afedpd", "cpu", "per_client"), ("afedpd", "cpu", "vectorised"), ("fedavg", "cpu", "auto")}
    assert all(r["round_s"] > 0 for r in timed["rows"])
    assert "| fedavg | cpu | auto |" in (out / "timing.md").read_text()
    held = records.load(out / "afedpd_table2" / "records")
    assert list(held) == ["cifar10-lenet/iid/afedpdsam/s0"]
    rec = held["cifar10-lenet/iid/afedpdsam/s0"]
    assert rec.config["run"]["device"] == "cpu" and "--set run.device=cpu" in rec.provenance["command"]
    assert (out / "afedpd_table2" / "README.md").is_file()
    with tarfile.open(out / "afedpd_table2.tar.gz") as tar:  # the same folder as one archive, without runs/
        names = tar.getnames()
    assert "afedpd_table2/records/cifar10-lenet/iid/afedpdsam/s0.json.gz" in names
    assert "afedpd_table2/README.md" in names and not any(n.startswith("afedpd_table2/runs") for n in names)


def test_a_failing_timing_is_a_row_not_the_end_of_the_lease(monkeypatch):
    """One way of running that fails on the device (an old torch, a missing kernel) is reported in
    its row; the other rows and the screen still run."""
    module = script()
    calls = []

    def fake(config, device, execution, rounds, **kw):
        calls.append((device, execution))
        if execution == "vectorised":
            raise RuntimeError("no vmap here")
        return {"device": device, "execution": execution, "setup_s": 1.0, "first_round_s": 0.5, "round_s": 0.25,
                "rounds": rounds}

    monkeypatch.setattr(module, "time_rounds", fake)
    monkeypatch.setattr(module, "medium_config", lambda method, budget="medium": {})
    args = type("Args", (), {"methods": ["fedavg"], "executions": ["per_client", "vectorised"], "device": "cuda",
                             "rounds": 1, "local_steps": None, "problem": None, "budget": "medium",
                             "cpu_method": "fedavg", "cpu_rounds": 1})()
    rows = module.timing(args)
    assert calls == [("cuda", "per_client"), ("cuda", "vectorised"), ("cpu", "auto")]
    assert rows[1] == {"method": "fedavg", "device": "cuda", "execution": "vectorised",
                       "error": "RuntimeError: no vmap here"}
    text = module.table(rows, "fedavg")
    assert "| fedavg | cuda | vectorised | failed: RuntimeError: no vmap here |" in text
    assert "| fedavg | cuda | per_client | 1.0 | 0.5 | 0.25 | 1.0 |" in text  # the CPU's 0.25 over this 0.25


@needs_cifar
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["fedavg", "scaffold", "feddyn", "afedpd", "fedsam", "afedpdsam"])
@pytest.mark.parametrize("execution", ["per_client", "vectorised"])
def test_the_medium_configs_run_on_cuda_as_on_the_cpu(method, execution):
    """One round of 3 local steps of each medium-budget method on CUDA and on the CPU: every client
    state and the server's agree to float32 rounding (no TF32: exact_float32)."""
    from fedpd.config import load_config
    from fedpd.reproduce.spec import merge
    from fedpd.simulation import Simulation

    config = script().medium_config(method)
    states = {}
    for device in ("cpu", "cuda"):
        sim = Simulation(load_config(merge(config, {"run": {"device": device, "execution": execution, "rounds": 1},
                                                    "solver": {"local_steps": 3}})))
        try:
            sim.step()
            states[device] = {k: v.detach().cpu().double() for k, v in sim.server.items() if v.is_floating_point()}
        finally:
            sim.close()
    for key, value in states["cpu"].items():
        other = states["cuda"][key]
        assert torch.allclose(value, other, rtol=1e-4, atol=1e-6), (key, (value - other).abs().max())
