"""``fedpd reproduce``: the listing, one-line errors, a smoke version of every reproduction end to end,
skipping complete runs, resuming interrupted ones, refusing a directory of another config."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from fedpd.cli import main
from fedpd.config import load_config
from fedpd.data import resolve_data_dir
from fedpd.errors import ConfigError
from fedpd.io import read_jsonl
from fedpd.reproduce import core, execute, records
from fedpd.reproduce.spec import RunSpec, grid
from fedpd.runner import run
from registry_checks import check_robustness_grid
from helpers import ROOT

#: where fedpd itself looks: $FEDPD_DATA, else the cache directory the README names (tests needing a
#: dataset skip, naming it, when it is not there)
DATA_DIR = str(resolve_data_dir(None))

#: every experiment fedpd reproduces (the listing, the smoke runs and the reports name each)
EXPECTED = {
    "fedpd_fig2",
    "fedpd_p_heterogeneity",
    "fedpd_femnist",
    "fedplus_table2",
    "fedplus_standard",
    "fedplus_kappa",
    "afedpd_table2",
    "feddyn_fedpd",
    "robustness",
    "time_to_target",
}


def _has(dataset: str) -> bool:
    from fedpd.data import dataset_status

    return dataset_status(dataset, DATA_DIR).state == "present"


def test_list_shows_every_experiment(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    names = {line.strip() for line in out.splitlines() if line and not line.startswith(" ")}
    assert names == EXPECTED
    for name in EXPECTED:
        exp = core.get(name)
        assert {"smoke", "reduced", "full"} <= set(exp.budgets)
        assert exp.source and exp.title


@pytest.mark.parametrize("argv, fragment", [
    (["reproduce", "nope"], "unknown experiment 'nope'"),
    (["reproduce", "fedpd_fig2", "--budget", "huge"], "invalid choice: 'huge'"),
    (["reproduce", "fedpd_fig2", "--jobs", "0"], "--jobs 0"),
    (["reproduce", "fedpd_fig2", "--jobs", "two"], "invalid int value"),
    (["reproduce"], "missing NAME"),
    (["reproduce", "fedpd_fig2", "--list"], "either NAME or --list"),
])
def test_bad_input_is_one_line_exit_2(argv, fragment, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path / "r")] if "--list" not in argv and len(argv) > 1 else argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and err.startswith(("fedpd: error:", "fedpd reproduce: error:"))
    assert not (tmp_path / "r").exists()


def test_missing_dataset_is_one_line_before_anything_runs(tmp_path, capsys):
    assert main(["reproduce", "robustness", "--budget", "smoke", "--out", str(tmp_path / "r"),
                 "--data-dir", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "dataset mnist is missing" in err and err.count("\n") == 1
    assert not (tmp_path / "r" / "runs").exists()


def _smoke(name: str, out: Path) -> Path:
    return core.reproduce(name, budget="smoke", out=out, jobs=1, data_dir=DATA_DIR, progress=False,
                          command=f"fedpd reproduce {name} --budget smoke")


def _check_report(name: str, out: Path) -> str:
    text = (out / "README.md").read_text()
    exp = core.get(name)
    specs = exp.runs(exp.budgets["smoke"])
    assert text.startswith(f"# {exp.title}")
    assert f"`fedpd reproduce {name} --budget smoke`" in text and "Budget **smoke**" in text
    assert "| " in text
    # FEMNIST: 16 LEAF writers against the paper's 90 agents, so its report says why it checks no claim
    assert ("The paper's claim, not checked" if name == "fedpd_femnist" else "claims, checked") in text
    for image in [line.split("(")[-1].rstrip(")") for line in text.splitlines() if line.startswith("![")]:
        assert (out / image).is_file() and (out / image).stat().st_size > 1000
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["run"] for r in rows] == [s.key for s in specs]
    for s in specs:  # every setting's resolved config, loadable
        load_config(out / "configs" / f"{s.group}.toml")
        assert not (out / "runs" / s.key / "checkpoint.pt").exists()  # removed once complete
    return text


@pytest.mark.parametrize("name, dataset", [
    ("fedpd_fig2", None), ("fedpd_p_heterogeneity", None), ("feddyn_fedpd", None), ("robustness", "mnist"),
    ("fedplus_table2", "mnist"), ("fedplus_standard", "mnist"), ("fedplus_kappa", None), ("fedpd_femnist", "femnist"),
    ("afedpd_table2", "cifar10"), ("time_to_target", None),
])
def test_smoke_reproduction_end_to_end(name, dataset, tmp_path, smoke_report):
    if dataset and not _has(dataset):
        pytest.skip(f"{dataset} not found in {DATA_DIR} (set FEDPD_DATA to the folder that holds it)")
    out = tmp_path / name
    readme = smoke_report(name, out)  # made by core.reproduce once this session, shared
    assert readme == out / "README.md"
    _check_report(name, out)
    held = records.load(out / "records")
    assert sorted(held) == sorted(s.key for s in core.get(name).runs(core.get(name).budgets["smoke"]))
    assert all(r.provenance["command"] == f"fedpd reproduce {name} --budget smoke" for r in held.values())


def test_second_invocation_skips_complete_runs(tmp_path, smoke_report):
    out = tmp_path / "r"
    smoke_report("feddyn_fedpd", out)
    before = {p: p.stat().st_mtime_ns for p in [*(out / "runs").rglob("metrics.jsonl"), *(out / "records").rglob("*")]}
    _smoke("feddyn_fedpd", out)
    assert {p: p.stat().st_mtime_ns for p in [*(out / "runs").rglob("metrics.jsonl"),
                                               *(out / "records").rglob("*")]} == before
    text = (out / "README.md").read_text()
    assert "Every one of the 9 runs is recorded." in text and "| 9 |" in text  # one row: the invocation that ran them


def test_feddyn_equals_fedpd_in_the_smoke_report(tmp_path, smoke_report):
    out = tmp_path / "r"
    smoke_report("feddyn_fedpd", out)
    results = core.rep.Results.from_dirs(core.get("feddyn_fedpd").runs(core.get("feddyn_fedpd").budgets["smoke"]),
                                         out / "runs")
    a = results.select(problem="ls", variant="fedpd")[0].trajectory()
    b = results.select(problem="ls", variant="feddyn")[0].trajectory()
    c = results.select(problem="ls", variant="feddyn-k2")[0].trajectory()
    assert a.shape == (6, 10) and (a - b).abs().max() < 1e-10 and (a - c).abs().max() > 1e-3


def _tiny(rounds: int) -> dict:
    return {"problem": {"name": "least_squares", "clients": 4, "dim": 3}, "algorithm": {"name": "fedavg"},
            "solver": {"name": "gd", "lr": 0.1, "local_steps": 2}, "run": {"rounds": rounds, "eval_every": 1,
                                                                          "checkpoint_every": 1}}


def test_a_runs_reference_cycles_are_freed_when_it_ends_and_nothing_stays_frozen(tmp_path, monkeypatch):
    """execute() collects the garbage a run leaves in reference cycles (a sweep's worker would grow
    otherwise), looking only at what the run made (gc.freeze meanwhile), and unfreezes afterwards."""
    import gc
    import weakref

    import fedpd.runner

    class Web:  # a finished Simulation's kind of garbage: objects that refer to each other
        pass

    left: list[weakref.ref] = []
    plain = fedpd.runner.run

    def run_leaving_a_cycle(*args, **kwargs):
        web = Web()
        web.me = web
        left.append(weakref.ref(web))
        return plain(*args, **kwargs)

    monkeypatch.setattr(fedpd.runner, "run", run_leaving_a_cycle)
    gc.disable()  # only execute's own collection may free it
    try:
        _, _, error, _ = execute.execute("t/s0", _tiny(2), str(tmp_path / "t"), "new", False, False)
        assert error == "" and (tmp_path / "t" / "metrics.jsonl").is_file()
        assert left and left[0]() is None
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_interrupted_run_is_resumed_to_the_same_metrics(tmp_path):
    spec = RunSpec("a/s0", "a", 0, _tiny(6))
    path = tmp_path / "runs" / "a" / "s0"
    run(_tiny(3), path)  # an interrupted run: checkpoint at round 3 of 6
    (job,) = execute.plan([spec], tmp_path / "runs")
    assert job.status == "resume"
    execute.run_jobs([job], 1, progress=False)
    resumed = [{k: v for k, v in r.items() if k != "wall_s"} for r in read_jsonl(path / "metrics.jsonl")]
    fresh = [{k: v for k, v in r.items() if k != "wall_s"} for r in run(_tiny(6)).history]
    assert resumed == json.loads(json.dumps(fresh))
    assert execute.plan([spec], tmp_path / "runs")[0].status == "complete"


def test_classification_of_run_directories(tmp_path):
    spec = RunSpec("a/s0", "a", 0, _tiny(2))
    cfg = load_config(spec.config)
    path = tmp_path / "a"
    assert execute.classify(spec, cfg, path) == "new"
    run(_tiny(2), path)
    assert execute.classify(spec, cfg, path) == "complete"
    traced = RunSpec("a/s0", "a", 0, _tiny(2), trace=True)
    (path / "checkpoint.pt").unlink()
    assert execute.classify(traced, cfg, path) == "restart"  # no trajectory.pt, no checkpoint: start again
    other = RunSpec("a/s0", "a", 0, {**_tiny(2), "algorithm": {"name": "fedprox"}})
    with pytest.raises(ConfigError, match="another config .*algorithm.name differs"):
        execute.classify(other, load_config(other.config), path)


def test_a_bad_config_names_its_run_before_anything_runs(tmp_path):
    specs = grid("g", {**_tiny(2), "solver": {"name": "gd", "lr": -1.0}}, [0])
    with pytest.raises(ConfigError, match=r"run g/s0: solver.lr"):
        execute.plan(specs, tmp_path)
    assert not any(tmp_path.iterdir())


def test_failed_runs_are_reported_and_the_others_kept(tmp_path):
    good = RunSpec("good/s0", "good", 0, _tiny(2))
    bad = RunSpec("bad/s0", "bad", 0, {**_tiny(2), "problem": {"name": "dataset", "dataset": "mnist",
                                                                 "data_dir": str(tmp_path / "none")}})
    jobs = execute.plan([bad, good], tmp_path / "runs")
    with pytest.raises(Exception, match="1 of 2 runs failed .*first: bad/s0"):
        execute.run_jobs(jobs, 1, progress=False)
    assert execute.plan([good], tmp_path / "runs")[0].status == "complete"


def test_parallel_jobs_give_the_same_metrics_as_in_process(tmp_path):
    specs = [
        RunSpec(f"g{i}/s0", f"g{i}", 0, {**_tiny(3), "run": {"rounds": 3, "seed": i, "threads": 1, "eval_every": 1}})
        for i in range(3)
    ]
    execute.run_jobs(execute.plan(specs, tmp_path / "par"), 2, progress=False)
    execute.run_jobs(execute.plan(specs, tmp_path / "seq"), 1, progress=False)
    for s in specs:
        a = [
            {k: v for k, v in r.items() if k != "wall_s"}
            for r in read_jsonl(tmp_path / "par" / s.key / "metrics.jsonl")
        ]
        b = [
            {k: v for k, v in r.items() if k != "wall_s"}
            for r in read_jsonl(tmp_path / "seq" / s.key / "metrics.jsonl")
        ]
        assert a == b and len(a) == 4


def test_configs_only_writes_the_full_budget_configs(tmp_path, capsys):
    assert main(["reproduce", "afedpd_table2", "--budget", "full", "--configs-only", "--out", str(tmp_path)]) == 0
    files = sorted((tmp_path / "configs").rglob("*.toml"))
    assert len(files) == 4 * 3 * 8  # CIFAR-10/100 x LeNet/ResNet-18, 3 splits, 8 methods (4 seeds each)
    cfg = load_config(tmp_path / "configs" / "cifar100-resnet18_gn" / "dir0.1" / "afedpdsam.toml")
    assert cfg.model["name"] == "resnet18_gn" and cfg.run.rounds == 800 and cfg.options["solver"].local_steps == 50
    # the authors' simulator: balanced Dirichlet split, clipping at 10; Table 2's metrics, no full-data gradient
    assert cfg.section("problem")["balanced"] and cfg.options["solver"].clip_norm == 10.0
    assert cfg.run.eval_metrics == ["test_acc", "test_loss", "train_loss"] and cfg.run.eval_train_samples == 5000
    assert not load_config(tmp_path / "configs" / "cifar10-lenet" / "iid" / "fedavg.toml").section("problem")[
        "balanced"
    ]
    assert "seeds 0, 1, 2, 3" in files[0].read_text()
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_report_tables_and_numbers():
    from fedpd.reproduce.afedpd_paper import PUBLISHED
    from fedpd.reproduce.report import fmt_ms, md_table, mean_std

    assert mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0, 3)
    assert fmt_ms([0.9, 0.92], "pct") == "91.0 ± 1.4" and fmt_ms([], "pct") == "—"
    assert fmt_ms([5.0], "int", expected=3) == "5 (1/3)"
    assert md_table(["a|b"], [["x"]]).startswith("| a\\|b |")
    # A-FedPD's Table 2, read from the poster's text: 2 models x 8 methods x 2 data sets x 3 splits
    assert len(PUBLISHED) == 96 and PUBLISHED[("cifar10", "lenet", "dir0.1", "afedpd")] == "80.28 ± .20"
    assert PUBLISHED[("cifar100", "resnet18_gn", "iid", "feddyn")] == "-"


def test_fedpd_logreg_heterogeneity_interpolates_between_one_truth_and_strong():
    from fedpd.build import build_problem

    def problem(**opts):
        return build_problem(load_config({"problem": {"name": "fedpd_logreg", "clients": 5, "samples_per_client": 50,
                                                      **opts}, "algorithm": {"name": "fedavg"}}))

    strong, h1 = problem(non_iid="strong"), problem(heterogeneity=1.0)
    assert (strong.train.y == h1.train.y).all() and (strong.train.x == h1.train.x).all()
    from fedpd.reproduce.fedpd_paper import delta_sq

    d = [delta_sq({"problem": {"name": "fedpd_logreg", "clients": 10, "samples_per_client": 100, "heterogeneity": h},
                   "algorithm": {"name": "fedavg"}})[1] for h in (0.0, 0.5, 1.0)]
    assert d[0] < d[1] < d[2]


def test_the_recorded_command_names_no_path_of_the_machine(tmp_path, monkeypatch):
    data, work = tmp_path / "data", tmp_path / "work"
    data.mkdir(), work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("FEDPD_DATA", str(data))
    record = core.recorded_command
    assert record(["x", "--out", "r", "--data-dir", str(data), "--quiet"]) == \
        'fedpd reproduce x --out r --data-dir "$FEDPD_DATA" --quiet'
    assert record(["x", f"--data-dir={data}/", f"--out={work / 'a b'}"]) == \
        "fedpd reproduce x --data-dir=\"$FEDPD_DATA\" --out='a b'"  # inside the working directory: relative
    assert record(["x", "--out", str(tmp_path / "elsewhere"), "--data-dir", "/opt/data"]) == \
        "fedpd reproduce x --out OUT_DIR --data-dir DATA_DIR"
    assert record(["x", "--out", "../up", "--data-dir", "data"]) == "fedpd reproduce x --out OUT_DIR --data-dir data"


def test_a_report_made_with_an_absolute_data_dir_records_none(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("FEDPD_DATA", str(data))
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "feddyn_fedpd", "--budget", "smoke", "--out", str(tmp_path / "r"), "--jobs", "1",
                 "--data-dir", str(data), "--quiet"]) == 0
    text = (tmp_path / "r" / "README.md").read_text() + "".join(
        json.dumps(r.provenance) for r in records.load(tmp_path / "r" / "records").values())
    assert "`fedpd reproduce feddyn_fedpd --budget smoke --out r --jobs 1 --data-dir \"$FEDPD_DATA\" --quiet`" in text
    assert str(tmp_path) not in text


@pytest.mark.parametrize("report", sorted((ROOT / "docs" / "reproductions").glob("*/README.md")),
                         ids=lambda p: p.parent.name)
def test_committed_reports_name_no_path_of_the_machine_that_made_them(report):
    lines = report.read_text().splitlines()
    lines += [r.provenance["command"] for r in records.load(report.parent / "records").values()]
    for line in lines:
        assert not re.search(r"--(data-dir|out)[= ]['\"]?(/|~)", line), f"{report.parent.name}: {line[:160]}"


def test_runs_go_seed_by_seed(tmp_path, monkeypatch):
    """A budget stopped part-way leaves whole seeds of every setting (what a paired report reads),
    not every seed of the first settings: the runs go seed 0 of every setting, then seed 1, ..."""
    order = []

    def capture(work, *args, **kwargs):
        order.extend(job.spec.seed for job in work)
        raise KeyboardInterrupt  # nothing runs

    monkeypatch.setattr(core, "run_jobs", capture)
    with pytest.raises(KeyboardInterrupt):
        core.reproduce("fedpd_fig2", "reduced", out=tmp_path / "r", jobs=1, progress=False)
    assert len(order) == 28 and set(order) == {0, 1}
    assert order == sorted(order)


def test_time_to_target_compares_like_with_like():
    """Part (a): one concurrency for the three methods and the same uploads per run (FedAvgM 30 a
    round, FedBuff K = 10 of 30 in flight, FedAsync one at a time), FedAvgM and FedBuff one server
    optimiser; part (b): every fleet's slow class placed by label group, over-selection for the
    sampled synchronous methods only; every config valid before anything runs, on any budget."""
    from fedpd.reproduce import time_claims as T

    exp = core.get("time_to_target")
    specs = exp.runs(exp.budgets["medium"])
    cfgs = {s.key: load_config(s.config) for s in specs}
    a = {s.labels["method"]: s.config for s in specs if s.labels["part"] == "a" and s.seed == 0}
    uploads = {m: c["run"]["rounds"] * {"fedavgm": c.get("sampler", {}).get("clients_per_round"),
                                        "fedbuff": c.get("asynchronous", {}).get("buffer"), "fedasync": 1}[m]
               for m, c in a.items()}
    assert set(uploads.values()) == {6000}
    assert a["fedavgm"]["sampler"]["clients_per_round"] == a["fedbuff"]["asynchronous"]["concurrency"] == \
        a["fedasync"]["asynchronous"]["concurrency"] == 30
    assert a["fedavgm"]["algorithm"] == a["fedbuff"]["algorithm"] == T.MOMENTUM
    assert all(c["system"] == a["fedavgm"]["system"] for c in a.values())
    b = [s for s in specs if s.labels["part"] == "b"]
    assert all(cfgs[s.key].system.classes_by == "label" for s in b)
    assert {s.labels["method"] for s in b if cfgs[s.key].system.overselect > 1} == {"fedavg", "feddyn", "afedpd"}
    assert {s.labels["profile"] for s in specs} == {"lognormal", "bandwidth", "compute"}
    assert exp.datasets_for(exp.budgets["smoke"]) == () and exp.datasets_for(exp.budgets["medium"]) == ("mnist",)
    for budget in exp.budgets.values():
        execute.validate(exp.runs(budget))


def test_robustness_runs_every_defence_against_every_attack():
    """The medium grid runs each of its defences against each of its attacks — the shipped attacks
    but the faults screened before aggregation (the aimed ones in the heterogeneous part) — every
    heterogeneous rule alone, after NNM and, where the rule takes ⌈20/2⌉ rows, after bucketing
    (tests/registry_checks.py; a rule or attack added to fedpd need not be in it), and Bulyan's
    n >= 4f + 3 for the participants of every round (all 20)."""
    from fedpd.reproduce import robustness as R

    check_robustness_grid()
    runs = R.Robustness().runs(R.Robustness.budgets["medium"])
    used_attacks = {s.config["attack"]["name"] for s in runs if s.labels["part"] == "attacks"}
    aimed = {"mimic", "optimal_alie", "optimal_ipm"}  # in the heterogeneous part (the records stand)
    assert not used_attacks & ({"nan", "inf", "dropout"} | aimed)
    hetero = [s for s in runs if s.labels["part"] == "hetero"]
    assert aimed <= {s.config["attack"]["name"] for s in hetero}
    assert all(s.config["run"]["rounds"] == 100 and len({t.seed for t in hetero}) >= 3 for s in hetero)
    assert all(s.config["attack"].get("fraction", 0.25) == 0.25 for s in hetero if s.labels["attack"] != "backdoor")
    bulyan = [s for s in runs if s.labels.get("method") == "bulyan"]
    assert bulyan and all(s.config["sampler"] == {"name": "all"} and s.config["problem"]["clients"]
                          >= 4 * s.config["algorithm"]["aggregator_options"]["n_byzantine"] + 3 for s in bulyan)
    # the held-out seeds: the chosen defence under every attack read by test accuracy and clean FedAvg, on
    # five seeds the grid never ran
    held = [s for s in runs if s.labels["part"] == "holdout"]
    assert {t.seed for t in held} == {3, 4, 5, 6, 7} and not {t.seed for t in held} & {t.seed for t in hetero}
    assert {(s.labels["method"], s.labels["attack"]) for s in held} == (
        {(R.H_HOLDOUT, a) for a in R.H_ATTACKS if a not in R.BACKDOORS} | {("fedavg", "none")})
    same = {t.key.replace("hetero/", "holdout/", 1): t.config for t in R.Robustness()._hetero_grid(
        R.Robustness.budgets["medium"], "hetero", "dir0.3", (3,), [(a, m) for a in R.H_ATTACKS
                                                                   for m in ("fedavg", R.H_HOLDOUT)])}
    assert [s.config == same[s.key] for s in held if s.seed == 3] == [True] * 13  # the grid's cells, other seeds
    dp = {(s.labels["method"], s.labels["z"]) for s in runs if s.labels["part"] == "dp"}
    assert dp == {(m, z) for m in ("fedavg", "feddyn") for z in R.DP_Z}


def test_centered_clipping_once_from_the_start_model_is_norm_bounding():
    """Why the robustness experiment runs centered clipping with 3 iterations: one iteration from
    the round's start model is norm bounding with M = τ."""
    import torch

    from fedpd.aggregators import centered_clipping, norm_bounding

    g = torch.Generator().manual_seed(0)
    w, ref = torch.randn(7, 5, generator=g), torch.randn(5, generator=g)
    once, _ = centered_clipping(w, tau=0.8, iterations=1, reference=ref)
    assert torch.allclose(once, norm_bounding(w, max_norm=0.8, reference=ref)[0])
    assert not torch.allclose(centered_clipping(w, tau=0.8, iterations=3, reference=ref)[0], once)
