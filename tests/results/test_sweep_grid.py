"""`fedpd sweep --grid`: the product of the values given, each config over the keys it takes; a
stated selection rule (the mean of a metric over a run's last k evaluations, maximised or
minimised, averaged over the seeds) names each config's chosen value; `--vary` picks the seed keys
a seed sets (problem.seed too: each seed its own split and initial model). Bad arguments are one
line before anything runs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import tomli_w

from doc_blocks import bash_blocks, clean_env, run_script
from fedpd.checks import FedpdNotice
from fedpd.errors import ConfigError
from fedpd.results.runs import read_run
from fedpd.sweep import choose, parse_grid, parse_select, parse_vary, specs, sweep
from helpers import ROOT, run_cli as cli
from helpers import sweep_configs


# --- parsing: one line for a bad argument -----------------------------------------------------------
def test_a_grid_is_keys_with_comma_separated_values():
    assert parse_grid(["solver.lr=0.1, 0.03,0.01", "algorithm.alpha=1e-2,0.1"]) == [
        ("solver.lr", ["0.1", "0.03", "0.01"]), ("algorithm.alpha", ["1e-2", "0.1"])]


@pytest.mark.parametrize("item, needle", [
    ("solver.lr", "expected SECTION.KEY=V1,V2"), ("lr=0.1", "expected SECTION.KEY"), ("solver.lr=", "expected"),
    ("solver.lr=0.1,0.10", "appears twice"), ("run.seed=1,2", "--seeds"), ("solver.lr=[1,2]", "allowed: numbers"),
    ("solver.lr=a/b", "allowed: numbers")])
def test_a_bad_grid_is_refused(item, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        parse_grid([item])
    with pytest.raises(ConfigError, match="given twice"):
        parse_grid(["solver.lr=1", "solver.lr=2"])


@pytest.mark.parametrize("text, metric, last, maximise", [
    ("test_acc:last5", "test_acc", 5, True), ("train_loss:last5", "train_loss", 5, False),
    ("grad_norm_sq", "grad_norm_sq", 1, False), ("personal_acc:last3:min", "personal_acc", 3, False),
    ("my_metric:max", "my_metric", 1, True)])
def test_a_selection_rule_says_what_it_maximises_or_minimises(text, metric, last, maximise):
    rule = parse_select(text)
    assert (rule.metric, rule.last, rule.maximise) == (metric, last, maximise)
    assert ("maximised" if maximise else "minimised") in rule.describe() and f"last {last}" in rule.describe()


@pytest.mark.parametrize("text", ["test_acc:lats5", "test_acc:last0", "test_acc:last5:up", ":last5", "a b"])
def test_a_bad_selection_rule_is_refused(text):
    with pytest.raises(ConfigError, match="--select"):
        parse_select(text)


def test_vary_names_seed_keys():
    assert parse_vary(None) == ("run.seed",)
    both = ("run.seed", "problem.seed")
    assert parse_vary(["run.seed,problem.seed"]) == parse_vary(["run.seed", "problem.seed"]) == both
    for bad in (["solver.lr"], ["seed"], ["run.seed,run.seed"]):
        with pytest.raises(ConfigError, match="--vary"):
            parse_vary(bad)


@pytest.mark.parametrize("args, needle", [
    (["--grid", "solver.lr"], "--grid"), (["--select", "test_acc:lats5"], "--select"),
    (["--grid", "solver.nosuch=1,2"], "no config takes it"), (["--vary", "problem.seed"], "needs --seeds"),
    (["--grid", "solver.lr=1,2", "--set", "solver.lr=3"], "also given by --set"),
    (["--seeds", "1", "--grid", "solver.lr=-1,0.1"], "solver.lr")])
def test_bad_sweep_arguments_are_one_line_before_anything_runs(tmp_path, capsys, args, needle):
    code, _, err = cli(["sweep", *sweep_configs(tmp_path, "fedavg"), "--out", tmp_path / "s", "--quiet", *args], capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s").exists()


# --- the runs of a grid -----------------------------------------------------------------------------
def test_the_grid_is_the_product_of_the_keys_a_config_takes(tmp_path):
    grid = parse_grid(["solver.lr=0.1,0.03", "algorithm.client_momentum=0,0.5"])
    with pytest.warns(FedpdNotice, match="client_momentum: scaffold.toml does not take it"):
        runs = specs(sweep_configs(tmp_path, "fedavg", "scaffold"), [1, 2], grid=grid)
    assert [s.key for s in runs] == [
        f"fedavg/lr={lr}/client_momentum={m}/s{s}" for lr in ("0.1", "0.03") for m in ("0", "0.5") for s in (1, 2)] + [
        f"scaffold/lr={lr}/s{s}" for lr in ("0.1", "0.03") for s in (1, 2)]
    by_key = {s.key: s.config for s in runs}
    assert by_key["fedavg/lr=0.03/client_momentum=0.5/s2"]["solver"]["lr"] == 0.03
    assert by_key["fedavg/lr=0.03/client_momentum=0.5/s2"]["algorithm"]["client_momentum"] == 0.5
    assert "client_momentum" not in by_key["scaffold/lr=0.1/s1"]["algorithm"]


def test_a_seed_sets_the_keys_vary_names(tmp_path):
    [plain] = specs(sweep_configs(tmp_path, "fedavg"), [3])
    [both] = specs(sweep_configs(tmp_path, "fedavg"), [3], vary=("run.seed", "problem.seed"))
    [data] = specs(sweep_configs(tmp_path, "fedavg"), [3], vary=("problem.seed",))
    assert plain.config["run"]["seed"] == 3 and "seed" not in plain.config["problem"]
    assert both.config["run"]["seed"] == both.config["problem"]["seed"] == 3
    assert data.config["problem"]["seed"] == 3 and "seed" not in data.config["run"]


def test_vary_problem_seed_gives_each_seed_its_own_data_and_initial_model(tmp_path):
    """With run.seed alone the seeds share the split and the initial model (the same ‖∇f‖² before
    any round); with problem.seed too they do not."""
    [cfg] = sweep_configs(tmp_path, "fedavg")
    first = {}
    for vary in (("run.seed",), ("run.seed", "problem.seed")):
        dirs = sweep([cfg], tmp_path / "_".join(vary), seeds=[1, 2], overrides=["run.rounds=1"], jobs=1,
                     progress=False, vary=vary)
        assert all(read_run(d).records[0]["round"] == 0 for d in dirs)
        first[vary] = [read_run(d).records[0]["grad_norm_sq"] for d in dirs]
    assert first[("run.seed",)][0] == first[("run.seed",)][1]
    assert first[("run.seed", "problem.seed")][0] != first[("run.seed", "problem.seed")][1]


# --- choosing: the stated rule, on runs whose numbers are known -------------------------------------
def fake_run(path: Path, seed: int, values: list) -> Path:
    path.mkdir(parents=True)
    (path / "config.toml").write_text(tomli_w.dumps({"algorithm": {"name": "fedavg"}, "run": {"seed": seed}}))
    (path / "metrics.jsonl").write_text("".join(json.dumps({"round": i, "train_loss": v}) + "\n"
                                                for i, v in enumerate(values)))
    return path


def test_the_chosen_value_is_the_best_mean_over_seeds_of_the_last_k_evaluations(tmp_path):
    out = tmp_path / "sweep"
    runs = {  # lr=1 is best at its final evaluation, lr=0.3 over the last two; lr=0.1 diverged on seed 2
        "fedavg/lr=1": ([9, 0.9, 0.1], [9, 0.9, 0.1]),
        "fedavg/lr=0.3": ([9, 0.2, 0.3], [9, 0.3, 0.2]),
        "fedavg/lr=0.1": ([9, 0.0, 0.0], [9, 0.0, None]),
        "scaffold/lr=1": ([1, 0.5], [1, 0.5]), "scaffold/lr=0.3": ([1, 0.5], [1, 0.5])}  # a tie
    dirs = [fake_run(out / point / f"s{seed}", seed, values) for point, pair in runs.items()
            for seed, values in zip((1, 2), pair)]
    final, _ = choose(dirs, out, parse_select("train_loss"))
    last2, scores = choose(dirs, out, parse_select("train_loss:last2"))
    assert [(c.config, c.point) for c in final] == [("fedavg", ("lr=1",)), ("scaffold", ("lr=1",))]  # tie: the first
    assert [(c.config, c.point) for c in last2] == [("fedavg", ("lr=0.3",)), ("scaffold", ("lr=1",))]
    assert last2[0].summary.mean == pytest.approx(0.25) and last2[0].summary.sd == 0 and last2[0].points == 3
    assert scores[out / "fedavg/lr=0.1/s2"] is None  # diverged: never chosen
    best_by_max, _ = choose(dirs, out, parse_select("train_loss:last2:max"))
    assert best_by_max[0].point == ("lr=1",)  # maximised: (0.9 + 0.1) / 2 beats 0.25


def test_a_metric_no_run_records_is_one_line_naming_what_they_record(tmp_path):
    d = fake_run(tmp_path / "s" / "fedavg" / "s1", 1, [1.0])
    with pytest.raises(ConfigError, match="does not record 'test_acc'.*train_loss"):
        choose([d], tmp_path / "s", parse_select("test_acc:last5"))


def test_fewer_evaluations_than_k_is_said(tmp_path):
    d = fake_run(tmp_path / "s" / "fedavg" / "s1", 1, [3.0, 1.0])
    with pytest.warns(FedpdNotice, match="fewer than 5 times"):
        [choice], _ = choose([d], tmp_path / "s", parse_select("train_loss:last5"))
    assert choice.summary.mean == 2.0


def test_the_sweep_table_marks_the_chosen_value_and_prints_the_rule(tmp_path, capsys):
    args = ["sweep", *sweep_configs(tmp_path, "fedavg", "scaffold"), "--seeds", "1,2", "--grid", "solver.lr=0.1,0.02",
            "--select", "train_loss:last2", "--out", tmp_path / "s", "--jobs", "1", "--quiet"]
    code, out, err = cli([*args, "--format", "json"], capsys)
    rows = {r["run"]: r for r in json.loads(out)}
    assert code == 0 and sorted(rows) == ["fedavg/lr=0.02", "fedavg/lr=0.1", "scaffold/lr=0.02", "scaffold/lr=0.1"]
    for config in ("fedavg", "scaffold"):
        mine = {name: r for name, r in rows.items() if name.startswith(config + "/")}
        [chosen] = [name for name, r in mine.items() if r["chosen"]]
        assert chosen == min(mine, key=lambda name: mine[name]["score"])  # train_loss: minimised
        means = [statistics.fmean(rec["train_loss"] for rec in read_run(p).records[-2:]) for p in mine[chosen]["paths"]]
        assert mine[chosen]["score"] == pytest.approx(statistics.fmean(means)) and mine[chosen]["n"] == 2
        assert f"  {config}: {chosen.split('/')[1]} — score" in err  # stdout holds only the table
    rule = "chosen by train_loss:last2: the mean of train_loss over each run's last 2 evaluations, minimised"
    assert rule in " ".join(err.split())
    code, out, err = cli(args[:-1], capsys)  # the same sweep again: the runs are complete, the table and the choice
    assert code == 0 and "0 runs to do" in out + err and "chosen by train_loss:last2" in out and "yes" in out


@pytest.mark.slow
def test_the_readme_grid_commands_run_as_written(tmp_path):
    [block] = [b for b in bash_blocks(ROOT / "README.md", "Many runs at once") if "--grid" in b]
    work = tmp_path / "clone"
    (work / "examples").mkdir(parents=True)
    for name in ("fedavg.toml", "fedprox.toml"):
        (work / "examples" / name).write_text((ROOT / "examples" / name).read_text())
    done = run_script(block, work, clean_env(tmp_path / "home"))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "chosen by grad_norm_sq:last3" in done.stdout and "fedprox: lr=" in done.stdout
    rows = list(csv_rows(work / "runs" / "tuned.csv"))
    assert {r["run"] for r in rows} == {f"{c}, lr={lr}" for c in ("fedavg", "fedprox") for lr in ("1", "0.3")}
    assert all(r["n"] == "3" and float(r["grad_norm_sq_final_sd"]) > 0 for r in rows)  # seeds of their own data


def csv_rows(path: Path):
    import csv

    with open(path, newline="") as f:
        yield from csv.DictReader(f)
