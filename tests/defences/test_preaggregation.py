"""Pre-aggregation (NNM, bucketing, ARC) before a robust rule: each step's rule on rows computed by
hand, its refusals, its randomness from the server's stream, the chain's options and how `fedpd
list` shows them (client momentum: test_client_momentum.py)."""

from __future__ import annotations

import re

import pytest
import torch

from fedpd.aggregators import coordinate_median, make_aggregator, min_rows, trimmed_mean
from fedpd.config import load_config
from fedpd.context import ServerContext
from fedpd.errors import ConfigError
from fedpd.preaggregators import arc, bucketing, nnm
from fedpd.streams import server_generator
from helpers import ROOT, context, server_context, simulation

T = lambda *rows: torch.tensor(rows, dtype=torch.float64)  # noqa: E731


# --- NNM ------------------------------------------------------------------------------------------
def test_nnm_mixes_each_row_with_its_k_minus_f_nearest():
    # K = 4, f = 1: each row averages its 3 nearest (itself included). 0, 1, 3 are each other's
    # nearest three; 10's are 10, 3, 1.
    y = nnm(T([0.0], [1.0], [3.0], [10.0]), 1)
    torch.testing.assert_close(y, T([4 / 3], [4 / 3], [4 / 3], [14 / 3]))


def test_nnm_breaks_distance_ties_by_the_lower_index():
    # row 2 (value 1) is 1 from both 0 and 2: the lower index, row 0, is its neighbour
    y = nnm(T([0.0], [2.0], [1.0]), 1)
    torch.testing.assert_close(y[2], T(0.5))


def test_nnm_refuses_without_an_honest_majority():
    with pytest.raises(ConfigError, match=r"'nnm' needs K > 2\*n_byzantine; got K=4, n_byzantine=2"):
        nnm(T([0.0], [1.0], [2.0], [3.0]), 2)


def test_nnm_then_trimmed_mean_through_make_aggregator():
    w = torch.randn(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    agg, info = make_aggregator("trimmed_mean", trim_ratio=0.2, pre="nnm", n_byzantine=2)(w)
    torch.testing.assert_close(agg, trimmed_mean(nnm(w, 2), 0.2)[0])
    assert info["pre_rows"] == 7


# --- bucketing ------------------------------------------------------------------------------------
def test_bucketing_averages_consecutive_rows_of_the_permutation():
    w = torch.arange(10.0, dtype=torch.float64).reshape(5, 2)
    perm = torch.randperm(5, generator=torch.Generator().manual_seed(3))
    y = bucketing(w, 2, torch.Generator().manual_seed(3))
    expected = torch.stack([w[perm[:2]].mean(0), w[perm[2:4]].mean(0), w[perm[4]]])  # ⌈5/2⌉ = 3 buckets
    torch.testing.assert_close(y, expected)
    # every row lands in exactly one bucket: the bucket means weighted by their sizes give the mean
    torch.testing.assert_close((2 * y[0] + 2 * y[1] + y[2]) / 5, w.mean(0))


def test_bucketing_needs_a_generator():
    with pytest.raises(ConfigError, match="pass generator"):
        bucketing(T([0.0], [1.0]), 2, None)


def test_bucketing_draws_from_the_servers_stream_for_the_round():
    """FedAvg's bucketing uses ServerContext.rng("pre_aggregation"): the run's seed and the round,
    nothing about the engine or the senders."""
    ctx = ServerContext(torch.arange(4), 7, 4, seed=11)
    a = torch.randperm(9, generator=ctx.rng("pre_aggregation"))
    assert torch.equal(a, torch.randperm(9, generator=server_generator(11, "pre_aggregation", 7)))
    sim = simulation({"name": "fedavg", "aggregator": "coordinate_median",
                      "aggregator_options": {"pre": "bucketing", "bucket_size": 2}},
                     problem={"name": "least_squares", "clients": 6, "dim": 3, "samples_per_client": 4},
                     solver={"name": "gd", "lr": 0.1, "local_steps": 1}, run={"seed": 5})
    ids = torch.arange(6)
    rows = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    up, _ = sim.algorithm.local(sim.algorithm.broadcast(sim.server), sim.store.get(ids), context(sim, ids))
    new, _ = sim.algorithm.aggregate(sim.server, {**up, "x": rows}, server_context(sim, ids))
    by_hand = coordinate_median(bucketing(rows, 2, server_generator(5, "pre_aggregation", 0)))[0]
    torch.testing.assert_close(new["x0"], by_hand, rtol=0, atol=0)


def test_bucketing_refuses_an_s_the_rule_cannot_take_on_the_buckets():
    # Krum with f = 2 needs 7 rows; 10 rows in buckets of 2 leave 5
    agg = make_aggregator("krum", n_byzantine=2, pre="bucketing", bucket_size=2)
    with pytest.raises(ConfigError, match=r"after bucketing \(s = 2\) the rule sees 5 rows of 10: krum needs"):
        agg(torch.randn(10, 2), generator=torch.Generator())
    assert min_rows("krum", {"n_byzantine": 2, "pre": "bucketing", "bucket_size": 2}) == 13  # ⌈13/2⌉ = 7
    with pytest.raises(ConfigError, match="needs at least 13 uploads per round; the sampler gives 10"):
        simulation({"name": "fedavg", "aggregator": "krum",
                    "aggregator_options": {"n_byzantine": 2, "pre": "bucketing"}},
                   problem={"name": "least_squares", "clients": 10, "dim": 2, "samples_per_client": 3})


# --- ARC ------------------------------------------------------------------------------------------
def test_arc_clips_the_k_largest_to_the_next_norm():
    w = T([1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, -4.0], [5.0, 0.0])
    # f = 1, K = 5: k = floor(2 · 1/5 · 4) = 1: the norm 5 row is clipped to norm 4
    torch.testing.assert_close(arc(w, 1), T([1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, -4.0], [4.0, 0.0]))
    # f = 2: k = floor(2 · 2/5 · 3) = 2: norms 5 and 4 are clipped to 3
    torch.testing.assert_close(arc(w, 2), T([1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, -3.0], [3.0, 0.0]))
    # about a reference, the updates are clipped: the same rows shifted by it
    ref = T(10.0, -1.0)
    torch.testing.assert_close(arc(w + ref, 2, ref), arc(w, 2) + ref)
    assert torch.equal(arc(w, 0), w)  # k = 0: nothing clipped


def test_arc_refuses_without_an_honest_majority():
    with pytest.raises(ConfigError, match=r"'arc' needs K > 2\*n_byzantine"):
        arc(T([1.0], [2.0]), 1)


# --- the chain's options --------------------------------------------------------------------------
@pytest.mark.parametrize("name, options, needle", [
    ("mean", {"pre": "nnm", "n_byzantine": 1}, "pre-aggregation goes before a robust rule, not 'mean'"),
    ("coordinate_median", {"pre": "nnm"}, "aggregator_options.n_byzantine: pre-aggregation 'nnm' needs f"),
    ("coordinate_median", {"bucket_size": 3}, "aggregator_options.bucket_size: only used by pre-aggregation"),
    ("coordinate_median", {"pre": "nmm"}, r"^aggregator_options.pre: expected a step or a list of steps, each one "
                                          r"of nnm, bucketing, arc or an import path package.module:Class "
                                          r"\(got 'nmm'\)$"),
    ("coordinate_median", {"pre": ["nnm", "arc", "bucket"], "n_byzantine": 1},
     r"^aggregator_options.pre: expected .* \(got \['nnm', 'arc', 'bucket'\]\)$"),
    ("coordinate_median", {"pre": 3}, r"^aggregator_options.pre: expected .* \(got 3\)$"),
    ("coordinate_median", {"pre": ["nnm", "nnm"], "n_byzantine": 1}, "repeats a step"),
    ("coordinate_median", {"pre": "bucketing", "bucket_size": 0}, "aggregator_options.bucket_size"),
])
def test_bad_chain_options_are_one_line(name, options, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        make_aggregator(name, **options)
    assert "\n" not in str(err.value)


def test_a_chain_refuses_per_client_weights():
    with pytest.raises(ConfigError, match="weights mean nothing"):
        make_aggregator("coordinate_median", pre="bucketing")(torch.randn(4, 2), torch.ones(4),
                                                              generator=torch.Generator())
    cfg = {"problem": {"name": "least_squares", "clients": 4, "dim": 2, "samples_per_client": 3},
           "algorithm": {"name": "fedavg", "aggregator": "coordinate_median", "weights": "samples",
                         "aggregator_options": {"pre": "bucketing"}}}
    with pytest.raises(ConfigError, match="^algorithm.weights: pre-aggregation mixes"):
        load_config(cfg)


def test_fedpd_list_shows_the_chain_beside_the_rules_options(capsys):
    from fedpd.cli import main

    assert main(["list", "trimmed_mean"]) == 0
    out = capsys.readouterr().out
    assert "pre = []" in out and "bucket_size = 2" in out and "n_byzantine = unset" in out


def test_fedpd_list_names_each_step_with_its_paper_equations_and_where_it_goes(capsys, monkeypatch):
    from fedpd.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    papers = {"nnm": "Allouah et al., AISTATS 2023, Alg. 1", "bucketing": "Karimireddy, He, Jaggi, ICLR 2022",
              "arc": "ICLR 2025"}
    reads = {"nnm": "n_byzantine  (required)", "bucketing": "bucket_size = 2", "arc": "n_byzantine  (required)"}
    for step, paper in papers.items():
        assert main(["list", step]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"pre-aggregation {step}: ") and paper in " ".join(out.split())
        assert f'algorithm.aggregator_options.pre = "{step}"' in out and reads[step] in out  # its own options
        assert max(map(len, out.splitlines())) <= 80, step
    assert main(["list", "nnm"]) == 0
    assert "y_i = (1/(K − f)) Σ_{j∈N_i} x_j" in capsys.readouterr().out  # the equation, as laid out
    assert main(["list"]) == 0
    everything = capsys.readouterr().out
    assert main(["list", "pre-aggregation"]) == 0
    block = capsys.readouterr().out
    assert block.startswith("pre-aggregation:") and block in everything and "fedavg" not in block
    for step in papers:
        assert re.search(rf"^  {step}  ", block, re.M), step


def test_the_docs_config_block_loads_as_written():
    """docs/algorithms.md's [algorithm] block of a chain with client momentum is a valid config."""
    import tomllib

    text = (ROOT / "docs" / "algorithms.md").read_text()
    block = text.split("### Heterogeneous clients", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    cfg = load_config({**tomllib.loads(block), "problem": {"name": "least_squares", "clients": 20, "dim": 2,
                                                           "samples_per_client": 3}})
    algorithm = cfg.options["algorithm"]
    assert algorithm.client_momentum == 0.9 and algorithm.aggregator_options["pre"] == ["arc", "nnm"]
