"""Download the canonical dataset archives (MNIST, Fashion-MNIST, CIFAR-10/100 python version) from public mirrors.

Each file streams to a temporary file in the target folder, is checked against its known size and hash
(``checksums.CANONICAL``), then renamed into place with ``os.replace``; on any failure the temporary file is
removed, so the data directory never holds a partial file, and folders the download created are removed again
if they are still empty. Files get the usual permissions (0666 less the umask). Files already present and valid
are skipped. The loaders are imported where used: ``fedpd.data`` imports this module eagerly.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from fedpd.data.checksums import CANONICAL, Expected, verify_file
from fedpd.errors import ConfigError, DataError
from fedpd.io import create_temp

_IDX = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
]

#: dataset -> files fetched into ``<data_dir>/<dataset>/``
FILES: dict[str, list[str]] = {
    "mnist": _IDX,
    "fashion-mnist": _IDX,
    "cifar10": ["cifar-10-python.tar.gz"],
    "cifar100": ["cifar-100-python.tar.gz"],
}

#: dataset -> base URLs tried in order (the file name is appended)
MIRRORS: dict[str, list[str]] = {
    "mnist": ["https://ossci-datasets.s3.amazonaws.com/mnist/",
              "https://storage.googleapis.com/cvdf-datasets/mnist/"],
    "fashion-mnist": ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
                      "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"],
    "cifar10": ["https://www.cs.toronto.edu/~kriz/"],
    "cifar100": ["https://www.cs.toronto.edu/~kriz/"],
}


class _Reporter:
    """Progress for one file: a rich bar on a terminal, a few plain lines otherwise, nothing when disabled."""

    def __init__(self, label: str, total: int | None, enabled: bool):
        self.label, self.total, self.enabled = label, total, enabled
        self.stream = sys.stderr
        self.next_mark = 0.1
        self._bar = None
        if not enabled:
            return
        if self.stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                 TimeRemainingColumn(), console=Console(file=self.stream))
            self._task = self._bar.add_task(label, total=total)
            self._bar.start()
        else:
            size = f"{total} bytes" if total is not None else "size unknown"
            print(f"downloading {label} ({size})", file=self.stream, flush=True)

    def update(self, done: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done)
        elif self.enabled and self.total:
            while done / self.total >= self.next_mark and self.next_mark < 1.0:
                print(f"  {self.label}: {self.next_mark:.0%}", file=self.stream, flush=True)
                self.next_mark += 0.1

    def close(self, done: int, ok: bool) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self.enabled:
            print(f"  {self.label}: {done} bytes, {'done' if ok else 'FAILED'}", file=self.stream, flush=True)


def _fetch(url: str, dest: Path, expected: Expected | None, progress: bool, timeout: float) -> None:
    """Stream ``url`` into a temp file beside ``dest``, check it, rename it to ``dest``; clean up on any failure."""
    fd, tmp = create_temp(dest, ".part")
    reporter = None
    done = 0
    try:
        algorithm = None
        if expected is not None:
            algorithm = "sha256" if expected.sha256 else "md5" if expected.md5 else None
        digest = hashlib.new(algorithm) if algorithm else None
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp:
                    length = resp.headers.get("Content-Length")
                    total = int(length) if length and length.isdigit() else None
                    if expected is not None and total is not None and total != expected.size:
                        raise DataError(f"{url}: server sends {total} bytes, expected {expected.size} (wrong file?)")
                    reporter = _Reporter(
                        dest.name, total if total is not None else getattr(expected, "size", None), progress
                    )
                    while chunk := resp.read(1 << 16):
                        out.write(chunk)
                        if digest is not None:
                            digest.update(chunk)
                        done += len(chunk)
                        reporter.update(done)
            except urllib.error.HTTPError as e:
                raise DataError(f"{url}: HTTP {e.code} {e.reason}") from None
            except urllib.error.URLError as e:
                raise DataError(f"{url}: cannot connect ({e.reason})") from None
            except (OSError, http.client.HTTPException) as e:
                raise DataError(f"{url}: transfer failed after {done} bytes ({type(e).__name__}: {e})") from None
            out.flush()
            os.fsync(out.fileno())
        if total is not None and done != total:
            raise DataError(f"{url}: transfer ended after {done} of {total} bytes")
        if expected is not None:
            if done != expected.size:
                raise DataError(f"{url}: got {done} bytes, expected {expected.size}; nothing was saved")
            want = expected.sha256 or expected.md5
            if digest is not None and digest.hexdigest() != want:
                raise DataError(
                    f"{url}: {algorithm} mismatch, got {digest.hexdigest()}, expected {want}; nothing was saved"
                )
        os.replace(tmp, dest)
        if reporter is not None:
            reporter.close(done, True)
    except BaseException:
        if reporter is not None:
            reporter.close(done, False)
        Path(tmp).unlink(missing_ok=True)
        raise


def load_or_say_how(name: str, data_dir: str | os.PathLike | None = None, **options):
    """``load_dataset(name, data_dir, **options)``; files that are missing, of a dataset this
    module fetches, are one line that ends with the command that fetches them."""
    from fedpd.data.loaders import NotFound, canonical_name, load_dataset

    try:
        return load_dataset(name, data_dir, **options)
    except NotFound as err:
        key = canonical_name(name)
        if key not in FILES:
            raise
        import shlex

        where = f" --data-dir {shlex.quote(str(data_dir))}" if data_dir is not None else ""
        raise NotFound(f"{err}; fetch it with: fedpd data download {key}{where}", err.looked) from None


def download(name: str, data_dir: str | os.PathLike | None = None, base_url: str | None = None, progress: bool = True,
             expected: dict[str, tuple | Expected] | None = None, timeout: float = 60.0) -> Path:
    """Fetch ``name``'s canonical files into ``<data_dir>/<name>/`` and return that folder.

    ``base_url`` replaces the mirror list (the file name is appended to it). ``expected`` maps file names to
    ``(size, sha256)`` or ``Expected`` and overrides the canonical table (tests use it for fixture files).
    Raises DataError if a file cannot be fetched from any mirror or fails its check.
    """
    from fedpd.data.loaders import canonical_name, resolve_data_dir

    key = canonical_name(name)
    if key not in FILES:
        raise ConfigError(
            f"no download for {key!r}; downloadable: {', '.join(FILES)} (LEAF data needs LEAF's own scripts)"
        )
    table = dict(CANONICAL.get(key, {}))
    for fname, exp in (expected or {}).items():
        table[fname] = exp if isinstance(exp, Expected) else Expected(*exp)
    target = resolve_data_dir(data_dir) / key
    created = [d for d in (target, *target.parents) if not d.exists()]  # deepest first
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"{target}: cannot create the download folder ({e.strerror})") from None
    try:
        _fetch_all(key, target, table, [base_url] if base_url else MIRRORS[key], progress, timeout)
    except BaseException:
        for d in created:  # folders this call made and left empty
            try:
                d.rmdir()
            except OSError:
                break
        raise
    return target


def _fetch_all(key: str, target: Path, table: dict[str, Expected], bases: list[str], progress: bool,
               timeout: float) -> None:
    for fname in FILES[key]:
        dest, exp = target / fname, table.get(fname)
        if dest.is_file() and exp is not None:
            try:
                verify_file(dest, exp)
                if progress:
                    print(f"{dest}: already present and verified", file=sys.stderr)
                continue
            except DataError:
                pass  # replaced below, atomically, once a good copy arrives
        errors = []
        for base in bases:
            try:
                _fetch(base.rstrip("/") + "/" + fname, dest, exp, progress, timeout)
                break
            except DataError as e:
                errors.append(str(e))
        else:
            raise DataError(f"{key}: could not download {fname}: {' | '.join(errors)}")
