"""The statistics of the reproduction reports: paired per-seed differences, their
95 % t-intervals (n − 1 degrees of freedom), the verdicts and Bonferroni over a claim's comparisons,
checked on hand-computed numbers; a whole report written from fake
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
from fedpd.reproduce.spec import Claim, RunSpec

from helpers import ROOT


# --- paired differences, by hand -------------------------------------------------------------------

def test_paired_differences_mean_and_t_interval_by_hand():
    # diffs 1, 2, 4: mean 7/3, sd² = (16/9 + 1/9 + 25/9) / 2 = 7/3, SE = sqrt(7/3) / sqrt(3) = 0.8819;
    # t_{0.975, 2} = 4.303: 95 % CI 2.333 ± 3.795 = [-1.46, 6.13] contains 0
    d = rep.paired({0: 80.0, 1: 82.0, 2: 84.0}, {0: 79.0, 1: 80.0, 2: 80.0})
    assert d.diffs == (1.0, 2.0, 4.0) and d.n == 3
    assert d.mean == pytest.approx(7 / 3) and d.se == pytest.approx(math.sqrt(7 / 3) / math.sqrt(3))
    assert d.se == pytest.approx(0.8819, abs=1e-4)
    lo, hi = d.interval()
    assert (lo, hi) == (
        pytest.approx(7 / 3 - 4.3027 * 0.8819, abs=1e-3),
        pytest.approx(7 / 3 + 4.3027 * 0.8819, abs=1e-3),
    )
    assert d.verdict() is None and d.verdict(higher=False) is None  # 2.33 > 2 SE, but the interval holds 0
    assert d.text(".2f") == "+2.33, 95 % CI [-1.46, 6.13], n = 3"
    # diffs 3, 4, 5: mean 4, SE 1/sqrt(3), CI 4 ± 2.48 = [1.52, 6.48]: holds; "A < B" fails
    d = rep.Paired((3.0, 4.0, 5.0))
    assert d.verdict() is True and d.verdict(higher=False) is False
    assert d.text(".2f") == "+4.00, 95 % CI [1.52, 6.48], n = 3"


@pytest.mark.parametrize("p, df, t", [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 3, 3.182), (0.975, 4, 2.776),
                                      (0.975, 9, 2.262), (0.975, 30, 2.042), (0.975, 120, 1.980), (0.995, 4, 4.604),
                                      (0.9875, 2, 6.205), (0.995, 2, 9.925), (0.95, 10, 1.812), (0.5, 7, 0.0)])
def test_t_quantiles_against_the_tables(p, df, t):
    assert rep.t_quantile(p, df) == pytest.approx(t, abs=1e-3)


def test_t_quantile_refuses_what_it_cannot_compute():
    with pytest.raises(ValueError, match="df must be a positive integer"):
        rep.t_quantile(0.975, 0)
    with pytest.raises(ValueError, match=r"p must be in \[0.5, 1\)"):
        rep.t_quantile(1.0, 3)


def test_pairs_are_the_seeds_both_sides_have():
    d = rep.paired({0: 5.0, 1: 6.0, 2: 9.0}, {0: 1.0, 2: 2.0, 3: 0.0})
    assert d.diffs == (4.0, 7.0)


@pytest.mark.parametrize("diffs, higher, verdict", [
    ((-3.0, -2.0, -4.0), True, False),  # mean -3, SE 0.577, CI [-5.48, -0.52]: fails
    ((-3.0, -2.0, -4.0), False, True),  # the same numbers for "A < B": holds
    ((1.0, -1.0, 3.0), True, None),  # mean 1, SE 1.155: inconclusive
    ((1.0, 2.0, 4.0), True, None),  # beyond 2 SE (2.33 > 1.76), not beyond t_{0.975,2} SE: inconclusive
    ((2.0, 2.0, 2.0), True, True),  # no spread: any mean difference decides
    ((0.0, 0.0), True, None),  # no difference at all
    ((5.0,), True, None),  # one seed: never decided
    ((), True, None),
    ((math.inf, math.inf, 2.0), True, True),  # B diverged on two seeds, A ahead on the third
    ((math.inf, -1.0, 2.0), True, None),  # pairs point both ways
])
def test_verdict_needs_the_95_percent_t_interval_to_exclude_zero(diffs, higher, verdict):
    assert rep.Paired(diffs).verdict(higher) is verdict


def test_verdict_threshold_is_the_t_quantile_with_n_minus_1_degrees_of_freedom():
    # diffs m - 1, m + 1: sd sqrt(2), SE 1, df 1: holds only when m > t_{0.975,1} = 12.706
    assert rep.Paired((12.6 - 1, 12.6 + 1)).verdict() is None
    assert rep.Paired((12.8 - 1, 12.8 + 1)).verdict() is True
    assert rep.Paired((-12.8 - 1, -12.8 + 1)).verdict() is False
    # diffs m ± 1 over 5 seeds (m-1, m-1, m, m+1, m+1): sd 1, SE 1/sqrt(5), df 4: m > 2.776/sqrt(5) = 1.2416
    five = lambda m: (m - 1, m - 1, m, m + 1, m + 1)  # noqa: E731
    assert rep.Paired(five(1.23)).verdict() is None and rep.Paired(five(1.26)).verdict() is True
    assert rep.Paired((math.inf, 1.0)).text() == "+inf, no interval (a diverged run), n = 2"
    assert rep.Paired((3.0,)).text() == "+3, no interval (one seed), n = 1"


def test_all_of_bonferroni_over_the_comparisons():
    # each part: diffs 3, 4, 5 (CI at 95 %: [1.52, 6.48]); at 1 − 0.05/3 = 98.33 %, t_{0.99167,2} = 7.649:
    # 4 ± 4.42 holds 0, so three such parts are inconclusive together, though each holds alone
    part = rep.Comparison("A − B", rep.Paired((3.0, 4.0, 5.0)))
    assert part.check()[0] is True
    assert rep.family_level(3) == pytest.approx(1 - 0.05 / 3)
    verdict, text = rep.all_of([part, part.where("x"), part.where("y")])
    assert verdict is None
    assert text == ("A − B = +4, 98.33 % CI [-0.416, 8.42], n = 3; x: A − B = +4, 98.33 % CI [-0.416, 8.42], n = 3; "
                    "y: A − B = +4, 98.33 % CI [-0.416, 8.42], n = 3 (Bonferroni over 3 comparisons: each 98.33 % "
                    "interval)")
    strong = rep.Comparison("C − D", rep.Paired((10.0, 10.5, 11.0)))
    assert rep.all_of([strong, strong])[0] is True
    assert rep.all_of([strong, rep.Comparison("E − F", rep.Paired((-10.0, -10.5, -11.0)))])[0] is False
    # margins: "A − B > 3" is inconclusive, "A − B > 1" holds, "A − B < 10" holds
    assert rep.Comparison("A − B", rep.Paired((3.0, 4.0, 5.0)), margin=3.0).verdict() is None
    assert rep.Comparison("A − B", rep.Paired((3.0, 4.0, 5.0)), margin=1.0).verdict() is True
    assert rep.Comparison("A − B", rep.Paired((3.0, 4.0, 5.0)), higher=False, margin=10.0).verdict() is True


def test_an_undecided_claim_names_its_decided_parts():
    # one split recorded and decided, the other not recorded yet (a partial report): the claim stays
    # undecided, and the text says which part already holds at the corrected level
    strong = rep.Comparison("A − B", rep.Paired((10.0, 10.5, 11.0))).where("Dir-0.1")
    unrecorded = rep.Comparison("A − B", rep.Paired(())).where("IID")
    verdict, text = rep.all_of([unrecorded, strong])
    assert verdict is None
    assert text.startswith("IID: A − B = no pairs; Dir-0.1: A − B = +10.5, 97.5 % CI [")
    assert "n = 3 (holds) (Bonferroni over 2 comparisons" in text
    against = rep.Comparison("A − B", rep.Paired((-10.0, -10.5, -11.0))).where("x")
    assert "(fails)" not in rep.all_of([against, strong])[1]  # decided claims carry no part marks
    assert "(holds)" not in rep.all_of([strong, strong])[1]


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
    assert "95 % confidence interval" in text and "n − 1 degrees of freedom" in text and "Bonferroni" in text
    assert "†: a threshold check on the seeds' means" in text


def test_some_of_confirms_one_part_at_the_corrected_level_and_refutes_at_95_percent():
    # three parts each just below 0 at 95 % (t_{0.975, 2} = 4.303) but not at 98.33 % (t = 7.65): refuted
    below = [rep.Comparison(f"p{i}", rep.Paired((-4.0, -6.0, -8.0))) for i in range(3)]
    assert all(c.verdict() is False for c in below) and all(c.verdict(rep.family_level(3)) is None for c in below)
    assert rep.some_of(below) is False
    # one part above 0 at 95 % but not at the corrected level does not confirm "somewhere"
    weak = rep.Comparison("w", rep.Paired((4.0, 6.0, 8.0)))
    assert weak.verdict() is True and rep.some_of(below[:2] + [weak]) is None
    strong = rep.Comparison("s", rep.Paired((50.0, 51.0, 52.0)))
    assert rep.some_of(below[:2] + [strong]) is True
    assert rep.some_of([]) is None


def test_not_testable_rows_and_the_projects_own_checks_have_their_own_wording():
    claims = [Claim("A grows with N", "§5", lambda r: (rep.NOT_TESTABLE, "another quantity"), paired=True),
              Claim("B is below 1", "§4", lambda r: (rep.NOT_TESTABLE, "averaged over data sets not here"))]
    text = rep.claims_section(claims, results=None)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "claim (the paper)" not in line]
    assert [row.rsplit("|", 2)[1].strip() for row in rows] == ["not testable as set up"] * 2
    assert "†" not in text and "no verdict is read from them" in text
    own = rep.claims_section([Claim("C on the server model", "§5 (server)", lambda r: (False, "C − D = −2"),
                                    paired=True)], results=None, own=True)
    assert own.startswith("## The project's own checks") and "Not the paper's claims" in own
    assert "| check (the project's) | reads | measured here | verdict |" in own and "| **fails** |" in own
    assert "claim (the paper)" not in own


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
    # verdicts on paired differences, with the difference and its t-interval, Bonferroni over the 2 splits
    claims = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}
    beats_dyn = claims["A-FedPD beats FedDyn (the virtual dual update helps)"]
    assert "IID: A-FedPD − FedDyn = +2.17, 97.5 % CI [1.13, 3.20], n = 3" in beats_dyn
    assert "Dir-0.1: A-FedPD − FedDyn = -3.17, 97.5 % CI [-4.20, -2.13], n = 3" in beats_dyn
    assert "(Bonferroni over 2 comparisons: each 97.5 % interval)" in beats_dyn and beats_dyn.endswith("| **fails** |")
    # Dir-0.1: diffs 1, 0.5, 1: beyond 2 SE (the old rule: holds), but t_{0.9875,2} = 6.205 SE take in 0
    beats_avg = claims["A-FedPD beats FedAvg"]
    assert "Dir-0.1: A-FedPD − FedAvg = +0.83, 97.5 % CI [-0.20, 1.87], n = 3" in beats_avg
    assert beats_avg.endswith("| inconclusive at this budget |")
    # A-FedPDSAM vs A-FedPD on IID: -1, +2, -1: inconclusive
    assert claims["A-FedPDSAM is the best method in every column"].endswith("| inconclusive at this budget |")
    # the paper's pair (A-FedPD, SCAFFOLD), fixed in advance: behind on Dir-0.1 (the best by our means, FedDyn,
    # would be ahead, but a pair chosen from the runs is not tested on them)
    pd_p = claims["with SGD locally, the best primal-dual method (FedDyn, A-FedPD) beats the best primal one "
                  "(FedAvg, FedCM, SCAFFOLD)"]
    assert "Dir-0.1: A-FedPD − SCAFFOLD = -1.17, 97.5 % CI [-2.20, -0.13], n = 3" in pd_p
    assert "fixed in advance, not chosen from these runs" in pd_p and pd_p.endswith("| **fails** |")
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
    verdict, text = _vs(results, "paper", "regression", "fedgeomed_plus", "fedavg_plus").check()
    assert verdict is True and text == "FedGeoMed+ − FedAvg+ = -1e+03, 95 % CI [-1e+03, -1e+03], n = 5"


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
    # the column counts every part the note costs: robustness's 5.5, its heterogeneous part's 36, held-out seeds' 4
    # and held-out settings' 20
    medium = {r["experiment"]: r for r in rows if r["budget"] == "medium"}
    assert medium["robustness"]["core_hours"] == "65.5"
    assert (
        "adds about 36 core-hours" in medium["robustness"]["note"]
        and "about 4 core-hours" in medium["robustness"]["note"]
        and "about 20 core-hours" in medium["robustness"]["note"]
    )
    # fedpd_fig2: 1.8 for its runs + 2.8 for the SGD curves' added seeds (costs.EXTRA_HOURS)
    assert medium["fedpd_fig2"]["core_hours"] == "4.6" and "seeds 5–14 add about 2.8" in medium["fedpd_fig2"]["note"]


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

    root = ROOT
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


def test_results_csv_holds_each_seeds_backdoor_accuracy(tmp_path):
    """A report's backdoor column has its per-seed values in results.csv too (as test accuracy does):
    a reader, and a reading that quotes one seed, finds them there."""
    def run(seed, backdoor):
        return rep.Run(RunSpec(f"door/s{seed}", "door", seed, {}, {"attack": "backdoor"}),
                       [{"round": 10, "comm_rounds": 10, "test_acc": 0.9, "backdoor_acc": backdoor}], None)

    rep.write_results_csv(rep.Results([run(0, 0.021), run(1, 0.994)]), tmp_path / "results.csv")
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [(r["seed"], r["test_acc"], r["backdoor_acc"]) for r in rows] == [
        ("0", "0.9", "0.021"),
        ("1", "0.9", "0.994"),
    ]
