"""``fedpd sweep``: independent runs — configs × seeds — in parallel processes, one progress display.

Every run is an ordinary run directory, ``<out>/<config name>/s<seed>/`` (``fedpd compare``,
``fedpd plot`` read it), written by :func:`fedpd.run` in a worker process with one CPU thread, so
``--jobs`` processes use that many cores — or, with ``--ray``, as a task on a Ray cluster whose
files come back here (:mod:`fedpd.reproduce.cluster`). Execution is the reproductions' (:mod:`fedpd.reproduce.
execute`): every config is checked before anything runs, complete runs are skipped, interrupted
ones resume from their checkpoint, a failed run does not stop the others. So a sweep that was
stopped continues when the same command is run again.

A seed sets ``run.seed`` (sampling, clients' minibatches and augmentation, attacks, FedPD's
coin); the data and the initial model keep ``problem.seed`` unless ``--set problem.seed=…`` says
otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path

from fedpd import plugins
from fedpd.config import apply_overrides, load_config, load_toml
from fedpd.options import SEED_MAX
from fedpd.errors import ConfigError
from fedpd.reproduce.execute import default_jobs, plan, run_jobs
from fedpd.reproduce.spec import RunSpec


def parse_seeds(text: str) -> list[int]:
    """``"1,2,5"`` or ``"1-4"`` (or both, comma-separated) as a list of distinct seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m[2] is not None and int(m[2]) < int(m[1])):
            raise ConfigError(f"--seeds {text!r}: expected seeds like 1,2,3 or 1-4 (non-negative integers)")
        seeds.extend(range(int(m[1]), int(m[2] or m[1]) + 1))
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: a seed appears twice")
    if max(seeds) > SEED_MAX:
        raise ConfigError(f"--seeds {text!r}: {max(seeds)} is too large (allowed: 0..{SEED_MAX})")
    return seeds


def _names(configs: list[Path]) -> list[str]:
    """A run-directory name per config: its file name without .toml, or its path if two share one."""
    stems = [c.stem for c in configs]
    if len(set(stems)) == len(stems):
        return stems
    return [str(c.with_suffix("")).strip("/").replace("/", "_") for c in configs]


def specs(configs: list[str | Path], seeds: list[int] | None = None, overrides: list[str] = ()) -> list[RunSpec]:
    """One :class:`RunSpec` per config and seed (the config's own ``run.seed`` when ``seeds`` is None)."""
    paths = [Path(c) for c in configs]
    if len(set(map(Path.resolve, paths))) != len(paths):
        raise ConfigError("fedpd sweep: a config is given twice")
    out = []
    for path, name in zip(paths, _names(paths)):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.=+-]*", name):
            raise ConfigError(f"config {str(path)!r}: its name makes no directory name (letters, digits, _ . = + - only)")
        raw = apply_overrides(load_toml(path), list(overrides))
        plugins.search(plugins.default_path(path))  # its plug-ins, for this process and the workers it spawns
        if seeds is None:
            try:
                own = [load_config(raw).run.seed]
            except ConfigError as err:
                raise ConfigError(f"config {str(path)!r}: {err}") from None
        for seed in seeds if seeds is not None else own:
            cfg = apply_overrides(raw, [f"run.seed={seed}"])
            out.append(RunSpec(key=f"{name}/s{seed}", group=name, seed=seed, config=cfg))
    return out


def sweep(configs: list[str | Path], out: str | Path, seeds: list[int] | None = None, overrides: list[str] = (),
          jobs: int | None = None, progress: bool = True, keep_checkpoints: bool = True, cluster=None) -> list[Path]:
    """Run every config × seed into ``out/<config name>/s<seed>``, ``jobs`` at a time (default:
    the cores this process may use) or as tasks on a Ray ``cluster``
    (:class:`fedpd.reproduce.cluster.Cluster`); returns the run directories. Raises one-line errors
    before anything runs (a bad config names its run; a directory holding another config's run is
    refused), and after the runs if any failed (the others are complete and kept)."""
    if jobs is not None and jobs < 1:
        raise ConfigError(f"fedpd sweep: --jobs {jobs} (allowed: 1 or more)")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r}: exists and is not a directory")
    work = plan(specs(configs, seeds, overrides), out)  # every config checked before anything runs
    run_jobs(work, jobs or default_jobs(), progress=progress, keep_checkpoints=keep_checkpoints, title="sweep",
             cluster=cluster)
    return [job.path for job in work]
