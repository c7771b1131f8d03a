"""run.tensorboard = true: every metric also goes to TensorBoard event files in
the run directory; read back here and compared with metrics.jsonl."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from fedpd.cli import main

pytest.importorskip("tensorboardX", reason="run.tensorboard needs the optional extra: pip install 'fedpd[tensorboard]'")

from fedpd.tensorboard import read_scalars  # noqa: E402

CONFIG = """
[problem]
name = "least_squares"
clients = 4
[algorithm]
name = "fedpd"
p = 0.3
[solver]
name = "gd"
lr = 0.1
local_steps = 2
[run]
rounds = 6
eval_every = 2
tensorboard = true
"""


def test_every_metric_is_written_as_a_tensorboard_scalar(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    assert list(out.glob("events.out.tfevents.*")), sorted(p.name for p in out.iterdir())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    scalars = read_scalars(out)
    keys = {k for r in records for k, v in r.items() if k != "round" and isinstance(v, (int, float))}
    assert keys and set(scalars) == keys
    for key in keys:
        having = [r for r in records if isinstance(r.get(key), (int, float))]  # e.g. residuals from round 2
        assert [s for s, _ in scalars[key]] == [r["round"] for r in having], key
        np.testing.assert_allclose([v for _, v in scalars[key]], [float(r[key]) for r in having],
                                   rtol=1e-6, err_msg=key)  # stored as float32
    assert [s for s, _ in scalars["train_loss"]] == [0, 2, 4, 6]


def test_resumed_run_appends_the_later_rounds(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    assert main(["run", "--resume", str(out), "--quiet", "--set", "run.rounds=10"]) == 0
    steps = [s for s, _ in read_scalars(out)["train_loss"]]
    assert steps == [0, 2, 4, 6, 8, 10]


def test_tensorboard_can_be_switched_on_at_resume(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.replace("tensorboard = true", ""))
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    assert not list(out.glob("events.out.tfevents.*"))
    assert main(["run", "--resume", str(out), "--quiet", "--set", "run.rounds=8", "--set", "run.tensorboard=true"]) == 0
    assert [s for s, _ in read_scalars(out)["grad_norm_sq"]] == [8]


def test_missing_package_is_one_line_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # as if not installed
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    code = main(["run", str(cfg), "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "run.tensorboard" in err and "pip install 'fedpd[tensorboard]'" in err
    assert not (tmp_path / "run").exists()
