"""`fedpd compare` names how each run was defended and made private: the aggregator column shows
the pre-aggregation steps in order and the rule's options (`arc→nnm→trimmed_mean(f=1, ...)`), the
privacy column whether ε came from the RDP or the PLD accountant, at which δ."""

from __future__ import annotations

import json

import pytest
import tomli_w

import fedpd
from fedpd.results.tables import compare_table


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
