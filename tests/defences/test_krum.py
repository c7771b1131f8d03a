"""Krum (Blanchard et al. 2017): the cluster centre chosen by hand, its argument errors, and a run
with fewer uploads a round than 2f + 3 refused before anything is written."""

from __future__ import annotations

import pytest
import torch

from fedpd.aggregators import krum
from fedpd.cli import main
from fedpd.errors import ConfigError
from helpers import SAMPLED_FEDAVG

DT = torch.float64


def _w(K=7, d=3, seed=0):
    return torch.randn(K, d, generator=torch.Generator().manual_seed(seed), dtype=DT)


def test_krum_picks_cluster_centre_and_ignores_outlier():
    w = torch.tensor([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [100.0, 100.0]], dtype=DT)
    agg, info = krum(w, n_byzantine=1)
    # K − f − 2 = 3 nearest: centre 1+1+1 = 3, each arm 1+2+2 = 5, outlier huge
    assert agg.tolist() == [0.0, 0.0]
    assert info["selected"] == [0]
    assert info["scores"][:5] == pytest.approx([3.0, 5.0, 5.0, 5.0, 5.0], abs=1e-12) and info["scores"][5] > 1e4
    agg5, info5 = krum(w, n_byzantine=1, m=5)
    assert sorted(info5["selected"]) == [0, 1, 2, 3, 4]
    assert agg5.tolist() == [0.0, 0.0]
    # exactly tied scores (integer distances): the lower index comes first
    w = torch.tensor([[0.0, 0.0], [3.0, 0.0], [-3.0, 0.0], [0.0, 4.0], [0.0, -4.0], [50.0, 50.0]], dtype=DT)
    _, info3 = krum(w, n_byzantine=1, m=3)
    assert info3["scores"][:5] == [34.0, 59.0, 59.0, 66.0, 66.0]
    assert info3["selected"] == [0, 1, 2]


def test_krum_bad_arguments():
    w = _w(K=4, d=2)
    with pytest.raises(ConfigError, match="K > 2"):
        krum(w, n_byzantine=1)
    with pytest.raises(ConfigError, match="n_byzantine"):
        krum(w, n_byzantine=-1)
    with pytest.raises(ConfigError, match="m must"):
        krum(_w(K=6), n_byzantine=1, m=6)
    with pytest.raises(ConfigError, match="m must"):
        krum(_w(K=6), n_byzantine=1, m=0)


@pytest.mark.parametrize("sampler, needle", [
    ('name = "uniform"\nclients_per_round = 4', "algorithm.aggregator_options"),  # f = 1 needs 2f + 3 = 5, K = 4
    ('name = "bernoulli"\nq = 0.9', "sampler.name"),  # a varying number of uploads
])
def test_krum_with_too_few_clients_is_refused_before_anything_is_written(tmp_path, capsys, sampler, needle):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SAMPLED_FEDAVG.replace('name = "uniform"\nclients_per_round = 4', sampler))
    out = tmp_path / "r"
    argv = ["run", str(cfg), "--out", str(out), "--quiet", "--set", 'algorithm.aggregator="krum"',
            "--set", "algorithm.aggregator_options={n_byzantine = 1}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "krum" in err, err
    assert not out.exists()
    # with enough participants it runs
    cfg.write_text(SAMPLED_FEDAVG.replace("clients_per_round = 4", "clients_per_round = 5"))
    assert main(argv) == 0
