"""The real datasets in the data directory ($FEDPD_DATA, as fedpd itself reads it): MNIST, Fashion-MNIST, CIFAR-10 (JPEG
archive, and python batches made from it by the shared conversion script), LEAF FEMNIST and Shakespeare.
Each test skips with a reason when its files are absent."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedpd.data import checksums, dataset_status, load_dataset
from fedpd.data.loaders import decoded, images, resolve_data_dir
from fedpd.errors import DataError

SHARED = resolve_data_dir(None)  # $FEDPD_DATA, else fedpd's default data directory


def shared(sub: str) -> Path:
    p = SHARED / sub
    if not p.exists():
        pytest.skip(f"{sub} not in the data directory {SHARED} (set FEDPD_DATA to a folder that holds it)")
    return p


MNIST_TRAIN = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_mnist():
    shared("mnist")
    ds = load_dataset("mnist", SHARED)  # verify=True: sizes and SHA-256 of the canonical .gz files
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert torch.bincount(ds.y_train).tolist() == MNIST_TRAIN
    assert torch.bincount(ds.y_test).tolist() == MNIST_TEST
    assert float(ds.x_train.min()) == 0.0 and float(ds.x_train.max()) == 1.0


def test_fashion_mnist():
    shared("fashion-mnist")
    ds = load_dataset("fashion-mnist", SHARED)
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert torch.bincount(ds.y_train).tolist() == [6000] * 10
    assert torch.bincount(ds.y_test).tolist() == [1000] * 10


def test_canonical_checksums_match_real_files():
    for name in ("mnist", "fashion-mnist"):
        folder = shared(name)
        for fname, exp in checksums.CANONICAL[name].items():
            if fname.endswith(".gz"):
                checksums.verify_file(folder / fname, exp)
    checksums.verify_file(
        shared("cifar-10/cifar-10-jpeg.tar.gz"), checksums.CANONICAL["cifar10"]["cifar-10-jpeg.tar.gz"]
    )
    assert dataset_status("mnist", SHARED, verify=True).state == "present"


def test_truncated_real_file_is_caught(tmp_path):
    src = shared("mnist") / "train-labels-idx1-ubyte.gz"
    (tmp_path / "mnist").mkdir()
    for f in (shared("mnist")).iterdir():
        (tmp_path / "mnist" / f.name).symlink_to(f)
    (tmp_path / "mnist" / src.name).unlink()
    (tmp_path / "mnist" / src.name).write_bytes(src.read_bytes()[:20000])
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path)
    assert "truncated" in str(e.value) and "28881" in str(e.value)
    with pytest.raises(DataError) as e:  # without the size check, the gzip stream itself is found short
        load_dataset("mnist", tmp_path, verify=False)
    assert "gzip" in str(e.value)


def test_cifar10_jpeg(cifar_jpeg, monkeypatch):
    ds = cifar_jpeg
    assert ds.x_train.shape == (50000, 3, 32, 32) and ds.x_test.shape == (10000, 3, 32, 32)
    assert ds.x_train.dtype == torch.float32 and ds.meta["format"] == "jpeg"
    assert torch.bincount(ds.y_train).tolist() == [5000] * 10
    assert torch.bincount(ds.y_test).tolist() == [1000] * 10
    assert ds.classes[0] == "airplane" and ds.classes[9] == "truck"
    # the decode left its arrays in the cache; the next load reads them: the same tensors, no decoding
    assert decoded.entry(SHARED / "cifar-10" / "cifar-10-jpeg.tar.gz", "image-folder RGB").is_file()
    monkeypatch.setattr(images, "_decode_all", lambda *a: pytest.fail("decoded again"))
    again = load_dataset("cifar10", SHARED)
    for field in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(again, field), getattr(ds, field)), field
    assert again.classes == ds.classes and again.meta["format"] == "jpeg"


@pytest.mark.slow
def test_cifar10_python_batches_from_conversion_script(cifar_py_dir, cifar_jpeg):
    ds = load_dataset("cifar10", cifar_py_dir)  # verify=True: batches.meta has torchvision's MD5
    assert ds.meta["format"] == "python" and ds.source.endswith("cifar-10-batches-py")
    meta = cifar_py_dir / "cifar-10-batches-py" / "batches.meta"
    assert checksums.file_hash(meta, "md5") == checksums.CANONICAL["cifar10"]["batches.meta"].md5
    assert dataset_status("cifar10", cifar_py_dir, verify=True).state == "present"  # every batch unpickled
    assert ds.x_train.shape == (50000, 3, 32, 32) and ds.x_test.shape == (10000, 3, 32, 32)
    assert torch.bincount(ds.y_train).tolist() == [5000] * 10
    assert torch.bincount(ds.y_test).tolist() == [1000] * 10
    assert ds.classes == cifar_jpeg.classes
    # the same images in another order: per-class pixel sums agree with the JPEG loader's
    for split in ("train", "test"):
        x, y = getattr(ds, f"x_{split}"), getattr(ds, f"y_{split}")
        xj, yj = getattr(cifar_jpeg, f"x_{split}"), getattr(cifar_jpeg, f"y_{split}")
        for c in (0, 5, 9):
            assert torch.allclose(x[y == c].sum(0), xj[yj == c].sum(0), atol=0.05)


def test_leaf_femnist():
    shared("leaf/femnist")
    ds = load_dataset("femnist", SHARED)
    assert ds.x_train.shape == (2328, 1, 28, 28) and ds.x_test.shape == (266, 1, 28, 28)
    assert len(ds.users) == 16 and ds.train_users.unique().numel() == 16 and ds.test_users.unique().numel() == 16
    assert 0 <= int(ds.y_train.min()) and int(ds.y_train.max()) <= 61
    assert 0.0 <= float(ds.x_train.min()) and float(ds.x_train.max()) <= 1.0


def test_leaf_shakespeare():
    shared("leaf/shakespeare")
    ds = load_dataset("shakespeare", SHARED)
    assert ds.x_train.shape == (41990, 80) and ds.x_test.shape == (3881, 80)
    assert len(ds.users) == 10 and ds.train_users.unique().numel() == 10
    assert int(ds.x_train.max()) <= 80 and ds.y_train.shape == (41990,)
    assert ds.meta["vocab_size"] == 81 and ds.num_classes == 81
