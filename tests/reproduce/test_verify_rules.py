"""``fedpd reproduce --verify``'s three rules: identical numbers on the kind of CPU that made a record,
the measured drift on another kind, and on another device a close check of the first rounds — each
loose enough for what rounding does and tight enough that a 1 % change of an update rule fails it;
counters of what a run did exact under each, counters that follow from floats held as their floats."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from fedpd.algorithms.fedavg import FedAvg
from fedpd.cli import main
from fedpd.config import load_config
from fedpd.reproduce import execute, records
from fedpd.reproduce import verify as ver

from helpers import ROOT


def _record(smoke_report, tmp_path) -> records.Record:
    smoke_report("fedpd_fig2", tmp_path)
    held = records.load(tmp_path / "records")
    return held[next(k for k in sorted(held) if "fedavg" in k)]


def _on(record: records.Record, **machine) -> records.Record:
    provenance = {**record.provenance, "machine": {**record.provenance["machine"], **machine}}
    return dataclasses.replace(record, provenance=provenance)


def _with(record: records.Record, section: str, key: str, factor: float) -> records.Record:
    config = json.loads(json.dumps(record.config))
    config[section][key] *= factor
    return dataclasses.replace(record, config=config)


def test_a_record_names_its_kind_of_cpu_and_the_rule_follows_it(smoke_report, tmp_path):
    record = _record(smoke_report, tmp_path)
    assert record.provenance["machine"]["cpu_kind"] == records.cpu_kind()
    assert ver.rule_of(record, "cpu") is ver.SAME_CPU
    assert ver.rule_of(_on(record, cpu_kind="GenuineIntel 6/143, AVX512 (sse4_2 avx avx2 fma avx512f)"),
                       "cpu") is ver.OTHER_CPU
    older = dataclasses.replace(record, provenance={**record.provenance, "machine": {
        k: v for k, v in record.provenance["machine"].items() if k != "cpu_kind"}})
    assert ver.rule_of(older, "cpu") is ver.OTHER_CPU  # a record that does not name its kind
    assert ver.rule_of(_on(record, torch="2.2.0+cpu"), "cpu") is ver.OTHER_CPU  # another torch: other kernels
    assert ver.rule_of(record, "cuda") is ver.OTHER_DEVICE


def test_on_another_cpu_a_one_percent_change_of_a_rule_still_fails(smoke_report, tmp_path, monkeypatch):
    elsewhere = _on(_record(smoke_report, tmp_path), cpu_kind="another kind")
    result = ver.verify_record(elsewhere)
    assert result.ok and result.rule == ver.OTHER_CPU.name and result.compared > 10
    lr = ver.verify_record(_with(elsewhere, "solver", "lr", 1.01))
    assert not lr.ok and lr.mismatch.startswith("round 1,")
    _server_step_one_percent_longer(monkeypatch)
    step = ver.verify_record(elsewhere)
    assert not step.ok and step.mismatch.startswith("round 1,")


#: float32 FedAvg on FedProx's Synthetic(1, 1): the record's execution path (vectorised over the
#: clients, as on a GPU) and the re-run's (per client, as on the CPU for a large model) add the
#: same terms in other orders, as two kinds of CPU or two devices do
FLOAT32 = {"problem": {"name": "synthetic", "alpha": 1.0, "beta": 1.0}, "algorithm": {"name": "fedavg"},
           "solver": {"name": "sgd", "lr": 0.05, "local_steps": 10, "batch_size": 10},
           "sampler": {"name": "uniform", "clients_per_round": 10},
           "run": {"dtype": "float32", "execution": "vectorised", "rounds": 4, "eval_every": 4, "seed": 0}}


@pytest.fixture(scope="module")
def float32_record() -> records.Record:
    """A float32 record as a run leaves it (its metrics every 4 rounds, its first rounds in
    ``early``), made by the vectorised path on another kind of CPU; its config asks the re-run for
    the per-client path."""
    config = load_config(FLOAT32).resolved()
    metrics = [execute.rerun(config, 4)[r] for r in (0, 4)]
    early = [execute.rerun(config, execute.EARLY_ROUNDS, every=1)[r] for r in range(execute.EARLY_ROUNDS + 1)]
    config["run"] = {**config["run"], "execution": "per_client"}
    return records.Record("f32/s0", "f32", 0, {}, "medium", config, metrics,
                          {"machine": {"device": "cpu", "cpu_kind": "another kind"}}, early=early)


def _server_step_one_percent_longer(monkeypatch) -> None:
    plain = FedAvg.aggregate_means

    def longer(self, server, means, ctx):
        out, state = plain(self, server, means, ctx)
        return {**out, "x0": server["x0"] + 1.01 * (out["x0"] - server["x0"])}, state

    monkeypatch.setattr(FedAvg, "aggregate_means", longer)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_float32_elsewhere_is_compared_closely_in_its_first_rounds(float32_record, device, monkeypatch):
    """On another kind of CPU, or a GPU's record on the CPU: the early rounds to EARLY_RTOL catch a
    1 % change of the learning rate or of the server step, which the loose check of a GPU record's
    later rounds alone lets through."""
    record = float32_record
    if device == "cuda":
        record = dataclasses.replace(
            record, config={**record.config, "run": {**record.config["run"], "device": "cuda"}}
        )
        monkeypatch.setattr(ver, "_present", lambda device: "cpu")  # this machine has no GPU
    rule = ver.OTHER_DEVICE if device == "cuda" else ver.OTHER_CPU
    result = ver.verify_record(record)
    assert result.ok and result.rule == rule.name and result.compared > 4 * len(record.early)
    assert result.across == ("cuda → cpu" if device == "cuda" else "")
    lr = ver.verify_record(_with(record, "solver", "lr", 1.01))
    assert not lr.ok and "(early rounds)" in lr.mismatch
    late_only = ver.verify_record(dataclasses.replace(_with(record, "solver", "lr", 1.01), early=[]))
    assert "no early rounds" in late_only.rule
    if device == "cuda":
        assert late_only.ok  # 5 % of round 4 lets it through
    _server_step_one_percent_longer(monkeypatch)
    step = ver.verify_record(record)
    assert not step.ok and "(early rounds)" in step.mismatch


def test_the_early_rounds_round_trip_through_a_record_file(tmp_path, float32_record):
    spec = type("Spec", (), {"key": "f32/s0", "group": "f32", "seed": 0, "labels": {}})()
    records.write(tmp_path, spec, "medium", float32_record.config, float32_record.metrics, {},
                  early=float32_record.early)
    again = records.load(tmp_path)["f32/s0"]
    assert again.early == float32_record.early and [m["round"] for m in again.early] == [0, 1, 2, 3]


def test_float32_and_gpu_runs_keep_their_first_rounds_for_the_record(tmp_path):
    float64 = {**FLOAT32, "run": {**FLOAT32["run"], "dtype": "float64"}}
    assert execute.keeps_early_rounds(FLOAT32) and not execute.keeps_early_rounds(float64)
    assert execute.keeps_early_rounds({**float64, "run": {**float64["run"], "device": "cuda"}})
    execute.record_early_rounds(FLOAT32, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / execute.EARLY).read_text().splitlines()]
    assert [r["round"] for r in rows] == list(range(execute.EARLY_ROUNDS + 1))
    assert rows[1] == execute.rerun(FLOAT32, 1, every=1)[1] | {"wall_s": rows[1]["wall_s"]}


def test_a_run_evaluated_every_round_keeps_its_own_first_rounds_without_a_second_pass(tmp_path, monkeypatch):
    two_rounds = {**FLOAT32, "run": {**FLOAT32["run"], "rounds": 2, "eval_every": 1}}
    own = execute.rerun(two_rounds, 2, every=1)
    (tmp_path / execute.METRICS).write_text("".join(json.dumps(own[r]) + "\n" for r in sorted(own)))

    def second_pass(*args, **kwargs):
        raise AssertionError("re-ran what the run had evaluated")

    monkeypatch.setattr(execute, "rerun", second_pass)
    execute.record_early_rounds(two_rounds, tmp_path)  # rounds 0..2: at most the run's rounds
    rows = [json.loads(line) for line in (tmp_path / execute.EARLY).read_text().splitlines()]
    assert rows == [own[0], own[1], own[2]]


REPORTS = ROOT / "docs" / "reproductions"
#: the committed reports with records, and the round each is verified to: the first evaluation at or
#: after 3 (--verify's default); A-FedPD's CIFAR-10 records (made on a GPU, keeping no early rounds)
#: at round 0 only, before any training — their first trained evaluation is round 10, ten LeNet
#: rounds of 50 local steps: minutes a record on a 2-core CPU
VERIFIED = {p.parent.name: 0 if p.parent.name == "afedpd_table2" else 3 for p in REPORTS.glob("*/records")}
#: the MNIST MLP reports, made on this kind of CPU in float32 (the same-CPU rule, which the
#: synthetic reports' float64 records test too): half a minute to a minute a record of the suite's
#: time each; `fedpd reproduce NAME --verify 1` checks one by hand (docs/reproductions/README.md)
BY_HAND = ("robustness", "fedplus_table2", "fedplus_standard")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(VERIFIED) - set(BY_HAND)))
def test_every_committed_report_verifies_here_and_says_by_which_rule(name, capsys):
    data = os.environ.get("FEDPD_DATA")
    needs = {"afedpd_table2": "cifar-10"}.get(name)
    if needs and not (data and (Path(data) / needs).is_dir()):
        pytest.skip(f"needs {needs} under $FEDPD_DATA")
    code = main(["reproduce", name, "--verify", "1", "--verify-rounds", str(VERIFIED[name]),
                 "--out", str(REPORTS / name)])  # one record each (a seeded choice): the suite's time
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "1 of 1 records agree" in out
    lines = [line for line in err.splitlines() if ": agrees" in line]
    assert len(lines) == 1 and all("; rule: " in line for line in lines)


# --- counters: those of what a run did are exact, those that follow from floats move with them ---

def _row(**metrics) -> dict:
    return {"round": 4, "train_loss": 0.5, "test_acc": 0.9, "uplink_floats": 6100, "sample_grads": 4000,
            "dropouts": 0, "agg_iterations": 7, "wall_s": 1.0, **metrics}


FLOAT32_SAME_CPU = ("float32", ver.SAME_CPU)


@pytest.mark.parametrize("dtype, rule", [FLOAT32_SAME_CPU, ("float64", ver.OTHER_CPU), ("float32", ver.OTHER_CPU),
                                         ("float32", ver.OTHER_DEVICE)])
def test_an_iteration_count_one_off_agrees_wherever_floats_may_round(dtype, rule):
    compared, mismatch, rounded = ver.compare([_row()], {4: _row(agg_iterations=8, wall_s=9.0)}, dtype, rule, 4)
    assert mismatch == "" and compared == 7
    assert rounded == ["round 4, agg_iterations: recorded 7, re-run 8"]


def test_an_iteration_count_is_exact_where_floats_must_be_identical():
    _, mismatch, _ = ver.compare([_row()], {4: _row(agg_iterations=8)}, "float64", ver.SAME_CPU, 4)
    assert mismatch == "round 4, agg_iterations: recorded 7, re-run 8"


@pytest.mark.parametrize("rule", [ver.SAME_CPU, ver.OTHER_CPU, ver.OTHER_DEVICE])
@pytest.mark.parametrize("counter", ["round", "uplink_floats", "sample_grads", "dropouts"])
def test_a_counter_of_what_the_run_did_is_exact_under_every_rule(rule, counter):
    row = _row()
    again = {**row, counter: row[counter] + 1}
    _, mismatch, _ = ver.compare([row], {4: again}, "float32", rule, 4)
    assert mismatch == f"round 4, {counter}: recorded {row[counter]}, re-run {row[counter] + 1}"


@pytest.mark.parametrize("dtype, rule", [FLOAT32_SAME_CPU, ("float64", ver.OTHER_CPU)])
def test_a_moved_iteration_count_does_not_hide_a_changed_update_rule(dtype, rule):
    """The count differs and the training loss is 1 % off: the loss decides (where the float rule is
    close enough to catch a 1 % change of an update rule; a float32 record's trained rounds on another
    CPU are compared closely in its early rounds, tested above)."""
    _, mismatch, _ = ver.compare([_row()], {4: _row(agg_iterations=8, train_loss=0.505)}, dtype, rule, 4)
    assert mismatch == "round 4, train_loss: recorded 0.5, re-run 0.505"


def test_a_moved_iteration_count_needs_a_float_metric_of_its_round_to_vouch_for_it():
    counters = {"round": 4, "agg_iterations": 7, "sample_grads": 4000}
    _, mismatch, _ = ver.compare([counters], {4: {**counters, "agg_iterations": 8}}, "float32", ver.OTHER_CPU, 4)
    assert mismatch.startswith("round 4, agg_iterations: recorded 7, re-run 8 (a counter that follows from floats")


def test_every_integer_metric_of_the_committed_records_has_its_kind_named():
    """An integer metric that :data:`KINDS` does not name is compared exactly; this keeps a new
    counter from being so by accident: whoever adds one says which kind it is."""
    import gzip

    unnamed = set()
    for path in REPORTS.glob("*/records/**/*.json.gz"):
        columns = json.loads(gzip.decompress(path.read_bytes()))["metrics"]
        unnamed |= {k for k, values in columns.items() if k not in ver.KINDS
                    and any(isinstance(v, int) for v in values)}
    assert not unnamed, f"integer metrics with no kind in fedpd.reproduce.verify.KINDS: {sorted(unnamed)}"
    assert ver.kind_of("agg_iterations", 7) == ver.FROM_FLOATS and ver.kind_of("uplink_floats", 1) == ver.COUNTER
    assert ver.kind_of("a_new_count", 3) == ver.COUNTER and ver.kind_of("a_new_loss", 0.3) == ver.FLOAT


#: RFA (FedAvg with the geometric median, smoothed Weiszfeld) in float32 on Synthetic(1, 1): its
#: ``agg_iterations`` is the count of a float stopping test
RFA = {**FLOAT32, "algorithm": {"name": "fedavg", "aggregator": "geometric_median"},
       "run": {"dtype": "float32", "rounds": 4, "eval_every": 4, "seed": 0}}


def _rfa_record(dtype: str, machine_kind: str) -> records.Record:
    config = load_config({**RFA, "run": {**RFA["run"], "dtype": dtype}}).resolved()
    metrics = [execute.rerun(config, 4)[r] for r in (0, 4)]
    metrics[1] = {**metrics[1], "agg_iterations": metrics[1]["agg_iterations"] + 1}  # as rounding moves it
    return records.Record("rfa/s0", "rfa", 0, {}, "medium", config, metrics,
                          {"machine": {"device": "cpu", "cpu_kind": machine_kind, "torch": torch.__version__}})


def test_a_record_whose_iteration_count_rounding_moved_verifies_and_a_one_percent_change_still_fails():
    record = _rfa_record("float32", records.cpu_kind())  # this kind of CPU: float32 to 1e-4
    result = ver.verify_record(record)
    assert result.ok and result.rule == ver.SAME_CPU.name
    assert [r.split(":")[0] for r in result.rounded] == ["round 4, agg_iterations"]
    lr = ver.verify_record(_with(record, "solver", "lr", 1.01))
    assert not lr.ok and lr.mismatch.startswith("round 4,") and "agg_iterations" not in lr.mismatch
    elsewhere = ver.verify_record(dataclasses.replace(record, provenance={"machine": {"cpu_kind": "another kind"}}))
    assert elsewhere.ok and elsewhere.rule.startswith(ver.OTHER_CPU.name) and elsewhere.rounded


def test_a_float64_record_of_this_cpu_kind_holds_its_iteration_count_exactly():
    result = ver.verify_record(_rfa_record("float64", records.cpu_kind()))
    assert not result.ok and result.mismatch.startswith("round 4, agg_iterations: recorded ")
