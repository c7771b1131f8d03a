"""Adding a rule, a pre-aggregation step or an attack is its code plus its test, and nothing else fails.

A 10-line rule, step and attack (a user's module, outside the repository) are added to fedpd's
registries the way a built-in is — what listing one in its module's tuple does at import — and the
checks every registry-iterating test runs (tests/registry_checks.py: the declarations, ``fedpd list``,
the robustness experiment's grid) pass over them; each then runs in a config. The same rule named by
its import path, declaring the fewest uploads it takes, is refused before round 0 as Krum is."""

from __future__ import annotations

import pytest
import torch

import fedpd
from fedpd import aggregators, names, preaggregators, registry
from helpers import run_cli
from registry_checks import check_all, check_listing, check_robustness_grid
from user_plugins import write_module

CODE = '''
import torch
from pydantic import Field
import fedpd
from fedpd.aggregators import RuleOptions, coordinate_median
from fedpd.attacks import UpdateAttack
from fedpd.preaggregators import Step


class HalfwayOptions(RuleOptions):
    rows: int = Field(3, ge=1, description="the fewest rows it aggregates")

    def min_rows(self):
        return self.rows


@fedpd.declares("halfway", HalfwayOptions, "halfway between the mean and the coordinate median of the rows")
def halfway(w, weights=None, rows=3):
    return (w.mean(0) + coordinate_median(w)[0]) / 2, {"iterations": 0, "converged": True}


class Shrink(Step):
    name, description = "shrink", "each row moved a share of the way to the coordinate median of the rows"

    class Options(fedpd.Options):
        share: float = Field(0.5, gt=0, le=1, description="how far each row moves")

    def __init__(self, share=0.5):
        super().__init__(share=share)
        self.share = share

    def __call__(self, rows, reference=None, generator=None):
        return rows + self.share * (coordinate_median(rows)[0] - rows)


class ZeroUpdate(UpdateAttack):
    name, description = "zero_update", "uploads: the update replaced by none (the broadcast model)"

    def corrupted(self, u, ref, rng):
        return ref + 0 * u
'''

LS = {"name": "least_squares", "clients": 8, "dim": 3, "samples_per_client": 5}


@pytest.fixture
def added(tmp_path, monkeypatch):
    """The user's rule, step and attack, listed in fedpd's registries as a built-in is."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(write_module(tmp_path, CODE, "extension"))
    rule, step, attack = module.halfway, module.Shrink, module.ZeroUpdate
    for table in (aggregators.AGGREGATORS, aggregators.RULES):
        monkeypatch.setitem(table, rule.name, rule)
    for table in (aggregators.KIND.builtins, registry.AGGREGATORS):
        monkeypatch.setitem(table, rule.name, names.Entry(rule.name, rule, rule.Options, rule.description))
    monkeypatch.setitem(preaggregators.STEPS, step.name, step)
    monkeypatch.setitem(preaggregators.KIND.builtins, step.name, names.Entry(step.name, step, step.Options,
                                                                             step.description))
    monkeypatch.setitem(registry.ATTACKS, attack.name, names.Entry(attack.name, attack, attack.Options,
                                                                   attack.description))
    return module


def test_a_new_rule_step_and_attack_pass_every_registry_check(added, capsys):
    check_all()  # the declarations of every registered rule, step and attack
    code, out, _ = run_cli(["list"], capsys)
    assert code == 0
    check_listing(out)
    assert "halfway" in out and "shrink" in out and "zero_update" in out
    for name in ("halfway", "shrink"):
        code, out, _ = run_cli(["list", name], capsys)
        assert code == 0 and name in out.splitlines()[0]
    check_robustness_grid()  # the experiment's grid need not hold them


def test_the_new_rule_step_and_attack_run_in_a_config(added):
    cfg = {"problem": LS, "sampler": {"name": "uniform", "clients_per_round": 6}, "run": {"rounds": 2},
           "algorithm": {"name": "fedavg", "aggregator": "halfway",
                         "aggregator_options": {"pre": ["shrink", "nnm"], "share": 0.25, "n_byzantine": 1}},
           "attack": {"name": "zero_update", "fraction": 0.25}}
    history = fedpd.run(cfg).history
    assert history[-1]["agg_iterations"] == 0 and history[-1]["round"] == 2
    cfg["algorithm"] = {"name": "feddyn", "aggregator": "halfway"}  # and in a means-only step
    assert fedpd.run(cfg).history[-1]["round"] == 2


def test_a_plugin_rule_that_declares_its_minimum_is_refused_before_round_0(tmp_path, capsys):
    """The built-in Krum and the same Krum by its import path (declaring KrumOptions' 2f + 3 rows):
    6 uploads a round for f = 2, which needs 7 — both refused in one line, before anything runs."""
    module = write_module(tmp_path, '''
        import fedpd
        from fedpd.aggregators import KrumOptions, krum

        @fedpd.declares("my_krum", KrumOptions, "Krum, as a user writes it")
        def my_krum(w, weights=None, n_byzantine=0, m=1):
            return krum(w, n_byzantine, m=m)
        ''', "rules")
    for rule in ("krum", f"{module}:my_krum"):
        config = tmp_path / "krum.toml"
        config.write_text(f'[problem]\nname = "least_squares"\nclients = 8\n[sampler]\nname = "uniform"\n'
                          f'clients_per_round = 6\n[algorithm]\nname = "fedavg"\naggregator = "{rule}"\n'
                          f'aggregator_options = {{n_byzantine = 2}}\n[run]\nrounds = 2\n')
        code, out, err = run_cli(["run", config, "--out", tmp_path / "run", "--overwrite"], capsys)
        assert code == 2 and out == "" and not (tmp_path / "run" / "metrics.jsonl").exists(), (rule, out)
        assert len(err.strip().splitlines()) == 1 and "needs at least 7 uploads per round; the sampler gives 6" in err


def test_a_plugin_step_by_its_import_path_runs_and_is_checked(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    module = write_module(tmp_path, CODE, "steps")
    cfg = {"problem": LS, "sampler": {"name": "uniform", "clients_per_round": 6}, "run": {"rounds": 1},
           "algorithm": {"name": "fedavg", "aggregator": "coordinate_median",
                         "aggregator_options": {"pre": f"{module}:Shrink", "share": 0.5}}}
    assert fedpd.run(cfg).history[-1]["round"] == 1
    cfg["algorithm"]["aggregator_options"]["share"] = 2.0
    with pytest.raises(fedpd.ConfigError, match=r"^algorithm.aggregator_options.share: input should be less"):
        fedpd.run(cfg)
    cfg["algorithm"]["aggregator_options"] = {"pre": f"{module}:halfway"}  # a function, not a Step
    with pytest.raises(fedpd.ConfigError, match="^algorithm.aggregator_options.pre: .*not a pre-aggregation Step"):
        fedpd.run(cfg)


def test_a_users_fedavg_receives_the_runs_defence_as_one_keyword(tmp_path, monkeypatch):
    """A plug-in algorithm on FedAvg's options is constructed with ``defence`` in place of the
    aggregator keys; one whose signature still names them is refused in one line, before a call."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = write_module(tmp_path, '''
        from fedpd.algorithms import FedAvg

        class Named(FedAvg):
            def __init__(self, defence=None):
                super().__init__(defence)

        class Old(FedAvg):
            def __init__(self, aggregator="mean", aggregator_options=None, weights="uniform", client_momentum=0.0,
                         client_momentum_start="zero"):
                super().__init__()
        ''', "algorithms")
    cfg = {"problem": LS, "run": {"rounds": 1},
           "algorithm": {"name": f"{module}:Named", "aggregator": "trimmed_mean",
                         "aggregator_options": {"trim_ratio": 0.2}}}
    sim = fedpd.Simulation(fedpd.load_config(cfg))
    assert sim.algorithm.defence is sim.cfg.options["algorithm"].defence()
    assert sim.algorithm.defence.name == "trimmed_mean"
    cfg["algorithm"]["name"] = f"{module}:Old"
    with pytest.raises(fedpd.ConfigError, match=r"^algorithm.name: .*Old\(aggregator=.* cannot be called as fedpd "
                                                r"calls .* plug-in, \(defence=\.\.\.\): .*'defence'"):
        fedpd.load_config(cfg)


def test_a_plugin_step_and_rule_get_their_options_defaults_and_a_bad_step_output_is_one_line(tmp_path, monkeypatch):
    """The defaults a plug-in declares in its Options reach its constructor and function (the doc's
    contract: options are the keywords), whether or not the signature repeats them; a step whose
    output is not rows [K', d] is named in one line, not blamed on the rule."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = write_module(tmp_path, '''
        import torch
        from pydantic import Field
        import fedpd
        from fedpd.preaggregators import Step

        class Scaled(Step):
            name, description = "scaled", "each row times a factor"

            class Options(fedpd.Options):
                factor: float = Field(0.5, gt=0, description="the factor")

            def __init__(self, factor):  # no default of its own: the Options' 0.5 must reach it
                super().__init__(factor=factor)
                self.factor = factor

            def __call__(self, rows, reference=None, generator=None):
                return rows * self.factor

        class Broken(Step):
            name, description = "broken", "returns a list"

            def __call__(self, rows, reference=None, generator=None):
                return rows.tolist()

        class RuleOptions(fedpd.Options):
            scale: float = Field(2.0, gt=0, description="the factor on the mean")

        @fedpd.declares("scaled_mean", RuleOptions, "the mean times a factor")
        def scaled_mean(w, scale, weights=None):
            return scale * w.mean(0), {}
        ''', "defaults")
    w = torch.arange(12.0, dtype=torch.float64).reshape(4, 3)
    agg = aggregators.make_aggregator(f"{module}:scaled_mean", pre=f"{module}:Scaled")
    assert torch.equal(agg(w)[0], 2.0 * (0.5 * w).mean(0))
    broken = aggregators.make_aggregator("coordinate_median", pre=f"{module}:Broken")
    with pytest.raises(fedpd.ConfigError, match=r"^aggregator_options.pre: broken returned a list .*allowed: rows "
                       r"\[K', 3\]"):
        broken(w)


def test_build_defence_and_make_attack_refuse_bad_values_in_one_line():
    from fedpd.attacks import make_attack
    from fedpd.defence import build_defence

    for kwargs, key in [({"weights": "Samples"}, "weights"), ({"client_momentum": 1.5}, "client_momentum"),
                        ({"client_momentum": 0.9, "client_momentum_start": "Update"}, "client_momentum_start")]:
        with pytest.raises(fedpd.ConfigError, match=f"^{key}: .*allowed"):
            build_defence("coordinate_median", **kwargs)
    defence = build_defence("coordinate_median", client_momentum=0.9, client_momentum_start="update")
    assert defence.momentum.start == "update"
    with pytest.raises(fedpd.ConfigError, match=r"^attack.name: unknown attack 'nope' \(allowed: none, "):
        make_attack("nope")
    assert type(make_attack("ipm", epsilon=0.5)).__name__ == "IPM"
