"""The ``dataset`` problem (fedpd.problems.dataset): real-format fixture files written by the tests,
run for two rounds through the CLI and the Python API with every partition, per-client test data and
augmentation; bad options are one line and exit 2, a missing data set names the command that fetches
it, and pooled test data dealt over non-i.i.d. clients is one note; and the acceptance run (FedAvg +
logistic regression on real MNIST, 100 IID clients, >= 90 % test accuracy within 20 rounds) when the
data is here."""

from __future__ import annotations

import importlib.util
import json
import math
import warnings
from pathlib import Path

import pytest
import torch

from fedpd.build import build_problem
from fedpd.checks import FedpdNotice
from fedpd.cli import main
from fedpd.config import load_config
from fedpd.data import load_dataset
from fedpd.problems.base import ClientSplit
from fedpd.problems.dataset import AugmentedSplit
from fedpd.runner import run
from fedpd.simulation import Simulation
from fedpd.streams import ClientStreams
from helpers import ROOT
from helpers import run_cli as cli
from user_plugins import write_module

# the fixture writers of tests/data/conftest.py (tiny files in the exact public formats)
_spec = importlib.util.spec_from_file_location("_fedpd_data_writers", ROOT / "tests" / "data" / "conftest.py")
writers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writers)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """mnist (30 / 10 idx, 3 per class), cifar10 (30 / 6 python batches), cifar100 (30 / 6), LEAF femnist,
    shakespeare and sent140 (3 users each), an image folder (imgs.tar.gz)."""
    root = tmp_path_factory.mktemp("data")
    writers.make_idx_dataset(root / "mnist", gz=True)
    writers.make_cifar(root, "cifar10", per_batch=6)
    writers.make_cifar(root / "cifar100", "cifar100", per_batch=6)
    writers.make_leaf(root, "femnist")
    writers.make_leaf(root, "shakespeare")  # its text holds '~', outside LEAF's 80 characters
    writers.make_leaf(root, "sent140")
    writers.make_image_folder(root, as_tar=True)  # imgs.tar.gz: classes ant, zebra; 6 / 4 images of 8 x 6
    return root


def config(data_dir: Path, rounds: int = 2, model: str | None = None, **problem) -> dict:
    cfg = {
        "problem": {"name": "dataset", "dataset": "mnist", "data_dir": str(data_dir), "clients": 3,
                    "verify": False, **problem},  # fixture files have canonical names, not canonical sums
        "algorithm": {"name": "fedavg"},
        "solver": {"name": "sgd", "lr": 0.05, "local_steps": 2, "batch_size": 4},
        "sampler": {"name": "all"},
        "run": {"rounds": rounds, "eval_every": 1},
    }
    if problem.get("partition") == "natural":  # one client per user: the count is the data set's
        del cfg["problem"]["clients"]
    if model:
        cfg["model"] = {"name": model}
    return cfg


def labels_of(split, i: int) -> set[int]:
    return set(split.y[split.offsets[i]:split.offsets[i + 1]].tolist())


def assert_ran(history: list[dict], rounds: int = 2) -> None:
    assert [r["round"] for r in history] == list(range(rounds + 1))
    for r in history:
        assert math.isfinite(r["train_loss"]) and math.isfinite(r["test_loss"])
        assert 0.0 <= r["test_acc"] <= 1.0


# ---------------------------------------------------------------------------------------------- runs

def test_cli_run_two_rounds(tmp_path, data_dir, capsys):
    cfg = tmp_path / "mnist.toml"
    cfg.write_text('[problem]\nname = "dataset"\ndataset = "mnist"\nclients = 3\nverify = false\n'
                   '[algorithm]\nname = "fedavg"\n[solver]\nname = "sgd"\nlr = 0.05\nlocal_steps = 2\nbatch_size = 4\n'
                   '[run]\nrounds = 2\neval_every = 1\n')
    out = tmp_path / "run"
    code = main(["run", str(cfg), "--out", str(out), "--quiet", "--set", f"problem.data_dir={data_dir}"])
    assert code == 0, capsys.readouterr().err
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert_ran(history)
    saved = load_config(out / "config.toml")  # the resolved config records the data dir and the defaults
    assert saved.section("problem")["data_dir"] == str(data_dir)
    assert saved.section("problem")["partition"] == "iid"


def test_problem_is_float32_and_seeded(data_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's "not writable" over an idx file's bytes
        p = build_problem(load_config(config(data_dir)))
    assert p.train.x.dtype == torch.float32 and p.x_init.dtype == torch.float32
    assert p.info["model"] == "logistic" and p.x_init.numel() == 784 * 10 + 10  # mnist's default model
    assert p.train.x.shape[1:] == (1, 28, 28) and p.train.sizes.tolist() == [10, 10, 10]
    assert p.test.y.numel() == 10  # pooled: the dataset's own test set, dealt over the clients
    # standardised with training statistics
    assert abs(float(p.train.x.mean())) < 1e-4 and abs(float(p.train.x.std()) - 1) < 1e-2
    again = build_problem(load_config(config(data_dir)))
    other = build_problem(load_config(config(data_dir, seed=1)))
    assert torch.equal(p.x_init, again.x_init) and not torch.equal(p.x_init, other.x_init)


@pytest.mark.parametrize("partition, options", [
    ("iid", {}),
    ("dirichlet", {"alpha": 0.1, "min_size": 4}),
    ("shards", {"classes_per_client": 2}),
    ("power_law", {"exponent": 1.2, "min_size": 2}),
])
def test_partitions_run_via_api(data_dir, partition, options):
    cfg = config(data_dir, partition=partition, **options)
    p = build_problem(load_config(cfg))
    sizes = p.train.sizes.tolist()
    assert p.train.num_clients == 3 and sum(sizes) == 30
    assert min(sizes) >= options.get("min_size", 1)
    if partition == "iid":
        assert sizes == [10, 10, 10]
    if partition == "shards":  # 6 shards of 5 sorted labels: at most 2 x 2 labels per client
        assert all(len(labels_of(p.train, i)) <= 4 for i in range(3))
    result = run(cfg)
    assert_ran(result.history)
    assert result.history[-1]["train_loss"] != result.history[0]["train_loss"]  # the model moved


def test_label_power_law_and_the_first_clients_of_a_partition(data_dir):
    """Fed+ §5.2's MNIST split: one digit per party (label_power_law), and a federation of the
    partition's first K parties (keep_clients) with the same parties' data."""
    cfg = config(data_dir, clients=10, partition="label_power_law", classes_per_client=1, min_size=1)
    every = build_problem(load_config(cfg))
    assert every.train.num_clients == 10 and sum(every.train.sizes.tolist()) == 30
    assert all(labels_of(every.train, k) == {k} for k in range(10))  # party k: digit k
    first = build_problem(load_config(config(data_dir, clients=10, partition="label_power_law", classes_per_client=1,
                                             min_size=1, keep_clients=4)))
    assert first.train.num_clients == 4
    for k in range(4):  # the same parties, with the same samples
        a, b = every.train.offsets[k], first.train.offsets[k]
        n = int(every.train.sizes[k])
        assert torch.equal(first.train.x[b:b + n], every.train.x[a:a + n])


def test_natural_partition_on_leaf(data_dir):
    cfg = config(data_dir, dataset="femnist", partition="natural")
    cfg["solver"]["batch_size"] = 2
    p = build_problem(load_config(cfg))
    # one client per user (alice, bob, carol), each with its own LEAF test samples
    assert p.train.sizes.tolist() == [3, 2, 4] and p.test.sizes.tolist() == [1, 1, 2]
    assert p.info["model"] == "femnist_cnn"
    cfg["model"] = {"name": "logistic"}  # the 6.4M-parameter CNN is covered by tests/problems/test_models.py
    assert_ran(run(cfg).history)


def test_per_client_test_and_augment(data_dir):
    cfg = config(data_dir, dataset="cifar10", partition="iid", test="per_client", test_fraction=0.2,
                 augment=True, model="lenet")
    p = build_problem(load_config(cfg))
    assert isinstance(p.train, AugmentedSplit) and not isinstance(p.test, AugmentedSplit)
    # 30 images, 10 per client, 2 of each held out as the client's test data
    assert p.train.sizes.tolist() == [8, 8, 8] and p.test.sizes.tolist() == [2, 2, 2]
    train_rows = {tuple(r.tolist()) for r in p.train.x.flatten(1)[:, :8]}
    assert not any(tuple(r.tolist()) in train_rows for r in p.test.x.flatten(1)[:, :8])  # disjoint
    # minibatches are cropped / flipped copies: same labels as the plain draw, other pixels
    ids = torch.tensor([0, 2])
    X, Y, _ = p.train.minibatch(ids, 16, ClientStreams.of(3, "batches", 0, ids))
    plain = ClientSplit.batch_from(p.train, ids, ClientStreams.of(3, "batches", 0, ids).uniform(16))  # same positions
    assert X.shape == plain[0].shape == (2, 16, 3, 32, 32) and torch.equal(Y, plain[1])
    assert not torch.equal(X, plain[0])
    assert_ran(run(cfg).history)


def test_image_folder_dataset(data_dir):
    cfg = config(data_dir, dataset="image-folder", path="imgs.tar.gz", clients=2, model="mlp")
    cfg["solver"]["batch_size"] = 2  # clients of 3 images: a larger batch is refused (fedpd.checks)
    p = build_problem(load_config(cfg))
    assert p.train.x.shape == (6, 3, 6, 8) and p.test.y.numel() == 4
    assert p.info["num_classes"] == 2
    assert_ran(run(cfg).history)


def test_shakespeare_char_lstm_gets_the_dataset_vocabulary(data_dir):
    """Characters outside LEAF's alphabet are id 80: the model's embedding must have 81 rows (it had 80 and
    the run died with an IndexError)."""
    cfg = config(data_dir, dataset="shakespeare", partition="natural")
    cfg["model"] = {"name": "char_lstm", "embed_dim": 4, "hidden": 8}  # small LSTM, same vocabulary logic
    p = build_problem(load_config(cfg))
    assert int(p.train.x.max()) == 80 and p.info["num_classes"] == 81
    assert p.model.module.embedding.weight.shape == (81, 4)
    assert p.info["model"] == "char_lstm" and p.train.sizes.tolist() == [3, 2, 4]
    assert_ran(run(cfg).history)


def test_sent140_sentiment_lstm_runs_with_vocab_and_seq_len(data_dir):
    cfg = config(data_dir, dataset="sent140", partition="natural", vocab_size=5, seq_len=4)
    cfg["model"] = {"name": "auto", "embed_dim": 6, "hidden": 8}
    p = build_problem(load_config(cfg))
    assert p.info["model"] == "sentiment_lstm"  # the dataset's default model, built without a vocab_size
    assert p.train.x.shape == (9, 4) and int(p.train.x.max()) < 5
    assert p.model.module.embedding.weight.shape == (5, 6)
    # front padding: the last step (the one the LSTM reads) is always a word, never <pad>
    assert (p.train.x[:, -1] != 0).all() and (p.train.x[:, 0] == 0).any()
    assert_ran(run(cfg).history)


def test_sent140_glove_initialises_the_embedding(tmp_path, data_dir):
    glove = tmp_path / "glove.tiny.3d.txt"
    glove.write_text("the 9 9 9\ngood 0.5 -1.25 2\nrain -3 0.125 1\nmovie 1 1 -1\n")
    cfg = config(data_dir, dataset="sent140", partition="natural", glove_path=str(glove))
    cfg["model"] = {"name": "sentiment_lstm", "hidden": 8}
    p = build_problem(load_config(cfg))
    vocab = load_dataset("sent140", data_dir).meta["vocab"]
    weights = p.model.module.embedding_weight  # frozen (LEAF's default): a buffer shared by all clients
    assert weights.shape == (len(vocab), 3) and "embedding_weight" not in p.model.names
    for word, vec in (("good", [0.5, -1.25, 2]), ("rain", [-3, 0.125, 1]), ("movie", [1, 1, -1])):
        assert weights[vocab.index(word)].tolist() == vec
    assert weights[0].abs().sum() == 0  # <pad>
    others = [i for i, w in enumerate(vocab) if w not in ("good", "rain", "movie", "<pad>")]
    assert others and all(weights[i].abs().sum() > 0 for i in others)  # words without a vector: random rows
    assert_ran(run(cfg).history)
    cfg["model"]["freeze_embedding"] = False  # trainable: the GloVe matrix is the initial embedding parameter
    q = build_problem(load_config(cfg))
    assert torch.equal(q.model.module.embedding.weight.detach(), weights)


def test_cifar100_label_mode(data_dir):
    cfg = config(data_dir, dataset="cifar100", label_mode="coarse", max_test_samples=3)
    p = build_problem(load_config(cfg))
    assert p.info["num_classes"] == 20 and int(p.train.y.max()) < 20
    assert build_problem(load_config(config(data_dir, dataset="cifar100"))).info["num_classes"] == 100


def test_balanced_dirichlet_is_the_same_split_on_every_engine(data_dir):
    """problem.balanced: 3 clients of 10 samples each, label mixes ~ Dir(0.1); the split a node
    rebuilds from the run's resolved config is the run's own, so the in-process and the loopback
    engine (2 nodes, each building the problem from the config's TOML) give the same metrics."""
    from fedpd.build import from_toml
    cfg = config(data_dir, partition="dirichlet", alpha=0.1, balanced=True)
    p = build_problem(load_config(cfg))
    assert p.train.sizes.tolist() == [10, 10, 10]
    per_class = build_problem(load_config(config(data_dir, partition="dirichlet", alpha=0.1)))
    assert not torch.equal(per_class.train.y, p.train.y)  # another split than the per-class one
    _, node_problem, _, _ = from_toml(load_config(cfg).to_toml())
    assert torch.equal(node_problem.train.y, p.train.y) and torch.equal(node_problem.train.x, p.train.x)
    runs = [run({**cfg, "run": {**cfg["run"], **engine}}).history
            for engine in ({"engine": "inprocess"}, {"engine": "loopback", "nodes": 2})]
    assert_ran(runs[0])
    strip = [[{k: v for k, v in r.items() if k != "wall_s"} for r in h] for h in runs]
    assert strip[0] == strip[1]


# ---------------------------------------------------------------------------------------------- bad input

BAD = [
    # (overrides, text the one-line message must contain)
    (["problem.dataset=nosuch"], "problem.dataset"),
    (["problem.partition=natural"], "problem.partition"),     # mnist has no users
    (["problem.partition=zipf"], "problem.partition"),
    (["problem.clients=31"], "problem.clients"),             # more clients than samples
    (["problem.partition=dirichlet", "problem.min_size=11"], "min_size"),  # 3 x 11 > 30 samples
    (["problem.balanced=true"], "problem.balanced"),          # iid: balanced is the dirichlet partition's
    (["problem.partition=shards", "problem.balanced=true"], "problem.balanced"),
    (["problem.partition=dirichlet", "problem.balanced=2"], "problem.balanced"),
    (["problem.augment=true", "problem.dataset=shakespeare", "problem.partition=natural"], "problem.augment"),
    (["problem.verify=true"], "mnist"),                      # fixture files fail the canonical check
    (["problem.test=everyone"], "problem.test"),
    (["model.name=vgg"], "model.name"),
    (["problem.dataset=image-folder"], "problem.path"),
    (["problem.vocab_size=100"], "problem.vocab_size"),       # sent140 only
    (["problem.keep_clients=4"], "problem.keep_clients: 4 of the partition's 3 clients"),
    (["problem.label_mode=coarse"], "problem.label_mode"),   # cifar100 only
    (["problem.label_mode=medium", "problem.dataset=cifar100"], "label_mode"),
    (["problem.glove_path=g.txt", "problem.dataset=shakespeare", "problem.partition=natural"], "problem.glove_path"),
    (["problem.glove_path=nosuch.txt", "problem.dataset=sent140", "problem.partition=natural"], "nosuch.txt"),
    (["problem.dataset=shakespeare", "problem.partition=natural", "model.name=char_lstm", "model.vocab_size=80"],
     "model.vocab_size"),                                    # below the 81 ids of the data
]


@pytest.mark.parametrize("overrides, needle", BAD)
def test_bad_options_exit_2_with_one_line(tmp_path, data_dir, capsys, overrides, needle):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[problem]\nname = "dataset"\ndataset = "mnist"\nclients = 3\nverify = false\n'
                   '[algorithm]\nname = "fedavg"\n[run]\nrounds = 1\n')
    sets = [a for o in [f"problem.data_dir={data_dir}", *overrides] for a in ("--set", o)]
    if "problem.partition=natural" in overrides:  # (the file's clients = 3 is the natural partition's to refuse)
        sets += ["--unset", "problem.clients"]
    code = main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet", *sets])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err
    assert not (tmp_path / "out").exists()  # nothing written for a config that cannot run


def test_missing_dataset_key_and_missing_files(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[problem]\nname = "dataset"\n[algorithm]\nname = "fedavg"\n')
    assert main(["run", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "problem.dataset" in err and "missing" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code = main(["run", str(cfg), "--quiet", "--set", "problem.dataset=mnist", "--set", f"problem.data_dir={empty}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "mnist" in err and "train-images-idx3-ubyte" in err  # says what is expected where


# ---------------------------------------------------------------------------------------------- real MNIST

def real_data_dir() -> Path:
    """$FEDPD_DATA, else fedpd's default data directory (as fedpd itself reads it)."""
    from fedpd.data.loaders import resolve_data_dir

    return resolve_data_dir(None)


def test_mnist_fedavg_logistic_reaches_90_percent():
    """The acceptance run: FedAvg + multinomial logistic regression on real MNIST, 100 IID clients,
    >= 90 % test accuracy within 20 rounds (benchmarks/configs/mnist_fedavg_logistic.toml)."""
    data = real_data_dir()
    if not (data / "mnist" / "train-images-idx3-ubyte.gz").exists() and \
            not (data / "mnist" / "train-images-idx3-ubyte").exists():
        pytest.skip(f"real MNIST not found in {data}/mnist (set FEDPD_DATA to the folder that holds mnist/)")
    result = run(ROOT / "benchmarks" / "configs" / "mnist_fedavg_logistic.toml",
                 overrides=[f"problem.data_dir={data}", "run.threads=1"])
    assert result.simulation.problem.train.num_clients == 100
    accs = [r["test_acc"] for r in result.history if "test_acc" in r and r["round"] <= 20]
    assert result.history[-1]["round"] == 20
    assert max(accs) >= 0.90, accs


@pytest.mark.parametrize("command", ["run", "split"])
def test_truncated_file_exit_2(tmp_path, capsys, command):
    """A truncated idx file (checks off, so only the format check catches it): `fedpd run` and
    `fedpd data split` print one line naming the file and exit 2."""
    writers.make_idx_dataset(tmp_path / "mnist", gz=False)
    f = tmp_path / "mnist" / "train-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:-100])
    if command == "run":
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[problem]\nname = "dataset"\ndataset = "mnist"\nclients = 2\nverify = false\n'
                       f'data_dir = "{tmp_path}"\n[algorithm]\nname = "fedavg"\n')
        argv = ["run", str(cfg), "--quiet"]
    else:
        argv = ["data", "split", "mnist", "--clients", "2", "--no-verify", "--data-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "train-images-idx3-ubyte" in err, err


# --- a missing dataset fedpd can download says how ---------------------------------------------
def test_a_missing_mnist_names_fedpd_data_download(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEDPD_DATA", str(tmp_path / "empty"))
    config = tmp_path / "mnist.toml"
    config.write_text('[problem]\nname = "dataset"\ndataset = "mnist"\nclients = 4\n[algorithm]\nname = "fedavg"\n'
                      '[solver]\nname = "sgd"\n[run]\nrounds = 1\n')
    code, _, err = cli(["run", config, "--out", tmp_path / "run", "--quiet"], capsys)
    assert code == 2 and err.strip().endswith("; fetch it with: fedpd data download mnist"), err
    code, _, err = cli(["data", "split", "mnist", "--data-dir", tmp_path / "other"], capsys)
    assert code == 2 and f"fetch it with: fedpd data download mnist --data-dir {tmp_path / 'other'}" in err, err
    assert not (tmp_path / "run").exists()


# --- personal metrics on a pooled test set dealt i.i.d. over non-i.i.d. clients: one note ----
LOADER = '''
import numpy as np

def load():
    rng = np.random.default_rng(0)
    y, yt = np.arange(60) % 3, np.arange(30) % 3
    return rng.normal(size=(60, 4)).astype(np.float32) + y[:, None], y, \\
        rng.normal(size=(30, 4)).astype(np.float32) + yt[:, None], yt
'''


@pytest.mark.parametrize("algorithm, partition, test, personal_eval, noted", [
    ("ditto", "shards", "pooled", "auto", True),
    ("fedavg", "dirichlet", "pooled", "always", True),
    ("ditto", "shards", "per_client", "auto", False),  # each client's own held-out samples
    ("ditto", "iid", "pooled", "auto", False),  # an i.i.d. slice is like the client's own data
    ("fedavg", "shards", "pooled", "auto", False),  # no personal metrics
    ("ditto", "shards", "pooled", "never", False),
])
def test_personal_metrics_on_pooled_slices_of_a_non_iid_split_are_one_note(tmp_path, monkeypatch, algorithm,
                                                                          partition, test, personal_eval, noted):
    module = write_module(tmp_path, LOADER, "loader")
    monkeypatch.chdir(tmp_path)
    problem = {"name": "dataset", "dataset": f"{module}:load", "clients": 3, "partition": partition, "test": test}
    if partition == "shards":  # (the only partition here that reads it)
        problem["classes_per_client"] = 1
    cfg = {"problem": problem,
           "algorithm": {"name": algorithm}, "run": {"personal_eval": personal_eval}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Simulation(load_config(cfg))
    notes = [str(w.message) for w in caught if issubclass(w.category, FedpdNotice)]
    assert len(notes) == (1 if noted else 0), notes
    if noted:
        assert f'problem.test: "pooled" with partition = "{partition}"' in notes[0] and "per_client" in notes[0]
        assert "\n" not in notes[0]


# --- the fedplus_mnist problem says how to fetch MNIST; a long y label is never cut ----------
def test_fedplus_mnist_without_its_data_names_the_download_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEDPD_DATA", str(tmp_path / "empty"))
    code, _, err = cli(["run", str(ROOT / "examples" / "fedgeomed_plus_mnist.toml"), "--out", str(tmp_path / "r")],
                       capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].endswith("fetch it with: fedpd data download mnist"), err
    assert not (tmp_path / "r").exists()
