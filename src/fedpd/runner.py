"""The run loop above a :class:`~fedpd.simulation.Simulation`: rounds, evaluations written to
``metrics.jsonl``, checkpoints, run directories, exact resume (:func:`run`, :func:`execute`).

A run directory holds the resolved ``config.toml`` and ``checkpoint.pt`` (the server state, every
client's state, the communication and computation counters, and the config it belongs to), both
written atomically, and ``metrics.jsonl`` (one JSON object per evaluation), appended and fsynced
line by line and rewritten atomically on resume to the records up to the checkpoint. Every random
stream is a function of (seed, purpose, round, client) (:mod:`fedpd.streams`), so a checkpoint
holds no generator state and a run killed at any point and resumed writes the same
``metrics.jsonl`` as one that never stopped (``wall_s`` aside).

A run whose config names plug-ins (:mod:`fedpd.plugins`) also holds ``plugins.json``: the
plug-in path and, for each plug-in module, its file and SHA-256. ``--resume`` searches the same
path, and says in one line (a :class:`~fedpd.checks.FedpdNotice`, not a refusal) when a module's
file changed since the run started.

A checkpoint is read without executing code (``torch.load(weights_only=True)``), every tensor in
it lives on the CPU (a run started on a GPU resumes on a CPU and the other way round), and one
that is foreign, damaged, of another format or of another config is refused with one line; so is
a ``metrics.jsonl`` that is missing, not UTF-8 or shorter than the checkpoint. A resume may change
``run.rounds`` (the target) and how the run is executed (:data:`fedpd.config.RESUMABLE`:
``run.device``, ``run.threads``, ``run.workers``, ``run.client_chunk``, ``run.engine``, ...), nothing
else; on another engine the clients' states move with the run (:mod:`fedpd.handover`).
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from fedpd import advice, plugins
from fedpd.checks import FedpdNotice, NonFiniteMetrics, check_finite, check_run_options_used
from fedpd.config import RESUMABLE, Config, Unset, first_difference, load_config
from fedpd.disk_store import default_store_dir
from fedpd.engines import in_process, open_runtime
from fedpd.errors import ConfigError, FedpdError, reason
from fedpd.hooks import HookError
from fedpd.io import append_jsonl, atomic_torch_save, atomic_write_text, read_jsonl, remove_leftover_temps
from fedpd.progress import Progress
from fedpd.rundir import CHECKPOINT, CONFIG, METRICS, NODES, PLUGINS, runs_below
from fedpd.simulation import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, Simulation
from fedpd.status import StatusFile
from fedpd.tensorboard import open_writer


def read_checkpoint(path: Path, fingerprint: dict) -> dict:
    """The checkpoint at ``path``, loaded without executing code (``weights_only``) and checked to
    belong to the run whose config has this ``fingerprint`` (:meth:`Simulation.fingerprint`);
    otherwise one line naming the file and the reason (nothing is changed)."""
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        if type(err).__name__ == "UnpicklingError":
            raise ConfigError(f"{path}: not a fedpd checkpoint (it holds objects a checkpoint never contains; "
                              f"refused without loading them)") from None
        raise ConfigError(f"{path}: damaged, cannot be read ({reason(err)})") from None
    if not isinstance(sd, dict) or sd.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{path}: not a fedpd checkpoint")
    if sd.get("version") != CHECKPOINT_VERSION:
        raise ConfigError(f"{path}: checkpoint format version {sd.get('version')!r}; this fedpd reads version "
                          f"{CHECKPOINT_VERSION} (start the run again with {advice.overwrite()})")
    ours, theirs = {**fingerprint, "run": dict(fingerprint["run"])}, sd.get("config")
    if isinstance(theirs, dict) and isinstance(theirs.get("run"), dict) and theirs["run"].get("store") == "auto":
        ours["run"]["store"] = "auto"  # a remote engine's run: run.store (in process only) was never resolved
    differs = first_difference(theirs, ours)
    if differs:
        raise ConfigError(f"{path}: belongs to a run with another config ({differs} differs from "
                          f"{CONFIG}); refusing to continue it")
    return sd


def _read_plugins(out: Path) -> dict:
    """The run directory's record of its plug-ins ({} when it has none)."""
    try:
        record = json.loads((out / PLUGINS).read_text()) if (out / PLUGINS).exists() else {}
    except (OSError, ValueError) as err:
        raise ConfigError(f"{out / PLUGINS}: cannot be read ({type(err).__name__}); restore it, or delete it if the "
                          f"run uses no plug-ins") from None
    return record if isinstance(record, dict) else {}


def _write_plugins(out: Path, cfg: Config) -> None:
    """``plugins.json`` for a run that imports plug-ins (none: no file)."""
    if cfg.plugin_modules:
        path = dict.fromkeys([*cfg.plugin_path, *plugins.roots(cfg.plugin_modules)])  # where they were found
        record = {"path": list(path), "modules": plugins.fingerprint(cfg.plugin_modules)}
        atomic_write_text(out / PLUGINS, json.dumps(record, indent=1) + "\n")
    elif (out / PLUGINS).exists():
        (out / PLUGINS).unlink()


def load_run_config(out: Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The config of the run in ``out`` (its ``config.toml``), its plug-ins searched where the run
    found them (``plugins.json``) and on the usual plug-in path."""
    path = (*_read_plugins(out).get("path", ()), *plugins.default_path(out / CONFIG))
    return load_config(out / CONFIG, overrides, plugin_path=path)


def _warn_if_changed(out: Path, record: dict) -> None:
    changed = plugins.changed(record.get("modules", {}))
    if changed:
        files = ", ".join(f"{m} ({record['modules'][m]['file']})" for m in changed)
        warnings.warn(f"the code of {files} changed since {out} started (plugins.json): the resumed rounds run the "
                      f"new code", FedpdNotice, stacklevel=3)


def _restore(sim: Simulation, out: Path) -> None:
    """Load the run directory's checkpoint into ``sim`` (none yet: the run starts at round 0)."""
    if (out / CHECKPOINT).exists():
        sim.load_state_dict(read_checkpoint(out / CHECKPOINT, sim.fingerprint()))


def _kept_history(out: Path, cfg: Config, round: int) -> list[dict]:
    """The records of metrics.jsonl an uninterrupted run of ``cfg`` has written by ``round`` (a
    changed target drops the old target's final record); a file that cannot give them is refused."""
    path = out / METRICS
    if not path.exists():
        if round > 0:
            raise ConfigError(f"{path}: missing, but the checkpoint is at round {round} (restore the file, or start "
                              f"again with {advice.overwrite()})")
        return []
    every = cfg.run.eval_every
    history = [r for r in read_jsonl(path) if r.get("round", 0) <= round
               and (r.get("round", 0) % every == 0 or r.get("round") == cfg.run.rounds)]
    have = {r.get("round") for r in history}
    lost = [t for t in range(0, round + 1, every) if t not in have] if round > 0 else []
    if lost:
        raise ConfigError(f"{path}: has no record of round {lost[0]}, but the checkpoint is at round {round} "
                          f"(the file was cut short or edited; start again with {advice.overwrite()})")
    return history


@dataclass
class RunResult:
    """What :func:`run` returns: the metric history, the final model and all final state."""

    history: list[dict]
    model: Tensor
    simulation: Simulation
    out_dir: Path | None = None
    config: Config = field(default=None)  # type: ignore[assignment]

    def final(self, key: str):
        return self.history[-1].get(key) if self.history else None



def _check_out(out: Path, overwrite: bool) -> list[str]:
    """The results ``out`` already holds (refused unless ``overwrite``)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r}: exists and is not a directory")
    inner = runs_below(out) if out.is_dir() else []
    if inner:  # a folder of runs (e.g. runs/): this run's files would land loose among them
        shown = ", ".join(str(p) for p in inner[:2]) + (", ..." if len(inner) > 2 else "")
        raise ConfigError(f"--out {str(out)!r}: holds other runs ({shown}); give this run a folder of its own "
                          f"(e.g. {str(out / 'NAME')!r})")
    held = [p for p in (METRICS, CHECKPOINT, NODES) if (out / p).exists()]
    if held and not overwrite and not (out / CHECKPOINT).exists():  # stopped before its first checkpoint
        raise ConfigError(f"run directory {str(out)!r} already holds results ({', '.join(held)}) but no checkpoint "
                          f"(the run stopped before its first one): nothing to resume; replace it with "
                          f"{advice.overwrite(python=True)}")
    if held and not overwrite:
        raise ConfigError(f"run directory {str(out)!r} already holds results ({', '.join(held)}); "
                          f"continue it with {advice.resume(out, python=True)}, or replace it with "
                          f"{advice.overwrite(python=True)}")
    return held


def _asked(out: Path) -> str:
    """The resume that was asked for, as the user asked it."""
    return f"resume=true (run directory {out})" if advice.in_flower_app() else f"--resume {str(out)!r}"


def _prepare_out(out: Path, overwrite: bool) -> None:
    held = _check_out(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    for p in held:
        if (out / p).is_dir():
            shutil.rmtree(out / p)
        else:
            (out / p).unlink()


def run(config: str | Path | dict | Config | None = None, out: str | Path | None = None, *,
        overrides: list[str] | tuple[str, ...] = (), resume: str | Path | None = None,
        progress: bool = False, overwrite: bool = False, label: str = "", transport=None,
        on_checkpoint: Callable[[Path], None] | None = None) -> RunResult:
    """Run a config (path, dict or :class:`Config`) and return its history and final state.

    ``out``: run directory to write (``None``: nothing is written). ``resume``: continue the
    run in that directory from its last checkpoint (its own ``config.toml`` is used).
    ``run.engine = "flower"`` runs the clients on Flower's simulation runtime (``fedpd.flower``);
    ``transport``: the nodes of a remote engine that is already connected (a Flower ServerApp
    passes its Grid's). ``on_checkpoint(out)``: called after every checkpoint is on disk, between
    rounds (a Ray task sends the run directory back to the head then).
    """
    if resume is not None:
        out = Path(resume)
        if not (out / CONFIG).is_file():
            raise ConfigError(f"{_asked(out)}: no {CONFIG} there (not a fedpd run directory)")
        if not (out / CHECKPOINT).is_file():  # a resume would silently start from round 0
            again = advice.overwrite() if advice.in_flower_app() else f"--out {str(out)!r} --overwrite"
            raise ConfigError(f"{_asked(out)}: no {CHECKPOINT} there (the run stopped before its first "
                              f"checkpoint): nothing to resume; start the run again with {again}")
        if any(isinstance(item, Unset) for item in overrides):
            raise ConfigError("--unset cannot be combined with --resume (a resume continues the run's own config)")
        cfg = load_run_config(out, overrides)
        kept = load_run_config(out).resolved()
        for item in overrides:  # anything else would continue the checkpoint under another run
            key = item.partition("=")[0].strip()
            section, _, name = key.partition(".")
            same = name in kept.get(section, {}) and cfg.resolved()[section].get(name) == kept[section][name]
            if key not in {f"run.{k}" for k in RESUMABLE} and not same:  # restating a value is no change
                raise ConfigError(f"--set {key}: a resume may change only {', '.join('run.' + k for k in RESUMABLE)} "
                                  f"(the target, and how the run is executed)")
    else:
        if config is None:
            raise ConfigError("no config given")
        cfg = load_config(config, overrides)
    check_run_options_used(cfg.run, transport, overrides if resume is not None else None,  # e.g. a disk store on nodes
                           on_nodes=not in_process(cfg.run, transport))
    out = Path(out) if out is not None else None
    # nothing is written without a directory: TensorBoard's scalars would be lost in silence (checkpoint_every
    # only says how often, and the examples set it for the CLI, so a run without a directory just has none)
    if out is None and cfg.run.tensorboard:
        raise ConfigError("run.tensorboard: writes its scalars into the run directory, and this run has none "
                          "(allowed: give out=, or run.tensorboard = false)")
    if out is not None and resume is None:
        _check_out(out, overwrite)
    with open_runtime(cfg, transport) as transport:  # run.engine = "flower": Flower's simulation runtime
        return execute(cfg, out, resume=resume is not None, rewrite_config=bool(overrides), progress=progress,
                       overwrite=overwrite, label=label, transport=transport, on_checkpoint=on_checkpoint)


def execute(cfg: Config, out: Path | None, *, resume: bool = False, rewrite_config: bool = False,
            progress: bool = False, overwrite: bool = False, label: str = "", transport=None,
            on_checkpoint: Callable[[Path], None] | None = None) -> RunResult:
    """Run a validated config in ``out`` (start it, or continue it from its checkpoint);
    ``transport``: the nodes of a remote engine, already reachable."""
    sim = Simulation(cfg, workdir=out, transport=transport)  # every check first
    fresh = status = None
    try:
        if out is not None:
            sim.attach_store(out, resume=resume)  # the disk store's checks, before anything is written
        if out is not None and not resume:
            fresh = _Written(out, default_store_dir(out, cfg.run.store_dir))
            _prepare_out(out, overwrite)
            fresh.taken()
        history: list[dict] = []
        if out is not None:
            if not resume:
                atomic_write_text(out / CONFIG, sim.config_toml())  # run.store as resolved
                _write_plugins(out, cfg)
            else:
                _restore(sim, out)  # every check first: a refused resume changes nothing
                if cfg.run.rounds < sim.round:
                    raise ConfigError(f"run.rounds: {cfg.run.rounds} is below the checkpoint's round {sim.round} "
                                      f"(allowed: {sim.round} or more)")
                history = _kept_history(out, cfg, sim.round)
                remove_leftover_temps(out, (CHECKPOINT, METRICS, CONFIG, PLUGINS))  # from a kill during a write
                if rewrite_config:  # a new target: config.toml keeps saying what the run is
                    atomic_write_text(out / CONFIG, sim.config_toml())
                atomic_write_text(out / METRICS, "".join(json.dumps(r) + "\n" for r in history))
                _warn_if_changed(out, _read_plugins(out))
        if out is not None and not sim.in_process:  # clients on nodes: how the run went, and its notices
            status = StatusFile(out, round=sim.round, rounds=cfg.run.rounds, resume=advice.resume_command(out),
                                resumed=resume)
            sim.engine.on_notice = status.note
        return _loop(sim, cfg, out, history, progress, label, on_checkpoint, status)
    except FedpdError as err:
        # bad input found only once the run went (a plug-in's result, a local problem without a
        # solution): a new run stopped before its first checkpoint leaves nothing behind — but a run
        # on nodes, whose status.json says to its operator what ended it, unless the nodes refused the
        # config's algorithm (fedpd.hooks: refused as in process, on every engine)
        if (fresh is not None and (status is None or isinstance(err, HookError))
                and not isinstance(err, NonFiniteMetrics) and not (out / CHECKPOINT).exists()):
            sim.close()
            fresh.remove()
        raise
    finally:
        sim.close()  # run.workers' processes


class _Written:
    """What a new run writes into its directory (and a store directory of its own), to take it
    away again when the run stops with bad input before its first checkpoint: nothing to resume,
    nothing to show — the directory is as it was."""

    def __init__(self, out: Path, store_dir: Path | None):
        self.out, self.existed = out, out.exists()
        self.store_dir = store_dir if store_dir is not None and not store_dir.exists() else None
        self.before: set[str] = set()

    def taken(self) -> None:
        """Note what the directory holds now (after ``--overwrite`` cleared the old results)."""
        self.before = {p.name for p in self.out.iterdir()}

    def remove(self) -> None:
        for path in [*(p for p in self.out.iterdir() if p.name not in self.before), self.store_dir]:
            if path is None or not (path.exists() or path.is_symlink()):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if not self.existed:
            try:
                self.out.rmdir()
            except OSError:  # something else was put there meanwhile: left alone
                pass


def _loop(sim: Simulation, cfg: Config, out: Path | None, history: list[dict], progress: bool, label: str,
          on_checkpoint=None, status: StatusFile | None = None) -> RunResult:
    rounds, every = cfg.run.rounds, cfg.run.eval_every
    dp = sim.privacy.dp if sim.privacy is not None else None  # [privacy]: stop before a round passes target_epsilon
    if dp is not None:
        limit = dp.round_limit(rounds)
        if limit < rounds and sim.round < rounds:  # said plainly, not a silent early finish
            warnings.warn(f"privacy.target_epsilon = {dp.opts.target_epsilon:g}: the run stops after round {limit} "
                          f"of {rounds} (ε = {dp.epsilon(limit):.4g}; one more round would spend "
                          f"{dp.epsilon(limit + 1):.4g})", FedpdNotice, stacklevel=2)
        rounds = max(min(rounds, limit), min(sim.round, rounds))
    ckpt_every = cfg.run.checkpoint_every or every
    bar = Progress(rounds, sim.round, label=label, enabled=progress)
    tb = open_writer(out, sim.round, enabled=cfg.run.tensorboard)  # the metrics as TensorBoard scalars too

    def record():
        m = sim.metrics()
        history.append(m)
        if out is not None:
            append_jsonl(out / METRICS, m)
        if tb is not None:
            tb.add(m)
        bar.update(sim.round, m)
        check_finite(m, history, out, allow_nonfinite=cfg.run.allow_nonfinite)  # NaN / Inf: the run stops

    def checkpoint():
        if out is not None:
            atomic_torch_save(sim.state_dict(), out / CHECKPOINT)
            sim.checkpointed()  # a versioned store may now drop what this checkpoint replaces
            if on_checkpoint is not None:
                on_checkpoint(out)
            if status is not None:
                status.progress(sim.round)

    try:
        due = sim.round % every == 0 or sim.round == rounds
        if due and not (history and history[-1]["round"] == sim.round):  # round 0, or a target cut to here
            record()
        while sim.round < rounds:
            sim.step()
            evaluated = sim.round % every == 0 or sim.round == rounds
            if evaluated:
                record()
            else:
                bar.update(sim.round)
            if sim.round % ckpt_every == 0 or sim.round == rounds:
                checkpoint()
        sim.finish()
    except BaseException as err:
        if status is not None:  # how it ended, for whoever reads the run directory
            stopped = isinstance(err, (KeyboardInterrupt, SystemExit))
            status.end("stopped" if stopped else "failed", sim.round, _why(err))
        raise
    finally:
        bar.close()
        if tb is not None:
            tb.close()
    if status is not None:
        status.end("finished", sim.round)
    return RunResult(history, sim.model().detach(), sim, out, _recorded_config(sim))


def _recorded_config(sim: Simulation) -> Config:
    """The config the run's directory records (``run.store`` resolved, :meth:`Simulation.recorded`)."""
    cfg = sim.cfg
    if sim.store_kind in (None, cfg.run.store):
        return cfg
    return load_config(sim.recorded(), plugin_path=cfg.plugin_path)


def _why(err: BaseException) -> str:
    """The line that ended a run: a fedpd error's whole message, else the exception's first line."""
    if isinstance(err, KeyboardInterrupt):
        return "interrupted"
    if isinstance(err, SystemExit):  # a deployment's ServerApp: flwr stop, or SIGTERM / SIGINT (Flower exits)
        return "told to stop (flwr stop, or a signal)"
    return str(err) if isinstance(err, FedpdError) else reason(err, limit=300)
