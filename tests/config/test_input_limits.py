"""Inputs a config fuzzer found that were tracebacks or hangs, each now one line and exit status 2
with nothing written: an integer longer than Python reads, a seed beyond what torch takes, a key
nested 100 000 tables deep (refused at once, not after the parser's quadratic time and memory), a
``~user`` path naming nobody, and counts of work per round without an upper bound."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import tomli_w

from fedpd.cli import main
from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.io import parse_toml
from helpers import BASE, SAMPLED_FEDAVG, refused, run_cli


def base_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps(BASE) + extra)
    return path


def test_an_integer_of_more_than_4300_digits_in_a_file_is_one_line(tmp_path, capsys):
    path = base_file(tmp_path, "\n[sampler]\nname = \"uniform\"\nclients_per_round = " + "7" * 5000 + "\n")
    at = len(path.read_text().splitlines())
    line = refused(tmp_path, capsys, path)
    assert line.endswith(f"is not valid TOML: an integer of more than 4300 digits (line {at}): no option takes one "
                         f"(allowed: integers of at most 2^63 − 1, 19 digits)"), line


def test_an_integer_of_more_than_4300_digits_in_a_set_is_one_line(tmp_path, capsys):
    line = refused(tmp_path, capsys, base_file(tmp_path), "--set", "run.seed=" + "7" * 5000)
    assert line.startswith("--set run.seed: an integer of more than 4300 digits: no option takes one"), line


@pytest.mark.parametrize("line", ["[" + ".".join(["a"] * 100_000) + "]", ".".join(["a"] * 100_000) + " = 1",
                                  "[[" + ".".join(["a"] * 100_000) + "]]"])
def test_a_key_nested_100000_deep_is_refused_at_once(line, tmp_path):
    """The header took 35 s to refuse; the dotted key grew the parser past the machine's memory."""
    path = base_file(tmp_path, "\n" + line + "\n")
    at = len(path.read_text().splitlines())
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert time.perf_counter() - start < 1.0
    assert f"a key or table header of 100000 dotted parts (line {at}) nests too deeply to read (allowed: at most " \
           f"100;" in str(err.value)


def test_many_dots_in_values_and_comments_are_no_deep_key():
    numbers = ", ".join(f"{i}.5" for i in range(300))  # 300 dots on one line, in values
    text = f"x = [{numbers}]\ny = \"{'.' * 300}\"\n# {'.' * 300}\n[a.b.c]\nk = [\n  {numbers},\n]\n"
    parsed = parse_toml(text)
    assert len(parsed["x"]) == 300 and parsed["y"] == "." * 300 and len(parsed["a"]["b"]["c"]["k"]) == 300


def test_a_home_of_nobody_is_one_line(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps({**BASE, "problem": {"name": "dataset", "dataset": "mnist",
                                                       "data_dir": "~nosuchuser/x"}}))
    line = refused(tmp_path, capsys, path)
    assert line == "problem.data_dir: '~nosuchuser/x' starts with ~nosuchuser, but this machine has no user " \
                   "'nosuchuser' (allowed: ~/..., ~<a user of this machine>/..., or a path without ~)", line


@pytest.mark.parametrize("sections, needle", [
    ({"solver": {"name": "sgd", "batch_size": 4, "local_epochs": 1_000_000}},
     "solver.local_epochs: input should be less than or equal to 1000 (got 1000000)"),
    ({"attack": {"name": "optimal_ipm", "evals": 1_000_000}}, "attack.evals: input should be less than or equal to "
                                                              "1000 (got 1000000)"),
    ({"attack": {"name": "optimal_alie", "evals": 1_000_000}}, "attack.evals: input should be less than or equal to "
                                                               "1000"),
])
def test_counts_of_work_per_round_have_an_upper_bound(sections, needle, tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps({**BASE, **sections}))
    assert refused(tmp_path, capsys, path).startswith(needle)


def test_local_epochs_are_bounded_by_the_steps_they_give(tmp_path, capsys):
    """E·⌈n_k / B⌉ local steps, at most as many as solver.local_steps takes (100 000)."""
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps({**BASE, "problem": {**BASE["problem"], "samples_per_client": 200},
                                   "solver": {"name": "sgd", "batch_size": 1, "local_epochs": 1000}}))
    assert refused(tmp_path, capsys, path) == (
        "solver.local_epochs: 1000 passes give the largest client (200 samples, batches of 1) 200000 local steps a "
        "round (allowed: at most 100000 steps, as solver.local_steps: local_epochs <= 500 here)")


def test_the_bounds_are_stated_in_the_options_descriptions(capsys):
    code, out, _ = run_cli(["list", "sgd"], capsys)
    assert code == 0 and "at most 1000" in " ".join(out.split())
    code, out, _ = run_cli(["list", "optimal_ipm"], capsys)
    assert code == 0 and "at most 1000" in " ".join(out.split())


@pytest.mark.parametrize("key", ["problem.seed", "run.seed", "attack.seed"])
def test_a_seed_beyond_what_torch_takes_is_one_line_before_anything_runs(tmp_path, capsys, key):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SAMPLED_FEDAVG)
    extra = ["--set", "attack.name=nan"] if key == "attack.seed" else []  # a bare nan is the attack's name
    out = tmp_path / "r"
    assert main(["run", str(cfg), "--out", str(out), "--quiet", "--set", f"{key}=18446744073709551616", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and key in err and "9223372036854775807" in err, err
    assert not out.exists()
