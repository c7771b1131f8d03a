"""Configs a fuzzer found that crashed, hung, half-wrote a run or were silently ignored — each now
refused in one line with exit status 2 and nothing written, or run as it should. The property-based
test (test_config_property.py) makes it hold for configs nobody listed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tomli_w

from fedpd import names, plugins, registry
from fedpd.config import Unset, load_config
from fedpd.errors import ConfigError
from helpers import BASE, config_file, refused, run_cli, runs
from user_plugins import write_module


# --- a valid combination that crashed in round 1 -------------------------------------------
def test_primal_dual_with_every_client_and_virtual_duals_runs(tmp_path, capsys):
    """participation = all, dual_mean = all, virtual_dual = true: A-FedPD's sets with every
    client every round (KeyError 'D' in round 1 before); equal to A-FedPD under full participation
    (tests/algorithms/test_primal_dual.py)."""
    path = config_file(tmp_path, algorithm={"name": "primal_dual", "participation": "all", "dual_mean": "all",
                                       "virtual_dual": True}, run={"rounds": 2})
    runs(tmp_path, capsys, path)


# --- plug-ins checked before anything of them is called ------------------------------------
#: callables of the standard library a fuzzer named: refused before the module is imported
DANGEROUS = ["sys:exit", "os:abort", "signal:pause", "builtins:input", "os:fork"]
HARMLESS = ["time:time", "json:loads", "builtins:object", "this:s"]
KEYS = ["problem.name", "sampler.name", "attack.name", "algorithm.aggregator", "problem.dataset"]


def with_key(key: str, value: str) -> dict:
    section, name = key.split(".")
    cfg = {s: dict(v) for s, v in BASE.items()}
    if key == "problem.dataset":
        cfg["problem"] = {"name": "dataset"}
    cfg.setdefault(section, {})[name] = value
    if key == "problem.name":  # a plug-in problem takes its own options, not least squares'
        cfg["problem"] = {"name": value}
    return cfg


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("value", DANGEROUS)
def test_a_dangerous_callable_is_refused_before_it_is_imported(key, value):
    """Checked through load_config alone: were one accepted by mistake, nothing would call it
    (the run builds the objects later) and the test process could not exit, abort, hang or fork."""
    with pytest.raises(ConfigError) as err:
        load_config(with_key(key, value))
    message = str(err.value)
    assert message.startswith(f"{key}: module '{value.split(':')[0]}' is part of Python's standard library")
    assert "\n" not in message


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("value", HARMLESS)
def test_a_standard_library_callable_is_one_line_and_writes_nothing(key, value, tmp_path, capsys):
    if value == "this:s" and "this" in sys.modules:
        pytest.skip("'this' already imported in this process (its Zen prints once)")
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps(with_key(key, value)))
    line = refused(tmp_path, capsys, path)  # stdout empty: no Zen of Python
    assert line.startswith(f"{key}: module ") and "standard library" in line
    assert "this" not in sys.modules


USER_PLUGINS = '''
import torch
from pydantic import Field

import fedpd
from fedpd.attacks import Attack
from fedpd.problems.synthetic import least_squares
from fedpd.sampling import UniformK


def no_options():
    """A function that declares nothing: not a plug-in of any kind that asks for Options."""
    return least_squares(clients=4, dim=3)


class SmallOptions(fedpd.Options):
    clients: int = Field(4, ge=1)


@fedpd.declares("wrong_signature", SmallOptions, "takes no clients")
def wrong_signature(dim):
    return least_squares(clients=4, dim=dim)


@fedpd.declares("not_a_problem", fedpd.NoOptions, "returns a string")
def not_a_problem():
    return "a problem"


class NoCount(UniformK):
    """A sampler whose constructor does not take the number of clients."""

    def __init__(self, clients_per_round):
        super().__init__(10, clients_per_round)


class NoSample:
    """Declares options and takes the right arguments, but cannot sample."""

    Options = fedpd.NoOptions

    def __init__(self, num_clients):
        self.num_clients = num_clients


class NotAnAttack:
    Options = fedpd.NoOptions


def needs_a_path(path):
    """A loader must be a function of no arguments."""
    raise AssertionError("never called")


@fedpd.declares("two_rows", fedpd.NoOptions, "returns the wrong shape")
def two_rows(w, weights=None):
    return w[:2], {}
'''

USER_CASES = [
    ({"problem": {"name": "{m}:no_options"}}, "problem.name: {m}:no_options declares no Options"),
    ({"problem": {"name": "{m}:wrong_signature"}}, "problem.name: {m}:wrong_signature(dim) cannot be called as fedpd "
                                                   "calls a problem plug-in, (clients=...)"),
    ({"problem": {"name": "{m}:not_a_problem"}}, "problem.name: {m}:not_a_problem gave a str, not a fedpd Problem"),
    ({"sampler": {"name": "{m}:NoCount", "clients_per_round": 2}}, "sampler.name: {m}:NoCount(clients_per_round) "
                                                                   "cannot be called"),
    ({"sampler": {"name": "{m}:NoSample"}}, "sampler.name: {m}:NoSample gave a NoSample, not a sampler"),
    ({"attack": {"name": "{m}:NotAnAttack"}}, "attack.name: {m}:NotAnAttack is not an Attack subclass"),
    ({"algorithm": {"name": "fedavg", "aggregator": "{m}:no_options"}}, "algorithm.aggregator: {m}:no_options "
                                                                        "declares no Options"),
    ({"problem": {"name": "dataset", "dataset": "{m}:needs_a_path"}}, "problem.dataset: {m}:needs_a_path(path) cannot "
                                                                      "be called as fedpd calls a dataset plug-in, ()"),
]


@pytest.fixture(scope="module")
def user_module(tmp_path_factory) -> tuple[Path, str]:
    directory = tmp_path_factory.mktemp("bad_plugins")
    return directory, write_module(directory, USER_PLUGINS, "bad_plugins")


@pytest.mark.parametrize(("change", "needle"), USER_CASES)
def test_a_users_callable_of_the_wrong_kind_is_one_line(change, needle, user_module, tmp_path, capsys, monkeypatch):
    directory, module = user_module
    monkeypatch.chdir(directory)
    sections = {s: {k: v.format(m=module) if isinstance(v, str) else v for k, v in values.items()}
                for s, values in change.items()}
    # a section is merged into BASE's, but a problem replaces least squares' (its options are its own)
    cfg = {**BASE, **{s: v if s == "problem" else {**BASE.get(s, {}), **v} for s, v in sections.items()}}
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps(cfg))
    assert refused(tmp_path, capsys, path).startswith(needle.format(m=module))


def test_an_aggregator_that_returns_the_wrong_shape_is_one_line(user_module, tmp_path, capsys, monkeypatch):
    """What an aggregator gives is known only once it runs: one line then, in round 1, and the
    new run's directory is taken away (nothing to resume before a first checkpoint)."""
    directory, module = user_module
    monkeypatch.chdir(directory)
    path = config_file(tmp_path, algorithm={"aggregator": f"{module}:two_rows"})
    line = refused(tmp_path, capsys, path)
    assert line.startswith(f"algorithm.aggregator: {module}:two_rows returned an aggregate of shape (2, 3) for 5 "
                           f"rows of (3,)")


def test_a_run_stopped_by_bad_input_before_its_first_checkpoint_leaves_nothing(tmp_path, capsys):
    """The exact solver on clients with fewer samples than features and nothing else to make
    their local problem strictly convex: no unique minimiser, found in round 1. The run's own
    files go (config.toml, metrics.jsonl, the disk store), what the directory held stays."""
    path = config_file(tmp_path, problem={"samples_per_client": 2}, solver={"name": "exact", "lr": None,
                                                                       "local_steps": None},
                  run={"rounds": 3, "store": "disk"})
    assert refused(tmp_path, capsys, path).startswith("solver.name: the exact local problem of client 0 and others "
                                                      "has no unique minimiser")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    code, _, err = run_cli(["run", path, "--out", tmp_path / "run", "--quiet"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["notes.txt"]
    runs(tmp_path / "ok", capsys, config_file(tmp_path, problem={"samples_per_client": 2, "ridge": 0.1},
                                          solver={"name": "exact", "lr": None, "local_steps": None}))


def test_what_a_name_of_each_kind_must_be_is_checked_before_it_is_called():
    """The kinds' checks, read from their signatures and declarations alone: nothing is called."""
    called = []

    def spy(*args, **kwargs):
        called.append(args)

    spy.Options = None  # declares nothing
    for kind in ("problem", "solver", "sampler", "aggregator"):
        with pytest.raises(plugins.PluginError, match="declares no Options"):
            names._plugin(registry.KINDS[kind], "spy", plugins.Plugin(spy, "import path"))
    with pytest.raises(plugins.PluginError, match="is not an Attack subclass"):
        names._plugin(registry.KINDS["attack"], "spy", plugins.Plugin(spy, "import path"))
    assert called == []


# --- files and values the TOML reader refuses ------------------------------------------
def test_deep_nesting_is_one_line_in_a_file_a_set_and_a_dict(tmp_path, capsys):
    deep = "[" * 500 + "1" + "]" * 500
    path = tmp_path / "deep.toml"
    path.write_text(f"[run]\nxx = {deep}\n")
    assert "nested too deeply" in refused(tmp_path, capsys, path)
    assert refused(tmp_path, capsys, config_file(tmp_path), "--set", f"run.xx={deep}").startswith(
        "--set run.xx: arrays or tables nested too deeply")
    value = 1
    for _ in range(5000):
        value = [value]
    with pytest.raises(ConfigError, match="nests values too deeply"):
        load_config({**BASE, "run": {"eval_metrics": value}})


def test_a_file_with_bare_cr_line_endings_is_refused_as_toml_refuses_it(tmp_path, capsys):
    path = tmp_path / "cr.toml"
    path.write_bytes(b'[problem]\rname = "least_squares"\r[algorithm]\rname = "fedavg"\r')
    assert "bare CR" in refused(tmp_path, capsys, path)
    path.write_bytes(tomli_w.dumps(BASE).replace("\n", "\r\n").encode())  # CRLF is TOML
    runs(tmp_path, capsys, path)


# --- numbers bounded by what they are used for -----------------------------------------
@pytest.mark.parametrize(("sections", "needle"), [
    ({"run": {"threads": 2**31}}, "run.threads: input should be less than or equal to 1024"),
    ({"run": {"rounds": 2**63}}, "run.rounds: 9223372036854775808 is out of range"),
    ({"attack": {"name": "sign_flip", "parties": [2**63]}}, "attack.parties: 9223372036854775808 is out of range"),
    ({"solver": {"local_steps": 2**63 - 1}}, "solver.local_steps: input should be less than or equal to 100000"),
    ({"algorithm": {"name": "fedavg_plus", "party_steps": [10**9] * 5}},
     "algorithm.party_steps.0: input should be less than or equal to 100000"),
    ({"algorithm": {"name": "pfedme", "inner_steps": 10**9}}, "algorithm.inner_steps: input should be less than"),
    ({"algorithm": {"name": "fedadagrad", "tau": 1e300}}, "algorithm.tau: 1e+300 is out of range (allowed: numbers "
                                                          "of at most 1e+100"),  # τ² overflowed Python's floats
    ({"problem": {"clients": 10**12}}, "problem.clients: 1000000000000 clients x 18 samples x 3 features needs about"),
    ({"solver": {"name": "sgd", "local_steps": 100_000, "batch_size": 8},
      "problem": {"name": "synthetic", "clients": 10**6, "samples_per_client": None}},
     "solver.local_steps: the minibatch draws of a round (100000 local steps x 1000000 clients x 8 samples"),
])
def test_numbers_too_large_for_what_they_are_used_for(sections, needle, tmp_path, capsys):
    assert refused(tmp_path, capsys, config_file(tmp_path, **sections)).startswith(needle)


# --- attacks -------------------------------------------------------------------------
def test_label_flip_on_the_synthetic_problem_runs(tmp_path, capsys):
    """Its classes were counted with numpy's max(initial=), which torch's max does not take."""
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps({**BASE, "problem": {"name": "synthetic", "clients": 5},
                                   "attack": {"name": "label_flip", "parties": []}}))
    out = runs(tmp_path, capsys, path)
    assert "parties = []" in (out / "config.toml").read_text()


@pytest.mark.parametrize(("attack", "needle"), [
    ({"name": "alie", "fraction": 1.0}, "attack.fraction: 1 makes all 5 clients Byzantine; alie forges"),
    ({"name": "ipm", "parties": [0, 1, 2, 3, 4]}, "attack.parties: [0, 1, 2, 3, 4] makes all 5 clients Byzantine"),
    ({"name": "sign_flip", "parties": [0], "fraction": 0.8}, "attack.fraction: attack.parties names the parties ([0]); "
                                                             "give fraction or parties, not both"),
    ({"name": "sign_flip", "parties": [0, 0]}, "attack.parties: party 0 named twice in [0, 0]"),
    ({"name": "sign_flip", "parties": [-1]}, "attack.parties.0: input should be greater than or equal to 0"),
])
def test_attacks_that_would_be_ignored_or_contradict_themselves(attack, needle, tmp_path, capsys):
    assert refused(tmp_path, capsys, config_file(tmp_path, attack=attack)).startswith(needle)


# --- run options a run would ignore ---------------------------------------------------
def test_run_options_that_would_be_ignored(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    for run, needle in [
        ({"store": "disk", "store_dir": str(tmp_path / "a_file")}, "exists and is not a directory"),
        ({"store": "disk", "store_dir": "a\0b"}, "run.store_dir: 'a\\x00b' holds a NUL byte"),
        ({"eval_clients": 6}, "run.eval_clients: 6 exceeds the problem's 5 clients (allowed: 1..5, or 0"),
        ({"nodes": 3}, "run.nodes: 3 nodes are the loopback and flower engines'"),
    ]:
        assert needle in refused(tmp_path, capsys, config_file(tmp_path, run=run)), run
    assert not (tmp_path / "a_file").read_text()


def test_set_and_unset_of_one_key_is_refused(tmp_path, capsys):
    line = refused(tmp_path, capsys, config_file(tmp_path), "--set", "run.rounds=3", "--unset", "run.rounds")
    assert line == "--unset run.rounds: also given a value by --set run.rounds=... (allowed: one of the two)"
    with pytest.raises(ConfigError, match="--unset run.rounds"):
        load_config(BASE, [Unset("run.rounds"), "run.rounds=3"])


# --- a hook that returns a state of the wrong shape -----------------------------------------
BAD_HOOKS = '''
import torch
from fedpd.algorithms import FedAvg


class BadServer(FedAvg):
    def init_server(self, x0):
        return {"x0": torch.cat([x0, x0])}


class BadAggregate(FedAvg):
    def aggregate(self, server, uploads, ctx):
        new, reply = super().aggregate(server, uploads, ctx)
        return {**new, "x0": new["x0"][:-1]}, reply


class BadClient(FedAvg):
    def init_client(self, x0):
        return {"c": torch.zeros(2, 2, dtype=x0.dtype)}

    def local(self, message, clients, ctx):
        up, _ = super().local(message, clients, ctx)
        return up, {"c": torch.zeros(ctx.ids.numel(), 5, dtype=clients["c"].dtype)}


class BadReceive(BadClient):
    def local(self, message, clients, ctx):
        return FedAvg.local(self, message, clients, ctx)[0], clients

    def aggregate(self, server, uploads, ctx):
        new, _ = super().aggregate(server, uploads, ctx)
        return new, {"c": torch.zeros(2, 2)}

    def receive(self, clients, reply, ctx):
        return {}


class BadEval(FedAvg):
    def evaluation_model(self, server, clients):
        return server["x0"][None]
'''


@pytest.mark.parametrize(("name", "needle"), [
    ("BadServer", "BadServer.init_server returned server state 'x0' of shape (6,) (allowed: (3,), the model's)"),
    ("BadAggregate", "BadAggregate.aggregate returned server state 'x0' of shape (2,) (allowed: (3,)"),
    ("BadClient", "BadClient.local returned client state 'c' of shape (5, 5) for 5 clients (allowed: (5, 2, 2), "
                  "init_client's (2, 2) for each)"),
    ("BadReceive", "BadReceive.receive returned no client state 'c'"),
    ("BadEval", "BadEval.evaluation_model returned a model of shape (1, 3) (allowed: (3,)"),
])
def test_a_hook_that_returns_the_wrong_shape_is_one_line_naming_it(name, needle, tmp_path, capsys, monkeypatch):
    module = write_module(tmp_path, BAD_HOOKS, "bad_hooks")
    monkeypatch.chdir(tmp_path)
    path = config_file(tmp_path, algorithm={"name": f"{module}:{name}"})
    assert refused(tmp_path, capsys, path).startswith(f"algorithm.name: {needle}")
