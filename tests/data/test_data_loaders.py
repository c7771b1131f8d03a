"""Loaders on tiny fixture files in the exact public formats (idx, CIFAR pickles, image folders, LEAF JSON),
plus the corrupt and missing cases: each must raise DataError/ConfigError with a one-line message."""

from __future__ import annotations

import gzip
import json
import pickle
import sys

import numpy as np
import pytest
import torch

from fedpd.data import DATASETS, LEAF_CHARS, Dataset, dataset_status, load_dataset, load_image_folder, read_idx
from fedpd.data import checksums
from fedpd.data.loaders import load_glove, resolve_data_dir
from fedpd.errors import ConfigError, DataError

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


# ---------------------------------------------------------------------------------------------- data dir, registry

def test_resolve_data_dir_order(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDPD_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_data_dir(str(tmp_path / "explicit")) == tmp_path / "explicit"
    assert resolve_data_dir(None) == tmp_path / "env"
    monkeypatch.delenv("FEDPD_DATA")
    assert resolve_data_dir(None) == tmp_path / "xdg" / "fedpd" / "data"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_data_dir(None) == tmp_path / "home" / ".cache" / "fedpd" / "data"


def test_registry_and_unknown_name(tmp_path, one_line):
    assert {
        "mnist",
        "fashion-mnist",
        "cifar10",
        "cifar100",
        "femnist",
        "shakespeare",
        "sent140",
        "image-folder",
    } <= set(DATASETS)
    assert all(isinstance(d, str) and d and "\n" not in d for d in DATASETS.values())
    with pytest.raises(ConfigError) as e:
        load_dataset("imagenet", tmp_path)
    assert "imagenet" in one_line(e) and "mnist" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_dataset("mnist", tmp_path, colour=True)
    assert "colour" in one_line(e)


def test_leaf_alphabet_is_80_chars():
    assert len(LEAF_CHARS) == 80 and len(set(LEAF_CHARS)) == 80


# ---------------------------------------------------------------------------------------------- idx

@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("name,sub", [("mnist", "mnist"), ("mnist", "mnist/raw"), ("mnist", "MNIST/raw"),
                                      ("fashion-mnist", "fashion-mnist"), ("fashion-mnist", "FashionMNIST/raw")])
def test_idx_layouts(tmp_path, writers, gz, name, sub):
    arrays = writers.make_idx_dataset(tmp_path / sub, gz=gz)
    ds = load_dataset(name, tmp_path, verify=False)
    assert isinstance(ds, Dataset) and ds.name == name and ds.num_classes == 10
    assert ds.x_train.shape == (30, 1, 28, 28) and ds.x_train.dtype == torch.float32
    assert ds.x_test.shape == (10, 1, 28, 28) and ds.y_test.dtype == torch.int64
    expect = torch.from_numpy(arrays["train-images-idx3-ubyte"].astype(np.float32) / 255)
    assert torch.allclose(ds.x_train[:, 0], expect)
    assert ds.y_train.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    assert 0.0 <= float(ds.x_train.min()) and float(ds.x_train.max()) <= 1.0
    assert ds.train_users is None


def test_read_idx_errors(tmp_path, writers, one_line):
    ok = writers.write_idx(tmp_path / "ok", np.zeros((4, 5, 6)))
    assert read_idx(ok, 2051).shape == (4, 5, 6)
    with pytest.raises(DataError) as e:
        read_idx(ok, 2049)
    assert "magic" in one_line(e) and "2051" in str(e.value) and "2049" in str(e.value)
    data = ok.read_bytes()
    (tmp_path / "short").write_bytes(data[:-7])
    with pytest.raises(DataError) as e:
        read_idx(tmp_path / "short", 2051)
    assert "truncated" in one_line(e) and str(tmp_path / "short") in str(e.value)
    (tmp_path / "long").write_bytes(data + b"xx")
    with pytest.raises(DataError) as e:
        read_idx(tmp_path / "long", 2051)
    assert "trailing" in one_line(e)
    (tmp_path / "tiny").write_bytes(b"\x00\x00")
    with pytest.raises(DataError) as e:
        read_idx(tmp_path / "tiny", 2051)
    one_line(e)
    (tmp_path / "cut.gz").write_bytes(gzip.compress(data)[:-20])
    with pytest.raises(DataError) as e:
        read_idx(tmp_path / "cut.gz", 2051)
    assert "gzip" in one_line(e)


def test_idx_dataset_corrupt_cases(tmp_path, writers, one_line):
    folder = tmp_path / "mnist"
    writers.make_idx_dataset(folder, gz=False)
    # labels file with the images' magic number
    writers.write_idx(folder / "t10k-labels-idx1-ubyte", np.zeros((10, 1)), magic=2051)
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path, verify=False)
    assert "t10k-labels-idx1-ubyte" in one_line(e) and "magic" in str(e.value)
    # count mismatch between images and labels
    writers.write_idx(folder / "t10k-labels-idx1-ubyte", np.zeros(9))
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path, verify=False)
    assert "9 labels" in one_line(e)
    # truncated images file
    writers.write_idx(folder / "t10k-labels-idx1-ubyte", np.zeros(10))
    p = folder / "train-images-idx3-ubyte"
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path, verify=False)
    assert "truncated" in one_line(e) and "train-images" in str(e.value)


def test_idx_canonical_names_are_verified(tmp_path, writers, one_line, monkeypatch):
    writers.make_idx_dataset(tmp_path / "mnist", gz=True)
    with pytest.raises(DataError) as e:  # canonical names, wrong sizes
        load_dataset("mnist", tmp_path)
    msg = one_line(e)
    assert "bytes, expected" in msg and "verify=False" in msg
    # right size, wrong content: the hash check names the file, expected and got
    p = tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz"
    table = {k: checksums.Expected(v.size, v.sha256, v.md5) for k, v in checksums.CANONICAL["mnist"].items()}
    for f in (tmp_path / "mnist").iterdir():
        table[f.name] = checksums.Expected(f.stat().st_size, checksums.file_hash(f))
    table[p.name] = checksums.Expected(p.stat().st_size, "0" * 64)
    monkeypatch.setitem(checksums.CANONICAL, "mnist", table)
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path)
    msg = one_line(e)
    assert "sha256 mismatch" in msg and p.name in msg and "0" * 64 in msg
    table[p.name] = checksums.Expected(p.stat().st_size, checksums.file_hash(p))
    assert load_dataset("mnist", tmp_path).x_test.shape[0] == 10


def test_idx_missing(tmp_path, writers, one_line):
    with pytest.raises(DataError) as e:
        load_dataset("fashion-mnist", tmp_path)
    msg = one_line(e)
    assert "fashion-mnist" in msg and "FashionMNIST" in msg and "train-images-idx3-ubyte" in msg
    writers.write_idx(tmp_path / "mnist" / "train-images-idx3-ubyte", np.zeros((2, 28, 28)))
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path)
    assert "lacks" in one_line(e) and "t10k-labels-idx1-ubyte" in str(e.value)


def test_checksum_helpers(tmp_path, one_line):
    f = tmp_path / "blob"
    f.write_bytes(b"hello")
    checksums.verify_file(f, checksums.Expected(5, checksums.file_hash(f)))
    checksums.verify_file(f, checksums.Expected(5, md5=checksums.file_hash(f, "md5")))
    with pytest.raises(DataError) as e:
        checksums.verify_file(f, checksums.Expected(6))
    assert "truncated" in one_line(e)
    with pytest.raises(DataError) as e:
        checksums.verify_file(f, checksums.Expected(5, md5="0" * 32))
    assert "md5 mismatch" in one_line(e)
    with pytest.raises(DataError) as e:
        checksums.verify_file(tmp_path / "nope", checksums.Expected(5))
    one_line(e)
    assert checksums.CANONICAL["mnist"]["train-images-idx3-ubyte.gz"].size == 9912422
    assert checksums.CANONICAL["cifar10"]["cifar-10-python.tar.gz"].md5 == "c58f30108f718f92721af3b95e74349a"
    assert checksums.CANONICAL["cifar100"]["cifar-100-python.tar.gz"].md5 == "eb9058c3a382ffc7106e4002c42a8d85"


# ---------------------------------------------------------------------------------------------- CIFAR

@pytest.mark.parametrize("as_tar", [False, True])
@pytest.mark.parametrize("sub", ["", "cifar10"])
def test_cifar10_python(tmp_path, writers, as_tar, sub):
    batches = writers.make_cifar(tmp_path / sub if sub else tmp_path, "cifar10", as_tar=as_tar)
    ds = load_dataset("cifar10", tmp_path, verify=False)
    assert ds.x_train.shape == (30, 3, 32, 32) and ds.x_test.shape == (6, 3, 32, 32)
    assert ds.classes == CIFAR10_CLASSES and ds.num_classes == 10
    labels = sum((batches[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), [])
    assert ds.y_train.tolist() == labels
    first = batches["data_batch_1"][b"data"][0].reshape(3, 32, 32).astype(np.float32) / 255
    assert torch.allclose(ds.x_train[0], torch.from_numpy(first))  # rows are R plane, G plane, B plane


@pytest.mark.parametrize("as_tar", [False, True])
def test_cifar100_fine_and_coarse(tmp_path, writers, as_tar):
    batches = writers.make_cifar(tmp_path / "cifar100", "cifar100", as_tar=as_tar)
    fine = load_dataset("cifar100", tmp_path, verify=False)
    assert fine.num_classes == 100 and fine.y_train.tolist() == batches["train"][b"fine_labels"]
    assert fine.classes[3] == "fine3" and fine.x_train.shape == (30, 3, 32, 32)
    coarse = load_dataset("cifar100", tmp_path, verify=False, label_mode="coarse")
    assert coarse.num_classes == 20 and coarse.y_test.tolist() == batches["test"][b"coarse_labels"]
    with pytest.raises(ConfigError):
        load_dataset("cifar100", tmp_path, verify=False, label_mode="medium")


def test_cifar_canonical_tar_is_verified(tmp_path, writers, one_line):
    writers.make_cifar(tmp_path, "cifar10", as_tar=True)
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", tmp_path)
    assert "cifar-10-python.tar.gz" in one_line(e) and "170498071" in str(e.value)


def test_cifar_corrupt(tmp_path, writers, one_line):
    writers.make_cifar(tmp_path, "cifar10", as_tar=True)
    tar = tmp_path / "cifar-10-python.tar.gz"
    tar.write_bytes(tar.read_bytes()[: tar.stat().st_size // 2])
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", tmp_path, verify=False)
    assert "cifar-10-python.tar.gz" in one_line(e)

    folder_root = tmp_path / "f"
    writers.make_cifar(folder_root, "cifar10")
    batch = folder_root / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(batch.read_bytes()[:500])
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", folder_root, verify=False)
    assert "data_batch_3" in one_line(e) and "not a readable CIFAR python pickle" in str(e.value)
    (folder_root / "cifar-10-batches-py" / "data_batch_3").unlink()
    for verify in (True, False):
        with pytest.raises(DataError) as e:
            load_dataset("cifar10", folder_root, verify=verify)
        assert "missing data_batch_3" in one_line(e)


def test_cifar_folder_batches_meta_is_verified(tmp_path, writers, one_line, monkeypatch):
    """batches.meta has torchvision's MD5 (the shared converter reproduces it byte for byte); with verify on,
    a folder's batches.meta must match it. The fixture's own meta does not."""
    assert checksums.CANONICAL["cifar10"]["batches.meta"] == checksums.Expected(
        158, md5="5ff9c542aee3614f3951f8cda6e48888"
    )
    writers.make_cifar(tmp_path, "cifar10")
    meta = tmp_path / "cifar-10-batches-py" / "batches.meta"
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", tmp_path)
    assert "batches.meta" in one_line(e) and "158" in str(e.value)
    size = meta.stat().st_size
    monkeypatch.setitem(checksums.CANONICAL, "cifar10", {"batches.meta": checksums.Expected(size, md5="0" * 32)})
    with pytest.raises(DataError) as e:  # right size, wrong content
        load_dataset("cifar10", tmp_path)
    assert "md5 mismatch" in one_line(e) and "batches.meta" in str(e.value)
    monkeypatch.setitem(
        checksums.CANONICAL, "cifar10", {"batches.meta": checksums.Expected(size, md5=checksums.file_hash(meta, "md5"))}
    )
    assert load_dataset("cifar10", tmp_path).x_train.shape == (30, 3, 32, 32)


def test_cifar_folder_status(tmp_path, writers, monkeypatch):
    """`data list`: a folder with a missing batch is corrupt; a damaged batch is corrupt with --verify (which
    unpickles every batch), where it used to be reported present."""
    writers.make_cifar(tmp_path / "cifar100", "cifar100")
    folder = tmp_path / "cifar100" / "cifar-100-python"
    assert dataset_status("cifar100", tmp_path).state == "present"
    assert dataset_status("cifar100", tmp_path, verify=True).state == "present"
    train = folder / "train"
    data = train.read_bytes()
    train.write_bytes(data[: len(data) // 2])  # truncated
    assert dataset_status("cifar100", tmp_path).state == "present"  # sizes of these batches are not known
    st = dataset_status("cifar100", tmp_path, verify=True)
    assert st.state == "corrupt" and "train" in st.detail and "\n" not in st.detail
    train.write_bytes(data.replace(b"fine_labels", b"fine_lab3ls"))  # readable pickle, no labels
    st = dataset_status("cifar100", tmp_path, verify=True)
    assert st.state == "corrupt" and "fine_labels" in st.detail
    train.unlink()
    st = dataset_status("cifar100", tmp_path)
    assert st.state == "corrupt" and "missing train" in st.detail


def test_cifar_pickle_only_allows_numpy_globals(tmp_path, writers, one_line):
    writers.make_cifar(tmp_path, "cifar10")
    evil = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"x": sys.exit}  # references builtins/sys
    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "wb") as f:
        pickle.dump(evil, f, protocol=2)
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", tmp_path, verify=False)
    assert "not allowed" in one_line(e)


def test_cifar_missing(tmp_path, one_line):
    with pytest.raises(DataError) as e:
        load_dataset("cifar100", tmp_path)
    assert "cifar-100-python" in one_line(e) and str(tmp_path) in str(e.value)


def _make_cifar_jpeg(writers, root, as_tar):
    return writers.make_image_folder(root, classes=CIFAR10_CLASSES, per_class=(2, 1), size=(32, 32), ext="jpg",
                                     top="cifar-10-jpeg", as_tar=as_tar, tar_name="cifar-10-jpeg.tar.gz")


@pytest.mark.parametrize("as_tar", [False, True])
def test_cifar10_jpeg_fallback(tmp_path, writers, as_tar, one_line):
    pytest.importorskip("PIL")
    _make_cifar_jpeg(writers, tmp_path / "cifar-10", as_tar)
    if as_tar:  # canonical name, non-canonical content
        with pytest.raises(DataError) as e:
            load_dataset("cifar10", tmp_path)
        assert "cifar-10-jpeg.tar.gz" in one_line(e)
    ds = load_dataset("cifar10", tmp_path, verify=False)
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (10, 3, 32, 32)
    assert ds.classes == CIFAR10_CLASSES and ds.y_train.tolist() == [i // 2 for i in range(20)]
    assert ds.meta["format"] == "jpeg"


# ---------------------------------------------------------------------------------------------- image folders

@pytest.mark.parametrize("as_tar,top", [(False, None), (False, "imgs"), (True, "imgs"), (True, None)])
def test_image_folder(tmp_path, writers, as_tar, top):
    pytest.importorskip("PIL")
    from PIL import Image

    path = writers.make_image_folder(tmp_path, as_tar=as_tar, top=top)
    ds = load_image_folder(path)
    assert ds.classes == ["ant", "zebra"]  # sorted by name
    assert ds.x_train.shape == (6, 3, 6, 8) and ds.x_test.shape == (4, 3, 6, 8)
    assert ds.y_train.tolist() == [0, 0, 0, 1, 1, 1] and ds.y_test.tolist() == [0, 0, 1, 1]
    src = tmp_path / "_stage_images" if as_tar else tmp_path
    src = src / top if top else src
    png = np.asarray(Image.open(src / "train" / "ant" / "000.png"))
    assert torch.allclose(ds.x_train[0], torch.from_numpy(png.transpose(2, 0, 1).astype(np.float32) / 255))
    assert ds.x_train.is_contiguous()
    grey = load_image_folder(path, mode="L")
    assert grey.x_train.shape == (6, 1, 6, 8)


def test_image_folder_via_load_dataset(tmp_path, writers, one_line):
    pytest.importorskip("PIL")
    writers.make_image_folder(tmp_path, as_tar=True)
    ds = load_dataset("image-folder", tmp_path, path="imgs.tar.gz")  # relative to the data dir
    assert ds.num_classes == 2
    with pytest.raises(ConfigError) as e:
        load_dataset("image-folder", tmp_path)
    assert "path" in one_line(e)
    with pytest.raises(DataError) as e:
        load_dataset("image-folder", tmp_path, path="nope.tar.gz")
    assert "nope.tar.gz" in one_line(e)


def test_image_folder_errors(tmp_path, writers, one_line):
    pytest.importorskip("PIL")
    root = writers.make_image_folder(tmp_path / "a", top=None)
    (root / "train" / "ant" / "000.png").write_bytes(b"not a png at all")
    with pytest.raises(DataError) as e:
        load_image_folder(root)
    assert "000.png" in one_line(e) and "decode" in str(e.value)

    root = writers.make_image_folder(tmp_path / "b", top=None)
    from PIL import Image
    Image.new("RGB", (9, 9)).save(root / "test" / "ant" / "big.png")
    with pytest.raises(DataError) as e:
        load_image_folder(root)
    assert "big.png" in one_line(e) and "shape" in str(e.value)

    tar = writers.make_image_folder(tmp_path / "c", as_tar=True)
    tar.write_bytes(tar.read_bytes()[:300])
    with pytest.raises(DataError) as e:
        load_image_folder(tar)
    one_line(e)

    empty = tmp_path / "d"
    (empty / "train").mkdir(parents=True)
    (empty / "test").mkdir()
    with pytest.raises(DataError) as e:
        load_image_folder(empty)
    assert "no images" in one_line(e)


def test_image_folder_without_pillow(tmp_path, writers, monkeypatch, one_line):
    pytest.importorskip("PIL")
    path = writers.make_image_folder(tmp_path)
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(DataError) as e:
        load_image_folder(path)
    assert "Pillow" in one_line(e)


# ---------------------------------------------------------------------------------------------- LEAF

def test_leaf_femnist(tmp_path, writers):
    writers.make_leaf(tmp_path, "femnist")
    ds = load_dataset("femnist", tmp_path)
    assert ds.users == ["alice", "bob", "carol"] and ds.num_classes == 62
    assert ds.x_train.shape == (9, 1, 28, 28) and ds.x_train.dtype == torch.float32
    assert ds.x_test.shape == (4, 1, 28, 28)
    assert ds.train_users.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert ds.test_users.tolist() == [0, 1, 2, 2]
    assert ds.y_train.tolist() == list(range(9))


def test_leaf_shakespeare(tmp_path, writers):
    writers.make_leaf(tmp_path, "shakespeare")
    ds = load_dataset("shakespeare", tmp_path)
    assert ds.x_train.shape == (9, 80) and ds.x_train.dtype == torch.int64
    assert ds.x_test.shape == (4, 80)  # LEAF's overstated num_samples in test files is ignored
    assert ds.num_classes == 81
    text = "".join(LEAF_CHARS[i] if i < 80 else "~" for i in ds.x_train[0].tolist())
    assert text.startswith("To be, or not to be: that is the question~")
    assert int(ds.x_train.max()) == 80  # "~" is outside LEAF's alphabet -> reserved index
    assert ds.meta["vocab_size"] == 81  # token ids a model must embed
    assert ds.train_users.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]


def test_leaf_sent140(tmp_path, writers):
    writers.make_leaf(tmp_path, "sent140")
    ds = load_dataset("sent140", tmp_path, seq_len=4, vocab_size=5)
    vocab = ds.meta["vocab"]
    assert vocab[:2] == ["<pad>", "<unk>"] and len(vocab) == 5
    assert ds.x_train.shape == (9, 4) and ds.x_train.dtype == torch.int64
    assert ds.y_train.tolist() == [i % 2 for i in range(9)] and ds.num_classes == 2
    assert int(ds.x_train.max()) < 5 and (ds.x_train == 1).any()  # capped vocabulary -> unknown words
    assert (ds.x_train[0] == 0).sum() == 1 and ds.x_train[0, 0] == 0  # 3 words padded to 4, at the front
    assert (ds.x_train[:, -1] != 0).all()  # the last step, which SentimentLSTM reads, is a word
    assert ds.meta["vocab_size"] == 5
    full = load_dataset("sent140", tmp_path)
    assert full.x_train.shape[1] == 25 and "good" in full.meta["vocab"]  # lower-cased


def test_sent140_front_padding_keeps_the_first_words(tmp_path):
    f = tmp_path / "leaf" / "sent140"
    for split in ("train", "test"):
        (f / split).mkdir(parents=True)
        tweets = ["a b c d e f", "b"]
        (f / split / "x.json").write_text(json.dumps({"users": ["u"], "user_data": {"u": {
            "x": [["1", "d", "q", "u", t] for t in tweets], "y": [0, 1]}}}))
    ds = load_dataset("sent140", tmp_path, seq_len=4)
    ids = {w: i for i, w in enumerate(ds.meta["vocab"])}
    assert ds.x_train.tolist() == [[ids[w] for w in "abcd"], [0, 0, 0, ids["b"]]]


def test_load_glove(tmp_path, one_line):
    vocab = ["<pad>", "<unk>", "good", "new york", "zebra"]
    g = tmp_path / "g.txt"
    g.write_text("good 1 2\nnew york 3 4\nbad 5 6\n\n")  # a word may contain spaces (GloVe 840B)
    w = load_glove(g, vocab, seed=3)
    assert w.shape == (5, 2) and w.dtype == torch.float32
    assert w[2].tolist() == [1, 2] and w[3].tolist() == [3, 4] and w[0].tolist() == [0, 0]
    assert torch.equal(w, load_glove(g, vocab, seed=3)) and not torch.equal(w, load_glove(g, vocab, seed=4))
    bad = {
        "good 1 2\nzebra 1\n": "g.txt:2",                  # short line
        "good 1 2\nzebra 1 x\n": "non-numeric",            # bad number
        "": "empty",
        "cat 1 2\n": "none of the 5 vocabulary words",
        "good\n": "g.txt:1",
    }
    for text, needle in bad.items():
        g.write_text(text)
        with pytest.raises(DataError) as e:
            load_glove(g, vocab)
        assert needle in one_line(e)
    g.write_bytes(b"good 1 2\n\xff\xfe 1 2\n")
    with pytest.raises(DataError) as e:
        load_glove(g, vocab)
    assert "UTF-8" in one_line(e)
    with pytest.raises(DataError) as e:
        load_glove(tmp_path / "nope.txt", vocab)
    assert "nope.txt" in one_line(e)


def test_leaf_other_layout_and_errors(tmp_path, writers, one_line):
    writers.make_leaf(tmp_path, "femnist")
    (tmp_path / "leaf").rename(tmp_path / "moved")
    (tmp_path / "moved" / "femnist").rename(tmp_path / "femnist")  # <dir>/femnist/{train,test}
    assert load_dataset("femnist", tmp_path).x_train.shape[0] == 9
    bad = tmp_path / "femnist" / "train" / "f1_train.json"
    bad.write_text('{"users": ["x"], "user_data": {')
    with pytest.raises(DataError) as e:
        load_dataset("femnist", tmp_path)
    assert "f1_train.json" in one_line(e) and "JSON" in str(e.value)
    bad.write_text('{"users": ["x"], "num_samples": [1], "user_data": {"x": {"x": [[0.5, 0.5]], "y": [1]}}}')
    with pytest.raises(DataError) as e:
        load_dataset("femnist", tmp_path)
    assert "784" in one_line(e)
    bad.write_text('{"users": ["x"], "num_samples": [1], "user_data": {}}')
    with pytest.raises(DataError) as e:
        load_dataset("femnist", tmp_path)
    assert "'x'" in one_line(e)
    with pytest.raises(DataError) as e:
        load_dataset("shakespeare", tmp_path)
    assert "train/*.json" in one_line(e)


# ---------------------------------------------------------------------------------------------- status

def test_dataset_status(tmp_path, writers):
    writers.make_idx_dataset(tmp_path / "mnist", gz=True)  # canonical names, wrong sizes -> corrupt
    writers.make_leaf(tmp_path, "femnist")
    st = {n: dataset_status(n, tmp_path) for n in DATASETS}
    assert st["mnist"].state == "corrupt" and "train-images-idx3-ubyte.gz" in st["mnist"].detail
    assert st["femnist"].state == "present" and st["femnist"].where == str(tmp_path / "leaf" / "femnist")
    assert st["cifar10"].state == "missing" and tmp_path / "cifar10" in st["cifar10"].looked
    assert st["image-folder"].state == "n/a"


# ---------------------------------------------------------------------------------------------- decoded archives

def _tensors(ds: Dataset) -> list:
    return [ds.x_train, ds.y_train, ds.x_test, ds.y_test]


def test_an_archive_is_decoded_once_then_read_from_the_cache(tmp_path, writers, monkeypatch):
    pytest.importorskip("PIL")
    from fedpd.data.loaders import images

    monkeypatch.setenv("FEDPD_CACHE", str(tmp_path / "cache"))
    path = writers.make_image_folder(tmp_path, as_tar=True)
    first = load_image_folder(path)
    (kept,) = (tmp_path / "cache").glob("imgs.tar.gz.*.npz")
    decode = images._decode_all
    monkeypatch.setattr(images, "_decode_all", lambda *a: pytest.fail("decoded again"))
    again = load_image_folder(path)
    assert all(torch.equal(a, b) for a, b in zip(_tensors(again), _tensors(first))) and again.classes == first.classes
    monkeypatch.setattr(images, "_decode_all", decode)
    grey = load_image_folder(path, mode="L")  # another decoding of the same archive: an entry of its own
    assert grey.x_train.shape[1] == 1 and len(list((tmp_path / "cache").glob("*.npz"))) == 2
    kept.write_bytes(b"not an npz")  # damaged: decoded again, and the entry replaced
    assert all(torch.equal(a, b) for a, b in zip(_tensors(load_image_folder(path)), _tensors(first)))
    assert kept.read_bytes()[:2] == b"PK"


def test_loads_of_one_archive_at_once_decode_it_once(tmp_path, writers, monkeypatch):
    """Two loads at once (as two processes of ``fedpd reproduce --jobs 2``: each opens the lock
    file itself, so threads contend as processes do): the second waits for the first's decode and
    reads its entry."""
    pytest.importorskip("PIL")
    import threading
    import time

    from fedpd.data.loaders import images

    monkeypatch.setenv("FEDPD_CACHE", str(tmp_path / "cache"))
    path = writers.make_image_folder(tmp_path, as_tar=True)
    decode, calls = images._decode_all, []

    def slow_decode(*args):
        calls.append(threading.get_ident())
        time.sleep(0.5)  # long enough for the other load to arrive while this one decodes
        return decode(*args)

    monkeypatch.setattr(images, "_decode_all", slow_decode)
    loaded = [None, None]

    def load(i):
        loaded[i] = load_image_folder(path)

    threads = [threading.Thread(target=load, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert all(torch.equal(a, b) for a, b in zip(_tensors(loaded[0]), _tensors(loaded[1])))


def test_a_changed_archive_is_decoded_again(tmp_path, writers, monkeypatch):
    """The entry is keyed by the archive's content, not its name or time: the same file name, written
    again at once with other images, is not read from the old entry."""
    pytest.importorskip("PIL")
    monkeypatch.setenv("FEDPD_CACHE", str(tmp_path / "cache"))
    path = writers.make_image_folder(tmp_path / "a", as_tar=True)
    before = load_image_folder(path)
    other = writers.make_image_folder(tmp_path / "b", as_tar=True, size=(5, 4))
    path.write_bytes(other.read_bytes())
    after = load_image_folder(path)
    assert before.x_train.shape == (6, 3, 6, 8) and after.x_train.shape == (6, 3, 4, 5)
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 2


def test_the_cache_is_where_the_environment_says_or_off(tmp_path, writers, monkeypatch):
    pytest.importorskip("PIL")
    from fedpd.data.loaders.decoded import cache_dir

    path = writers.make_image_folder(tmp_path, as_tar=True)
    monkeypatch.delenv("FEDPD_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "fedpd" / "decoded"
    load_image_folder(path)
    assert len(list((tmp_path / "xdg" / "fedpd" / "decoded").glob("*.npz"))) == 1
    monkeypatch.setenv("FEDPD_CACHE", "off")
    assert cache_dir() is None
    (tmp_path / "blocked").write_text("a file where the cache folder would go")
    for value in ("off", str(tmp_path / "blocked" / "cache")):  # off, and a cache that cannot be written
        monkeypatch.setenv("FEDPD_CACHE", value)
        assert load_image_folder(path).x_train.shape == (6, 3, 6, 8)
    assert (tmp_path / "blocked").is_file()
    monkeypatch.setenv("FEDPD_CACHE", str(tmp_path / "c2"))
    assert load_image_folder(tmp_path / "_stage_images" / "imgs").num_classes == 2
    assert not (tmp_path / "c2").exists()  # a folder of image files is read as it is, never cached
