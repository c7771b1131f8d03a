"""The configs of tests/engines/test_thread_independence.py, run in this (fresh) process:
``python tests/thread_matrix.py ENGINE [NAME ...]`` prints {name: metrics history, wall_s left out}
as JSON. The thread count is the environment's (OMP_NUM_THREADS), which is also what torch uses
while the data are built.

One config of each family, each large enough that a sum fedpd left to torch would be split over
threads (above torch's 32 768-element grain size): real data subsampled and standardised (MNIST,
float64 and float32), the MLP (d ≈ 1.6·10^5) with SAM's normalised ascent, a primal-dual method, a
Fed+ method under attack, a robust aggregator under ALIE, adaptive-clipping DP and a
variance-reduced method."""

from __future__ import annotations

import json
import os
import sys

MNIST = {"name": "dataset", "dataset": "mnist", "clients": 10, "max_samples": 2000, "max_test_samples": 1000}
SGD = {"name": "sgd", "lr": 0.1, "local_steps": 2, "batch_size": 50}
CASES = {
    "mnist_fedavg_float64": {"problem": MNIST, "algorithm": {"name": "fedavg"}, "solver": SGD,
                             "run": {"dtype": "float64"}},
    "mnist_fedavg_gd_float64": {"problem": MNIST, "algorithm": {"name": "fedavg"},  # full-batch GD on MNIST
                                "solver": {"name": "gd", "lr": 1.0, "local_steps": 4}, "run": {"dtype": "float64"}},
    "mnist_mlp_fedsam_float32": {"problem": {**MNIST, "partition": "dirichlet"}, "model": {"name": "mlp"},
                                 "algorithm": {"name": "fedsam"}, "solver": SGD,
                                 "sampler": {"name": "uniform", "clients_per_round": 3}},
    "mnist_median_alie_float64": {"problem": MNIST, "algorithm": {"name": "fedavg", "aggregator": "coordinate_median"},
                                  "solver": SGD, "attack": {"name": "alie", "fraction": 0.2},
                                  "run": {"dtype": "float64"}},
    "mnist_dp_adaptive_float64": {"problem": MNIST, "algorithm": {"name": "fedavg"}, "solver": SGD,
                                  "sampler": {"name": "bernoulli", "q": 0.5},
                                  "privacy": {"clip": "adaptive", "noise_multiplier": 1.0, "quantile_noise": 1.0},
                                  "run": {"dtype": "float64"}},
    "synthetic_fedpd": {"problem": {"name": "synthetic", "alpha": 1.0, "beta": 1.0},
                        "algorithm": {"name": "fedpd"}, "solver": {**SGD, "lr": 0.05, "batch_size": 10}},
    "fedplus_regression_fedgeomed_signflip": {"problem": {"name": "fedplus_regression"},
                                              "algorithm": {"name": "fedgeomed_plus", "sigma": 10.0, "delta": 2.0},
                                              "solver": {"name": "gd", "lr": 0.003, "local_steps": 5},
                                              "attack": {"name": "sign_flip", "fraction": 0.2},
                                              "run": {"personal_eval": "always"}},
    "logreg_parallel_saga": {"problem": {"name": "fedpd_logreg", "non_iid": "strong"},
                             "algorithm": {"name": "parallel_saga"}},
    # simulated time: lognormal devices that come and go, a deadline; and FedBuff on the same fleet
    "mnist_fleet_deadline_float32": {"problem": MNIST, "model": {"name": "mlp"}, "algorithm": {"name": "fedavg"},
                                     "solver": SGD, "sampler": {"name": "uniform", "clients_per_round": 4},
                                     "system": {"speed": {"dist": "lognormal", "median": 1e8, "sigma": 1.0},
                                                "availability": "markov", "mean_on_s": 30.0, "mean_off_s": 10.0,
                                                "deadline_s": 2.0}},
    "synthetic_fedbuff": {"problem": {"name": "synthetic", "clients": 20}, "algorithm": {"name": "fedadam"},
                          "solver": {**SGD, "lr": 0.05, "batch_size": 10},
                          "system": {"speed": {"dist": "classes", "values": [1e5, 1e6], "shares": [0.3, 0.7]}},
                          "asynchronous": {"concurrency": 5, "buffer": 2}},
}
ENGINES = {"inprocess": {}, "loopback": {"engine": "loopback", "nodes": 2}}
#: the configs that read MNIST from $FEDPD_DATA
NEEDS_DATA = [name for name, cfg in CASES.items() if cfg["problem"].get("dataset")]


def config(name: str, engine: str) -> dict:
    cfg = json.loads(json.dumps(CASES[name]))
    if "asynchronous" not in cfg:
        cfg.setdefault("sampler", {"name": "all"})
    cfg["run"] = {**cfg.get("run", {}), "rounds": 2, "eval_every": 1, "seed": 0, **ENGINES[engine]}
    return cfg


def main(engine: str, names: list[str]) -> None:
    from fedpd.runner import run

    out = {}
    for name in names:
        history = run(config(name, engine)).history
        out[name] = [{k: v for k, v in m.items() if k != "wall_s"} for m in history]
    print(json.dumps(out))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    main(sys.argv[1], sys.argv[2:] or list(CASES))
