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
