"""The statistics of the reproduction reports (issue 22): paired per-seed differences, their standard
error and the 2-SE verdicts, checked on hand-computed numbers; a whole report written from fake
metrics (tables with ± and n, verdicts with difference and SE, provenance of every run); the
medium budget of every experiment and ``--estimate``."""

from __future__ import annotations

import csv
import json
import math
import os

import pytest

from fedpd.cli import main
from fedpd.io import read_jsonl
from fedpd.reproduce import core, records
from fedpd.reproduce import report as rep
from fedpd.reproduce.spec import Claim


# --- paired differences, by hand -------------------------------------------------------------------

def test_paired_differences_mean_and_standard_error_by_hand():
    # diffs 1, 2, 4: mean 7/3, sd² = (16/9 + 1/9 + 25/9) / 2 = 7/3, SE = sqrt(7/3) / sqrt(3) = 0.8819
    d = rep.paired({0: 80.0, 1: 82.0, 2: 84.0}, {0: 79.0, 1: 80.0, 2: 80.0})
    assert d.diffs == (1.0, 2.0, 4.0) and d.n == 3
    assert d.mean == pytest.approx(7 / 3) and d.se == pytest.approx(math.sqrt(7 / 3) / math.sqrt(3))
    assert d.se == pytest.approx(0.8819, abs=1e-4)
    assert d.verdict() is True  # 2.33 > 2 × 0.88
    assert d.verdict(higher=False) is False  # "A < B": the difference points the other way, beyond 2 SE
    assert d.text(".2f") == "+2.33 ± 0.88 (SE, n = 3)"


def test_pairs_are_the_seeds_both_sides_have():
    d = rep.paired({0: 5.0, 1: 6.0, 2: 9.0}, {0: 1.0, 2: 2.0, 3: 0.0})
    assert d.diffs == (4.0, 7.0)


@pytest.mark.parametrize("diffs, higher, verdict", [
    ((-3.0, -2.0, -4.0), True, False),  # mean -3, SE 1/sqrt(3) = 0.577: fails
    ((-3.0, -2.0, -4.0), False, True),  # the same numbers for "A < B": holds
    ((1.0, -1.0, 3.0), True, None),  # mean 1, sd 2, SE 1.155: 1 < 2.31, inconclusive
    ((2.0, 2.0, 2.0), True, True),  # no spread: any mean difference decides
    ((0.0, 0.0), True, None),  # no difference at all
    ((5.0,), True, None),  # one seed: never decided
    ((), True, None),
    ((math.inf, math.inf, 2.0), True, True),  # B diverged on two seeds, A ahead on the third
    ((math.inf, -1.0, 2.0), True, None),  # pairs point both ways
])
def test_verdict_needs_the_mean_beyond_two_standard_errors(diffs, higher, verdict):
    assert rep.Paired(diffs).verdict(higher) is verdict


def test_verdict_threshold_is_two_standard_errors():
    # diffs m - 1, m + 1: sd sqrt(2), SE 1; holds only when m > 2
    assert rep.Paired((1.9 - 1, 1.9 + 1)).verdict() is None
    assert rep.Paired((2.1 - 1, 2.1 + 1)).verdict() is True
    assert rep.Paired((-2.1 - 1, -2.1 + 1)).verdict() is False
    assert rep.Paired((math.inf, 1.0)).text() == "+inf ± — (SE, n = 2)"


def test_all_of_holds_only_when_every_part_holds_and_fails_when_one_fails():
    assert rep.all_of([(True, "a"), (True, "b")]) == (True, "a; b")
    assert rep.all_of([(True, "a"), (None, "b")])[0] is None
    assert rep.all_of([(None, "a"), (False, "b"), (True, "c")])[0] is False
    assert rep.all_of([]) == (None, "nothing to compare at this budget")


def test_claims_section_names_the_verdicts_and_marks_threshold_checks():
    claims = [Claim("A beats B", "Table 1", lambda r: (True, "A − B = +2"), paired=True),
              Claim("B beats A", "Table 1", lambda r: (False, "B − A = −2"), paired=True),
              Claim("C is noisy", "Fig. 1", lambda r: (None, "C − D = +0.1"), paired=True),
              Claim("E is below 1", "§4", lambda r: (True, "E = 0.5"))]
    text = rep.claims_section(claims, results=None)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "claim (the paper)" not in line]
    assert [row.rsplit("|", 2)[1].strip() for row in rows] == ["holds", "**fails**", "inconclusive at this budget",
                                                               "holds †"]
    assert "exceeds 2 standard errors" in text and "†: a threshold check on the seeds' means" in text


# --- a whole report from fake metrics ------------------------------------------------------------

#: CIFAR-10 LeNet test accuracy (%) per method and split, seeds 0, 1, 2
FAKE = {
    "iid": {"fedavg": (70, 71, 72), "scaffold": (72, 73, 74), "feddyn": (74, 75, 76), "afedpd": (76, 77.5, 78),
            "fedsam": (71, 72, 73), "afedpdsam": (75, 79.5, 77)},
    "dir0.1": {"fedavg": (65, 66, 67), "scaffold": (67, 68, 69), "feddyn": (69, 70, 71), "afedpd": (66, 66.5, 68),
               "fedsam": (66, 67, 68), "afedpdsam": (70, 74.5, 72)},
}


def _fake_runs(specs, runs_dir):
    for s in specs:
        acc = FAKE[s.labels["split"]][s.labels["method"]][s.seed] / 100
        path = runs_dir / s.key
        path.mkdir(parents=True)
        records = [{"round": t, "test_acc": acc * (0.5 + t / 200), "wall_s": 3.0 * t} for t in range(0, 101, 10)]
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_medium_report_from_fake_metrics(tmp_path):
    exp = core.get("afedpd_table2")
    budget = exp.budgets["medium"]
    specs = exp.runs(budget)
    assert len(specs) == 36 and budget.seeds == (0, 1, 2)
    _fake_runs(specs, tmp_path / "runs")
    held = {s.key: records.Record(s.key, s.group, s.seed, s.labels, "medium", s.config,
                                  read_jsonl(tmp_path / "runs" / s.key / "metrics.jsonl"),
                                  {"command": "fedpd reproduce afedpd_table2 --budget medium", "commit": "abc1234",
                                   "finished": f"2026-11-2{4 + (i > 0)} 12:00:00 UTC", "compute_s": 300.0,
                                   "machine": {"cores": 2, "cpu": "X", "threads": 1, "device": "cpu"}})
            for i, s in enumerate(specs)}
    text = core.write_report(exp, budget, specs, tmp_path, held).read_text()
    # tables: mean ± std over the seeds, and how many seeds
    assert "n = 3 seeds" in text
    table = next(line for line in text.splitlines() if line.startswith("| A-FedPD |"))
    assert table.split(" | ")[1] == "77.17 ± 1.04"  # 76, 77.5, 78: sd sqrt(13/12)
    assert "| FedCM | not run |" in text
    # verdicts on paired differences, with the difference and its SE
    claims = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}
    beats_dyn = claims["A-FedPD beats FedDyn (the virtual dual update helps)"]
    assert "IID: A-FedPD − FedDyn = +2.17 ± 0.17 (SE, n = 3)" in beats_dyn
    assert "Dir-0.1: A-FedPD − FedDyn = -3.17 ± 0.17 (SE, n = 3)" in beats_dyn and beats_dyn.endswith("| **fails** |")
    beats_avg = claims["A-FedPD beats FedAvg"]
    assert "Dir-0.1: A-FedPD − FedAvg = +0.83 ± 0.17 (SE, n = 3)" in beats_avg and beats_avg.endswith("| holds |")
    # A-FedPDSAM vs A-FedPD on IID: -1, +2, -1: inconclusive
    assert claims["A-FedPDSAM is the best method in every column"].endswith("| inconclusive at this budget |")
    assert claims["with SGD locally, the best primal-dual method (FedDyn, A-FedPD) beats the best primal one "
                  "(FedAvg, FedCM, SCAFFOLD)"].endswith("| holds |")
    # provenance: who ran the runs, from the records; results.csv names each run's commit
    assert "| `fedpd reproduce afedpd_table2 --budget medium` | abc1234 | 2 cores (X), 1 thread, cpu | 36 | " \
           "2026-11-24 12:00 – 2026-11-25 12:00 | 3.00 |" in text
    assert {r["commit"] for r in csv.DictReader((tmp_path / "results.csv").open())} == {"abc1234"}
    assert "band their range (min–max)" in text


def test_fedplus_regression_claims_take_lower_error_as_better(tmp_path):
    from fedpd.reproduce.fedplus_paper import _vs

    exp = core.get("fedplus_table2")
    specs = [s for s in exp.runs(exp.budgets["medium"]) if s.labels["dataset"] == "regression"
             and s.labels["setting"] == "paper" and s.labels["method"] in ("fedavg_plus", "fedgeomed_plus")]
    for s in specs:  # FedGeoMed+ has the lower error on every seed
        path = tmp_path / "runs" / s.key
        path.mkdir(parents=True)
        mse = (1000.0 if s.labels["method"] == "fedgeomed_plus" else 2000.0) + 10 * s.seed * s.seed
        path.joinpath("metrics.jsonl").write_text(json.dumps({"round": 500, "personal_mse": mse}) + "\n")
    results = rep.Results.from_dirs(specs, tmp_path / "runs")
    verdict, text = _vs(results, "paper", "regression", "fedgeomed_plus", "fedavg_plus")
    assert verdict is True and text == "FedGeoMed+ − FedAvg+ = -1e+03 ± 0 (SE, n = 5)"


# --- the medium budget and its cost ----------------------------------------------------------------

def test_every_experiment_has_a_medium_budget_with_three_seeds_or_more():
    for name, exp in core.experiments().items():
        medium = exp.budgets["medium"]
        assert len(medium.seeds) >= 3, name
        for s in exp.runs(medium):  # a seed fixes data, split and initial model, shared by every setting
            assert s.config["run"]["seed"] == s.seed and s.config["problem"]["seed"] == s.seed, s.key


def test_afedpd_medium_is_the_papers_local_work_for_100_rounds():
    from fedpd.config import load_config

    exp = core.get("afedpd_table2")
    specs = exp.runs(exp.budgets["medium"])
    assert {(s.labels["split"], s.labels["method"]) for s in specs} == {
        (split, m) for split in ("iid", "dir0.1") for m in ("fedavg", "scaffold", "feddyn", "afedpd", "fedsam",
                                                             "afedpdsam")}
    cfg = load_config(specs[0].config)
    solver = cfg.options["solver"]
    assert (cfg.run.rounds, solver.local_steps, solver.batch_size) == (100, 50, 50)
    problem = specs[0].config["problem"]
    assert problem["clients"] == 100 and "max_samples" not in problem  # 50 000 images: 500 per client
    assert cfg.options["sampler"].clients_per_round == 10


def test_list_shows_the_medium_budget(capsys):
    assert main(["reproduce", "--list", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["experiment"] for r in rows if r["budget"] == "medium"} == set(core.experiments())


def test_estimate_times_each_setting_and_extrapolates(capsys):
    assert main(["reproduce", "fedpd_p_heterogeneity", "--budget", "smoke", "--estimate", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fedpd_p_heterogeneity --budget smoke: 4 runs, about ") and "2 settings measured" in out
    found = core.estimate("fedpd_p_heterogeneity", "smoke", rounds=2, progress=False)
    # the heterogeneities share a measurement; cost = set-up + 3 rounds + evaluations at rounds 0..3
    assert found["measured"] == 2 and [r["runs"] for r in found["rows"]] == [2, 2]
    row = found["rows"][0]
    expected = 2 * (row["setup_s"] + 3 * row["round_s"] + 4 * row["eval_s"]) / 3600
    assert row["core_hours"] == pytest.approx(expected, abs=2e-3)
    assert main(["reproduce", "fedpd_p_heterogeneity", "--budget", "smoke", "--estimate", "0"]) == 2


def test_the_medium_budget_section_runs_as_written(tmp_path):
    """docs/reproductions/README.md, "The medium budget": its bash block, verbatim, in an empty directory
    with a clean environment (a fresh HOME; PYTHONPATH only this checkout's src)."""
    import subprocess
    import sys
    from pathlib import Path

    from doc_blocks import bash_blocks

    root = Path(__file__).resolve().parents[1]
    blocks = bash_blocks(root / "docs" / "reproductions" / "README.md", "The medium budget")
    assert len(blocks) == 1 and "--estimate 1" in blocks[0]
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
           "HOME": str(tmp_path / "home"), "PYTHONPATH": str(root / "src"), "LANG": "C.UTF-8", "COLUMNS": "120"}
    done = subprocess.run(["bash", "-e", "-c", blocks[0]], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fedpd_p_heterogeneity --budget medium: 100 runs, about" in done.stdout
    assert "wrote 12 configs (36 runs with the seeds)" in done.stdout
    assert (tmp_path / "afedpd_medium" / "configs" / "cifar10-lenet" / "dir0.1" / "afedpd.toml").is_file()
