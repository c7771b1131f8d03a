"""``fedpd sweep``: configs × seeds as independent run directories, in parallel processes, each
equal to the same run made alone; a second invocation skips what is complete; bad input is one
line before anything runs."""

from __future__ import annotations

import pytest

from fedpd.cli import main
from fedpd.errors import ConfigError
from fedpd.runner import run
from fedpd.sweep import parse_seeds, specs, sweep
from helpers import SWEEP_CONFIG, run_records, sweep_configs


@pytest.mark.parametrize("text, seeds", [("3", [3]), ("1,2,5", [1, 2, 5]), ("1-4", [1, 2, 3, 4]),
                                         ("0-1, 7", [0, 1, 7])])
def test_seeds_are_lists_and_ranges(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "3-1", "1,1", "-2", "1.5", "18446744073709551616"])
def test_bad_seeds_are_refused(text):
    with pytest.raises(ConfigError, match="--seeds"):
        parse_seeds(text)


def test_every_run_equals_the_run_made_alone_and_a_second_sweep_skips_them(tmp_path):
    configs = sweep_configs(tmp_path)
    dirs = sweep(configs, tmp_path / "sweep", seeds=[1, 2], jobs=2,
                 progress=False)
    assert sorted(p.relative_to(tmp_path / "sweep").as_posix() for p in dirs) == [
        "fedavg/s1", "fedavg/s2", "scaffold/s1", "scaffold/s2"]
    for path in dirs:
        alone = run(configs[0] if path.parent.name == "fedavg" else configs[1], tmp_path / "alone" / path.parent.name /
                    path.name, overrides=[f"run.seed={path.name[1:]}"])
        assert run_records(path) == [{k: v for k, v in r.items() if k != "wall_s"} for r in alone.history]
    assert run_records(dirs[0]) != run_records(dirs[1])  # the seeds differ
    stamps = {p: (p / "metrics.jsonl").stat().st_mtime_ns for p in dirs}
    sweep(configs, tmp_path / "sweep", seeds=[1, 2], jobs=2, progress=False)
    assert {p: (p / "metrics.jsonl").stat().st_mtime_ns for p in dirs} == stamps


def test_overrides_reach_every_run_and_the_config_seed_is_the_default(tmp_path):
    (spec_a, spec_b) = specs(sweep_configs(tmp_path), None, ["run.rounds=2", "run.seed=9"])
    assert spec_a.key == "fedavg/s9" and spec_b.key == "scaffold/s9"
    assert spec_a.config["run"]["rounds"] == spec_b.config["run"]["rounds"] == 2


def test_a_bad_config_is_refused_before_anything_runs(tmp_path, capsys):
    good, _ = sweep_configs(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text(SWEEP_CONFIG.format(algorithm="fedavg").replace("lr = 0.05", "lr = -1"))
    code = main(["sweep", str(good), str(bad), "--seeds", "1,2", "--out", str(tmp_path / "s"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "bad/s1" in err and "solver.lr" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("args, needle", [
    (["--seeds", "x"], "--seeds"),
    (["--jobs", "0"], "--jobs"),
    (["--set", "nosuchsection.a=1"], "unknown section"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, args, needle):
    code = main(["sweep", str(sweep_configs(tmp_path)[0]), "--out", str(tmp_path / "s"), "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_cli_prints_the_compare_table(tmp_path, capsys):
    code = main(
        ["sweep", *map(str, sweep_configs(tmp_path)), "--seeds", "3", "--jobs", "1", "--out", str(tmp_path / "s")]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "fedavg/s3" in out and "scaffold/s3" in out and "2 runs in" in out


def test_a_bad_seed_in_a_config_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        SWEEP_CONFIG.format(algorithm="fedavg").replace('dtype = "float64"', 'dtype = "float64"\nseed = "x"')
    )
    code = main(["sweep", str(bad), "--out", str(tmp_path / "s"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "run.seed" in err and len(err.strip().splitlines()) == 1
