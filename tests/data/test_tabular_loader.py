"""A user's table without code: ``dataset = "csv"`` / ``"npz"`` with ``path`` (fedpd.data.loaders.tabular),
per-feature standardisation of [N, F] data by ``normalize``, a loader plug-in's options
(``problem.dataset_options``), every bad file refused in one line, and docs/data.md's table section
run as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import tomli_w
import torch

import fedpd
from doc_blocks import bash_blocks, clean_env, run_script, section
from fedpd.config import load_config
from fedpd.data import load_dataset
from fedpd.errors import FedpdError
from fedpd.problems.dataset import feature_statistics
from fedpd.simulation import Simulation
from helpers import run_cli
from user_plugins import write_module

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "data.md"
SECTION = "Your own table: CSV and npz"
HEADER = "age,income,visits,churned"


def customers(n: int = 400, seed: int = 0) -> list[str]:
    """The lines of docs/data.md's customers.csv: the rows it shows, then rows like them, whether a
    customer left depending on all three features (so that standardising them matters)."""
    shown = [line for line in re.search(r"```text\n(.*?)```", section(DOC.read_text(), SECTION), re.S)
             .group(1).splitlines() if line != "..."]
    assert shown[0] == HEADER, shown
    rng = np.random.default_rng(seed)
    lines = list(shown)
    while len(lines) < n + 1:
        age, income, visits = int(rng.integers(18, 80)), float(rng.normal(45000, 15000)), int(rng.poisson(3))
        score = (age - 50) / 10 - (visits - 3) - (income - 45000) / 15000 + rng.normal(0, 0.5)
        lines.append(f"{age},{max(8000, round(income, -2)):.0f},{visits},{'yes' if score > 0 else 'no'}")
    return lines


def write_csv(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def table(lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
    rows = [line.split(",") for line in lines[1:]]
    return np.array([[float(v) for v in r[:3]] for r in rows], dtype=np.float32), np.array([r[3] for r in rows])


def config(**problem) -> dict:
    return {"problem": {"name": "dataset", "dataset": "csv", "label_column": "churned", "clients": 4, **problem},
            "model": {"name": "logistic"}, "algorithm": {"name": "fedavg"},
            "solver": {"name": "sgd", "lr": 0.1, "local_steps": 3, "batch_size": 16},
            "run": {"rounds": 3, "eval_every": 1}}


def records(history) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in history]


# --- the doc, as written -----------------------------------------------------------------------
@pytest.mark.slow
def test_the_docs_table_runs_as_written_and_standardising_it_is_what_makes_sgd_converge(tmp_path):
    text = section(DOC.read_text(), SECTION)
    toml = re.search(r"```toml\n(# churn\.toml.*?)```", text, re.S).group(1)
    (tmp_path / "churn.toml").write_text(toml)
    write_csv(tmp_path / "customers.csv", customers())
    [block] = bash_blocks(DOC, SECTION)
    done = run_script(block, tmp_path, clean_env(tmp_path / "home"))
    assert done.returncode == 0, done.stdout[-3000:]

    def last(run: str) -> dict:
        return json.loads((tmp_path / "runs" / run / "metrics.jsonl").read_text().splitlines()[-1])

    standardised, raw = last("churn"), last("churn-raw")  # as the page reads them
    assert standardised["train_loss"] < 0.4 and standardised["test_acc"] > 0.9, standardised
    assert raw["train_loss"] > 1e6 and raw["test_acc"] < 0.5, raw
    assert "churn-raw" in done.stdout


# --- the formats, end to end --------------------------------------------------------------------
def test_a_csv_and_the_same_table_as_an_npz_give_the_same_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = customers(120)
    write_csv(tmp_path / "t.csv", lines)
    x, y = table(lines)
    np.savez(tmp_path / "t.npz", x=x, y=y)  # the CSV's numbers exactly (integers, whole hundreds)
    runs = {}
    for name, problem in (("csv", {"path": "t.csv"}), ("npz", {"dataset": "npz", "path": str(tmp_path / "t.npz")})):
        cfg = config(**problem)
        if name == "npz":
            del cfg["problem"]["label_column"]
        path = tmp_path / f"{name}.toml"
        path.write_text(tomli_w.dumps(cfg))
        code, _, err = run_cli(["run", path, "--out", tmp_path / name, "--quiet"], capsys)
        assert code == 0, err
        runs[name] = [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
                      for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    assert runs["csv"] == runs["npz"] and len(runs["csv"]) == 4


def test_the_loader_reads_names_ids_clients_and_a_test_file(tmp_path):
    write_csv(tmp_path / "a.csv", ["f1,who,label,f2", "1,ann,2,5", "2,bob,0,6", "3,ann,1,7", "", "4,10,2,8"])
    write_csv(tmp_path / "b.csv", ["f1,who,label,f2", "9,bob,1,9"])
    ds = load_dataset("csv", tmp_path, path="a.csv", test_path="b.csv", client_column="who")
    assert ds.x_train.tolist() == [[1, 5], [2, 6], [3, 7], [4, 8]] and ds.x_train.dtype == torch.float32
    assert ds.y_train.tolist() == [2, 0, 1, 2] and ds.num_classes == 3 and ds.classes is None  # ids as given
    assert ds.users == ["10", "ann", "bob"] and ds.train_users.tolist() == [1, 2, 1, 0]
    assert ds.test_users.tolist() == [2] and ds.meta["features"] == ["f1", "f2"]
    names = load_dataset("csv", tmp_path, path=str(tmp_path / "a.csv"), label_column="who")
    assert names.classes == ["10", "ann", "bob"]  # text labels: class names, sorted
    split, again = (load_dataset("csv", tmp_path, path="a.csv", client_column="who", holdout=0.25, seed=3)
                    for _ in range(2))
    assert len(split.y_test) == 1 and len(split.y_train) == 3 and torch.equal(split.x_test, again.x_test)


def test_normalize_standardises_each_feature_with_the_training_statistics(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "t.csv", customers(120))
    sims = {on: Simulation(load_config(config(path="t.csv", normalize=on))) for on in (True, False)}
    x = {on: sims[on].problem.train.x for on in sims}
    assert x[False][:, 1].abs().max() > 8000  # the incomes as loaded
    torch.testing.assert_close(x[True].double().mean(0), torch.zeros(3, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(x[True].double().std(0), torch.ones(3, dtype=torch.float64), atol=1e-5, rtol=0)
    on, off = (records(fedpd.run(config(path="t.csv", normalize=flag)).history) for flag in (True, False))
    assert on != off and on[-1]["train_loss"] < off[-1]["train_loss"]


def test_feature_statistics_are_the_same_bits_at_any_thread_count():
    x = torch.randn(70_000, 1, generator=torch.Generator().manual_seed(0)) * 3 + 1  # one feature: one long sum
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = feature_statistics(x)
        torch.set_num_threads(2)
        two = feature_statistics(x)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, two))
    torch.testing.assert_close(one[0], x.double().mean(0, keepdim=True).float())
    torch.testing.assert_close(one[1], x.double().std(0, keepdim=True).float())


def test_images_are_still_standardised_per_channel(tmp_path, monkeypatch):
    module = write_module(tmp_path, '''
import numpy as np

def images():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(40, 2, 4, 4)).astype(np.float32) * np.array([1.0, 5.0], np.float32)[None, :, None, None]
    return x, np.arange(40) % 2, x[:8], np.arange(8) % 2
''', "images")
    monkeypatch.chdir(tmp_path)
    cfg = config(dataset=f"{module}:images", clients=2)
    del cfg["problem"]["label_column"]
    x = Simulation(load_config(cfg)).problem.train.x.double()
    per_channel = x.transpose(0, 1).reshape(2, -1)
    torch.testing.assert_close(per_channel.mean(1), torch.zeros(2, dtype=torch.float64), atol=1e-6, rtol=0)
    assert x.mean(0).abs().max() > 1e-3  # not per pixel: each pixel's mean is not 0


# --- bad input: one line ------------------------------------------------------------------------
def npz(path: Path, **arrays) -> str:
    np.savez(path, **arrays)
    return str(path)


BAD_CSV = [
    (["a,b,label", "1,2,0", "3,4"], "bad.csv line 3: 2 fields, its header has 3"),
    (["a,b,churned", "1,2,0", "3,x,1"], "bad.csv line 3, column 'b': 'x' is not a number (allowed: a finite number"),
    (["a,b,y", "1,2,0", "3,4,1"], "bad.csv: no column 'churned' (its columns: a, b, y; set problem.label_column"),
    (["a,b,churned", "1,2,0", "3,,1"], "bad.csv line 3, column 'b': empty (allowed: a finite number in every "
                                       "feature cell; fedpd does not impute missing values)"),
    (["a,b,churned", "1,2,0", "nan,4,1"], "column 'a': 'nan' is not a finite number"),
    (["a,b,churned", "1,inf,0", "2,4,1"], "column 'b': 'inf' is not a finite number"),
    (["a,b,churned", "1,2,0.5", "3,4,1"], "label column 'churned' holds '0.5' (allowed: integer class ids"),
    (["a,b,churned", "1,2,", "3,4,1"], "bad.csv line 2, column 'churned': no label"),
    (["a,a,churned", "1,2,0", "3,4,1"], "names column 'a' twice"),
    (["a,b,churned"], "bad.csv: a header and no rows"),
    (["a,b,churned", "1,2,-1", "3,4,1"], "label -1 (allowed: class ids 0, 1, ..., or class names)"),
]


@pytest.mark.parametrize(("lines", "needle"), BAD_CSV, ids=[n[:40] for _, n in BAD_CSV])
def test_a_bad_csv_is_one_line_and_exit_2_with_nothing_written(lines, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "bad.csv", lines)
    refused(config(path="bad.csv"), needle, tmp_path, capsys)


def refused(cfg: dict, needle: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text(tomli_w.dumps(cfg))
    code, _, err = run_cli(["run", path, "--out", tmp_path / "run", "--quiet"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("fedpd: error: "), err
    assert needle in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


BAD_NPZ = [
    ({"x": np.array([[1.0, np.nan], [2, 3], [4, 5]]), "y": np.array([0, 1, 0])},
     "t.npz holds x with NaN or infinite values (allowed: finite numbers; fedpd does not impute"),
    ({"x": np.ones((3, 2)), "labels": np.array([0, 1, 0])}, "t.npz holds no array 'y' (its arrays: x, labels"),
    ({"x": np.ones((3, 2)), "y": np.array([0, 1, 0]), "w": np.ones(3)}, "holds an array 'w' fedpd does not read"),
    ({"x": np.array([{"a": 1}] * 3, dtype=object), "y": np.array([0, 1, 0])},
     "array 'x' holds Python objects (a pickle), which fedpd never loads"),
    ({"x": np.ones((3, 2)), "y": np.array([0.0, 1.0, 0.0])}, "t.npz holds y of shape (3,) and dtype float64"),
    ({"x_train": np.ones((3, 2)), "y_train": np.zeros(3, int), "x_test": np.ones((1, 2)), "y_test": np.zeros(1, int),
      "holdout": None}, "problem.holdout: "),
]


@pytest.mark.parametrize(("arrays", "needle"), BAD_NPZ, ids=[n[:40] for _, n in BAD_NPZ])
def test_a_bad_npz_is_one_line_and_exit_2_with_nothing_written(arrays, needle, tmp_path, capsys):
    problem = {"dataset": "npz", "path": str(tmp_path / "t.npz")}
    if "holdout" in arrays:
        arrays.pop("holdout")
        problem["holdout"] = 0.3
    npz(tmp_path / "t.npz", **arrays)
    cfg = config(**problem)
    del cfg["problem"]["label_column"]
    refused(cfg, needle, tmp_path, capsys)


@pytest.mark.parametrize(("problem", "needle"), [
    ({"path": "nowhere.csv"}, "csv: nowhere.csv not found (looked at "),
    ({"dataset": "npz", "path": "table.csv", "label_column": None}, "table.csv: not a NumPy .npz archive"),
    ({"dataset": "csv"}, "problem.path: missing; csv needs path = <file.csv>"),
    ({"dataset": "mnist", "path": "table.csv", "label_column": None}, "problem.path: not an option of mnist (it "
                                                                       "applies to image-folder, csv, npz)"),
    ({"dataset": "npz", "path": "table.npy", "label_column": None}, "table.npy: one NumPy array (.npy), expected an "
                                                                    ".npz archive"),
    ({"path": "table.csv", "dataset_options": {"rows": 3}}, "problem.dataset_options: only a loader plug-in takes"),
    ({"path": "table.csv", "holdout": 1.0}, "problem.holdout: input should be less than 1"),
    ({"path": "table.csv", "test_path": "table.csv", "holdout": 0.5}, "problem.holdout: the test set is test_path's"),
])
def test_a_missing_or_wrong_file_or_option_is_one_line(problem, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "table.csv", customers(20))
    np.save(tmp_path / "table.npy", np.ones((3, 2)))
    cfg = config(**problem)
    if "path" not in problem:
        cfg["problem"].pop("path", None)
    cfg["problem"] = {k: v for k, v in cfg["problem"].items() if v is not None}
    refused(cfg, needle, tmp_path, capsys)


# --- a loader plug-in's options -----------------------------------------------------------------
LOADER = '''
import numpy as np

def blobs(rows=40, features=3, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(rows) % 2
    x = rng.normal(size=(rows, features)) + y[:, None]
    return x, y, x[: rows // 4], y[: rows // 4]

def from_file(path, scale=1.0):
    x = np.loadtxt(path, delimiter=",") * scale
    return x, np.arange(len(x)) % 2, x, np.arange(len(x)) % 2
'''


def test_a_loader_takes_its_options_from_the_config(tmp_path, monkeypatch):
    module = write_module(tmp_path, LOADER, "loader")
    monkeypatch.chdir(tmp_path)
    cfg = config(dataset=f"{module}:blobs", dataset_options={"rows": 80, "features": 5})
    del cfg["problem"]["label_column"]
    sim = Simulation(load_config(cfg))
    assert sim.problem.train.x.shape == (80, 5)
    np.savetxt(tmp_path / "f.csv", np.arange(24.0).reshape(8, 3), delimiter=",")
    cfg["problem"]["dataset"], cfg["problem"]["dataset_options"] = f"{module}:from_file", {"path": "f.csv"}
    cfg["problem"]["clients"], cfg["solver"]["batch_size"] = 2, 4
    sim = Simulation(load_config(cfg))  # a required parameter, given by the options
    assert sim.problem.train.x.shape == (8, 3)
    fedpd.run(cfg, out=tmp_path / "run")
    assert load_config(tmp_path / "run" / "config.toml").raw["problem"]["dataset_options"] == {"path": "f.csv"}


@pytest.mark.parametrize(("loader", "options", "needle"), [
    ("blobs", {"colour": 1}, "problem.dataset_options: {m}:blobs(rows=40, features=3, seed=0) cannot be called as "
                             "fedpd calls a dataset plug-in, (colour=...): got an unexpected keyword argument "
                             "'colour'"),
    ("from_file", {}, "problem.dataset: {m}:from_file(path, scale=1.0) cannot be called as fedpd calls a dataset "
                      "plug-in, (): missing a required argument: 'path'"),
])
def test_a_loaders_wrong_options_are_one_line(loader, options, needle, tmp_path, capsys, monkeypatch):
    module = write_module(tmp_path, LOADER, "loader")
    monkeypatch.chdir(tmp_path)
    cfg = config(dataset=f"{module}:{loader}", dataset_options=options)
    del cfg["problem"]["label_column"]
    refused(cfg, needle.format(m=module), tmp_path, capsys)


def test_fedpd_data_split_reads_a_csv(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_csv(tmp_path / "customers.csv", customers(100))
    code, out, err = run_cli(["data", "split", "csv", "--path", "customers.csv", "--label-column", "churned",
                              "--clients", "4"], capsys)
    assert code == 0, err
    assert "csv: iid partition of 80 training samples (seed 0)" in out and "classes: 0 no, 1 yes" in out
    code, _, err = run_cli(["data", "split", "mnist", "--path", "customers.csv", "--clients", "4"], capsys)
    assert code == 2 and "--path: not an option of mnist" in err


def test_load_dataset_refuses_without_a_path(tmp_path):
    with pytest.raises(FedpdError, match="csv: no path given"):
        load_dataset("csv", tmp_path)
