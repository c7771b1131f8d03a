"""Tabular data of a user's own: a CSV file or a NumPy ``.npz`` archive of features and labels.

* **CSV** (``load_csv``): UTF-8 text, comma-separated, a header row naming the columns. The label
  column (``label_column``, default ``label``) holds integer class ids (0, 1, ...) or class names
  (any other text: the classes are the names sorted); ``client_column``, if given, each row's owner
  (for the natural partition); every other column is a feature and must hold a finite number on
  every row. Blank lines are skipped. Features become float32 ``[N, F]``.
* **npz** (``load_npz``, written by ``numpy.savez``): either one table, arrays ``x`` ``[N, ...]``
  and ``y`` ``[N]`` (and optionally ``client`` ``[N]``), or a dataset with its own test set: the
  keys a loader returns (``x_train``, ``y_train``, ``x_test``, ``y_test``, optionally
  ``client_train``, ``client_test``, ``num_classes``; :mod:`fedpd.data.loaders.arrays`). Labels are
  integers or strings (class names); float features become float32, integer ones stay int64 (token
  ids, as a loader's). Pickled (object) arrays are refused, never unpickled.

A table's test set is ``test_path`` (a second file of the same columns or arrays), or else a
seeded random ``holdout`` share of its rows (default 0.2; seed ``seed``, the problem's). Every bad
input — a missing file, a line with another number of fields than the header, a cell that is not
a number, an empty or NaN cell, a missing label column, an unknown array — is one
:class:`~fedpd.errors.DataError` naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from pathlib import Path

import numpy as np

from fedpd.data.loaders.arrays import ARRAYS, CLIENTS, dataset_from_arrays, label_array, sample_array
from fedpd.data.loaders.base import Dataset, NotFound
from fedpd.errors import ConfigError, DataError

#: the share of a table's rows held out as its test set when it has none
HOLDOUT = 0.2
_INTEGER = re.compile(r"[+-]?\d+")
#: what a table's feature cells may hold, said when one does not
NUMBERS = "a finite number in every feature cell; fedpd does not impute missing values"


def find_file(root: Path, path: str | None, name: str, what: str) -> Path:
    """``path`` as given (absolute, or relative to the working directory), else under the data
    directory ``root``; :class:`NotFound` (one line, both places) when neither holds it."""
    if not path:
        raise ConfigError(f"{name}: no path given, expected path=<{what}> (absolute, relative to the working "
                          f"directory, or under the data dir)")
    given = Path(path).expanduser()
    looked = [given] if given.is_absolute() else [given, root / given]
    for p in looked:
        if p.is_file():
            return p
    shown = ", ".join(str(p.absolute()) for p in looked)
    raise NotFound(f"{name}: {path} not found (looked at {shown}); expected {what}", looked)


# --- CSV --------------------------------------------------------------------------------------
def load_csv(root: Path, path: str | None = None, test_path: str | None = None, label_column: str = "label",
             client_column: str | None = None, holdout: float | None = None, seed: int = 0) -> Dataset:
    """A CSV file's rows as a :class:`Dataset` (module docstring); ``root``: the data directory."""
    file = find_file(root, path, "csv", "a CSV file with a header row")
    tables = [_read_csv(file, label_column, client_column)]
    if test_path is not None:
        test = find_file(root, test_path, "csv", "a CSV file with a header row")
        tables.append(_read_csv(test, label_column, client_column))
        if tables[1][0] != tables[0][0]:
            raise DataError(f"{test}: its feature columns {', '.join(tables[1][0])} are not those of {file} "
                            f"({', '.join(tables[0][0])}; allowed: the same columns, in the same order)")
    features = tables[0][0]
    labels, classes = _class_ids([t[2] for t in tables], [t[4] for t in tables], label_column)
    owners, users = (_owner_ids([t[3] for t in tables]) if client_column is not None else (None, None))
    xs = [t[1] for t in tables]
    parts = _split([*xs], labels, owners, holdout, seed, file, test_path is not None)
    if classes is not None:
        parts["num_classes"] = len(classes)
    ds = dataset_from_arrays(parts, "csv", f"{file} holds", str(file))
    ds.classes, ds.users = classes, users
    ds.meta = {"format": "csv", "features": features}
    return ds


def _read_csv(file: Path, label_column: str, client_column: str | None):
    """(feature names, features [n, F] float32, label cells, client cells or None, their line numbers)."""
    try:
        text = file.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataError(f"{file}: not UTF-8 text (byte {err.start}); expected a CSV file") from None
    except OSError as err:
        raise DataError(f"{file}: cannot be read ({err.strerror})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header, rows, lines = None, [], []
    try:
        for row in reader:
            if not row or all(not cell.strip() for cell in row):
                continue  # a blank line
            if header is None:
                header = [cell.strip() for cell in row]
                continue
            if len(row) != len(header):
                raise DataError(f"{file} line {reader.line_num}: {len(row)} fields, its header has {len(header)} "
                                f"(allowed: the header's number of fields on every line)")
            rows.append(row)
            lines.append(reader.line_num)
    except csv.Error as err:
        raise DataError(f"{file} line {reader.line_num}: not CSV ({err})") from None
    if header is None:
        raise DataError(f"{file}: empty, expected a header row and one row per sample")
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise DataError(f"{file}: the header names column {twice[0]!r} twice (allowed: one name per column)")
    for option, column in (("label_column", label_column), ("client_column", client_column)):
        if column is not None and column not in header:
            raise DataError(f"{file}: no column {column!r} (its columns: {', '.join(header)}; set problem.{option} "
                            f"to the one that holds the {'labels' if option == 'label_column' else 'client ids'})")
    if not rows:
        raise DataError(f"{file}: a header and no rows (allowed: at least one sample)")
    special = {label_column, client_column}
    columns = [i for i, c in enumerate(header) if c not in special]
    if not columns:
        raise DataError(f"{file}: no feature columns besides {label_column!r} (allowed: at least one)")
    cells = [[row[i].strip() for i in columns] for row in rows]
    x = _numbers(cells, file, [header[i] for i in columns], lines)
    labels = [row[header.index(label_column)].strip() for row in rows]
    owners = [row[header.index(client_column)].strip() for row in rows] if client_column is not None else None
    return [header[i] for i in columns], x, labels, owners, (file, lines)


def _numbers(cells: list[list[str]], file: Path, names: list[str], lines: list[int]) -> np.ndarray:
    try:
        x = np.array(cells, dtype=np.float64)  # NumPy parses the strings (fast); a failure is found below
    except ValueError:
        x = None
    if x is None or not np.isfinite(x).all():
        for r, row in enumerate(cells):
            for c, cell in enumerate(row):
                where = f"{file} line {lines[r]}, column {names[c]!r}"
                if not cell:
                    raise DataError(f"{where}: empty (allowed: {NUMBERS})")
                try:
                    value = float(cell)
                except ValueError:
                    raise DataError(f"{where}: {cell[:40]!r} is not a number (allowed: {NUMBERS}; encode a "
                                    f"category as numbers, or drop its column)") from None
                if not np.isfinite(value):
                    raise DataError(f"{where}: {cell!r} is not a finite number (allowed: {NUMBERS})")
    return x.astype(np.float32)


def _class_ids(cells: list[list[str]], where: list, column: str):
    """(labels of each table as int64 arrays, class names or None): integers are class ids, any
    other text a class name (the classes: the names sorted)."""
    every = [c for table in cells for c in table]
    for table, (file, lines) in zip(cells, where):
        for cell, line in zip(table, lines):
            if not cell:
                raise DataError(f"{file} line {line}, column {column!r}: no label (allowed: a class id or name on "
                                f"every row)")
    if all(_INTEGER.fullmatch(c) or _integral(c) for c in every):
        ids = [np.array([int(float(c)) for c in table], dtype=np.int64) for table in cells]
        for table, ys, (file, lines) in zip(cells, ids, where):
            if (ys < 0).any():
                line = lines[int(np.flatnonzero(ys < 0)[0])]
                raise DataError(f"{file} line {line}, column {column!r}: label {int(ys.min())} (allowed: class ids "
                                f"0, 1, ..., or class names)")
        return ids, None
    numbers = [c for c in every if _number(c)]
    if len(numbers) == len(every):  # numbers, and not all whole: a value to regress, not a class
        bad = next(c for c in every if not _integral(c) and not _INTEGER.fullmatch(c))
        raise DataError(f"{where[0][0]}: label column {column!r} holds {bad!r} (allowed: integer class ids 0, 1, "
                        f"..., or class names; fedpd classifies)")
    classes = sorted(set(every))
    index = {c: i for i, c in enumerate(classes)}
    return [np.array([index[c] for c in table], dtype=np.int64) for table in cells], classes


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _integral(cell: str) -> bool:
    try:
        value = float(cell)
    except ValueError:
        return False
    return np.isfinite(value) and value == int(value)


def _owner_ids(cells: list[list[str]]):
    """(each table's client ids as int64 arrays, the client names): integers sorted as numbers,
    other names as text."""
    every = sorted(set(c for table in cells for c in table),
                   key=lambda c: (0, int(c), "") if _INTEGER.fullmatch(c) else (1, 0, c))
    index = {c: i for i, c in enumerate(every)}
    return [np.array([index[c] for c in table], dtype=np.int64) for table in cells], every


# --- npz --------------------------------------------------------------------------------------
TABLE, TABLE_CLIENT = ("x", "y"), "client"


def load_npz(root: Path, path: str | None = None, test_path: str | None = None, holdout: float | None = None,
             seed: int = 0) -> Dataset:
    """A NumPy ``.npz`` archive as a :class:`Dataset` (module docstring)."""
    file = find_file(root, path, "npz", "a NumPy .npz archive (numpy.savez)")
    arrays = _read_npz(file)
    if all(k in arrays for k in ARRAYS):  # a dataset with its own test set
        if test_path is not None or holdout is not None:
            option = "test_path" if test_path is not None else "holdout"
            raise ConfigError(f"problem.{option}: {file} holds its own test set (x_test, y_test) (allowed: leave "
                              f"{option} out, or store one table: x, y)")
        parts = {k: arrays[k] for k in arrays}
        if "num_classes" in parts:
            parts["num_classes"] = _scalar(parts["num_classes"], file)
        classes = _class_names(parts, ("y_train", "y_test"), file)
        return _dataset(parts, file, classes)
    tables = [(file, arrays)]
    if test_path is not None:
        test = find_file(root, test_path, "npz", "a NumPy .npz archive (numpy.savez)")
        tables.append((test, _read_npz(test)))
    for f, table in tables:
        unknown = [k for k in table if k not in (*TABLE, TABLE_CLIENT)]
        missing = [k for k in TABLE if k not in table]
        if missing or unknown:
            what = f"no array {missing[0]!r}" if missing else f"an array {unknown[0]!r} fedpd does not read"
            raise DataError(f"{f} holds {what} (its arrays: {', '.join(table) or 'none'}; allowed: x, y[, client] — "
                            f"one table — or x_train, y_train, x_test, y_test[, client_train, client_test, "
                            f"num_classes])")
    if len(tables) == 2 and (TABLE_CLIENT in tables[0][1]) != (TABLE_CLIENT in tables[1][1]):
        raise DataError(f"{tables[1][0]}: one file has client ids and the other not (allowed: both, or neither)")
    labels, classes = _labels_as_ids([t["y"] for _, t in tables])
    # each array checked under the name the file gives it, before the split renames them
    xs = [sample_array(t["x"], "x", f"{f} holds") for f, t in tables]
    labels = [label_array(y, "y", f"{f} holds") for (f, _), y in zip(tables, labels)]
    owners = ([label_array(t[TABLE_CLIENT], TABLE_CLIENT, f"{f} holds") for f, t in tables]
              if TABLE_CLIENT in tables[0][1] else None)
    parts = _split(xs, labels, owners, holdout, seed, file, test_path is not None)
    if classes is not None:
        parts["num_classes"] = len(classes)
    return _dataset(parts, file, classes)


def _read_npz(file: Path) -> dict[str, np.ndarray]:
    try:
        archive = np.load(file, allow_pickle=False)  # never unpickles: a pickle is refused, not run
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise DataError(f"{file}: not a NumPy .npz archive ({type(err).__name__}); expected the file "
                        f"numpy.savez(file, x=..., y=...) writes") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataError(f"{file}: one NumPy array (.npy), expected an .npz archive: numpy.savez(file, x=..., y=...)")
    with archive:
        out = {}
        for key in archive.files:
            try:
                out[key] = archive[key]
            except ValueError:  # an object array: reading it would unpickle
                raise DataError(f"{file}: array {key!r} holds Python objects (a pickle), which fedpd never loads "
                                f"(allowed: arrays of numbers or strings)") from None
            except (OSError, EOFError, zipfile.BadZipFile) as err:
                raise DataError(f"{file}: array {key!r} is damaged ({type(err).__name__}: {err})") from None
    return out


def _scalar(value: np.ndarray, file: Path):
    if value.shape != () or value.dtype.kind not in "iu":
        raise DataError(f"{file}: num_classes of shape {value.shape} and dtype {value.dtype} (allowed: one integer)")
    return int(value)


def _class_names(parts: dict, keys: tuple[str, str], file: Path) -> list[str] | None:
    """String labels of ``parts[keys]`` replaced by class ids in place; the class names (None: integer labels)."""
    ids, classes = _labels_as_ids([parts[k] for k in keys])
    for k, y in zip(keys, ids):
        parts[k] = y
    if classes is not None and "num_classes" in parts:
        raise DataError(f"{file}: num_classes with class names as labels (allowed: one of them)")
    if classes is not None:
        parts["num_classes"] = len(classes)
    return classes


def _labels_as_ids(labels: list[np.ndarray]):
    """Labels that are strings become class ids (the classes: the names sorted); others pass as they are
    (and are checked as a loader's are)."""
    if not all(y.dtype.kind in "US" for y in labels):
        return labels, None
    classes = sorted(set(str(c) for y in labels for c in y.tolist()))
    index = {c: i for i, c in enumerate(classes)}
    return [np.array([index[str(c)] for c in y.tolist()], dtype=np.int64) for y in labels], classes


def _dataset(parts: dict, file: Path, classes: list[str] | None) -> Dataset:
    ds = dataset_from_arrays(parts, "npz", f"{file} holds", str(file))
    ds.classes = classes
    ds.meta = {"format": "npz"}
    return ds


# --- the test set of a table ------------------------------------------------------------------
def _split(xs: list, ys: list, owners: list | None, holdout: float | None, seed: int, file: Path,
           has_test: bool) -> dict:
    """The loader's arrays (:data:`ARRAYS`, :data:`CLIENTS`) of one table split by ``holdout``, or
    of a table and its test file."""
    if has_test:
        if holdout is not None:
            raise ConfigError("problem.holdout: the test set is test_path's file (allowed: leave holdout out, or "
                              "test_path)")
        parts = dict(zip(ARRAYS, (xs[0], ys[0], xs[1], ys[1])))
        if owners is not None:
            parts.update(zip(CLIENTS, owners))
        return parts
    share = HOLDOUT if holdout is None else holdout
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
        raise ConfigError(f"problem.holdout: {share!r} (allowed: a share of the rows strictly between 0 and 1)")
    n = len(xs[0])
    n_test = max(1, round(share * n))
    if n_test >= n:
        raise DataError(f"{file}: {n} rows, too few to hold out {share:g} of them as the test set and keep a "
                        f"training set (allowed: at least 2 rows, or a test_path file)")
    order = np.random.default_rng(seed).permutation(n)
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
    x, y = np.asarray(xs[0]), np.asarray(ys[0])
    parts = {"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]}
    if owners is not None:
        c = np.asarray(owners[0])
        parts.update(client_train=c[train], client_test=c[test])
    return parts
