"""`fedpd compare` names how each run was defended and made private: the aggregator column shows
the pre-aggregation steps in order and the rule's options (`arc→nnm→trimmed_mean(f=1, ...)`), the
privacy column whether ε came from the RDP or the PLD accountant, at which δ."""

from __future__ import annotations

import csv
import io
import json

import pytest
import tomli_w

import fedpd
from fedpd.results.tables import compare_table
from helpers import run_cli as cli


def fake_run(path, cfg: dict):
    path.mkdir(parents=True)
    (path / "config.toml").write_text(tomli_w.dumps(cfg))
    (path / "metrics.jsonl").write_text(json.dumps({"round": 0, "train_loss": 1.0}) + "\n")
    return path


TINY = {"problem": {"name": "synthetic", "clients": 6, "dim": 4, "classes": 3, "max_client_samples": 12},
        "solver": {"name": "sgd", "lr": 0.05, "local_steps": 2, "batch_size": 4}, "sampler": {"name": "all"},
        "run": {"rounds": 1, "dtype": "float64"}}


def test_the_aggregator_column_names_the_chain_and_the_rules_options(tmp_path):
    """The config.toml a run writes is what the column reads: a real run, so the keys are the ones
    fedpd writes."""
    algorithm = {"name": "fedavg", "aggregator": "trimmed_mean",
                 "aggregator_options": {"pre": ["arc", "nnm"], "n_byzantine": 1, "trim_ratio": 0.2}}
    fedpd.run({**TINY, "algorithm": algorithm}, tmp_path / "defended")
    fedpd.run({**TINY, "algorithm": {"name": "fedavg"}}, tmp_path / "plain")
    _, rows = compare_table([tmp_path / "defended", tmp_path / "plain"], group=False)
    assert [r["aggregator"] for r in rows] == ["arc→nnm→trimmed_mean(f=1, trim_ratio=0.2)", "-"]


@pytest.mark.parametrize("algorithm, shown", [
    ({"aggregator": "krum", "aggregator_options": {"n_byzantine": 2, "m": 3}}, "krum(f=2, m=3)"),
    ({"aggregator": "mean", "aggregator_options": {"pre": "bucketing", "bucket_size": 3}}, "bucketing→mean(s=3)"),
    ({"aggregator": "coordinate_median"}, "coordinate_median"),
    ({"aggregator": "mean"}, ""),
])
def test_every_part_of_a_defence_is_named(tmp_path, algorithm, shown):
    runs = [fake_run(tmp_path / "a", {"algorithm": {"name": "fedavg", **algorithm}}),
            fake_run(tmp_path / "b", {"algorithm": {"name": "fedavg", "aggregator": "geometric_median"}})]
    _, rows = compare_table(runs, group=False)
    assert rows[0]["aggregator"] == (shown or "-")


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_the_privacy_column_names_the_accountant_and_delta(tmp_path, accountant):
    privacy = {"clip": "fixed", "noise_multiplier": 1.1, "delta": 1e-6, "accountant": accountant}
    [run] = [fake_run(tmp_path / "dp", {"algorithm": {"name": "fedavg"}, "privacy": privacy})]
    _, [row] = compare_table([run], group=False)
    assert row["privacy"] == f"fixed clip, z=1.1, ε by {accountant.upper()} at δ=1e-06"


#: a run with metrics every round, of a classifier (the backdoor's accuracy is a test accuracy)
BACKDOOR_TINY = {"problem": {"name": "synthetic", "clients": 6, "max_client_samples": 40},
                 "solver": {"name": "sgd", "lr": 0.1, "local_steps": 2, "batch_size": 8},
                 "run": {"rounds": 2, "eval_every": 1}}


# --- compare shows every metric, and names the aggregator, the attack and privacy ------------
@pytest.fixture
def backdoor_runs(tmp_path):
    """FedAvg under a backdoor, once with the plain mean and once with norm bounding, and a
    private FedAvg without an attack: three runs whose algorithm is fedavg."""
    attack = {"name": "backdoor", "parties": [0], "target": 1, "poison_fraction": 0.5}
    for name, algorithm, more in [
            ("mean", {"name": "fedavg"}, {"attack": attack}),
            ("bounded", {"name": "fedavg", "aggregator": "norm_bounding",
                         "aggregator_options": {"max_norm": 0.5}}, {"attack": attack}),
            ("private", {"name": "fedavg"}, {"privacy": {"clip": "fixed", "noise_multiplier": 0.5}})]:
        fedpd.run({**BACKDOOR_TINY, "algorithm": algorithm, **more}, tmp_path / name)
    return [tmp_path / n for n in ("mean", "bounded", "private")]


def test_compare_csv_holds_every_recorded_metric_and_names_aggregator_attack_and_privacy(backdoor_runs, capsys):
    code, out, _ = cli(["compare", *map(str, backdoor_runs), "--format", "csv"], capsys)
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(out))}
    assert code == 0 and set(rows) == {"mean", "bounded", "private"}
    recorded = {k for p in backdoor_runs for line in open(p / "metrics.jsonl") for k in fedpd.io.json.loads(line)}
    assert "backdoor_acc" in recorded
    columns = set(next(iter(rows.values())))
    mechanism = {k for k in recorded if k.startswith("dp_") and k != "dp_epsilon"}  # settings: the privacy column
    assert mechanism and not mechanism & columns
    for key in recorded - {"round", "comm_rounds", "uplink_floats", "dp_epsilon"} - mechanism:
        assert key in columns or f"{key}_final" in columns, key
    assert {"backdoor_acc_final", "backdoor_acc_best", "rejected_uploads", "wall_s", "dp_epsilon"} <= columns
    assert [rows[n]["algorithm"] for n in ("mean", "bounded", "private")] == ["fedavg"] * 3
    assert (rows["mean"]["aggregator"], rows["bounded"]["aggregator"]) == ("-", "norm_bounding(max_norm=0.5)")
    assert (rows["mean"]["attack"], rows["private"]["attack"]) == ("backdoor 1 party", "-")
    assert (rows["mean"]["privacy"], rows["private"]["privacy"]) == ("-", "fixed clip, z=0.5, ε by RDP at δ=1e-05")
    assert rows["mean"]["backdoor_acc_final"] != "" and rows["private"]["backdoor_acc_final"] == ""


def test_compare_table_leads_with_backdoor_accuracy_and_a_plain_run_has_no_setting_columns(backdoor_runs, capsys,
                                                                                          monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = cli(["compare", *map(str, backdoor_runs[:2])], capsys)
    header = " ".join(out.splitlines()[:2])
    assert code == 0 and "backdoor acc" in header and "aggregator" in header and "attack" in header
    assert "privacy" not in header  # no run of these sets it
    monkeypatch.setenv("COLUMNS", "80")  # what is left out is named, a metric's final and best together
    code, out, _ = cli(["compare", *map(str, backdoor_runs[:2])], capsys)
    note = " ".join(out.split("left out at 80 columns:")[1].split())
    assert code == 0 and "test loss (final, best)" in note and "rejected uploads" in note, out
    assert "test acc" in " ".join(out.splitlines()[:2])  # an accuracy outranks the setting columns
    code, out, _ = cli(["compare", str(backdoor_runs[2]), "--format", "csv"], capsys)
    keys = next(csv.reader(io.StringIO(out)))
    assert "privacy" in keys and "aggregator" not in keys and "attack" not in keys
