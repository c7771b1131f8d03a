"""The trimmed mean: the extremes of each coordinate dropped, a ratio it cannot take refused."""

from __future__ import annotations

import pytest
import torch

from fedpd.aggregators import coordinate_median, trimmed_mean
from fedpd.errors import ConfigError

DT = torch.float64


def _w(K=7, d=3, seed=0):
    return torch.randn(K, d, generator=torch.Generator().manual_seed(seed), dtype=DT)


def test_trimmed_mean_drops_extremes():
    w = torch.tensor([[1.0, -50.0], [2.0, 0.0], [3.0, 1.0], [4.0, 2.0], [100.0, 3.0]], dtype=DT)
    agg, info = trimmed_mean(w, 0.2)  # b = 1 per side
    assert agg.tolist() == [3.0, 1.0]
    assert info["trimmed"] == 1 and info["weights_ignored"] is False
    assert trimmed_mean(w, 0.0)[0].tolist() == w.mean(0).tolist()
    # 0.3 * 10 rounds to 2.9999...; floor must still give 3
    w10 = torch.arange(10, dtype=DT).unsqueeze(1)
    agg10, info10 = trimmed_mean(w10, 0.3)
    assert info10["trimmed"] == 3 and agg10.tolist() == [4.5]
    assert trimmed_mean(w, 0.2, weights=torch.ones(5, dtype=DT))[1]["weights_ignored"] is True


def test_trimmed_mean_bad_ratio():
    w = _w(K=4, d=2)
    with pytest.raises(ConfigError, match="trim_ratio"):
        trimmed_mean(w, -0.1)
    assert trimmed_mean(w[:2], 0.49)[1]["trimmed"] == 0  # floor(0.98) = 0: nothing to trim, allowed
    # β = 1/2: the median for odd K, too much for even K (2 * floor(K/2) = K)
    torch.testing.assert_close(trimmed_mean(w[:3], 0.5)[0], coordinate_median(w[:3])[0], rtol=0, atol=0)
    with pytest.raises(ConfigError, match="K=4"):
        trimmed_mean(w, 0.5)
    with pytest.raises(ConfigError, match="trim_ratio"):
        trimmed_mean(w, 0.6)
