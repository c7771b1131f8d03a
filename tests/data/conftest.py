"""Fixtures for the data tests: tiny files in the exact public formats, written by the tests themselves,
and the real datasets in the data directory ($FEDPD_DATA, as fedpd itself reads it) when present."""

from __future__ import annotations

import gzip
import json
import pickle
import struct
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fedpd.data.loaders import resolve_data_dir  # noqa: E402

SHARED = resolve_data_dir(None)  # $FEDPD_DATA, else fedpd's default data directory
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def shared(sub: str) -> Path:
    """Path of ``sub`` in the data directory, or skip the test when it is absent."""
    p = SHARED / sub
    if not p.exists():
        pytest.skip(f"{sub} not in the data directory {SHARED} (set FEDPD_DATA to a folder that holds it)")
    return p


# ---------------------------------------------------------------------------------------------- writers

def write_idx(path: Path, arr: np.ndarray, magic: int | None = None, gz: bool = False) -> Path:
    arr = np.asarray(arr, dtype=np.uint8)
    magic = magic if magic is not None else 0x0800 | arr.ndim
    data = struct.pack(">I", magic) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def make_idx_dataset(folder: Path, gz: bool = True, n_train: int = 30, n_test: int = 10, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": np.arange(n_train) % 10,
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": (np.arange(n_test) * 3) % 10,
    }
    for stem, arr in arrays.items():
        write_idx(folder / (stem + (".gz" if gz else "")), arr, gz=gz)
    return arrays


def _dump(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def make_cifar(root: Path, name: str = "cifar10", as_tar: bool = False, per_batch: int = 6, seed: int = 0) -> dict:
    """A tiny CIFAR-10 (5 train batches + test) or CIFAR-100 (train + test) "python version" folder or tar.gz."""
    rng = np.random.default_rng(seed)
    if name == "cifar10":
        folder, archive = "cifar-10-batches-py", "cifar-10-python.tar.gz"
        batches = {f"data_batch_{i}": per_batch for i in range(1, 6)} | {"test_batch": per_batch}
    else:
        folder, archive = "cifar-100-python", "cifar-100-python.tar.gz"
        batches = {"train": 5 * per_batch, "test": per_batch}
    stage = root / ("_stage_" + name if as_tar else "")
    out = {}
    for fname, n in batches.items():
        data = rng.integers(0, 256, (n, 3072)).astype(np.uint8)
        d = {b"batch_label": fname.encode(), b"data": data, b"filenames": [b"x.png"] * n}
        if name == "cifar10":
            d[b"labels"] = [int(v) for v in rng.integers(0, 10, n)]
        else:
            d[b"fine_labels"] = [int(v) for v in rng.integers(0, 100, n)]
            d[b"coarse_labels"] = [int(v) for v in rng.integers(0, 20, n)]
        _dump(d, stage / folder / fname)
        out[fname] = d
    if name == "cifar10":
        meta = {
            b"label_names": [c.encode() for c in CIFAR10_CLASSES],
            b"num_cases_per_batch": per_batch,
            b"num_vis": 3072,
        }
        _dump(meta, stage / folder / "batches.meta")
    else:
        meta = {b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
                b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)]}
        _dump(meta, stage / folder / "meta")
    if as_tar:
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(root / archive, "w:gz") as tf:
            tf.add(stage / folder, arcname=folder)
    return out


def make_leaf(root: Path, name: str) -> dict:
    """Two LEAF JSON file pairs for femnist / shakespeare / sent140 under root/leaf/<name>/{train,test}/."""
    rng = np.random.default_rng(1)

    def sample(i: int):
        if name == "femnist":
            return [float(v) for v in np.round(rng.random(784), 3)], int(i % 62)
        if name == "shakespeare":
            text = ("To be, or not to be: that is the question~ " * 3)[i % 7: i % 7 + 81]
            return text[:80], text[80]
        words = ["good", "bad", "day", "movie", "GOOD", "rain"]
        text = " ".join(words[(i + k) % len(words)] for k in range(3 + i % 4))
        return ["1467810369", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", f"user{i}", text], str(i % 2)

    users = {"train": {"f0": ["alice", "bob"], "f1": ["carol"]}, "test": {"f0": ["alice", "bob"], "f1": ["carol"]}}
    counts = {"train": {"alice": 3, "bob": 2, "carol": 4}, "test": {"alice": 1, "bob": 1, "carol": 2}}
    k = 0
    for split, files in users.items():
        for fname, us in files.items():
            user_data, num = {}, []
            for u in us:
                xs, ys = [], []
                for _ in range(counts[split][u]):
                    x, y = sample(k)
                    k += 1
                    xs.append(x)
                    ys.append(y)
                user_data[u] = {"x": xs, "y": ys}
                num.append(len(xs) + (79 if name == "shakespeare" and split == "test" else 0))  # LEAF's quirk
            path = root / "leaf" / name / split / f"{fname}_{split}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"users": us, "num_samples": num, "user_data": user_data}))
    return counts


def make_image_folder(root: Path, classes=("zebra", "ant"), per_class=(3, 2), size=(8, 6), ext="png",
                      top: str | None = "imgs", as_tar: bool = False, tar_name: str = "imgs.tar.gz") -> Path:
    """train/<class>/*.<ext> and test/<class>/... (optionally under one top folder), as a folder or tar.gz."""
    from PIL import Image

    rng = np.random.default_rng(2)
    base = root / "_stage_images" if as_tar else root
    tree = base / top if top else base
    for split, n in zip(("train", "test"), per_class):
        for c in classes:
            for i in range(n):
                arr = rng.integers(0, 256, (size[1], size[0], 3)).astype(np.uint8)
                p = tree / split / c / f"{i:03d}.{ext}"
                p.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(arr).save(p)
    (tree / "README.md").write_text("not an image")
    if not as_tar:
        return tree if top else base
    with tarfile.open(root / tar_name, "w:gz") as tf:
        for p in sorted(base.rglob("*")):
            tf.add(p, arcname=str(p.relative_to(base)), recursive=False)
    return root / tar_name


@pytest.fixture
def writers():
    return SimpleNamespace(write_idx=write_idx, make_idx_dataset=make_idx_dataset, make_cifar=make_cifar,
                           make_leaf=make_leaf, make_image_folder=make_image_folder)


@pytest.fixture
def one_line():
    def check(excinfo) -> str:
        msg = str(excinfo.value)
        assert msg and "\n" not in msg, f"not a one-line message: {msg!r}"
        assert "Traceback" not in msg
        return msg
    return check


# ---------------------------------------------------------------------------------------------- real data

@pytest.fixture(scope="session")
def _cifar_py_job(tmp_path_factory):
    """Start the shared conversion script in the background: (process, OUT_DIR, log file).

    It runs on the second core while ``cifar_jpeg`` decodes the archive; stopped at session end if still running."""
    script = shared("cifar-10/cifar10_jpeg_to_py.py")
    pytest.importorskip("PIL")
    out = tmp_path_factory.mktemp("cifar10py")
    log = out.parent / (out.name + ".log")
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, str(script), str(out)], stdout=fh, stderr=subprocess.STDOUT)
    yield proc, out, log
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def cifar_jpeg(request):
    """CIFAR-10 from the shared JPEG archive, loaded once per session (the heavy part of the real-data
    tests) and decoded for certain: the session's cache entry of the archive (tests/conftest.py) is
    removed first, and the decode writes it again for the session's other tests."""
    archive = shared("cifar-10/cifar-10-jpeg.tar.gz")
    pytest.importorskip("PIL")
    if any("cifar_py_dir" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("_cifar_py_job")  # start the conversion first, so both run at once
    from fedpd.data import load_dataset
    from fedpd.data.loaders.decoded import entry

    entry(archive, "image-folder RGB").unlink(missing_ok=True)
    return load_dataset("cifar10", SHARED)


@pytest.fixture(scope="session")
def cifar_py_dir(_cifar_py_job):
    """OUT_DIR holding cifar-10-batches-py/, written once per session by the shared conversion script."""
    proc, out, log = _cifar_py_job
    try:
        rc = proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    assert rc == 0, log.read_text()[-2000:]
    return out
