"""Every config under benchmarks/configs/ loads and validates (without running, without data), states
its source, and the generated A-FedPD table configs match their generator, so none of them rot."""

from __future__ import annotations

import importlib.util

import pytest

from fedpd import registry
from fedpd.config import load_config
from fedpd.data.loaders import canonical_name
from fedpd.models import MODELS

from helpers import ROOT

CONFIGS = sorted((ROOT / "benchmarks" / "configs").rglob("*.toml"))


def _generator():
    spec = importlib.util.spec_from_file_location(
        "_make_afedpd_configs", ROOT / "benchmarks" / "make_afedpd_configs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configs_exist():
    names = {p.relative_to(ROOT / "benchmarks" / "configs").as_posix() for p in CONFIGS}
    assert {"mnist_fedavg_logistic.toml", "femnist_fedpd_cnn.toml", "fedplus_mnist_robust.toml",
            "fedplus_mnist_personal.toml", "afedpd_cifar10/afedpd_dir0.1.toml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT / "benchmarks" / "configs").as_posix())
def test_config_validates(path):
    text = path.read_text()
    header = text.split("\n[", 1)[0]
    assert text.startswith("#") and "Source:" in header, "the header comment must state its source table"
    cfg = load_config(path)  # every section's options, names and types (ConfigError otherwise)
    problem = cfg.section("problem")
    if problem["name"] == "dataset":
        canonical_name(problem["dataset"])  # a dataset fedpd knows
        name = cfg.model.get("name", "auto")
        assert name == "auto" or name in MODELS


def test_afedpd_configs_match_generator():
    gen = _generator()
    folder = ROOT / "benchmarks" / "configs" / "afedpd_cifar10"
    expected = {f"{m}_{s}.toml": gen.render(m, s) for m in gen.METHODS for s in gen.SPLITS}
    assert {p.name for p in folder.glob("*.toml")} == set(expected)
    for name, text in expected.items():
        assert (folder / name).read_text() == text, f"{name} differs: rerun benchmarks/make_afedpd_configs.py"
    # the A-FedPD Table 2 methods that fedpd implements are all there
    assert {"fedavg", "fedcm", "scaffold", "fedsam", "feddyn", "fedspeed", "afedpd", "afedpdsam"} <= set(gen.METHODS)
    assert set(gen.METHODS) <= set(registry.ALGORITHMS)


def test_afedpd_setup_is_the_table_caption():
    cfg = load_config(ROOT / "benchmarks" / "configs" / "afedpd_cifar10" / "feddyn_dir0.1.toml")
    p, s = cfg.section("problem"), cfg.section("solver")
    assert (p["dataset"], p["clients"], p["partition"], p["alpha"]) == ("cifar10", 100, "dirichlet", 0.1)
    assert (s["local_steps"], s["batch_size"], cfg.section("sampler")["clients_per_round"]) == (50, 50, 10)
    assert cfg.model["name"] == "lenet"
