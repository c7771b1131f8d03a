"""Files that survive crashes: every write goes to a temporary file first, then is renamed."""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import sys
from pathlib import Path
from typing import BinaryIO, Callable

from fedpd.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def create_temp(path: Path, suffix: str = ".tmp") -> tuple[int, Path]:
    """A new temporary file beside ``path``, created exclusively and opened for writing: (fd,
    its path). Its mode is what a plain open() gives (0666 less the umask, applied by the OS),
    not mkstemp's 0600, so the renamed file reads like any other the user writes."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}{suffix}"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary file name for {path.name}")


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """``write`` into a temporary file beside ``path``, fsync it, rename it over ``path``."""
    path = Path(path)
    fd, tmp = create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make a rename durable; not every OS can open a directory (Windows cannot)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_torch_save(obj, path: Path) -> None:
    import torch  # here, not above: the modules that only read and write text load without torch

    atomic_write(path, lambda f: torch.save(obj, f))


def clean_json(record: dict) -> dict:
    """NaN and ±Inf are not JSON: written as null (a diverged run still writes valid lines)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(clean_json(record)) + "\n")
        f.flush()
        os.fsync(f.fileno())


def remove_leftover_temps(folder: Path, names) -> list[Path]:
    """Delete the temporary files a kill during an atomic write of ``names`` left in ``folder``."""
    gone = []
    for name in names:
        for tmp in Path(folder).glob(f".{name}.*.tmp"):
            tmp.unlink(missing_ok=True)
            gone.append(tmp)
    return gone


def read_jsonl(path: Path) -> list[dict]:
    """Complete lines only: a line cut short by a crash is dropped. A file that is not UTF-8 text
    is a ConfigError naming it."""
    out = []
    if not Path(path).exists():
        return out
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}); not a fedpd metrics file") from None
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out


#: the most parts of a dotted key or table header (``[a.b.c]``: 3). No config nests more than a few;
#: the parser's time and memory grow with the square of the parts (a 100 000-part header took 7 s,
#: a 100 000-part key more memory than a machine has), so a longer one is refused before it is parsed
KEY_PARTS_MAX = 100
_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'')


def _deepest_key(text: str) -> tuple[int, int]:
    """(parts, line number) of the dotted key or table header of ``text`` with the most parts, among
    lines with more than :data:`KEY_PARTS_MAX` dots (a cheap look, not a parse: values, arrays and
    quoted parts are left out)."""
    deepest = (0, 0)
    for number, line in enumerate(text.splitlines(), 1):
        if line.count(".") <= KEY_PARTS_MAX:
            continue
        line = _QUOTED.sub("q", line.strip())
        if line.startswith("[") and "]" in line:
            key = line.lstrip("[").split("]", 1)[0]
        elif "=" in line:
            key = line.split("=", 1)[0]
        else:
            continue  # a value going on from the line before (an array, a string)
        if "," not in key and "{" not in key:  # (an array of numbers is no key)
            deepest = max(deepest, (key.count(".") + 1, number))
    return deepest


def parse_toml(text: str) -> dict:
    """``text`` parsed as TOML; :class:`ConfigError` with the parser's one line otherwise — also
    for nesting too deep for the parser (arrays in arrays hundreds of levels down), which would
    otherwise escape as a RecursionError, a key of more than :data:`KEY_PARTS_MAX` parts (refused
    before parsing) and an integer longer than Python reads (4 300 digits)."""
    parts, line = _deepest_key(text)
    if parts > KEY_PARTS_MAX:
        raise ConfigError(f"a key or table header of {parts} dotted parts (line {line}) nests too deeply to read "
                          f"(allowed: at most {KEY_PARTS_MAX}; no config nests more than a few)")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        cr_only = "\r" in text and "\n" not in text
        hint = "; its lines end in a bare CR (old Mac), which TOML does not allow: save it with LF or CRLF line " \
               "endings" if cr_only else ""
        raise ConfigError(f"{err}{hint}") from None
    except RecursionError:
        raise ConfigError("arrays or tables nested too deeply to read (no config nests more than a few levels)") \
            from None
    except ValueError as err:  # Python's limit on the digits of an integer it converts from text
        if "digits" not in str(err):
            raise
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        found = re.search(r"\d[\d_]{%d,}" % limit, text)
        where = f" (line {text.count(chr(10), 0, found.start()) + 1})" if found and "\n" in text.strip() else ""
        raise ConfigError(f"an integer of more than {limit} digits{where}: no option takes one (allowed: integers "
                          f"of at most 2^63 − 1, 19 digits)") from None


def load_toml(path: str | Path) -> dict:
    """A TOML file's tables, or a one-line :class:`ConfigError` naming the file and what is wrong.
    The file's bytes are decoded as they are (no newline translation: a file TOML refuses, e.g. one
    whose lines end in a bare CR, is refused here too)."""
    path = Path(path)
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.toml"))[:3]
        hint = f" (it holds {', '.join(found)}{', ...' if len(found) == 3 else ''})" if found else ""
        raise ConfigError(f"config file {str(path)!r} is a directory; give one .toml file{hint}")
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} not found")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text") from None
    try:
        return parse_toml(text)
    except ConfigError as err:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {err}") from None
