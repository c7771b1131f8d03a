"""Why IPM with a small ε is the attack that costs nearest-neighbour mixing (NNM) the most on
heterogeneous clients: the f forged rows −ε·(honest mean) lie near the origin, and once the honest
rows spread farther from their mean than the mean is long, the origin sits inside the honest cloud.
Then every honest row's n − f nearest rows include all f forged rows (they coincide: one in, all
in). Each mixed row keeps only (n − 2f)/(n − f) of honest rows and takes f/(n − f) of −ε·mean. No
rule after NNM can undo that, since every mixed row carries it alike. With a large ε the forged
rows are far away, no honest neighbourhood takes them, and NNM returns the honest mean exactly.
ALIE's forged row μ − zσ is inside the cloud too, but it carries the honest mean μ, so mixing it in
costs little; IPM's carries −εμ, so it removes a share f/(n − f) of the step.

Rows are built with a known mean μ (length 1) and spread (the honest rows' typical distance from μ);
"kept" is the share of the honest mean step the defence returns, ⟨aggregate, m⟩ / ‖m‖², m the
honest rows' mean."""

from __future__ import annotations

import pytest
import torch

from fedpd.aggregators import make_aggregator
from fedpd.preaggregators import nnm

N, F, D = 20, 6, 50  # 20 clients, 6 of them Byzantine (30 %); rows of 50 coordinates
RULES = (("trimmed_mean", {"trim_ratio": 0.3}), ("coordinate_median", {}), ("geometric_median", {}), ("krum", {}))


def honest_rows(spread: float, h: int = N - F, seed: int = 0) -> torch.Tensor:
    """h honest updates: μ = e_1 plus Gaussian noise of norm about ``spread``."""
    mu = torch.zeros(D, dtype=torch.float64)
    mu[0] = 1.0
    noise = torch.randn(h, D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return mu + spread * noise / D ** 0.5


def with_forged(honest: torch.Tensor, forged: torch.Tensor, f: int = F) -> torch.Tensor:
    return torch.cat([honest, forged.expand(f, -1)])


def ipm(honest: torch.Tensor, eps: float) -> torch.Tensor:
    return -eps * honest.mean(0)


def kept(aggregate: torch.Tensor, honest: torch.Tensor) -> float:
    m = honest.mean(0)
    return float(aggregate @ m / (m @ m))


def forged_in_honest_neighbourhoods(w: torch.Tensor, h: int, f: int = F) -> list[int]:
    """How many forged rows (the rows after the first h) each honest row's n − f nearest rows hold."""
    dist = torch.cdist(w, w, compute_mode="donot_use_mm_for_euclid_dist")
    near = dist.argsort(dim=1, stable=True)[:, :w.shape[0] - f]
    return (near[:h] >= h).sum(1).tolist()


def test_small_eps_rows_enter_every_honest_neighbourhood_once_the_spread_exceeds_the_mean():
    for spread, expected in ((0.5, 0), (4.0, F)):
        honest = honest_rows(spread)
        w = with_forged(honest, ipm(honest, 0.1))
        assert forged_in_honest_neighbourhoods(w, N - F) == [expected] * (N - F), spread
    # a large ε puts them outside every honest neighbourhood, however wide the spread
    honest = honest_rows(4.0)
    assert forged_in_honest_neighbourhoods(with_forged(honest, ipm(honest, 100.0)), N - F) == [0] * (N - F)


def test_each_honest_mixed_row_carries_f_over_n_minus_f_of_the_forged_row():
    honest = honest_rows(4.0)
    z = ipm(honest, 0.1)
    w = with_forged(honest, z)
    y = nnm(w, F)
    for i in range(N - F):  # by hand: the f forged rows and the n − 2f honest rows nearest x_i
        nearest_honest = (honest - honest[i]).norm(dim=1).argsort(stable=True)[:N - 2 * F]
        by_hand = (F * z + honest[nearest_honest].sum(0)) / (N - F)
        torch.testing.assert_close(y[i], by_hand)


def test_no_rule_after_nnm_gets_back_the_share_the_forged_rows_took():
    honest = honest_rows(4.0)
    share = (N - 2 * F) / (N - F)  # 8/14: what is left of honest rows in every mixed row
    for rule, options in RULES:
        defence = make_aggregator(rule, **options, pre="nnm", n_byzantine=F)
        small = kept(defence(with_forged(honest, ipm(honest, 0.1)))[0], honest)
        assert 0.3 < small < share, rule
        # against a large ε every honest neighbourhood is the honest rows: the honest mean, exactly
        large = defence(with_forged(honest, ipm(honest, 100.0)))[0]
        torch.testing.assert_close(large, honest.mean(0), msg=rule)


def test_the_spread_decides_and_alies_row_costs_less_because_it_carries_the_mean():
    defence = make_aggregator("trimmed_mean", trim_ratio=0.3, pre="nnm", n_byzantine=F)
    shares = []
    for spread in (0.5, 1.0, 2.0, 4.0):
        honest = honest_rows(spread)
        shares.append(kept(defence(with_forged(honest, ipm(honest, 0.1)))[0], honest))
        alie = honest.mean(0) - 0.674 * honest.std(0, unbiased=False)  # ALIE's row at its z for n = 20, f = 6
        w = with_forged(honest, alie)
        assert forged_in_honest_neighbourhoods(w, N - F) == [F] * (N - F)  # inside every neighbourhood too
        if spread >= 2.0:
            assert kept(defence(w)[0], honest) > shares[-1] + 0.3, spread
    assert shares[0] == pytest.approx(1.0) and shares == sorted(shares, reverse=True) and shares[-1] < 0.55


def test_fewer_byzantine_rows_take_a_smaller_share():
    honest_6 = honest_rows(4.0)
    honest_3 = honest_rows(4.0, h=N - 3)
    six = make_aggregator("trimmed_mean", trim_ratio=0.3, pre="nnm", n_byzantine=6)
    three = make_aggregator("trimmed_mean", trim_ratio=0.15, pre="nnm", n_byzantine=3)
    kept_6 = kept(six(with_forged(honest_6, ipm(honest_6, 0.1), 6))[0], honest_6)
    kept_3 = kept(three(with_forged(honest_3, ipm(honest_3, 0.1), 3))[0], honest_3)
    assert kept_6 < (N - 12) / (N - 6) < kept_3 < (N - 6) / (N - 3) + 0.05
