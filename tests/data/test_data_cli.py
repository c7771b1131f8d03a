"""``fedpd data`` through add_data_parser on a plain argparse parser, as the main CLI will call it."""

from __future__ import annotations

import argparse
import sys

import pytest

from fedpd.data.cli import add_data_parser
from fedpd.errors import ConfigError, DataError, FedpdError


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fedpd")
    add_data_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_list(tmp_path, writers, capsys):
    writers.make_idx_dataset(tmp_path / "fashion-mnist", gz=False)
    writers.make_leaf(tmp_path, "shakespeare")
    assert run(["data", "list", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert f"data dir: {tmp_path} (--data-dir)" in out
    assert "corrupt" in rows["fashion-mnist"]  # canonical names, non-canonical sizes
    assert "present" in rows["shakespeare"] and "leaf/shakespeare" in rows["shakespeare"]
    assert "missing" in rows["cifar10"] and "looked in" in rows["cifar10"]
    assert set(rows) >= {"mnist", "cifar100", "femnist", "sent140", "image-folder"}


def test_list_verify_reads_cifar_folders(tmp_path, writers, capsys):
    writers.make_cifar(tmp_path / "cifar100", "cifar100")
    batch = tmp_path / "cifar100" / "cifar-100-python" / "test"
    batch.write_bytes(batch.read_bytes()[:-200])  # truncated
    rows = {}
    for flags in ([], ["--verify"]):
        assert run(["data", "list", "--data-dir", str(tmp_path), *flags]) == 0
        rows[tuple(flags)] = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "present" in rows[()]["cifar100"]
    assert "corrupt" in rows[("--verify",)]["cifar100"] and "cifar-100-python/test" in rows[("--verify",)]["cifar100"]


def test_split_cifar100_label_mode(tmp_path, writers, capsys):
    writers.make_cifar(tmp_path, "cifar100")
    assert (
        run(["data", "split", "cifar100", "--clients", "2", "--label-mode", "coarse", "--data-dir", str(tmp_path)]) == 0
    )
    assert "2 clients, 30 samples, 20 classes" in capsys.readouterr().out
    assert run(["data", "split", "cifar100", "--clients", "2", "--data-dir", str(tmp_path)]) == 0
    assert "2 clients, 30 samples, 100 classes" in capsys.readouterr().out
    writers.make_leaf(tmp_path, "femnist")
    with pytest.raises(ConfigError, match="--label-mode"):
        run(["data", "split", "femnist", "--clients", "2", "--label-mode", "fine", "--data-dir", str(tmp_path)])


def test_split_dirichlet_and_plot(tmp_path, writers, capsys):
    pytest.importorskip("matplotlib")
    writers.make_idx_dataset(tmp_path / "mnist", gz=True, n_train=200)
    plot = tmp_path / "labels.png"
    argv = ["data", "split", "mnist", "--partition", "dirichlet", "--clients", "5", "--alpha", "0.3",
            "--min-size", "4", "--seed", "1", "--data-dir", str(tmp_path), "--no-verify", "--plot", str(plot)]
    assert run(argv) == 0
    out = capsys.readouterr().out
    assert "dirichlet partition of 200 training samples" in out and "5 clients, 200 samples, 10 classes" in out
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"
    assert run(argv[:-2]) == 0
    assert capsys.readouterr().out.splitlines()[:8] == out.splitlines()[:8]  # same seed, same split


def test_split_natural_and_errors(tmp_path, writers, capsys, monkeypatch):
    writers.make_leaf(tmp_path, "femnist")
    assert run(["data", "split", "femnist", "--partition", "natural", "--data-dir", str(tmp_path)]) == 0
    assert "3 clients, 9 samples, 62 classes" in capsys.readouterr().out
    writers.make_idx_dataset(tmp_path / "mnist", gz=False)
    with pytest.raises(ConfigError):  # natural needs users
        run(["data", "split", "mnist", "--partition", "natural", "--data-dir", str(tmp_path), "--no-verify"])
    with pytest.raises(ConfigError):  # too many clients
        run(
            [
                "data",
                "split",
                "mnist",
                "--partition",
                "iid",
                "--clients",
                "31",
                "--data-dir",
                str(tmp_path),
                "--no-verify",
            ]
        )
    with pytest.raises(DataError):  # canonical names, wrong sizes, verify on
        run(["data", "split", "mnist", "--clients", "2", "--data-dir", str(tmp_path)])
    with pytest.raises(FedpdError):
        run(["data", "split", "nosuch", "--clients", "2", "--data-dir", str(tmp_path)])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ConfigError, match="matplotlib"):
        run(["data", "split", "mnist", "--clients", "2", "--data-dir", str(tmp_path), "--no-verify",
             "--plot", str(tmp_path / "x.png")])


def test_split_image_folder(tmp_path, writers, capsys):
    pytest.importorskip("PIL")
    writers.make_image_folder(tmp_path, as_tar=True)
    assert run(["data", "split", "image-folder", "--path", "imgs.tar.gz", "--clients", "2", "--partition", "shards",
                "--classes-per-client", "1", "--data-dir", str(tmp_path)]) == 0
    assert "classes: 0 ant, 1 zebra" in capsys.readouterr().out


def test_download_command(tmp_path, capsys, monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(DataError, match="cannot connect"):
        run(["data", "download", "mnist", "--data-dir", str(tmp_path), "--base-url", "http://127.0.0.1:9/",
             "--no-progress"])
    with pytest.raises(SystemExit):  # argparse: a subcommand is required
        run(["data"])
