"""What a run directory holds, by name, and how to tell one: ``config.toml`` (the resolved config),
``metrics.jsonl`` (one record per evaluation), ``checkpoint.pt``, ``plugins.json`` (the plug-ins a
run imported) and ``nodes/`` (a remote engine's loopback or simulated nodes' client stores).

Below every layer that writes or reads runs: the run loop (:mod:`fedpd.runner`), the engines and
the reading of runs back (:mod:`fedpd.results`) all name the files from here."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG = "config.toml"
METRICS = "metrics.jsonl"
CHECKPOINT = "checkpoint.pt"
PLUGINS = "plugins.json"
NODES = "nodes"  # the remote engine's node stores, inside the run directory


def is_run_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a run's metrics or checkpoint."""
    return (Path(path) / METRICS).is_file() or (Path(path) / CHECKPOINT).is_file()


def runs_below(folder: str | Path) -> list[Path]:
    """The run directories inside ``folder`` (not ``folder`` itself), in path order; a run
    directory's own subfolders (nodes/, store/) are not searched."""
    found = []
    for root, dirs, _ in os.walk(folder):
        if Path(root) != Path(folder) and is_run_dir(Path(root)):
            found.append(Path(root))
            dirs.clear()
        dirs.sort()
    return sorted(found)
