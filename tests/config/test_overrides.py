"""--set and --unset on a config: a dotted key reaches into a table and keeps its other keys, and
--unset drops a plug-in's own option where the config switches to a built-in."""

from __future__ import annotations

import pytest

from helpers import FEDAVG_LS
from helpers import run_cli as cli


def test_set_reaches_into_a_table_and_keeps_its_other_keys():
    from fedpd.config import apply_overrides
    from fedpd.errors import ConfigError

    raw = {"algorithm": {"aggregator": "krum", "aggregator_options": {"n_byzantine": 1}}}
    out = apply_overrides(raw, ["algorithm.aggregator_options.m=2"])
    assert out["algorithm"]["aggregator_options"] == {"n_byzantine": 1, "m": 2}
    assert raw["algorithm"]["aggregator_options"] == {"n_byzantine": 1}  # the caller's dict is left alone
    with pytest.raises(ConfigError, match=r"--set algorithm.aggregator.x: algorithm.aggregator is 'krum', not a table"):
        apply_overrides(raw, ["algorithm.aggregator.x=1"])


# --- switching a plug-in config to a built-in: --unset drops the plug-in's own option ---------
Q_ALGORITHM = '''
from pydantic import Field
from fedpd.algorithms import FedAvg


class QAvg(FedAvg):
    """FedAvg with an option of its own."""

    class Options(FedAvg.Options):
        q: float = Field(0.5, gt=0)

    def __init__(self, q=0.5, **options):
        super().__init__(**options)
        self.q = q
'''


def test_unset_drops_a_plugins_own_option_when_switching_to_a_built_in(tmp_path, monkeypatch, capsys):
    (tmp_path / "q_algorithm.py").write_text(Q_ALGORITHM)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "q.toml"
    config.write_text(FEDAVG_LS.format(rounds=2).replace('name = "fedavg"', 'name = "q_algorithm:QAvg"\nq = 0.3'))
    switch = ["--set", "algorithm.name=fedavg"]
    code, _, err = cli(["run", config, "--out", "a", "--quiet", *switch], capsys)
    assert code == 2 and "algorithm.q: unknown key" in err and "--unset algorithm.q" in err, err
    code, _, err = cli(["run", config, "--out", "b", "--quiet", *switch, "--unset", "algorithm.q"], capsys)
    assert code == 0, err
    saved = (tmp_path / "b" / "config.toml").read_text()
    assert 'name = "fedavg"' in saved and "q = " not in saved
    code, _, err = cli(["run", "--resume", "b", "--unset", "algorithm.q"], capsys)
    assert code == 2 and "--unset cannot be combined with --resume" in err
    code, _, err = cli(["run", config, "--out", "c", "--unset", "nowhere.q"], capsys)
    assert code == 2 and "--unset nowhere.q: unknown section" in err
    from fedpd.config import Unset, load_config

    cfg = load_config(config, [Unset("algorithm.q"), "algorithm.name=fedavg", Unset("algorithm.not_there")])
    assert cfg.names["algorithm"] == "fedavg"
    assert "--unset SECTION.KEY" in cli(["run", "--help"], capsys)[1]
