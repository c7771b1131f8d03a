"""No option a user sets is silently ignored: one the chosen combination would not read is one
line and exit status 2 with nothing written — [privacy] without clip (no DP at all), adaptive
clipping's options with a fixed clip, bucketing's s without bucketing, the disk store or a node
timeout where nothing uses them. An option that only keeps its default (every key of a run's own
config.toml) is never refused, and a resume checks only what it sets."""

from __future__ import annotations


import pytest

import fedpd
from fedpd.config import load_config
from fedpd.errors import ConfigError
from helpers import BASE, config_file, refused, run_cli, runs

#: a data set's problem (its options are checked when the config is, before any file is read)
DATASET = {"name": "dataset", "dataset": "mnist"}


# --- [privacy]: DP or a refusal, never neither -------------------------------------------------
@pytest.mark.parametrize("key, value", [("noise_multiplier", 5.0), ("target_epsilon", 1.0), ("accountant", "pld")])
def test_privacy_options_without_clip_are_refused(key, value, tmp_path, capsys):
    line = refused(tmp_path, capsys, config_file(tmp_path, privacy={key: value}))
    assert line.startswith(f"privacy.{key}: set, but privacy.clip is not: the run would have no differential "
                           f"privacy"), line
    assert 'privacy.clip = "fixed" or "adaptive"' in line


def test_clip_none_written_out_switches_the_section_off(tmp_path, capsys):
    """The off switch (a private config's non-private baseline): it says no DP, so nothing is
    silently lost; the run is the one without [privacy]."""
    out = runs(tmp_path, capsys, config_file(tmp_path, privacy={"noise_multiplier": 5.0}), "--set", "privacy.clip=none")
    assert "privacy" not in (out / "config.toml").read_text()


@pytest.mark.parametrize("key, value", [("target_quantile", 0.7), ("clip_lr", 0.5), ("quantile_noise", 2.0)])
def test_adaptive_clipping_options_with_a_fixed_clip_are_refused(key, value, tmp_path, capsys):
    path = config_file(tmp_path, privacy={"clip": "fixed", key: value}, sampler={"name": "all"})
    line = refused(tmp_path, capsys, path)
    assert line.startswith(f"privacy.{key}: adaptive clipping's, and privacy.clip = \"fixed\""), line


def test_a_private_runs_own_config_runs_again(tmp_path, capsys):
    """Its config.toml states every privacy option, the adaptive ones at their defaults."""
    first = runs(tmp_path, capsys, config_file(tmp_path, privacy={"clip": "fixed"}, sampler={"name": "all"}), out="a")
    assert "target_quantile" in (first / "config.toml").read_text()
    runs(tmp_path, capsys, first / "config.toml", out="b")


# --- pre-aggregation -------------------------------------------------------------------------
@pytest.mark.parametrize("options, needle", [
    ({"pre": "nnm", "n_byzantine": 1, "bucket_size": 3}, "aggregator_options.bucket_size: bucketing's s, but pre = "
                                                         "['nnm'] has no bucketing"),
    ({"pre": ["arc"], "n_byzantine": 1, "bucket_size": 2}, "aggregator_options.bucket_size: bucketing's s, but pre = "
                                                           "['arc'] has no bucketing"),
    ({"pre": "bucketing", "n_byzantine": 1}, "aggregator_options.n_byzantine: read by nnm, arc, krum and bulyan"),
])
def test_pre_aggregation_options_no_step_reads_are_refused(options, needle, tmp_path, capsys):
    path = config_file(tmp_path, algorithm={"aggregator": "trimmed_mean",
                                       "aggregator_options": {"trim_ratio": 0.2, **options}})
    assert needle in refused(tmp_path, capsys, path)


# --- [run]: the options of an engine the run does not use --------------------------------------
@pytest.mark.parametrize("run, needle", [
    ({"engine": "loopback", "store": "disk"}, 'run.store: "disk" is the inprocess engine\'s client store; '
                                              'run.engine = "loopback" keeps the clients\' states on its nodes'),
    ({"engine": "loopback", "store_dir": "{tmp}/state"}, "run.store_dir: the inprocess engine's disk store directory"),
    ({"engine": "loopback", "store_dir": "{tmp}/a_file"}, "run.store_dir: the inprocess engine's disk store directory"),
    ({"store": "memory", "store_dir": "{tmp}/state"}, 'run.store_dir: the disk store\'s directory, and run.store = '
                                                      '"memory" keeps no files'),
    ({"engine": "loopback", "node_timeout": 5e-324}, "run.node_timeout: loopback nodes run in this process"),
    ({"workers": 1, "node_timeout": 30.0}, "run.node_timeout: the time to wait for a worker process, and "
                                           "run.workers = 1 starts none"),
    ({"execution": "per_client", "client_chunk": 2}, "run.client_chunk: vectorised execution's clients"),
])
def test_run_options_the_engine_does_not_use_are_refused(run, needle, tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    path = config_file(tmp_path, run={k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in run.items()})
    assert refused(tmp_path, capsys, path).startswith(needle)
    assert (tmp_path / "a_file").read_text() == "" and not (tmp_path / "state").exists()


def test_run_options_at_their_defaults_are_not_refused(tmp_path, capsys):
    """A loopback run's resolved config states store, store_dir and node_timeout (at their defaults)."""
    path = tmp_path / "resolved.toml"
    path.write_text(load_config({**BASE, "run": {"rounds": 1, "engine": "loopback"}}).to_toml())
    assert 'store_dir = ""' in path.read_text() and "node_timeout = 600.0" in path.read_text()
    runs(tmp_path, capsys, path)


def test_a_resume_checks_what_it_sets(tmp_path, capsys):
    """A disk store's run moved to loopback nodes still reads its states from that store (the run's
    config.toml says store = "disk"); a node timeout a resume sets on loopback is refused."""
    first = runs(tmp_path, capsys, config_file(tmp_path, run={"store": "disk", "rounds": 1}))
    code, _, err = run_cli(["run", "--resume", first, "--set", "run.rounds=2", "--set", "run.engine=loopback",
                            "--quiet"], capsys)
    assert code == 0, err
    before = (first / "metrics.jsonl").read_text()
    code, _, err = run_cli(["run", "--resume", first, "--set", "run.rounds=3", "--set", "run.node_timeout=5",
                            "--quiet"], capsys)
    assert code == 2 and err.strip().startswith("fedpd: error: run.node_timeout: loopback nodes"), err
    assert (first / "metrics.jsonl").read_text() == before


# --- options of the solver, algorithms and problems --------------------------------------------
@pytest.mark.parametrize("sections, needle", [
    ({"solver": {"name": "sgd", "batch_size": 4, "local_steps": 2, "local_epochs": 2}},
     "solver.local_steps: local_epochs = 2 sets each client's steps"),
    ({"algorithm": {"name": "fedpd", "skip": "periodic"}, "sampler": {"name": "all"}},
     'algorithm.skip: "periodic" says how rounds are skipped, and p = 0 skips none'),
    ({"algorithm": {"name": "primal_dual", "skip": "periodic"}}, 'algorithm.skip: "periodic" says how rounds'),
    ({"algorithm": {"name": "apfl", "adaptive": False, "alpha_lr": 0.1}}, "algorithm.alpha_lr: the step of alpha, "
                                                                          "and adaptive = false"),
    ({"problem": {"name": "synthetic", "clients": 5, "iid": True, "beta": 0.5}}, "problem.beta: how much the "
                                                                                "clients differ, and iid = true"),
    ({"problem": {"name": "fedpd_logreg", "clients": 5, "heterogeneity": 0.5, "non_iid": "weak"}},
     "problem.non_iid: heterogeneity sets the agents' truths instead"),
    ({"problem": {"name": "fedplus_mnist", "noise_scale": 0.3}}, 'problem.noise_scale: the personal variant\'s noisy '
                                                                 'classes, and variant = "robust" adds none'),
    ({"attack": {"name": "sign_flip", "parties": [1], "seed": 3}}, "attack.seed: chooses the parties, and "
                                                                   "attack.parties names them ([1])"),
    # a data set's partition reads only its own options
    ({"problem": {**DATASET, "alpha": 0.1}}, 'problem.alpha: partition = "iid" does not read it (allowed: no alpha, '
                                             'or partition = dirichlet)'),
    ({"problem": {**DATASET, "partition": "dirichlet", "classes_per_client": 3}},
     'problem.classes_per_client: partition = "dirichlet" does not read it'),
    ({"problem": {**DATASET, "partition": "shards", "exponent": 2.0}}, 'problem.exponent: partition = "shards"'),
    ({"problem": {**DATASET, "partition": "shards", "min_size": 5}},
     'problem.min_size: partition = "shards" does not read it (allowed: no min_size, or partition = dirichlet, '
     'power_law, label_power_law)'),
    ({"problem": {**DATASET, "test_fraction": 0.3}}, 'problem.test_fraction: is the per_client test split\'s share'),
    ({"problem": {**DATASET, "partition": "natural", "clients": 50}}, "problem.clients: the natural partition has one "
                                                                      "client per user"),
])
def test_options_the_chosen_rule_does_not_read_are_refused(sections, needle, tmp_path, capsys):
    cfg = {k: dict(v) for k, v in BASE.items()}
    for name, values in sections.items():  # a problem or solver replaces BASE's (its options are its own)
        cfg[name] = values if name in ("problem", "solver") else {**cfg.get(name, {}), **values}
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert str(err.value).startswith(needle) and "\n" not in str(err.value)


def test_the_same_options_at_their_defaults_are_not_refused():
    for cfg in ({"problem": {"name": "synthetic", "iid": True, "alpha": 1.0, "beta": 1.0}},
                {"problem": {"name": "fedpd_logreg", "heterogeneity": 0.5, "non_iid": "strong"}},
                {"algorithm": {"name": "fedpd", "skip": "random"}, "sampler": {"name": "all"}},
                {"solver": {"name": "sgd", "local_epochs": 2, "local_steps": 8}},
                {"attack": {"name": "backdoor", "parties": [1], "seed": 3}},  # its seed picks the samples too
                {"problem": {**DATASET, "alpha": 0.5, "test_fraction": 0.2, "classes_per_client": 2}},
                {"problem": {**DATASET, "partition": "natural", "clients": 100}}):
        resolved = load_config({**BASE, **cfg}).resolved()  # every key stated, as in a run's config.toml
        load_config(resolved)


def test_a_python_config_is_refused_alike(tmp_path):
    with pytest.raises(ConfigError, match="privacy.noise_multiplier: set, but privacy.clip is not"):
        fedpd.run({**BASE, "privacy": {"noise_multiplier": 5.0}}, tmp_path / "run")
    assert not (tmp_path / "run").exists()
