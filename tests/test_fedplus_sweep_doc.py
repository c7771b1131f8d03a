"""docs/reproductions/fedplus_table2/sweep.md, run as written: its bash block runs verbatim in an
empty directory in a clean environment (fresh HOME; on PATH only this Python's scripts and the
system's; PYTHONPATH only this checkout's src), with ROUNDS=2 — the knob the doc offers for a quick
check — and its one sweep writes a CSV with a FedAvg+ and a FedGeoMed+ row for every point; the κ
points cover the paper's recommended κ = 1/(1 + ησ) ∈ [0.9, 0.999] on three data sets each
(problem.seed = run.seed), and each run's σ gives the κ its name says."""

from __future__ import annotations

import csv
import re
import tomllib
from pathlib import Path

from doc_blocks import bash_blocks, clean_env, run_script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reproductions" / "fedplus_table2" / "sweep.md"


def test_the_sweep_commands_run_as_written(tmp_path):
    (block,) = bash_blocks(DOC, "Commands")
    done = run_script(block, tmp_path, clean_env(tmp_path, ROUNDS="2"), timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:]
    rows = list(csv.DictReader((tmp_path / "fedplus_sweep" / "results.csv").open()))
    assert all(r["rounds"] == "2" and float(r["personal_mse_final"]) > 0 for r in rows), rows
    points: dict[str, list[dict]] = {}
    for row in rows:
        point, method, seed = re.fullmatch(r"(.+)-(fedavg_plus|fedgeomed_plus)/s(\d)", row["run"]).groups()
        assert row["algorithm"] == method, row
        points.setdefault(point, []).append(row)
    assert len(points) == 11 + 2 + 3 * (6 + 2 + 5), sorted(points)
    assert all(sorted(r["algorithm"] for r in pair) == ["fedavg_plus", "fedgeomed_plus"] for pair in points.values())

    kappa_points = {}
    for point, pair in points.items():
        if m := re.fullmatch(r"lr([\d.]+)-kappa([\d.]+)-delta([\d.]+)-lam([\d.]+)-data(\d)", point):
            lr, kappa, seed = float(m[1]), float(m[2]), int(m[5])
            kappa_points.setdefault((m[1], m[2], m[3], m[4]), set()).add(seed)
            for row in pair:
                config = tomllib.loads((tmp_path / row["path"] / "config.toml").read_text())
                assert config["run"]["seed"] == config["problem"]["seed"] == seed, point
                assert config["solver"]["lr"] == lr, point
                assert abs(1 / (1 + lr * config["algorithm"]["sigma"]) - kappa) < 1e-9, point
    assert all(seeds == {0, 1, 2} for seeds in kappa_points.values()), kappa_points
    kappas = sorted(float(k) for (lr, k, delta, lam) in kappa_points if (lr, delta, lam) == ("0.0001", "0.1", "0.0"))
    assert kappas[0] == 0.9 and kappas[-1] == 0.999 and len(kappas) == 6, kappas
