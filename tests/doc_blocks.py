"""The shell blocks of a markdown document, for tests that run a doc's commands as written.

``bash_blocks(path, heading)``: the fenced ```` ```bash ```` blocks of the section whose heading
starts with ``heading`` (up to the next heading of the same or a higher level, so its
subsections are included), in order, each block's text exactly as the doc shows it."""

from __future__ import annotations

import re
from pathlib import Path

_HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"(`{3,}|~{3,})\s*(\S*)")


def section(text: str, heading: str) -> str:
    """The lines of the section under the first heading starting with ``heading`` (fenced code
    is never taken for a heading)."""
    lines, out, level, fence = text.splitlines(keepends=True), None, 0, None
    for line in lines:
        if fence is None and (m := _HEADING.fullmatch(line.rstrip("\n"))):
            if out is not None and len(m.group(1)) <= level:
                break
            if out is None and m.group(2).startswith(heading):
                out, level = [], len(m.group(1))
                continue
        if (m := _FENCE.match(line.lstrip())) and (fence is None or m.group(1).startswith(fence)):
            fence = m.group(1) if fence is None else None
        if out is not None:
            out.append(line)
    if out is None:
        raise LookupError(f"no heading starting with {heading!r}")
    return "".join(out)


def bash_blocks(path: str | Path, heading: str) -> list[str]:
    """The ```bash blocks of that section of the markdown file ``path``, in order."""
    blocks, current, fence = [], None, None
    for line in section(Path(path).read_text(), heading).splitlines(keepends=True):
        m = _FENCE.match(line.lstrip())
        if fence is None and m:
            fence, current = m.group(1), ([] if m.group(2) in ("bash", "sh", "shell") else None)
        elif fence is not None and m and m.group(1).startswith(fence) and not m.group(2):
            if current is not None:
                blocks.append("".join(current))
            fence, current = None, None
        elif current is not None:
            current.append(line)
    return blocks


# --- every block of a document, and running one as written ------------------------------------
def all_bash_blocks(path: str | Path) -> list[tuple[str, str, int]]:
    """Every ```bash block of the markdown file ``path`` as (text, the heading above it, the line
    its fence opens on), in order."""
    out, heading, fence, current, start = [], "", None, None, 0
    for number, line in enumerate(Path(path).read_text().splitlines(keepends=True), 1):
        m = _FENCE.match(line.lstrip())
        if fence is None and m:
            fence, start = m.group(1), number
            current = [] if m.group(2) in ("bash", "sh", "shell") else None
        elif fence is not None and m and m.group(1).startswith(fence) and not m.group(2):
            if current is not None:
                out.append(("".join(current), heading, start))
            fence, current = None, None
        elif current is not None:
            current.append(line)
        elif fence is None and (h := _HEADING.fullmatch(line.rstrip("\n"))):
            heading = h.group(2)
    return out


def untagged_blocks(path: str | Path) -> list[tuple[str, int]]:
    """The fenced blocks of ``path`` with no language, as (text, the line the fence opens on)."""
    out, fence, current, start = [], None, None, 0
    for number, line in enumerate(Path(path).read_text().splitlines(keepends=True), 1):
        m = _FENCE.match(line.lstrip())
        if fence is None and m:
            fence, start, current = m.group(1), number, [] if not m.group(2) else None
        elif fence is not None and m and m.group(1).startswith(fence) and not m.group(2):
            if current is not None:
                out.append(("".join(current), start))
            fence, current = None, None
        elif current is not None:
            current.append(line)
    return out


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's environment, nothing of the developer's: a fresh HOME, on PATH only this Python's
    scripts and the system's, PYTHONPATH only the ``fedpd`` under test (this checkout's ``src``,
    the installed package in CI), no $FEDPD_DATA unless ``extra`` gives it."""
    import os
    import sys

    import fedpd

    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
           "HOME": str(home), "PYTHONPATH": str(Path(fedpd.__file__).resolve().parents[1]), "LANG": "C.UTF-8",
           "COLUMNS": "100", "MPLBACKEND": "Agg", "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
           "RAY_USAGE_STATS_ENABLED": "0"}
    return {**env, **extra}


def share_decoded_cache(home: Path) -> None:
    """Give the fresh ``home`` the session's cache of decoded image archives (tests/conftest.py's
    ``$FEDPD_CACHE``) as its own ``~/.cache/fedpd/decoded``: a file in HOME, not a variable the doc
    does not set. An entry is keyed by the archive's bytes and holds its decode's arrays
    (tests/data/test_data_loaders.py), so the commands' results do not change — only a second
    decode of CIFAR-10's 60 000 JPEGs (about 40 CPU seconds) is spared; decoding is tested in
    tests/data."""
    import os

    folder = home / ".cache" / "fedpd"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "decoded").symlink_to(os.environ["FEDPD_CACHE"], target_is_directory=True)


def run_script(script: str, cwd: Path, env: dict[str, str], timeout: float = 600):
    """``script`` as one bash script, stopping at the first failing command, in a session of its own
    whose processes are all stopped when it ends: a CompletedProcess with stdout and stderr together."""
    import os
    import signal
    import subprocess

    proc = subprocess.Popen(["bash", "-e", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the script left running
        except ProcessLookupError:
            pass
        proc.wait()
    return subprocess.CompletedProcess(script, proc.returncode, out, "")
