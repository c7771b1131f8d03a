"""What a new user meets first: bare `fedpd`, --version, the option listing, output that
fits the terminal, machine-readable compare, the demo on an existing directory, resume and Ctrl-C
messages, checks against the problem, NaN exit status, personal metrics on the progress lines."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest

import fedpd
from fedpd.cli import make_parser
from fedpd.registry import TABLES

from helpers import ROOT, SMALL_GD, run_cli as cli


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL_GD.format(algorithm="fedavg"))
    return path


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


# --- CLI basics -----------------------------------------------------------------------
def test_bare_fedpd_prints_usage_and_the_commands(capsys):
    code, out, err = cli([], capsys)
    assert code == 0 and err == ""
    assert out.startswith("usage: fedpd")
    for command in ("run", "list", "show", "plot", "compare", "demo", "data"):
        assert re.search(rf"^\s+{command}\s", out, re.M), command


def test_version(capsys):
    code, out, _ = cli(["--version"], capsys)
    assert code == 0
    assert re.match(rf"fedpd {re.escape(fedpd.__version__)} \(torch \S+, Python \d", out), out


def test_help_and_compare_start_without_torch(config, tmp_path):
    """`fedpd --help`, `fedpd --version`, `fedpd data --help`, `fedpd data list`, `fedpd compare`
    (reading runs, printing a table) and `fedpd flower connection` import neither torch nor matplotlib
    (fedpd.exports; the data loaders import torch where they make tensors): they answer in a fraction
    of a second, not three; `fedpd plot` of metrics imports matplotlib, not torch."""
    import os
    import subprocess
    import sys

    fedpd.run(config, tmp_path / "small", progress=False)
    script = ("import json, sys\nfrom fedpd.cli import main\n"
              "codes = [main(a) for a in (['--help'], ['--version'], ['data', '--help'], ['data', 'list'],\n"
              "         ['compare', sys.argv[1]],\n"
              "         ['flower', 'connection', 'here', '--address', '127.0.0.1:9093', '--insecure'])]\n"
              "light = sorted(m for m in ('torch', 'matplotlib') if m in sys.modules)\n"
              "codes.append(main(['plot', sys.argv[1], '--metric', 'train_loss', '--output', sys.argv[1] + '.png']))\n"
              "print(json.dumps([codes, light, 'torch' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "small")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "FLWR_HOME": str(tmp_path / "flwr")})
    assert done.returncode == 0, done.stderr
    codes, heavy, plot_imported_torch = json.loads(done.stdout.splitlines()[-1])
    assert codes == [0] * 7 and heavy == [] and not plot_imported_torch, (codes, heavy)
    assert "small" in done.stdout and "here" in (tmp_path / "flwr" / "config.toml").read_text()
    assert (tmp_path / "small.png").stat().st_size > 1000


def test_every_option_of_every_command_has_help():
    parser = make_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {a.dest for a in subparsers._choices_actions} >= {"run", "list", "show", "plot", "compare", "demo"}
    for choice in subparsers._choices_actions:
        assert choice.help, choice.dest
    def check(prog, parser):
        for action in parser._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                for choice in action._choices_actions:
                    assert choice.help, f"{prog} {choice.dest}"
                for name, sub in action.choices.items():
                    check(f"{prog} {name}", sub)
            elif action.dest != "help":
                assert action.help, f"{prog}: {action.option_strings or action.dest} has no help"

    check("fedpd", parser)


@pytest.mark.parametrize("args", [["list", "fedpd"], ["show", "algorithm", "fedpd"]])
def test_option_listing_of_an_algorithm(args, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(args, capsys)
    assert code == 0
    assert "FedPD" in out and "Zhang, Hong, Dhople, Yin, Liu" in out  # the paper, by its authors
    assert re.search(r"^\s+eta = 1\.0\s+float, > 0$", out, re.M), out
    assert re.search(r"^\s+p = 0\.0\s+float, 0 ≤ p < 1$", out, re.M), out
    assert re.search(r'^\s+skip = "random"\s+random \| periodic$', out, re.M), out
    assert "probability of skipping communication in a round" in out
    assert widest(out) <= 80


def test_listing_follows_the_option_models_of_every_section(capsys, monkeypatch):
    """Every option of every entry of every section TABLES has (whatever sections it holds) is
    listed with the default its model gives, and nothing is listed that the model lacks."""
    from fedpd import describe

    monkeypatch.setenv("COLUMNS", "100")
    for section, table in TABLES.items():
        for name, entry in table.items():
            code, out, _ = cli(["show", section, name], capsys)
            assert code == 0, (section, name)
            options = out.split("options and their defaults:\n", 1)[1] if entry.options.model_fields else ""
            listed = re.findall(r"^  (\w+)(?: = |  \(required\))", options, re.M)
            assert listed == list(entry.options.model_fields), (section, name, listed)
            for row in describe.option_rows(section, name, entry.options):
                if row.default != "required":
                    assert f"  {row.name} = {row.default}" in out, (section, name, row.name)
            assert widest(out) <= 100, (section, name)


def test_list_prints_every_entry_within_the_terminal_width(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = cli(["list"], capsys)
    assert code == 0 and widest(out) <= 60
    for table in TABLES.values():
        for name in table:
            assert re.search(rf"^  {re.escape(name)}( |$)", out, re.M), name
    code, out, _ = cli(["list", "samplers"], capsys)
    assert code == 0 and out.startswith("samplers:") and "uniform" in out and "fedavg" not in out
    code, out, _ = cli(["list", "run"], capsys)
    assert code == 0 and "threads = 0" in out and "allow_nonfinite = false" in out


@pytest.mark.parametrize("args,needle", [
    (["list", "fedpdd"], "did you mean fedpd"),
    (["show", "algorithms", "nosuch"], "unknown algorithm 'nosuch'"),
    (["show", "nosection", "x"], "unknown section"),
    (["show", "solver"], "missing NAME"),
])
def test_listing_errors_are_one_line(args, needle, capsys):
    code, _, err = cli(args, capsys)
    assert code == 2 and needle in one_line(err)


# --- output that fits the terminal ----------------------------------------------------
@pytest.fixture
def two_runs(config, tmp_path, capsys):
    dirs = []
    for algo in ("fedavg", "fedprox"):
        dirs.append(tmp_path / f"a-rather-long-run-name-{algo}")
        assert cli(["run", config, "--out", dirs[-1], "--quiet", "--set", f"algorithm.name={algo}"], capsys)[0] == 0
    return dirs


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_compare_fits_the_terminal(two_runs, columns, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = cli(["compare", *two_runs], capsys)
    assert code == 0
    assert widest(out) <= columns, out
    assert "fedprox" in out
    rows = [line for line in out.splitlines() if "fedavg" in line or "fedprox" in line]
    assert len(rows) == 2  # one line per run: nothing wrapped
    if columns < 120:
        assert "left out at" in out and "--format" in out


def test_compare_shows_every_column_when_wide(two_runs, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = cli(["compare", *two_runs], capsys)
    assert code == 0 and "left out" not in out
    for header in ("‖∇f‖²", "train loss", "test loss", "uplink", "best"):
        assert header in out


def test_compare_machine_readable(two_runs, capsys):
    finals = [json.loads((d / "metrics.jsonl").read_text().splitlines()[-1]) for d in two_runs]
    code, out, _ = cli(["compare", *two_runs, "--format", "csv"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["algorithm"] for r in rows] == ["fedavg", "fedprox"]
    for row, final in zip(rows, finals):
        assert float(row["grad_norm_sq_final"]) == final["grad_norm_sq"]  # full precision
        assert int(row["comm_rounds"]) == final["comm_rounds"]
        assert Path(row["path"]) in two_runs
    code, out, _ = cli(["compare", *two_runs, "--format", "json"], capsys)
    data = json.loads(out)
    assert code == 0 and data[1]["train_loss_final"] == finals[1]["train_loss"]
    assert data[0]["train_loss_best"] <= data[0]["train_loss_final"]
    code, out, _ = cli(["compare", *two_runs, "--format", "markdown", "--metrics", "grad_norm_sq"], capsys)
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 4 and lines[0].startswith("| run | algorithm")
    assert "grad_norm_sq_final" in lines[0] and "train_loss" not in lines[0]
    assert re.fullmatch(r"\|(-{3}|-{3}:)(\|(-{3}|-{3}:))*\|", lines[1])
    code, _, err = cli(["compare", *two_runs, "--format", "xml"], capsys)
    assert code == 2 and "--format" in one_line(err)
    code, _, err = cli(["compare", *two_runs, "--metrics", "nosuch"], capsys)
    assert code == 2 and "nosuch" in one_line(err)


def test_compare_tells_runs_with_one_folder_name_apart(config, tmp_path, capsys):
    dirs = [tmp_path / "a" / "run", tmp_path / "b" / "run"]
    for d, lr in zip(dirs, ("0.1", "0.2")):
        assert cli(["run", config, "--out", d, "--quiet", "--set", f"solver.lr={lr}"], capsys)[0] == 0
    code, out, _ = cli(["compare", *dirs, "--format", "csv"], capsys)
    assert [r["run"] for r in csv.DictReader(io.StringIO(out))] == ["run (lr=0.1)", "run (lr=0.2)"]


def test_demo_table_fits_the_terminal_and_demo_takes_overwrite(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "demo"
    code, stdout, err = cli(["demo", "--out", out, "--rounds", "20", "--quiet", "--threads", "1"], capsys)
    assert code == 0, err
    assert widest("\n".join(line for line in stdout.splitlines() if str(tmp_path) not in line)) <= 80, stdout
    assert "fedpd-gd-p0.5" in stdout
    assert "Theorem 1" in stdout  # why p = 0.5 hovers
    from fedpd.demo import CAPTION, LABELS

    assert "Theorem 1" in CAPTION and "anchor" in CAPTION  # the figure's caption says the same
    assert all("Q = 8" in label for label in LABELS.values())  # each run's settings in the legend
    assert "μ = 0.1" in LABELS["fedprox"] and "p = 0.5" in LABELS["fedpd-gd-p0.5"] and "p = 0 " in LABELS["fedpd-gd-p0"]
    assert (out / "grad_norm_sq.png").read_bytes()[:4] == b"\x89PNG"
    before = (out / "fedpd-gd-p0" / "metrics.jsonl").read_bytes()
    code, _, err = cli(["demo", "--out", out, "--rounds", "20", "--quiet"], capsys)
    line = one_line(err)
    assert code == 2 and "--overwrite" in line and "--resume" not in line
    assert (out / "fedpd-gd-p0" / "metrics.jsonl").read_bytes() == before
    code, _, err = cli(["demo", "--out", out, "--rounds", "10", "--quiet", "--overwrite"], capsys)
    assert code == 0, err
    assert json.loads((out / "fedpd-gd-p0" / "metrics.jsonl").read_text().splitlines()[-1])["round"] == 10


# --- resume and Ctrl-C ------------------------------------------------------------------------
def test_resume_says_where_it_continues_and_takes_threads(config, tmp_path, capsys):
    out = tmp_path / "r"
    assert cli(["run", config, "--out", out, "--quiet"], capsys)[0] == 0
    code, stdout, err = cli(["run", "--resume", out, "--set", "run.rounds=8", "--threads", "1"], capsys)
    assert code == 0
    assert "continuing from round 4 (the last checkpoint) to round 8" in err
    assert "threads = 1" in (out / "config.toml").read_text()
    assert "finished round 8" in stdout
    code, _, err = cli(["run", "--resume", out], capsys)
    assert code == 0 and "already at round 8 of 8" in err


@pytest.mark.parametrize("stop_at,has_checkpoint", [(1, False), (3, True)])
def test_ctrl_c_names_the_real_run_directory(config, tmp_path, capsys, monkeypatch, stop_at, has_checkpoint):
    from fedpd.simulation import Simulation

    step = Simulation.step

    def interrupted(self):
        if self.round == stop_at:
            raise KeyboardInterrupt
        step(self)

    monkeypatch.setattr(Simulation, "step", interrupted)
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(["run", config, "--quiet"], capsys)  # no --out: runs/small-<time>
    assert code == 130
    [run_dir] = list((tmp_path / "runs").iterdir())
    line = one_line(err)
    assert str(Path("runs") / run_dir.name) in line
    assert (run_dir / "checkpoint.pt").exists() == has_checkpoint
    if has_checkpoint:
        assert f"fedpd run --resume runs/{run_dir.name}" in line
    else:
        assert "checkpoint" in line and "--resume" not in line and "nothing to resume" in line


def test_ctrl_c_in_the_demo_names_the_run_and_how_to_start_again(tmp_path, capsys, monkeypatch):
    from fedpd.simulation import Simulation

    step = Simulation.step

    def interrupted(self):
        if self.round == 5:
            raise KeyboardInterrupt
        step(self)

    monkeypatch.setattr(Simulation, "step", interrupted)
    out = tmp_path / "demo"
    code, _, err = cli(["demo", "--out", out, "--rounds", "20", "--quiet"], capsys)
    line = one_line(err)
    assert code == 130 and str(out / "fedavg-gd") in line and "--resume" not in line
    assert f"fedpd demo --out {out} --overwrite" in line


# --- checks against the problem ------------------------------------------------------
def test_batch_larger_than_every_client_is_refused_before_anything_runs(config, tmp_path, capsys):
    out = tmp_path / "o"
    code, _, err = cli(["run", config, "--out", out, "--quiet", "--set", "solver.name=sgd",
                        "--set", "solver.batch_size=100000"], capsys)
    line = one_line(err)
    assert code == 2 and "solver.batch_size: 100000" in line and "largest client: 50 samples" in line
    assert "allowed: 1..50" in line
    assert not out.exists() or not any(out.iterdir())
    code, _, err = cli(["run", config, "--out", out, "--quiet", "--set", "solver.name=sgd",
                        "--set", "solver.batch_size=50"], capsys)  # as many as the largest client: fine
    assert code == 0, err
    admm = tmp_path / "admm.toml"  # Xu's methods take no [solver]: their batch is algorithm.batch_size
    admm.write_text('[problem]\nname = "least_squares"\nclients = 4\nsamples_per_client = 50\n'
                    '[algorithm]\nname = "stochastic_admm"\nbatch_size = 51\n[run]\nrounds = 2\n')
    code, _, err = cli(["run", admm, "--out", tmp_path / "o2", "--quiet"], capsys)
    assert code == 2 and "algorithm.batch_size: 51" in one_line(err)


def test_batch_check_uses_the_largest_client(tmp_path):
    """Clients of different sizes: a batch above some clients but within the largest is allowed
    (minibatches are drawn with replacement)."""
    from fedpd.config import load_config
    from fedpd.errors import ConfigError
    from fedpd.simulation import Simulation

    cfg = {"problem": {"name": "synthetic", "clients": 5, "max_client_samples": 200}, "algorithm": {"name": "fedavg"},
           "solver": {"name": "sgd", "batch_size": 1}, "run": {"rounds": 1}}
    sim = Simulation(load_config(cfg))
    sizes = sim.problem.train.sizes
    largest, smallest = int(sizes.max()), int(sizes.min())
    assert smallest < largest
    Simulation(load_config({**cfg, "solver": {"name": "sgd", "batch_size": largest}}))
    with pytest.raises(ConfigError, match=f"largest client: {largest} samples"):
        Simulation(load_config({**cfg, "solver": {"name": "sgd", "batch_size": largest + 1}}))


# --- NaN exit status ------------------------------------------------------------------
def test_nonfinite_metrics_stop_the_run_with_exit_status_3(config, tmp_path, capsys):
    out = tmp_path / "boom"
    code, stdout, err = cli(["run", config, "--out", out, "--quiet", "--set", "solver.lr=1e6",
                             "--set", "run.rounds=40"], capsys)
    assert code == 3  # distinct from 2 (bad input) and 0
    line = one_line(err)
    assert "diverged" in line and "run.allow_nonfinite = true" in line and str(out) in line
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["round"] < 40 and records[-1]["train_loss"] is None  # stopped at the first NaN / Inf
    assert all(r["train_loss"] is not None for r in records[:-1])
    code, _, err = cli(["run", config, "--out", tmp_path / "on", "--quiet", "--set", "solver.lr=1e6",
                        "--set", "run.rounds=40", "--set", "run.allow_nonfinite=true"], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "on" / "metrics.jsonl").read_text().splitlines()[-1])["round"] == 40


def test_nonfinite_metrics_raise_in_python(config):
    from fedpd.checks import NonFiniteMetrics

    with pytest.raises(NonFiniteMetrics) as info:
        fedpd.run(config, overrides=["solver.lr=1e6", "run.rounds=40"])
    err = info.value
    assert err.exit_code == 3 and err.keys and err.round == err.history[-1]["round"]
    assert not math.isfinite(err.history[-1]["train_loss"])


# --- personalised runs report personal metrics ----------------------------------------
def test_progress_lines_lead_with_personal_metrics():
    from fedpd.progress import summary

    line = summary({"round": 5, "train_loss": 6384.0, "personal_mse": 0.52, "personal_loss": 0.26,
                    "comm_rounds": 5, "grad_norm_sq": 1e3})
    assert line.startswith("personal_mse=0.52  personal_loss=0.26  comm_rounds=5  server model: train_loss=6384")
    assert summary({"train_loss": 0.5, "comm_rounds": 3}) == "train_loss=0.5  comm_rounds=3"


def test_personalised_run_prints_personal_metrics(tmp_path, capsys):
    cfg = ROOT / "examples" / "ditto.toml"
    code, stdout, err = cli(["run", cfg, "--out", tmp_path / "d", "--set", "run.rounds=2", "--set", "run.eval_every=1"],
                            capsys)
    assert code == 0, err
    final = [line for line in stdout.splitlines() if line.startswith("finished")][0]
    assert re.match(r"finished round 2: personal_mse=\S+  personal_loss=\S+", final), final
    progress = [line for line in err.splitlines() if line.startswith("round ")]
    assert progress and all("personal_" in line.split("server model")[0] for line in progress)


def test_a_sampler_that_picks_almost_nobody_gets_a_notice(config, tmp_path, capsys):
    code, _, err = cli(["run", config, "--out", tmp_path / "q", "--quiet", "--set", "sampler.name=bernoulli",
                        "--set", "sampler.q=0.01"], capsys)
    assert code == 0
    assert one_line(err).startswith("fedpd: note: sampler.q: 0.01 x 4 clients = 0.04 expected participants")
    code, _, err = cli(["run", config, "--out", tmp_path / "q2", "--quiet", "--set", "sampler.name=bernoulli",
                        "--set", "sampler.q=0.5"], capsys)
    assert code == 0 and err == ""
