"""docs/extending.md, "The server step": the worked example (FedDyn with a damped server step)
runs as written in an empty directory, and the same file with the step put behind the other door
(``aggregate`` instead of ``aggregate_means``) fails its own check; an ``aggregate_means`` that no
round would call is refused with one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fedpd
from doc_blocks import bash_blocks, clean_env, run_script, section
from helpers import ROOT

DOC = ROOT / "docs" / "extending.md"
HEADING = "The server step"


def example() -> str:
    (body,) = re.findall(r"```python\n(# damped_feddyn\.py\n.*?)```", section(DOC.read_text(), HEADING), re.S)
    return body


def run_example(text: str, tmp_path: Path):
    (tmp_path / "damped_feddyn.py").write_text(text)
    (block,) = bash_blocks(DOC, HEADING)
    return run_script(block, tmp_path, clean_env(tmp_path / "home"), timeout=600)


def test_the_damped_feddyn_example_runs_as_written(tmp_path):
    done = run_example(example(), tmp_path)
    assert done.returncode == 0 and "the same records" in done.stdout, done.stdout[-3000:]


def test_the_example_fails_when_its_step_is_behind_the_other_door(tmp_path):
    """The same damping in ``aggregate``: every round still takes it, but the round no longer
    streams (and [privacy] would refuse the rule), which the example's check says."""
    wrong = example().replace("def aggregate_means(self, server, means, ctx):",
                              "def aggregate(self, server, uploads, ctx):")
    wrong = wrong.replace("super().aggregate_means(server, means, ctx)", "super().aggregate(server, uploads, ctx)")
    assert wrong != example() and "aggregate_means" not in wrong.split("class DampedFedDyn")[1].split("__main__")[0]
    done = run_example(wrong, tmp_path)
    assert done.returncode != 0 and "the round no longer streams the means" in done.stdout, done.stdout[-3000:]


UNUSED = '''
from fedpd.algorithms import FedAvg


class MomentumAvg(FedAvg):
    """A server step put in aggregate_means only."""

    def aggregate_means(self, server, means, ctx):
        new, reply = super().aggregate_means(server, means, ctx)
        return {**new, "x0": 2 * new["x0"] - server["x0"]}, reply
'''


def test_an_aggregate_means_no_round_calls_is_refused(tmp_path, monkeypatch):
    (tmp_path / "unused_step.py").write_text(UNUSED)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = {"problem": {"name": "least_squares", "clients": 6}, "solver": {"name": "gd"}, "run": {"rounds": 2},
              "algorithm": {"name": "unused_step:MomentumAvg", "aggregator": "geometric_median"}}
    with pytest.raises(fedpd.ConfigError) as err:
        fedpd.run(config)
    message = str(err.value)
    assert message.startswith("algorithm.name: MomentumAvg overrides aggregate_means, which no round calls") and \
        "every round calls FedAvg.aggregate" in message and "\n" not in message, message
    config["algorithm"]["aggregator"] = "mean"  # means_only: both doors take the step
    plain = fedpd.run({**config, "algorithm": {"name": "fedavg"}}).history
    assert fedpd.run(config).history[-1]["train_loss"] != plain[-1]["train_loss"]
