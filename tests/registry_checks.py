"""What every registered rule, pre-aggregation step and attack must be — checked by iterating the
registries, never by a list of names, so that adding one (a function or a class in its module, listed
in its tuple, plus its own test) fails no other test. tests/defences/test_rules.py, test_printed_tables.py,
test_plugins.py and test_reproduce.py run these over the built-ins;
tests/config/test_extension_points.py over a new rule, step and attack added the way a built-in is."""

from __future__ import annotations

import torch
from pydantic import BaseModel

from fedpd import registry
from fedpd.aggregators import RULES
from fedpd.attacks import Attack
from fedpd.defence import build_defence
from fedpd.preaggregators import STEPS, Step


def _example(model: type[BaseModel]) -> dict | None:
    """Options for ``model`` with every required key at 1 (None where 1 is no value for it)."""
    values = {k: 1 for k, f in model.model_fields.items() if f.is_required()}
    try:
        model.model_validate(values)
    except Exception:
        return None
    return values


def check_rule(name: str, fn) -> None:
    """A rule declares its name, options model and one-line description, and aggregates rows."""
    assert callable(fn) and fn.name == name, name
    assert isinstance(fn.description, str) and fn.description and "\n" not in fn.description, name
    assert isinstance(fn.Options, type) and issubclass(fn.Options, BaseModel), name
    options = _example(fn.Options)
    if options is None or getattr(fn, "chosen_by", ""):
        return
    defence = build_defence(name, options)
    assert defence.min_rows >= 1, name
    rows = torch.randn(max(defence.min_rows, 12), 3, generator=torch.Generator().manual_seed(0),
                       dtype=torch.float64)
    agg, info = defence.aggregate(rows, reference=torch.zeros(3, dtype=torch.float64))
    assert agg.shape == (3,) and isinstance(info, dict), name


def check_step(name: str, cls) -> None:
    """A step is a Step subclass with its options model and one line, and maps rows to rows."""
    assert isinstance(cls, type) and issubclass(cls, Step) and cls.name == name, name
    assert cls.description and "\n" not in cls.description, name
    assert issubclass(cls.Options, BaseModel), name
    options = _example(cls.Options) or {}
    step = cls(**options)
    need = step.rows_needed(3)
    rows = torch.randn(max(need, 12), 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out = step(rows, torch.zeros(3, dtype=torch.float64), torch.Generator().manual_seed(2))
    assert out.dim() == 2 and out.shape[1] == 3 and out.shape[0] >= 1, name


def check_attack(name: str, entry) -> None:
    """An attack is an Attack subclass with its options model and one line."""
    assert isinstance(entry.build, type) and issubclass(entry.build, Attack), name
    assert entry.description and "\n" not in entry.description, name


def check_listing(out: str) -> None:
    """``fedpd list``'s output names every registered rule, step and attack with its one line."""
    flat = " ".join(out.split())
    aggregators = out.split("\naggregators:\n", 1)[1].split("\nsolvers:", 1)[0]
    for name, entry in registry.AGGREGATORS.items():
        assert f"  {name}  " in aggregators, name
        assert " ".join(entry.description.split()[:3]) in " ".join(aggregators.split()), name
    steps = out.split("\npre-aggregation:\n", 1)[1]
    for name, cls in STEPS.items():
        assert f"  {name}  " in steps and " ".join(cls.description.split()[:3]) in flat, name
    for name, entry in registry.ATTACKS.items():
        assert f"  {name}  " in out and " ".join(entry.description.split()[:3]) in flat, name


def check_all() -> None:
    """Every registry entry of the three kinds."""
    for name, fn in RULES.items():
        check_rule(name, fn)
    for name, cls in STEPS.items():
        check_step(name, cls)
    for name, entry in registry.ATTACKS.items():
        check_attack(name, entry)


def check_robustness_grid() -> None:
    """The robustness experiment's medium grid runs what it declares — its methods against its attacks,
    each heterogeneous rule alone, after NNM and after bucketing where the rule accepts the buckets —
    and names only registered rules and attacks. It need not hold every one: a new rule or attack is
    its own file and test, and joins the experiment when its grid names it."""
    from fedpd.aggregators import min_rows
    from fedpd.reproduce import robustness as R

    runs = R.Robustness().runs(R.Robustness.budgets["medium"])
    attacks = {s.config["attack"]["name"] for s in runs if "attack" in s.config}  # (the DP curve runs none)
    rules = {s.config["algorithm"].get("aggregator", "mean") for s in runs}
    assert attacks <= set(registry.ATTACKS) and rules <= set(RULES)
    main = [s for s in runs if s.labels["part"] == "attacks"]
    assert {s.labels["method"] for s in main} == set(R.METHODS) and {s.labels["attack"] for s in main} == set(R.ATTACKS)
    hetero = [s for s in runs if s.labels["part"] == "hetero"]
    assert {s.labels["attack"] for s in hetero} == set(R.H_ATTACKS)
    chains = {(s.config["algorithm"].get("aggregator", "mean"),
               str(s.config["algorithm"].get("aggregator_options", {}).get("pre", ""))) for s in hetero}
    for _, rule, options in R.H_RULES.values():
        assert {(rule, ""), (rule, "nnm")} <= chains, rule
        takes_buckets = min_rows(rule, {**options, "pre": "bucketing", "bucket_size": 2}) <= R.H_N
        assert ((rule, "bucketing") in chains) == takes_buckets, rule
