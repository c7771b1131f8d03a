"""The defence a run builds once from its config and hands the algorithm: every algorithm whose server
averages models routes that average through it (and docs/fedplus.md lists exactly those), a rule
stopped by its cap is counted, the config's aggregator_options are read once, and each
pre-aggregation step has its own options and declared rows."""

from __future__ import annotations

import re

import pytest
import torch

from fedpd.aggregators import coordinate_median, min_rows
from fedpd.algorithms.fedopt import ServerOptimiser
from fedpd.algorithms.robust import RobustMeans
from fedpd.registry import ALGORITHMS
from fedpd.runner import run
from helpers import ROOT, context, server_context, simulation

DT = torch.float64


def _w(K=7, d=3, seed=0):
    return torch.randn(K, d, generator=torch.Generator().manual_seed(seed), dtype=DT)


# --- algorithms whose server averages models ------------------------------------------------
#: every algorithm with an ``aggregator`` key (generated, so a new one is tested and documented)
TAKES_ONE = sorted(name for name, entry in ALGORITHMS.items() if "aggregator" in entry.options.model_fields)


#: those whose server model is the aggregate of the model uploads (the others replace a mean inside
#: their step: tests/defences/test_robust_means.py)
AVERAGING = [name for name in TAKES_ONE if not issubclass(ALGORITHMS[name].build, RobustMeans)]


LS5 = {"name": "least_squares", "clients": 5, "dim": 3, "samples_per_client": 6}


GD2 = {"name": "gd", "lr": 0.05, "local_steps": 2}


def _aggregate_rows(name: str, rows: torch.Tensor, **options):
    """One server aggregation of ``name`` whose model uploads are replaced by ``rows``."""
    sim = simulation({"name": name, **options}, problem=LS5, solver=GD2)
    alg, ids = sim.algorithm, torch.arange(5)
    up, _ = alg.local(alg.broadcast(sim.server), sim.store.get(ids), context(sim, ids))
    key = next(k for k in up if k in alg.model_uploads)
    new, _ = alg.aggregate(sim.server, {**up, key: rows.to(up[key].dtype)}, server_context(sim, ids))
    return new, alg.diagnostics(new)


#: the FedOpt family's adaptive steps move from the aggregate (tests/algorithms/test_fedopt.py); FedAvgM with β = 0,
#: η = 1 is FedAvg
PLAIN = {"fedavgm": {"beta": 0.0}}


def _server_steps_from_the_aggregate(name: str) -> bool:
    return issubclass(ALGORITHMS[name].build, ServerOptimiser) and name not in PLAIN


@pytest.mark.parametrize("name", [n for n in AVERAGING if not _server_steps_from_the_aggregate(n)])
def test_averaging_algorithms_route_through_the_robust_aggregator(name):
    """coordinate_median ignores one huge outlier upload; the default mean does not."""
    rows = _w(K=5, d=3, seed=4)
    rows[0] = 1e6
    new, metrics = _aggregate_rows(name, rows, aggregator="coordinate_median", **PLAIN.get(name, {}))
    torch.testing.assert_close(new["x0"], coordinate_median(rows)[0], rtol=0, atol=1e-12)
    assert metrics["agg_iterations"] == 0 and metrics["agg_unconverged_rounds"] == 0
    plain, _ = _aggregate_rows(name, rows, aggregator="mean", **PLAIN.get(name, {}))
    assert float(plain["x0"].abs().max()) > 1e5


def test_docs_list_exactly_the_algorithms_that_take_an_aggregator():
    text = (ROOT / "docs" / "fedplus.md").read_text()
    marker = "`aggregator` is a key of exactly these algorithms:"
    assert marker in text
    listed = text.split(marker, 1)[1].split(".", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", listed)) == TAKES_ONE


@pytest.mark.parametrize("name", ["fedavg", "apfl"])
def test_unconverged_robust_aggregation_is_counted(name):
    """A geometric median stopped by its cap shows in ``agg_unconverged_rounds``."""
    def last(max_iter):
        cfg = {"problem": LS5, "solver": GD2, "run": {"rounds": 3},
               "algorithm": {"name": name, "aggregator": "geometric_median",
                             "aggregator_options": {"max_iter": max_iter, "tol": 1e-12}}}
        return run(cfg).history[-1]

    capped, free = last(1), last(1000)
    assert capped["agg_iterations"] == 1 and capped["agg_unconverged_rounds"] == 3
    assert 1 < free["agg_iterations"] < 1000 and free["agg_unconverged_rounds"] == 0


# --- the one defence object a run builds -------------------------------------------------------------
def test_a_run_reads_aggregator_options_once_into_the_defence_it_hands_the_algorithm_and_the_attack(monkeypatch):
    import warnings

    from fedpd import defence as defence_module
    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    reads = []
    real = defence_module.pipeline
    monkeypatch.setattr(defence_module, "pipeline", lambda *a, **k: reads.append(a) or real(*a, **k))
    cfg = load_config({"problem": {"name": "least_squares", "clients": 10, "dim": 3, "samples_per_client": 4},
                       "algorithm": {"name": "fedavg", "aggregator": "krum", "client_momentum": 0.5,
                                     "aggregator_options": {"n_byzantine": 1, "m": 2, "pre": ["arc", "nnm"]}},
                       "attack": {"name": "optimal_ipm", "fraction": 0.2, "evals": 3},
                       "run": {"rounds": 2, "store": "memory"}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the attack is handed the defence, not the algorithm
        sim = Simulation(cfg)
    sim.step()
    assert len(reads) == 1  # checked with the config, built from it, simulated by the attack: one reading
    defence = cfg.options["algorithm"].defence()
    assert sim.algorithm.defence is defence and sim.engine.attack.simulate.__self__ is defence
    assert defence.describe() == "ARC → NNM → krum" and defence.momentum.beta == 0.5
    assert [type(s).__name__ for s in defence.pipeline.steps] == ["ARC", "NNM"] and defence.min_rows == 5


def test_each_step_has_its_own_options_and_declared_rows():
    from fedpd.aggregators import pipeline

    chain = pipeline("krum", {"n_byzantine": 2, "pre": ["bucketing", "nnm"], "bucket_size": 3})
    bucketing, nnm = chain.steps
    assert bucketing.options == {"bucket_size": 3} and nnm.options == {"n_byzantine": 2}
    # Krum (f = 2) takes 7 rows; NNM leaves as many as it gets and needs 5; bucketing leaves ⌈K/3⌉ ≥ 7
    assert chain.rule.min_rows == 7 and nnm.rows_needed(7) == 7 and bucketing.rows_needed(7) == 19
    assert chain.min_rows == 19 == min_rows("krum", {"n_byzantine": 2, "pre": ["bucketing", "nnm"], "bucket_size": 3})
    assert pipeline("trimmed_mean", {"trim_ratio": 0.1, "pre": "nnm", "n_byzantine": 4}).min_rows == 9  # K > 2f
