"""Bulyan (El Mhamdi et al. 2018): Krum's selection, then the mean of the values nearest each
coordinate's median, by hand; fewer than 4f + 3 uploads refused, by the rule and by the config."""

from __future__ import annotations

import pytest
import torch

from fedpd.aggregators import bulyan, min_rows
from fedpd.errors import ConfigError

DT = torch.float64


def _t(rows):
    return torch.tensor(rows, dtype=DT)


def test_bulyan_selection_by_hand():
    # n = 7, f = 1: θ = 5 rows by repeated Krum. Values 0, 1, 2, 3, 4, 100, −50.
    # r=7 (4 nearest): scores 30, 15, 10, 15, 30, … → 2; r=6 (3 nearest): 0:26, 1:14, 3:14, 4:26 → 1
    # (tie, lower index); r=5 (2 nearest): 0:25, 3:10, 4:17 → 3; r=4 (1 nearest): 0:16, 4:16 → 0;
    # r=3 (1 nearest): 4: 54² = 2916, 100: 96², −50: 54² → 4 (tie with −50, lower index).
    w = _t([[0], [1], [2], [3], [4], [100], [-50]])
    agg, info = bulyan(w, n_byzantine=1)
    assert info["selected"] == [2, 1, 3, 0, 4]
    # β = θ − 2f = 3 nearest the median 2 of {0..4}: 1, 2, 3
    torch.testing.assert_close(agg, _t([2.0]), rtol=0, atol=0)


def test_bulyan_averages_the_values_nearest_the_median_not_a_symmetric_trim():
    # five honest rows and two far outliers at indices 5, 6: the selection is the five honest rows.
    # coordinate 1: 0, 1, 2, 10, 11 → median 2, nearest three 0, 1, 2 → 1 (a trimmed mean gives 13/3)
    # coordinate 2: 5, 5, 6, 7, −3 → median 5, nearest three 5, 5, 6 → 16/3
    w = _t([[0, 5], [1, 5], [2, 6], [10, 7], [11, -3], [1000, 0], [0, -1000]])
    agg, info = bulyan(w, n_byzantine=1)
    assert sorted(info["selected"]) == [0, 1, 2, 3, 4]
    torch.testing.assert_close(agg, _t([1.0, 16 / 3]), rtol=0, atol=1e-15)
    # f = 0: every row selected, β = n: the mean
    torch.testing.assert_close(bulyan(w, n_byzantine=0)[0], w.mean(0), rtol=0, atol=1e-12)


def test_bulyan_refuses_fewer_than_4f_plus_3_rows():
    w = _t([[0.0]] * 6)
    with pytest.raises(ConfigError, match=r"bulyan needs K >= 4\*n_byzantine \+ 3; got K=6, n_byzantine=1 "
                                          r"\(allowed: n_byzantine <= 0\)") as err:
        bulyan(w, n_byzantine=1)
    assert "\n" not in str(err.value)
    assert min_rows("bulyan", {"n_byzantine": 2}) == 11


def test_config_refuses_bulyan_with_too_few_participants():
    from fedpd.build import build, build_problem
    from fedpd.config import load_config

    cfg = load_config({"problem": {"name": "least_squares", "clients": 6, "dim": 3, "samples_per_client": 4},
                       "algorithm": {"name": "fedavg", "aggregator": "bulyan",
                                     "aggregator_options": {"n_byzantine": 1}},
                       "solver": {"name": "exact"}})
    with pytest.raises(ConfigError, match="needs at least 7 uploads per round") as err:
        build(cfg, build_problem(cfg))
    assert "\n" not in str(err.value)
