"""LEAF JSON (Caldas et al. 2018) for FEMNIST, Shakespeare and Sent140, keeping each sample's
user (the natural partition), and GloVe vectors for Sent140's word ids."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedpd.data.loaders.base import Dataset, NotFound, as_labels, looked_in
from fedpd.errors import ConfigError, DataError

if TYPE_CHECKING:  # imported where a tensor is made: `fedpd data list` starts without torch
    import torch

# LEAF's Shakespeare alphabet (80 characters); index 80 is reserved for characters outside it.
LEAF_CHARS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
assert len(LEAF_CHARS) == 80 and len(set(LEAF_CHARS)) == 80
SHAKESPEARE_UNKNOWN = len(LEAF_CHARS)


def _leaf_dirs(root: Path, name: str) -> list[Path]:
    return [root / "leaf" / name, root / "leaf" / name / "data", root / name, root / name / "data",
            root / "leaf" / "data" / name / "data"]


def find_leaf(root: Path, name: str) -> tuple[list[Path], list[Path]]:
    dirs = _leaf_dirs(root, name)
    for d in dirs:
        train, test = sorted((d / "train").glob("*.json")), sorted((d / "test").glob("*.json"))
        if train and test:
            return train, test
        if train or test:
            raise NotFound(f"{name}: {d} has {'train' if train else 'test'}/*.json but no "
                           f"{'test' if train else 'train'}/*.json", dirs)
    raise NotFound(f"{name}: LEAF train/*.json and test/*.json not found in {looked_in(dirs)}", dirs)


def _read_leaf(files: list[Path]) -> list[tuple[str, list, list, Path]]:
    """(user, xs, ys, file) per user, files in name order, users in each file's ``users`` order.

    ``num_samples`` is ignored: LEAF's Shakespeare test files overstate it (the lengths of x and y count)."""
    out = []
    for f in files:
        try:
            with open(f, "rb") as fh:
                obj = json.load(fh)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{f}: invalid JSON at line {e.lineno} column {e.colno} ({e.msg}); expected a LEAF file"
            ) from None
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{f}: cannot read ({e}); expected a LEAF JSON file") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("user_data"), dict):
            raise DataError(f"{f}: no 'user_data' object, expected LEAF JSON "
                            "{'users': [...], 'num_samples': [...], 'user_data': {user: {'x': [...], 'y': [...]}}}")
        users = obj.get("users", list(obj["user_data"]))
        for u in users:
            ud = obj["user_data"].get(u)
            if not isinstance(ud, dict) or not isinstance(ud.get("x"), list) or not isinstance(ud.get("y"), list):
                raise DataError(f"{f}: user {u!r} has no user_data entry with 'x' and 'y' lists")
            if len(ud["x"]) != len(ud["y"]):
                raise DataError(f"{f}: user {u!r} has {len(ud['x'])} x but {len(ud['y'])} y, expected equal counts")
            out.append((str(u), ud["x"], ud["y"], f))
    return out


def _encode_chars(strings: list[str], length: int, where: str) -> np.ndarray:
    """Strings of one length -> int64 indices into LEAF_CHARS (unknown characters -> SHAKESPEARE_UNKNOWN)."""
    if not strings:
        return np.zeros((0, length), np.int64)
    if any(not isinstance(s, str) or len(s) != length for s in strings):
        bad = next(s for s in strings if not isinstance(s, str) or len(s) != length)
        raise DataError(f"{where}: sample {bad!r:.40} is not a string of {length} characters")
    codes = np.frombuffer("".join(strings).encode("utf-32-le"), dtype=np.uint32)
    table = np.full(max(int(codes.max()), 127) + 1, SHAKESPEARE_UNKNOWN, dtype=np.int64)
    table[[ord(c) for c in LEAF_CHARS]] = np.arange(len(LEAF_CHARS))
    return table[codes].reshape(len(strings), length)


def _sent140_text(x, where: str) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, list) and len(x) >= 5 and isinstance(x[4], str):
        return x[4]
    raise DataError(f"{where}: sample {x!r:.60} is not [id, date, query, user, text], expected a 5-item list")


def _binary_label(y, where: str) -> int:
    try:
        v = int(float(y))
    except (TypeError, ValueError):
        v = -1
    if v not in (0, 1):
        raise DataError(f"{where}: label {y!r}, expected 0 or 1")
    return v


def load_leaf(root: Path, name: str, vocab_size: int = 10000, seq_len: int = 25) -> Dataset:
    import torch

    train_files, test_files = find_leaf(root, name)
    splits = {"train": _read_leaf(train_files), "test": _read_leaf(test_files)}
    users: list[str] = []
    user_index: dict[str, int] = {}
    for split in ("train", "test"):
        for u, *_ in splits[split]:
            if u not in user_index:
                user_index[u] = len(users)
                users.append(u)
    meta: dict = {"format": "leaf"}
    if name == "sent140":
        if vocab_size < 3 or seq_len < 1:
            raise ConfigError(
                f"sent140: vocab_size={vocab_size}, seq_len={seq_len}; expected vocab_size >= 3, seq_len >= 1"
            )
        counts = Counter(
            tok for _, xs, _, f in splits["train"] for x in xs for tok in _sent140_text(x, str(f)).lower().split()
        )
        words = sorted(counts, key=lambda t: (-counts[t], t))[: vocab_size - 2]
        vocab = {w: i + 2 for i, w in enumerate(words)}
        meta.update(vocab=["<pad>", "<unk>", *words], vocab_size=len(words) + 2, seq_len=seq_len)
    elif name == "shakespeare":
        meta["vocab_size"] = len(LEAF_CHARS) + 1  # token ids 0..80, 80 = outside LEAF's alphabet
    out = []
    for split in ("train", "test"):
        xs_all, ys_all, owners = [], [], []
        for u, xs, ys, f in splits[split]:
            xs_all += xs
            ys_all += ys
            owners += [user_index[u]] * len(xs)
        where = f"{name} {split}/*.json"
        if name == "femnist":
            try:
                x = np.asarray(xs_all, dtype=np.float32).reshape(-1, 784) if xs_all else np.zeros((0, 784), np.float32)
                y = np.asarray(ys_all, dtype=np.int64)
            except (ValueError, TypeError) as e:
                raise DataError(f"{where}: samples are not 784 floats with integer labels ({e})") from None
            if x.shape[0] != len(xs_all):
                raise DataError(f"{where}: samples have {x.size // max(len(xs_all), 1)} values, expected 784 (28x28)")
            if len(y) and (y.min() < 0 or y.max() > 61):
                raise DataError(f"{where}: label {int(y.max())} out of range, expected 0-61")
            x_t = torch.from_numpy(x.reshape(-1, 1, 28, 28))
        elif name == "shakespeare":
            x_t = torch.from_numpy(_encode_chars(xs_all, 80, where))
            y = _encode_chars(ys_all, 1, where)[:, 0]
        else:  # sent140
            x = np.zeros((len(xs_all), seq_len), np.int64)
            for i, s in enumerate(xs_all):  # padded at the front: the last step is the last word
                ids = [vocab.get(t, 1) for t in _sent140_text(s, where).lower().split()[:seq_len]]
                x[i, seq_len - len(ids):] = ids
            x_t = torch.from_numpy(x)
            y = np.array([_binary_label(v, where) for v in ys_all], dtype=np.int64)
        out += [x_t, as_labels(y), as_labels(owners)]
    num_classes = {"femnist": 62, "shakespeare": len(LEAF_CHARS) + 1, "sent140": 2}[name]
    return Dataset(name=name, x_train=out[0], y_train=out[1], x_test=out[3], y_test=out[4], num_classes=num_classes,
                   train_users=out[2], test_users=out[5], users=users, source=str(train_files[0].parent.parent),
                   meta=meta)


def load_glove(path: str | os.PathLike, vocab: list[str], seed: int = 0) -> torch.Tensor:
    """An embedding matrix [len(vocab), D] from a GloVe text file (``word v1 ... vD`` per line, D from the
    first line): a word's row is its GloVe vector; words the file lacks get seeded N(0, s^2) rows, s the std of
    the vectors found; row 0 (padding) is zero. Only the vocabulary's lines are parsed."""
    import torch

    path = Path(path)
    index = {w: i for i, w in enumerate(vocab)}
    found: dict[int, np.ndarray] = {}
    dim = None
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                parts = line.rstrip("\r\n ").split(" ")
                if parts == [""]:
                    continue
                dim = len(parts) - 1 if dim is None else dim
                if dim < 1 or len(parts) < dim + 1:  # a word may hold spaces (GloVe 840B): the vector is the last dim
                    raise DataError(f"{path}:{lineno}: {len(parts) - 1} values after the word, expected "
                                    f"{dim if dim >= 1 else 'at least 1'}; a GloVe file has 'word v1 ... vD' per line")
                i = index.get(" ".join(parts[:-dim]))
                if i is not None:
                    try:
                        found[i] = np.array(parts[-dim:], dtype=np.float32)
                    except ValueError:
                        raise DataError(
                            f"{path}:{lineno}: non-numeric vector for {vocab[i]!r}; expected {dim} numbers"
                        ) from None
    except OSError as e:
        raise DataError(f"{path}: cannot read the GloVe file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); expected a GloVe text file") from None
    if dim is None:
        raise DataError(f"{path}: empty; expected a GloVe text file ('word v1 ... vD' per line)")
    if not found:
        raise DataError(f"{path}: none of the {len(vocab)} vocabulary words has a vector; expected a GloVe file "
                        f"covering the dataset's (lower-cased) words")
    vectors = np.stack(list(found.values()))
    scale = float(vectors.std()) or 1.0
    weights = np.random.default_rng(seed).normal(0.0, scale, (len(vocab), dim)).astype(np.float32)
    weights[list(found)] = vectors
    weights[0] = 0.0
    return torch.from_numpy(weights)
