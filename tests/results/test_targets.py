"""The time to a target: the first record that meets it, in every cost the records hold."""

from __future__ import annotations

import pytest

from fedpd.errors import ConfigError
from fedpd.results.targets import parse_target, reached

HISTORY = [{"round": 0, "comm_rounds": 0, "test_acc": 0.1, "train_loss": 2.0, "sim_time_s": 0.0},
           {"round": 5, "comm_rounds": 4, "test_acc": 0.7, "train_loss": 0.9, "sim_time_s": 3.5},
           {"round": 10, "comm_rounds": 8, "test_acc": 0.82, "train_loss": 0.4, "sim_time_s": 7.25},
           {"round": 15, "comm_rounds": 12, "test_acc": 0.79, "train_loss": float("nan"), "sim_time_s": 9.0}]


@pytest.mark.parametrize("text, expected", [
    ("test_acc=0.8", {"round": 10, "comm_rounds": 8, "sim_time_s": 7.25}),  # an accuracy: at least
    ("train_loss=1.0", {"round": 5, "comm_rounds": 4, "sim_time_s": 3.5}),  # anything else: at most
    ("test_acc<=0.1", {"round": 0, "comm_rounds": 0, "sim_time_s": 0.0}),
    ("test_acc>=0.9", None),  # never reached
    ("train_loss<=0.1", None),  # a NaN never meets a target
])
def test_the_first_record_that_meets_the_target(text, expected):
    assert reached(HISTORY, parse_target(text)) == expected


@pytest.mark.parametrize("text", ["test_acc", "test_acc=high", "=0.5", "test_acc=nan", "test_acc>0.5"])
def test_a_malformed_target_is_one_line(text):
    with pytest.raises(ConfigError) as err:
        parse_target(text)
    assert "expected METRIC=VALUE" in str(err.value) and "\n" not in str(err.value)
