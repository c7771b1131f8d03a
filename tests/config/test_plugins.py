"""A user's own model, data and algorithm: import paths wherever a config takes a name,
entry points of installed distributions, where modules are found, what a run records of them,
what a node may import, and every bad input as one line and exit status 2 with nothing written.

The user's code lives in pytest's temporary directories, outside the repository; each module
has a fresh name (tests/user_plugins.py), and entry points come from a temporary distribution
(a ``*.dist-info`` directory) put on ``sys.path``, so nothing is installed."""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pytest
import tomli_w
import torch

import fedpd
from fedpd import names, plugins, registry
from fedpd.config import load_config
from fedpd.engine import InProcessEngine
from fedpd.remote.engine import LoopbackTransport
from fedpd.remote.node import NodeRuntime
from fedpd.simulation import Simulation
from helpers import run_cli
from user_plugins import write_module

DATA = '''
import numpy as np
import torch
from torch import nn


def bars(seed, n, size=8):
    """4 classes of 8x8 images (a horizontal or vertical bar, top/left or bottom/right half) by 6 writers."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    writer = rng.integers(0, 6, n)
    x = rng.normal(0.0, 0.3, (n, 1, size, size)).astype(np.float32)
    for i, (label, w) in enumerate(zip(y, writer)):
        k = (1 + w % 3) if label % 2 == 0 else size - 2 - w % 3
        if label < 2:
            x[i, 0, k, :] += 1.0
        else:
            x[i, 0, :, k] += 1.0
    return x, y, writer


def load():
    x, y, w = bars(0, 240)
    xt, yt, wt = bars(1, 60)
    return x, y, xt, yt, w, wt


def load_mapping():
    x, y, xt, yt, w, wt = load()
    return {"x_train": torch.from_numpy(x), "y_train": torch.from_numpy(y), "x_test": xt, "y_test": yt,
            "client_train": w, "client_test": wt}


def load_plain():
    return load()[:4]


class SmallCNN(nn.Module):
    def __init__(self, input_shape, num_classes, width=4):
        super().__init__()
        c, h, w = input_shape
        self.conv = nn.Conv2d(c, width, 3, padding=1)
        self.norm = nn.GroupNorm(1, width)
        self.fc = nn.Linear(width * (h // 2) * (w // 2), num_classes)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.norm(self.conv(x))), 2)
        return self.fc(h.flatten(1))


def batch_norm(input_shape, num_classes):
    c, h, w = input_shape
    return nn.Sequential(nn.Conv2d(c, 2, 3, padding=1), nn.BatchNorm2d(2), nn.Flatten(),
                         nn.Linear(2 * h * w, num_classes))


def one_too_many(input_shape, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), num_classes + 1))


def one_argument(input_shape):
    return nn.Linear(1, 1)


def needs_depth(input_shape, num_classes, depth):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), num_classes))


def mismatched():
    x, y, xt, yt = load_plain()
    return x, y[:-1], xt, yt


def words():
    x, y, xt, yt = load_plain()
    return np.array([["a"]] * len(y)), y, xt, yt


def float_labels():
    x, y, xt, yt = load_plain()
    return x, y.astype(np.float32), xt, yt


def out_of_range():
    x, y, xt, yt = load_plain()
    return {"x_train": x, "y_train": y, "x_test": xt, "y_test": yt, "num_classes": 3}


def raises():
    raise RuntimeError("the disk is on fire")


NOT_CALLABLE = 3
'''

BASE = {"solver": {"name": "sgd", "lr": 0.1, "local_steps": 2, "batch_size": 8},
        "sampler": {"name": "uniform", "clients_per_round": 3},
        "run": {"rounds": 3, "eval_every": 1, "dtype": "float64"}}


@pytest.fixture(scope="module")
def user_data(tmp_path_factory) -> tuple[Path, str]:
    directory = tmp_path_factory.mktemp("user_data")
    return directory, write_module(directory, DATA, "my_data")


def dataset_config(module: str, loader: str = "load", model: str = "SmallCNN", **problem) -> dict:
    return {"problem": {"name": "dataset", "dataset": f"{module}:{loader}", "partition": "natural", **problem},
            "model": {"name": f"{module}:{model}"}, "algorithm": {"name": "fedavg"}, **BASE}


def records(history) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in history]


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(tomli_w.dumps(cfg))
    return path


# --- where modules are found, what a run records ----------------------------------------------
def test_a_config_files_directory_is_searched_and_the_run_records_the_module(user_data, tmp_path, monkeypatch,
                                                                             capsys):
    directory, module = user_data
    path = write_config(directory / f"{module}_run.toml", dataset_config(module))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = run_cli(["run", path, "--out", tmp_path / "run", "--quiet"], capsys)
    assert code == 0, err
    saved = (tmp_path / "run" / "config.toml").read_text()
    assert f'"{module}:load"' in saved and f'"{module}:SmallCNN"' in saved  # the import paths, as given
    record = json.loads((tmp_path / "run" / "plugins.json").read_text())
    assert str(directory) in record["path"]
    entry = record["modules"][module]
    assert entry["file"] == str(directory / f"{module}.py")
    import hashlib

    assert entry["sha256"] == hashlib.sha256((directory / f"{module}.py").read_bytes()).hexdigest()


def test_the_current_directory_is_searched(user_data, monkeypatch):
    directory, module = user_data
    monkeypatch.chdir(directory)
    assert load_config(dataset_config(module)).plugin_modules == {module: "import path"}


def test_a_run_without_plugins_writes_no_record(tmp_path):
    fedpd.run({"problem": {"name": "least_squares"}, "algorithm": {"name": "fedavg"}, "run": {"rounds": 1}},
              tmp_path / "run")
    assert not (tmp_path / "run" / "plugins.json").exists()


def test_resume_finds_the_module_again_and_says_when_it_changed(tmp_path, monkeypatch, capsys):
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    module = write_module(code_dir, "from fedpd.algorithms import FedAvg\n\nclass Mine(FedAvg):\n    pass\n")
    cfg = {"problem": {"name": "least_squares", "clients": 4}, "algorithm": {"name": f"{module}:Mine"},
           "solver": {"name": "gd", "lr": 0.1}, "run": {"rounds": 2, "eval_every": 1, "dtype": "float64"}}
    path = write_config(code_dir / "mine.toml", cfg)
    monkeypatch.chdir(tmp_path)  # neither the run directory nor the current one holds the module
    straight = fedpd.run(path, overrides=["run.rounds=4"]).history
    assert run_cli(["run", path, "--out", tmp_path / "run", "--quiet"], capsys)[0] == 0
    code, out, err = run_cli(["run", "--resume", tmp_path / "run", "--set", "run.rounds=3", "--quiet"], capsys)
    assert code == 0 and "changed" not in err, err
    (code_dir / f"{module}.py").write_text((code_dir / f"{module}.py").read_text() + "# a comment\n")
    code, out, err = run_cli(["run", "--resume", tmp_path / "run", "--set", "run.rounds=4", "--quiet"], capsys)
    notes = [line for line in err.splitlines() if line.startswith("fedpd: note:")]
    assert code == 0 and len(notes) == 1 and module in notes[0] and "changed" in notes[0], err
    resumed = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records(resumed) == records(straight)  # a comment changes no number


OTHER_KINDS = '''
import torch
from pydantic import Field

import fedpd
from fedpd.attacks import Attack
from fedpd.problems.synthetic import least_squares
from fedpd.sampling import UniformK


def small_least_squares(clients=4, seed=0):
    """A user's problem: fedpd's least squares with other defaults."""
    return least_squares(clients=clients, dim=3, samples_per_client=8, seed=seed)


class Options(fedpd.Options):
    clients: int = Field(4, ge=1)
    seed: int = Field(0, ge=0)


small_least_squares.Options = Options


class FirstK(UniformK):
    """A user's sampler: always the clients 0 .. K-1."""

    def sample(self, round, generator):
        return torch.arange(self.k)


@fedpd.declares("mean", fedpd.NoOptions, "A user's aggregator: the mean, saying how it went.")
def mean(w, weights=None):
    return w.mean(0), {"iterations": 0, "converged": True}
'''


def test_a_problem_sampler_and_aggregator_of_ones_own(tmp_path, monkeypatch):
    module = write_module(tmp_path, OTHER_KINDS, "other_kinds")
    monkeypatch.chdir(tmp_path)
    mine = fedpd.run({"problem": {"name": f"{module}:small_least_squares", "clients": 5},
                      "sampler": {"name": f"{module}:FirstK", "clients_per_round": 2},
                      "algorithm": {"name": "fedavg", "aggregator": f"{module}:mean", "weights": "samples"},
                      "solver": {"name": "exact"}, "run": {"rounds": 2}})
    theirs = fedpd.run({"problem": {"name": "least_squares", "clients": 5, "dim": 3, "samples_per_client": 8},
                        "sampler": {"name": "uniform", "clients_per_round": 2}, "algorithm": {"name": "fedavg"},
                        "solver": {"name": "exact"}, "run": {"rounds": 2}})
    assert mine.simulation.num_clients == 5 and mine.simulation.participants(7).tolist() == [0, 1]
    assert "agg_iterations" in mine.history[-1]  # the aggregator ran (counters kept)
    assert mine.history[0]["train_loss"] == theirs.history[0]["train_loss"]  # the same problem


# --- a user's model and data ------------------------------------------------------------------
def test_a_users_loader_and_model_go_through_fedpds_pipeline(user_data, monkeypatch):
    """The natural partition of the loader's client ids (and each client's own test samples),
    max_samples, the model factory's options, the disk store, per-client execution."""
    directory, module = user_data
    monkeypatch.chdir(directory)
    sim = Simulation(load_config({**dataset_config(module), "model": {"name": f"{module}:SmallCNN", "width": 3}}))
    data = __import__(module)
    x, y, xt, yt, w, wt = data.load()
    assert sim.num_clients == 6 and sim.problem.info["num_classes"] == 4
    assert sim.problem.train.sizes.tolist() == np.bincount(w).tolist()
    assert sim.problem.test.sizes.tolist() == np.bincount(wt).tolist()
    assert sim.problem.model.module.conv.out_channels == 3
    reference = records(fedpd.run(dataset_config(module)).history)
    for overrides in (["run.store=disk"], ["run.execution=per_client"], ["run.client_chunk=1"]):
        got = records(fedpd.run(dataset_config(module), overrides=overrides).history)
        if "run.execution=per_client" in overrides:  # another order of floating-point sums
            assert [r["round"] for r in got] == [r["round"] for r in reference]
            np.testing.assert_allclose([r["train_loss"] for r in got], [r["train_loss"] for r in reference],
                                       rtol=1e-10)
        else:
            assert got == reference, overrides
    small = Simulation(load_config(dataset_config(module, max_samples=100)))
    assert int(small.problem.train.sizes.sum()) == 100
    assert reference[-1]["train_loss"] < reference[0]["train_loss"]


def test_a_loader_may_return_a_mapping_of_torch_tensors(user_data, monkeypatch):
    directory, module = user_data
    monkeypatch.chdir(directory)
    assert records(fedpd.run(dataset_config(module, "load_mapping")).history) == \
        records(fedpd.run(dataset_config(module)).history)


def test_a_loader_without_clients_takes_fedpds_partitions(user_data, monkeypatch):
    directory, module = user_data
    monkeypatch.chdir(directory)
    cfg = dataset_config(module, "load_plain", partition="dirichlet", clients=5, alpha=0.5)
    assert Simulation(load_config(cfg)).num_clients == 5


def test_a_user_model_resumes_exactly(user_data, tmp_path, monkeypatch):
    directory, module = user_data
    monkeypatch.chdir(directory)
    cfg = dataset_config(module)
    straight = records(fedpd.run(cfg, overrides=["run.rounds=4"]).history)
    fedpd.run(cfg, tmp_path / "run", overrides=["run.rounds=2"])
    assert records(fedpd.run(resume=tmp_path / "run", overrides=["run.rounds=4"]).history) == straight


# --- bad input: one line, exit status 2, nothing written ---------------------------------------
BAD = [
    # (config changes, what the one line must say)
    ({"algorithm": {"name": "no_such_module_xyz:Algo"}}, "no module named 'no_such_module_xyz'"),
    ({"algorithm": {"name": "{data}:NoSuchThing"}}, "has no attribute 'NoSuchThing'"),
    ({"algorithm": {"name": "{data}:load"}}, "is not an Algorithm subclass"),
    ({"algorithm": {"name": "fedavg", "aggregator": "{data}:NOT_CALLABLE"}}, "is not callable"),
    ({"algorithm": {"name": "{broken}:Algo"}}, "ModuleNotFoundError: No module named 'not_installed_anywhere'"),
    ({"model": {"name": "{data}:one_argument"}}, "a model factory takes (input_shape, num_classes"),
    ({"model": {"name": "{data}:SmallCNN", "depth": 3}}, "model.depth: unknown option"),
    ({"model": {"name": "{data}:needs_depth"}}, "model.depth: missing"),
    ({"model": {"name": "{data}:one_too_many"}}, "gives outputs of shape (1, 5)"),
    ({"model": {"name": "{data}:batch_norm"}}, "has a BatchNorm2d layer (1) with running statistics"),
    ({"model": {"name": "{data}:batch_norm"}, "run": {"dtype": "float32"}}, "BatchNorm2d(..., track_running_stats"),
    ({"problem": {"dataset": "{data}:mismatched"}}, "different lengths"),
    ({"problem": {"dataset": "{data}:words"}}, "x_train of dtype <U1"),
    ({"problem": {"dataset": "{data}:float_labels"}}, "integer labels"),
    ({"problem": {"dataset": "{data}:out_of_range"}}, "label 3, out of range (allowed: 0..2"),
    ({"problem": {"dataset": "{data}:raises"}}, "raised RuntimeError: the disk is on fire"),
    ({"problem": {"dataset": "{data}:NOT_CALLABLE"}}, "is not callable"),
    ({"problem": {"dataset": "{data}:load_plain", "vocab_size": 10}}, "problem.vocab_size"),
]


@pytest.mark.parametrize(("change", "needle"), BAD, ids=[n for _, n in BAD])
def test_bad_plugins_are_one_line_and_exit_2_with_nothing_written(change, needle, user_data, tmp_path, capsys):
    directory, module = user_data
    broken = write_module(directory, "import not_installed_anywhere\n", "broken")
    cfg = dataset_config(module)
    for section, values in change.items():
        values = {k: v.format(data=module, broken=broken) if isinstance(v, str) else v for k, v in values.items()}
        cfg[section] = {**cfg[section], **values}
        if section == "algorithm":
            cfg[section] = values
    path = write_config(directory / f"bad_{len(needle)}_{abs(hash(needle))}.toml", cfg)
    code, out, err = run_cli(["run", path, "--out", tmp_path / "run", "--quiet"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("fedpd: error: "), err
    assert needle in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


def test_show_model_refuses_the_factories_run_refuses(user_data, tmp_path, monkeypatch, capsys):
    """``fedpd show model`` and ``fedpd run`` apply one signature rule (and say it alike)."""
    directory, module = user_data
    monkeypatch.chdir(directory)
    path = write_config(tmp_path / "c.toml", {**dataset_config(module), "model": {"name": f"{module}:one_argument"}})
    code, _, run_err = run_cli(["run", path, "--out", tmp_path / "run", "--quiet"], capsys)
    assert code == 2
    code, _, show_err = run_cli(["show", "model", f"{module}:one_argument"], capsys)
    reason = "takes (input_shape); a model factory takes (input_shape, num_classes, **options)"
    assert code == 2 and reason in show_err and reason in run_err, (show_err, run_err)
    code, out, err = run_cli(["show", "model", f"{module}:needs_depth"], capsys)  # an option a config gives
    assert code == 0 and "depth  (required)" in out, err


# --- entry points of an installed distribution --------------------------------------------------
def distribution(site: Path, entry_points: str, name: str = "mydist") -> None:
    """A distribution as pip would leave it, without installing anything: ``site/NAME-1.0.dist-info``."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[fedpd.plugins]\n{entry_points}\n")


ENTRY_MODULE = '''
from pydantic import Field
from fedpd.algorithms import FedAvg


class Damped(FedAvg):
    """FedAvg that moves halfway."""

    description = "FedAvg whose server moves a fraction of the way"

    class Options(FedAvg.Options):
        gamma: float = Field(0.5, gt=0, le=1, description="how far the server moves")

    def __init__(self, gamma=0.5, **options):
        super().__init__(**options)
        self.gamma = gamma
'''


@pytest.fixture
def site(tmp_path, monkeypatch) -> tuple[Path, str]:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    return site, write_module(site, ENTRY_MODULE, "entry_mod")


def test_an_entry_point_is_listed_shown_and_runs(site, capsys):
    site, module = site
    distribution(site, f"algorithm.damped = {module}:Damped")
    code, out, _ = run_cli(["list", "algorithms"], capsys)
    line = next(line for line in out.splitlines() if line.strip().startswith("damped"))
    assert code == 0 and "entry point of distribution mydist 1.0" in out and "FedAvg whose server" in line
    code, out, _ = run_cli(["list", "damped"], capsys)
    assert code == 0 and "gamma = 0.5" in out and "how far the server moves" in out
    result = fedpd.run({"problem": {"name": "least_squares"}, "algorithm": {"name": "damped", "gamma": 0.25},
                        "solver": {"name": "gd"}, "run": {"rounds": 2}})
    assert type(result.simulation.algorithm).__name__ == "Damped" and result.simulation.algorithm.gamma == 0.25


def test_entry_points_name_a_dataset_loader_and_a_model(site, capsys):
    site, _ = site
    module = write_module(site, DATA, "entry_data")
    distribution(site, f"dataset.bars = {module}:load\nmodel.small_cnn = {module}:SmallCNN")
    code, out, _ = run_cli(["list", "models"], capsys)
    assert code == 0 and "small_cnn" in out
    cfg = {**dataset_config(module), "problem": {"name": "dataset", "dataset": "bars", "partition": "natural"},
           "model": {"name": "small_cnn", "width": 2}}
    sim = Simulation(load_config(cfg))
    assert sim.num_clients == 6 and sim.problem.model.module.conv.out_channels == 2


def test_a_dataset_entry_point_is_listed_shown_and_split(site, capsys):
    """``fedpd list``, ``fedpd list NAME``, ``fedpd show dataset NAME``, ``fedpd data list`` and
    ``fedpd data split NAME`` know an installed loader."""
    site, _ = site
    module = write_module(site, DATA, "entry_data")
    distribution(site, f"dataset.bars = {module}:load")
    code, out, err = run_cli(["list"], capsys)
    assert code == 0 and "datasets:" in out and any(line.split()[:1] == ["bars"] for line in out.splitlines()), err
    assert "entry point of distribution mydist 1.0" in out
    for args in (["list", "bars"], ["show", "dataset", "bars"]):
        code, out, err = run_cli(args, capsys)
        assert code == 0 and 'dataset = "bars"' in out, (args, err)
    code, out, err = run_cli(["list", "dataset"], capsys)  # still the problem of that name
    assert code == 0 and "problem dataset:" in out, err
    code, out, err = run_cli(["data", "list"], capsys)
    assert code == 0 and any(line.split()[:2] == ["bars", "plug-in"] for line in out.splitlines()), out
    code, out, err = run_cli(["data", "split", "bars", "--partition", "natural"], capsys)
    assert code == 0 and "natural partition of 240 training samples" in out, err


def test_a_clash_with_a_built_in_stops_the_run_that_names_it_and_is_a_line_of_the_listing(site, tmp_path, capsys,
                                                                                          monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    site, module = site
    distribution(site, f"algorithm.fedavg = {module}:Damped")
    config = write_config(tmp_path / "c.toml", {"problem": {"name": "least_squares"}, "algorithm": {"name": "fedavg"}})
    code, out, err = run_cli(["run", config, "--out", tmp_path / "run"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "clashes with the built-in algorithm 'fedavg'" in err
    assert not (tmp_path / "run").exists()
    code, out, err = run_cli(["list"], capsys)
    assert code == 0 and "fedpd: note: 1 installed plug-in cannot be used" in err, err
    [line] = [line for line in out.splitlines() if "clashes with the built-in algorithm 'fedavg'" in line]
    assert line.split()[:4] == ["fedavg", "!", "cannot", "be"]


def test_an_entry_point_named_without_its_kind_names_nothing_and_is_listed(site, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    site, module = site
    distribution(site, f"fedavg2 = {module}:Damped")
    config = write_config(tmp_path / "c.toml", {"problem": {"name": "least_squares"}, "algorithm": {"name": "fedavg"},
                                                "run": {"rounds": 1}})
    code, _, err = run_cli(["run", config, "--out", tmp_path / "run", "--quiet"], capsys)
    assert code == 0, err  # it names nothing a config uses: no run is stopped by it
    code, _, err = run_cli(["run", config, "--out", tmp_path / "run2", "--set", 'algorithm.name="fedavg2"'], capsys)
    assert code == 2 and "unknown algorithm 'fedavg2'" in err and "must be <kind>.<name>: algorithm.fedavg2" in err
    code, out, err = run_cli(["list"], capsys)
    assert code == 0 and "1 installed plug-in cannot be used" in err
    assert "entry point 'fedavg2' of distribution mydist 1.0 (group fedpd.plugins): its name must be" in out


def test_every_clash_is_a_line_of_the_listing_not_only_the_first(site, capsys, monkeypatch):
    """Every clash, each a line under its kind, and the listing of everything else
    intact (exit 0, a note on stderr)."""
    monkeypatch.setenv("COLUMNS", "400")  # each entry on one line
    site, module = site
    agg = write_module(site, AGGREGATOR, "clash_agg")
    distribution(site, f"algorithm.damped = {module}:Damped\nalgorithm.fedprox = {module}:Damped\n"
                       f"aggregator.first_row = {agg}:first_row\nsampler.mine = {module}:Field")
    distribution(site, f"algorithm.damped = {module}:Other\naggregator.first_row = {agg}:other", name="otherdist")
    code, out, err = run_cli(["list"], capsys)
    assert code == 0 and "fedpd: note: 4 installed plug-ins cannot be used" in err, err
    marked = {line.split()[0]: line for line in out.splitlines() if " ! cannot be used: " in line}
    assert set(marked) == {"damped", "fedprox", "first_row", "mine"}
    for name in ("damped", "first_row"):
        assert "is declared by both distribution mydist 1.0 and distribution otherdist 1.0" in marked[name]
    assert "clashes with the built-in algorithm 'fedprox'" in marked["fedprox"]
    assert "declares no Options" in marked["mine"]  # a sampler must declare its options
    assert any(line.split()[:1] == ["fedavg"] for line in out.splitlines())  # the built-ins are all there


def test_a_clash_stops_only_what_uses_the_name_and_names_its_key(site, tmp_path, capsys):
    """One rule for every kind — two distributions declaring one name, or an entry point
    taking a built-in's name, stop a run that uses that name (one line naming its config key) and
    no other run."""
    site, module = site
    data = write_module(site, DATA, "clash_data")
    distribution(site, f"algorithm.damped = {module}:Damped\nmodel.mlp = {data}:SmallCNN\n"
                       f"dataset.mnist = {data}:load\nsampler.bernoulli = {data}:load")
    distribution(site, f"algorithm.damped = {module}:Other", name="otherdist")
    least_squares = {"problem": {"name": "least_squares"}, "solver": {"name": "gd"}, "run": {"rounds": 1}}
    fedpd.run({**least_squares, "algorithm": {"name": "fedavg"}})  # uses none of the clashing names
    bars = {**dataset_config(data), "problem": {"name": "dataset", "dataset": f"{data}:load", "partition": "natural"},
            "model": {"name": f"{data}:SmallCNN"}}
    fedpd.run(bars)
    for change, needle in [
        ({"algorithm": {"name": "damped"}}, "algorithm.name: entry point 'algorithm.damped' is declared by both"),
        ({"model": {"name": "mlp"}}, "model.name: entry point 'model.mlp' of distribution mydist 1.0 clashes "
                                     "with the built-in model 'mlp'"),
        ({"problem": {"name": "dataset", "dataset": "mnist"}}, "problem.dataset: entry point 'dataset.mnist'"),
        ({"sampler": {"name": "bernoulli"}}, "sampler.name: entry point 'sampler.bernoulli'"),
    ]:
        base = bars if "model" in change else least_squares
        cfg = {"algorithm": {"name": "fedavg"}, **base, **change}
        path = write_config(tmp_path / "c.toml", cfg)
        code, _, err = run_cli(["run", path, "--out", tmp_path / "run", "--quiet"], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, (needle, err)
        assert not (tmp_path / "run").exists()


AGGREGATOR = '''
import fedpd


def first_row(w, weights=None):
    """The first upload, whatever the others say."""
    return w[0], {}


first_row.Options = fedpd.NoOptions
'''


def test_one_module_resolves_every_kind_in_one_order(site):
    """``fedpd.names.resolve`` decides for every kind, in one order: an import path is that
    attribute; a built-in name is the built-in, and an entry point may not take it; an entry
    point's name is what it names; anything else is unknown — each message the same for every kind."""
    site, module = site
    data, agg = write_module(site, DATA, "order_data"), write_module(site, AGGREGATOR, "order_agg")
    distribution(site, f"algorithm.damped = {module}:Damped\nmodel.small_cnn = {data}:SmallCNN\n"
                       f"aggregator.first_row = {agg}:first_row")
    distribution(site, f"algorithm.fedavg = {module}:Damped\nmodel.mlp = {data}:SmallCNN\n"
                       f"aggregator.mean = {agg}:first_row", name="clashing")
    cases = {"algorithm": ("fedprox", f"{module}:Damped", "damped"),
             "model": ("lenet", f"{data}:SmallCNN", "small_cnn"),
             "aggregator": ("krum", f"{agg}:first_row", "first_row")}
    clashing = {"algorithm": "fedavg", "model": "mlp", "aggregator": "mean"}
    for kind, (builtin, path, entry_point) in cases.items():
        table = registry.KINDS[kind]
        found = names.resolve(table, builtin)
        assert found is table.builtins[builtin] and found.origin == names.BUILT_IN
        by_path, by_name = names.resolve(table, path), names.resolve(table, entry_point)
        assert by_path.origin == "import path" and by_name.origin == "entry point of distribution mydist 1.0"
        assert by_path.build is by_name.build and by_path.module == by_name.module
        clash = rf"^entry point '{kind}\.{clashing[kind]}' of distribution clashing 1\.0 clashes with the built-in "
        with pytest.raises(plugins.PluginError, match=clash + rf"{kind} '{clashing[kind]}'"):
            names.resolve(table, clashing[kind])
        allowed = f"(allowed: {', '.join(table.builtins)}, {entry_point}, or an import path package.module:Attribute)"
        with pytest.raises(plugins.PluginError) as err:
            names.resolve(table, "nosuch")
        assert str(err.value) == f"unknown {kind} 'nosuch' {allowed}"
        with pytest.raises(fedpd.ConfigError) as err:
            names.resolve(table, None, key=f"{kind}.name")
        assert str(err.value) == f"{kind}.name: missing {allowed}"


# --- what a node may import ---------------------------------------------------------------------
def test_allowed_plugins_are_module_prefixes():
    assert plugins.parse_allowed(" mypkg, other.sub ,") == ("mypkg", "other.sub")
    with plugins.restricted(("mypkg",)):
        plugins._check_allowed("mypkg")
        plugins._check_allowed("mypkg.algos")
        for refused in ("mypkgevil", "other", "other.mypkg"):
            with pytest.raises(plugins.PluginError, match=f"'{refused}' is not allowed"):
                plugins._check_allowed(refused)
    with pytest.raises(fedpd.ConfigError, match="allowed-plugins"):
        plugins.parse_allowed("my-pkg")


def test_a_node_refuses_a_module_it_does_not_allow_and_its_uploads_are_rejected(user_algorithms, tmp_path,
                                                                               monkeypatch, capsys):
    """Node 0 allows another package: it answers train with one line naming the module, and the
    server counts its clients' uploads as rejected; node 1 allows the module and trains."""
    directory, module = user_algorithms
    monkeypatch.chdir(directory)
    cfg = load_config({"problem": {"name": "least_squares", "clients": 6}, "algorithm": {"name": f"{module}:MyFedAvg"},
                       "solver": {"name": "gd"}, "run": {"rounds": 2, "engine": "loopback", "dtype": "float64"}})
    transport = LoopbackTransport({0: NodeRuntime([0, 1, 2], tmp_path / "n0", durable=False, allowed=("other",)),
                                   1: NodeRuntime([3, 4, 5], tmp_path / "n1", durable=False, allowed=(module,))})
    sim = Simulation(cfg, workdir=tmp_path, transport=transport)
    sim.step()
    assert sim.comm.rejected_uploads == 3 and sim.comm.uplink_floats == 3 * sim.problem.dim
    node_log, server_log = capsys.readouterr().err.strip().splitlines()  # (one process here: both logs)
    refused = f"plug-in module '{module}' is not allowed on this node"
    assert node_log.startswith("fedpd node (clients 0-2): train of round 1 refused: ") and refused in node_log
    assert server_log.startswith("fedpd: the node of clients 0-2 (node id 0): train failed (") and refused in \
        server_log and "in round 1; its 3 upload(s) rejected" in server_log
    x1 = sim.server["x0"]
    # the same round in process, with node 0's clients left out: the server averaged node 1's alone
    reference = Simulation(load_config(cfg, ["run.engine=inprocess"]))
    assert isinstance(reference.engine, InProcessEngine)
    up, _ = reference.algorithm.local(reference.algorithm.broadcast(reference.server), {},
                                      _context(reference, torch.tensor([3, 4, 5])))
    torch.testing.assert_close(x1, up["x"].mean(0), rtol=0, atol=0)


def _context(sim, ids):
    from helpers import context

    return context(sim, ids)


def test_a_simulated_flower_node_imports_from_the_runs_plugin_path(tmp_path, monkeypatch):
    """Flower's virtual SuperNodes (Ray actors: other processes, any current directory) add the
    plug-in path the server sends with each message, and then find the run's own modules."""
    pytest.importorskip("flwr")
    from fedpd.flower.clientapp import node_runtime
    from fedpd.remote.messages import Envelope

    code_dir = tmp_path / "code"
    code_dir.mkdir()
    module = write_module(code_dir, "from fedpd.algorithms import FedAvg\n\nclass Mine(FedAvg):\n    pass\n")
    config = tomli_w.dumps({"problem": {"name": "least_squares", "clients": 4},
                            "algorithm": {"name": f"{module}:Mine"}})
    monkeypatch.chdir(tmp_path)
    context = types.SimpleNamespace(node_config={"partition-id": 1, "num-partitions": 2})
    without = Envelope("hello", {"config": config, "store-root": str(tmp_path / "nodes")})
    with pytest.raises(fedpd.ConfigError, match=f"no module named '{module}'"):
        node_runtime(context, without)
    with_path = Envelope("hello", {**without.config, "plugin-path": [str(code_dir)]})
    assert node_runtime(context, with_path).hosted == [2, 3]


# --- other processes and places that rebuild a config --------------------------------------------
def test_sweep_workers_import_the_configs_plugins(tmp_path, monkeypatch, capsys):
    """fedpd sweep's spawned worker processes find a module beside the config, run from elsewhere."""
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    module = write_module(code_dir, "from fedpd.algorithms import FedAvg\n\nclass Mine(FedAvg):\n    pass\n")
    path = write_config(code_dir / "mine.toml", {"problem": {"name": "least_squares", "clients": 4},
                                                 "algorithm": {"name": f"{module}:Mine"}, "solver": {"name": "gd"},
                                                 "run": {"rounds": 2}})
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["sweep", path, "--seeds", "1,2", "--jobs", "2", "--out", tmp_path / "sweep", "--quiet"],
                             capsys)
    assert code == 0, err
    assert all((tmp_path / "sweep" / "mine" / s / "metrics.jsonl").is_file() for s in ("s1", "s2"))


def test_the_roots_of_plugin_modules_are_where_they_were_found(tmp_path, monkeypatch):
    package = tmp_path / "pkg_root" / "my_pkg_roots"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "algos.py").write_text("from fedpd.algorithms import FedAvg\n\nclass Mine(FedAvg):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg_root"))
    cfg = load_config({"problem": {"name": "least_squares"}, "algorithm": {"name": "my_pkg_roots.sub.algos:Mine"}})
    assert plugins.roots(cfg.plugin_modules) == (str((tmp_path / "pkg_root").resolve()),)
    assert plugins.roots(["my_pkg_roots"]) == (str((tmp_path / "pkg_root").resolve()),)


def test_a_flower_app_of_a_plugin_config_has_a_name_flower_accepts(user_algorithms, tmp_path, monkeypatch):
    pytest.importorskip("flwr")
    import re
    import tomllib

    from fedpd.flower.deploy import write_app

    directory, module = user_algorithms
    monkeypatch.chdir(directory)
    for algorithm in (f"{module}:DualAverage", "fedgeomed_plus"):
        cfg = load_config({"problem": {"name": "fedplus_regression"}, "algorithm": {"name": algorithm}})
        app = write_app(cfg, tmp_path / algorithm.replace(":", "_"), tmp_path / "run")
        name = tomllib.loads((app / "pyproject.toml").read_text())["project"]["name"]
        assert re.fullmatch(r"[a-z][a-z0-9-]{0,31}", name) and not name.endswith("-"), name
