"""Run records: every finished run of ``fedpd reproduce`` leaves a record
in the report folder; a recorded run never runs again; records made apart merge; ``--report-only``
rebuilds the report from the records alone; ``--verify K`` re-runs records and fails when the code
no longer computes what they hold; every committed report is what its committed records give."""

from __future__ import annotations

import dataclasses

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest

from fedpd.cli import main
from fedpd.errors import ConfigError
from fedpd.reproduce import core, records
from fedpd.reproduce import verify as ver

from helpers import ROOT

REPORTS = ROOT / "docs" / "reproductions"


def _smoke(name: str, out: Path) -> Path:
    return core.reproduce(name, budget="smoke", out=out, jobs=1, progress=False,
                          command=f"fedpd reproduce {name} --budget smoke")


def _keys(name: str) -> list[str]:
    return [s.key for s in core.get(name).runs(core.get(name).budgets["smoke"])]


def test_a_record_holds_config_metrics_and_provenance(tmp_path, smoke_report):
    smoke_report("fedpd_fig2", tmp_path)
    held = records.load(tmp_path / "records")
    assert sorted(held) == sorted(_keys("fedpd_fig2"))
    key = sorted(held)[0]
    raw = json.loads(gzip.decompress((tmp_path / "records" / f"{key}.json.gz").read_bytes()))
    assert set(raw) == {"format", "key", "group", "seed", "labels", "budget", "config", "metrics", "provenance"}
    assert raw["budget"] == "smoke" and raw["config"]["run"]["rounds"] == 3
    # the metrics history, exactly as the run directory's metrics.jsonl has it
    lines = [json.loads(line) for line in (tmp_path / "runs" / key / "metrics.jsonl").read_text().splitlines()]
    assert held[key].metrics == lines and raw["metrics"]["round"] == [r["round"] for r in lines]
    p = raw["provenance"]
    assert p["fedpd"] and p["command"] == "fedpd reproduce fedpd_fig2 --budget smoke" and p["elapsed_s"] > 0
    assert p["compute_s"] == lines[-1]["wall_s"]
    assert {"cores", "cpu", "threads", "device", "python", "torch"} <= set(p["machine"])
    assert p["machine"]["threads"] == 1 and p["machine"]["device"] == "cpu"


def test_metrics_columns_round_trip_with_missing_values():
    rows = [{"round": 0, "train_loss": 1.5}, {"round": 5, "train_loss": 0.1 + 0.2, "primal_residual": 1e-300}]
    rec = records.Record("a/s0", "a", 0, {}, "smoke", {}, rows)
    data = json.loads(json.dumps(rec.to_json()))
    assert data["metrics"] == {"round": [0, 5], "train_loss": [1.5, 0.30000000000000004],
                               "primal_residual": [None, 1e-300]}
    assert records.Record.from_json(data).metrics == rows  # floats exact, absent stays absent


def test_report_only_rebuilds_the_same_report_from_the_records_alone(tmp_path, capsys, smoke_report):
    out = tmp_path / "r"
    smoke_report("feddyn_fedpd", out)
    readme, table = (out / "README.md").read_text(), (out / "results.csv").read_text()
    shutil.rmtree(out / "runs")
    for name in ("README.md", "results.csv", "trajectories.png"):
        (out / name).unlink()
    assert main(["reproduce", "feddyn_fedpd", "--report-only", "--out", str(out)]) == 0  # the budget from the records
    assert (out / "README.md").read_text() == readme and (out / "results.csv").read_text() == table
    assert (out / "trajectories.png").is_file() and not (out / "runs").exists()  # nothing ran
    assert "--report-only --out <this folder>" in readme


def test_report_only_takes_the_largest_budget_of_the_records():
    """A run two budgets share keeps the budget it was made at (robustness's DP curve: reduced records
    in the medium report), so --report-only without --budget reads the largest; none, or a budget
    the experiment has not, is one line."""
    from fedpd.errors import ConfigError
    from fedpd.reproduce.core import budget_of

    def held(*budgets):
        return {f"g/s{i}": records.Record(f"g/s{i}", "g", i, {}, b, {}, []) for i, b in enumerate(budgets)}

    assert budget_of("robustness", held("reduced", "medium", "reduced")) == "medium"
    assert budget_of("robustness", held("smoke")) == "smoke"
    for bad, needle in ((held(), "no run records"), (held("medium", "huge"), "'huge'")):
        with pytest.raises(ConfigError, match=needle):
            budget_of("robustness", bad)


def test_a_recorded_run_never_runs_again_and_records_made_apart_merge(tmp_path, smoke_report):
    a, b = tmp_path / "a", tmp_path / "b"
    smoke_report("fedpd_fig2", a)
    keys = _keys("fedpd_fig2")
    # machine B holds half of the records (say from a merge), no run directories: it runs only the rest
    for key in keys[::2]:
        target = records.path_of(b / "records", key)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(records.path_of(a / "records", key), target)
    before = {k: records.path_of(b / "records", k).read_bytes() for k in keys[::2]}
    _smoke("fedpd_fig2", b)
    ran = {str(p.parent.relative_to(b / "runs")) for p in (b / "runs").rglob("metrics.jsonl")}
    assert ran == set(keys[1::2])
    assert {k: records.path_of(b / "records", k).read_bytes() for k in keys[::2]} == before
    assert sorted(records.load(b / "records")) == sorted(keys)
    # the same report as the machine that ran everything (but who ran what)
    strip = lambda path: [{k: v for k, v in row.items() if k not in ("wall_s",)}  # noqa: E731
                          for row in csv.DictReader(path.open())]
    assert strip(b / "results.csv") == strip(a / "results.csv")


def test_a_record_of_another_config_is_run_again(tmp_path, capsys, smoke_report):
    smoke_report("fedpd_fig2", tmp_path)
    key = _keys("fedpd_fig2")[0]
    path = records.path_of(tmp_path / "records", key)
    data = json.loads(gzip.decompress(path.read_bytes()))
    data["config"]["solver"]["lr"] = data["config"]["solver"]["lr"] * 2
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    core.reproduce("fedpd_fig2", budget="smoke", out=tmp_path, jobs=1, progress=True, command="again")
    assert "1 records hold another config and are run again (first: " + key + ", solver.lr differs)" in \
        capsys.readouterr().err
    fresh = records.load(tmp_path / "records")[key]
    assert fresh.provenance["command"] == "again" and fresh.config["solver"]["lr"] != data["config"]["solver"]["lr"]


def test_a_record_names_committed_code_or_says_it_does_not(tmp_path):
    """The provenance rule: the commit a record names is marked "(with uncommitted changes)"
    when fedpd's code — the package's files, tracked or not (ignored ones aside), and pyproject.toml —
    differs from it; files outside the code (a report folder's records and README) do not count."""
    import subprocess

    from fedpd.reproduce import report as rep

    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t",  # noqa: E731
                                     *a], check=True, capture_output=True, text=True)
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "rule.py").write_text("STEP = 1\n")
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("report\n")
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "code")
    sha = git("rev-parse", "--short", "HEAD").stdout.strip()
    assert rep.git_commit(package) == sha
    (tmp_path / "docs" / "README.md").write_text("a report rendered again\n")  # not code
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "rule.pyc").write_bytes(b"ignored")
    assert rep.git_commit(package) == sha
    for change in (lambda: (package / "rule.py").write_text("STEP = 2\n"),  # a changed update rule
                   lambda: (package / "new_rule.py").write_text("\n"),  # a module git does not know
                   lambda: (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")):
        git("checkout", "-q", "--", ".")
        (package / "new_rule.py").unlink(missing_ok=True)
        assert rep.git_commit(package) == sha
        change()
        assert rep.git_commit(package) == f"{sha} (with uncommitted changes)"
        assert rep.uncommitted({"commit": rep.git_commit(package)})
    assert rep.git_commit(tmp_path.parent) == "" or not rep.git_commit(tmp_path.parent).startswith(sha)
    # a run finishing later names its invocation's commit while the code is still that commit's: a commit of
    # records or a report meanwhile changes nothing, one of code (or a change not committed) does
    git("checkout", "-q", "--", ".")
    (package / "new_rule.py").unlink(missing_ok=True)
    assert rep.same_code(package, sha)
    (tmp_path / "docs" / "README.md").write_text("the records landed\n")
    git("commit", "-q", "-am", "records")
    assert rep.git_commit(package) != sha and rep.same_code(package, sha)
    (package / "new_rule.py").write_text("\n")
    assert not rep.same_code(package, sha)  # untracked code
    git("add", ".")
    assert not rep.same_code(package, sha)  # staged
    git("commit", "-q", "-m", "a new rule")
    assert not rep.same_code(package, sha) and rep.same_code(package, rep.git_commit(package))  # committed since
    assert not rep.same_code(package, f"{sha} (with uncommitted changes)") and not rep.same_code(package, "")


def test_a_report_says_plainly_which_records_name_no_committed_code(tmp_path, smoke_report):
    from fedpd.reproduce import report as rep

    clean = [records.Record(f"g/s{i}", "g", i, {}, "smoke", {}, [], {"commit": "abc1234"}) for i in range(3)]
    assert rep.uncommitted_note(clean, "fedpd_fig2") == ""
    dirty = clean[:2] + [records.Record("g/s2", "g", 2, {}, "smoke", {}, [], {"commit": "abc1234 (with uncommitted "
                                                                                       "changes)"})]
    assert rep.uncommitted_note(dirty, "fedpd_fig2").startswith(
        "**1 of the 3 records were made with uncommitted changes to fedpd's code**")
    # in a rendered report, under the table of who made the runs
    smoke_report("fedpd_fig2", tmp_path)
    held = records.load(tmp_path / "records")
    for i, key in enumerate(sorted(held)):
        path = records.path_of(tmp_path / "records", key)
        data = json.loads(gzip.decompress(path.read_bytes()))
        data["provenance"]["commit"] = "abc1234 (with uncommitted changes)" if i == 0 else "abc1234"
        path.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert main(["reproduce", "fedpd_fig2", "--report-only", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "README.md").read_text()
    table = text.index("| abc1234 (with uncommitted changes) |")
    assert text.index(f"**1 of the {len(held)} records were made with uncommitted changes") > table
    assert "they name no committed code" in text


@pytest.mark.parametrize("commit", ["", None, "unknown", "(with uncommitted changes)"])
def test_a_record_that_names_no_commit_counts_as_naming_no_committed_code(tmp_path, smoke_report, commit):
    """An empty or unknown commit (a record written afterwards from a run directory whose invocation
    left none) is as bold in the report as uncommitted changes: no record slips through."""
    from fedpd.reproduce import report as rep

    provenance = {} if commit is None else {"commit": commit}
    assert rep.uncommitted(provenance) and not rep.uncommitted({"commit": "abc1234"})
    held = [records.Record(f"g/s{i}", "g", i, {}, "smoke", {}, [], {"commit": "abc1234"}) for i in range(2)]
    note = rep.uncommitted_note(held + [records.Record("g/s2", "g", 2, {}, "smoke", {}, [], provenance)], "x")
    dirty = commit == "(with uncommitted changes)"
    assert note.startswith("**1 of the 3 records were made with uncommitted changes" if dirty else
                           "**1 of the 3 records name no commit** (\"unknown\" above")
    assert "they name no committed code" in note
    both = rep.uncommitted_note(held + [records.Record("g/s2", "g", 2, {}, "smoke", {}, [], provenance),
                                        records.Record("g/s3", "g", 3, {}, "smoke", {}, [],
                                                       {"commit": "abc1234 (with uncommitted changes)"})], "x")
    assert both.startswith(f"**{1 + dirty} of the 4 records were made with uncommitted changes")
    assert ("**1 of the 4 records name no commit**" in both) is not dirty
    if commit != "":
        return
    smoke_report("fedpd_fig2", tmp_path)  # in a rendered report: "unknown" in the table, the note under it
    keys = sorted(records.load(tmp_path / "records"))
    path = records.path_of(tmp_path / "records", keys[0])
    data = json.loads(gzip.decompress(path.read_bytes()))
    data["provenance"]["commit"] = ""
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert main(["reproduce", "fedpd_fig2", "--report-only", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "README.md").read_text()
    assert text.index(f"**1 of the {len(keys)} records name no commit**") > text.index(" | unknown | ")


def test_report_only_and_verify_refuse_a_folder_without_records(tmp_path, capsys):
    for argv in (["reproduce", "fedpd_fig2", "--report-only", "--out", str(tmp_path)],
                 ["reproduce", "fedpd_fig2", "--verify", "2", "--out", str(tmp_path)],
                 ["reproduce", "fedpd_fig2", "--report-only"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("no run records" in err or "give --out" in err), err
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("name", ["fedpd_fig2", "feddyn_fedpd", "fedpd_p_heterogeneity"])
def test_a_report_of_part_of_the_budget_names_what_is_missing(name, tmp_path, smoke_report):
    smoke_report(name, tmp_path)
    keys = _keys(name)
    records.path_of(tmp_path / "records", keys[0]).unlink()
    assert main(["reproduce", name, "--report-only", "--out", str(tmp_path), "--budget", "smoke"]) == 0
    text = (tmp_path / "README.md").read_text()
    assert f"**1 of the {len(keys)} runs are not recorded yet**" in text and f"`{keys[0]}`" in text


# --- --verify -------------------------------------------------------------------------------------

def test_verify_agrees_and_a_changed_update_rule_fails_it(tmp_path, monkeypatch, capsys, smoke_report):
    smoke_report("fedpd_fig2", tmp_path)
    assert main(["reproduce", "fedpd_fig2", "--verify", "3", "--out", str(tmp_path), "--quiet"]) == 0
    assert "3 of 3 records agree" in capsys.readouterr().out
    # a deliberate change of FedAvg's server step (x0 = the mean of the uploads, moved by 1 %)
    from fedpd.algorithms.fedavg import FedAvg

    plain = FedAvg.aggregate_means

    def changed(self, server, means, ctx):
        out, state = plain(self, server, means, ctx)
        return {**out, "x0": out["x0"] * 1.01}, state

    monkeypatch.setattr(FedAvg, "aggregate_means", changed)
    fedavg = [k for k in _keys("fedpd_fig2") if "fedavg" in k]
    assert main(["reproduce", "fedpd_fig2", "--verify", str(len(_keys("fedpd_fig2"))), "--out", str(tmp_path),
                 "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "differs: round 1," in out and any(k in out for k in fedavg)


def test_a_record_of_an_absent_device_is_checked_at_round_0_closely_and_after_it_loosely(tmp_path, monkeypatch,
                                                                                        smoke_report):
    """A GPU's record re-run on the CPU: the untrained round 0 to float32 rounding, the trained rounds
    to CROSS_DEVICE_RTOL (rounding grows through training), counters exactly."""
    smoke_report("fedpd_fig2", tmp_path)
    record = records.load(tmp_path / "records")[sorted(_keys("fedpd_fig2"))[0]]
    record.config = {**record.config, "run": {**record.config["run"], "device": "cuda"}}
    monkeypatch.setattr(ver, "_present", lambda device: "cpu")  # this machine has no such device

    def shifted(round_, key, factor):
        out = dataclasses.replace(record, metrics=[dict(m) for m in record.metrics])
        row = next(m for m in out.metrics if m["round"] == round_)
        row[key] = row[key] * factor
        return out

    trained, metric = record.metrics[1]["round"], "train_loss"
    assert ver.verify_record(record).ok and ver.verify_record(record).across == "cuda → cpu"
    assert ver.verify_record(shifted(trained, metric, 1.01)).ok  # 1 % after training: within 5 %
    assert not ver.verify_record(shifted(trained, metric, 1.10)).ok  # 10 %: a different computation
    late = ver.verify_record(shifted(0, metric, 1.01))  # 1 % before any training: not rounding
    assert not late.ok and late.mismatch.startswith("round 0, train_loss")
    count = next(k for k in ("uplink_floats", "comm_rounds") if k in record.metrics[1])
    assert not ver.verify_record(shifted(trained, count, 2)).ok


def test_the_choice_of_records_is_seeded():
    keys = [f"g{i}/s0" for i in range(20)]
    assert ver.choose(keys, 4) == ver.choose(list(reversed(keys)), 4) and len(ver.choose(keys, 4)) == 4
    assert ver.choose(keys, 4, seed=1) != ver.choose(keys, 4, seed=0)
    assert ver.choose(keys, 50) == sorted(keys)


@pytest.mark.parametrize("a, b, dtype, same", [
    (0.1, 0.1, "float64", True), (1.0, 1.0 + 2e-16, "float64", False),
    (1.0, 1.0 + 5e-5, "float32", True), (1.0, 1.0 + 5e-4, "float32", False), (0.0, 1e-10, "float32", True),
    (float("nan"), float("nan"), "float64", True), (float("inf"), 1e300, "float32", False), (3, 3, "float32", True),
])
def test_agreement_is_exact_in_float64_and_to_the_stated_tolerance_in_float32(a, b, dtype, same):
    assert ver.agree(a, b, ver.SAME_CPU.tolerance(dtype, 0)) is same


@pytest.mark.parametrize("a, b, dtype, key, same", [
    (1.0, 1.0 + 2e-16, "float64", "train_loss", True), (1.0, 1.0 + 5e-8, "float64", "train_loss", True),
    (1.0, 1.0 + 1e-6, "float64", "train_loss", False), (1.0, 1.01, "float64", "train_loss", False),
    (0.9012, 0.9042, "float32", "test_acc", True), (0.9012, 0.9112, "float32", "test_acc", False),
    (0.688, 0.689, "float64", "personal_acc_worst10", True),
    (1.0, 1.005, "float32", "train_loss", True), (1.0, 1.02, "float32", "train_loss", False),
    (7, 8, "float64", "comm_rounds", False),
    (7.9e-33, 3.1e-33, "float64", "grad_norm_sq", True),  # 0 up to rounding
])
def test_another_cpu_allows_the_measured_drift_and_accuracy_a_few_flips(a, b, dtype, key, same):
    rule = ver.OTHER_CPU
    assert ver.agree(a, b, rule.tolerance(dtype, 2), rule.acc_atol, key) is same


def test_verify_needs_k_of_one_or_more(tmp_path):
    with pytest.raises(ConfigError, match="--verify 0"):
        ver.verify("fedpd_fig2", tmp_path, 0)


# --- the committed reports ------------------------------------------------------------------------

COMMITTED = sorted(p.parent for p in REPORTS.glob("*/README.md"))


@pytest.mark.parametrize("folder", COMMITTED, ids=lambda p: p.name)
def test_every_committed_report_is_what_its_committed_records_give(folder, tmp_path):
    held = records.load(folder / "records")
    if not held:  # no records: no report either, only a page saying so and how to make it
        text = (folder / "README.md").read_text()
        assert "**No report at the moment.**" in text and f"fedpd reproduce {folder.name} --budget " in text
        assert not (folder / "results.csv").exists() and not list(folder.glob("*.png")), \
            f"{folder.name}: a report without run records cannot be rebuilt (fedpd reproduce --report-only)"
        return
    shutil.copytree(folder / "records", tmp_path / "records")
    assert main(["reproduce", folder.name, "--report-only", "--out", str(tmp_path)]) == 0
    for name in ("README.md", "results.csv"):
        assert (tmp_path / name).read_text() == (folder / name).read_text(), \
            f"{folder.name}/{name} is stale: rebuild it with fedpd reproduce {folder.name} --report-only --out {folder}"
