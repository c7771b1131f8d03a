"""Configs: TOML in, every value validated before anything runs.

Sections ``[problem] [model] [algorithm] [solver] [sampler] [run]`` and the optional
``[attack]`` (faults and attacks, :mod:`fedpd.attacks`; default none) and ``[privacy]``
(client-level differential privacy, :mod:`fedpd.privacy`; default off). ``problem.name``,
``algorithm.name``, ``solver.name``, ``sampler.name``, ``attack.name`` and ``model.name`` pick a
built-in entry of :mod:`fedpd.registry` or a plug-in (an import path ``package.module:Attribute``
or an installed entry point, searched for on the config's plug-in path), resolved by
:func:`fedpd.names.resolve`;
the remaining keys of the section are that entry's options, checked by its own pydantic model
(a model factory's by its signature). Every problem raises :class:`ConfigError` with one line
naming the key and what is allowed.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any, Literal

import tomli_w
from pydantic import BaseModel, Field, field_validator, model_validator

from fedpd import names, plugins, registry
from fedpd.errors import ConfigError
from fedpd.io import load_toml, parse_toml
from fedpd.models import check_model_options
from fedpd.options import SEED_MAX, THREADS_MAX, Options, refuse, validate
from fedpd.asynchronous import AsynchronousOptions
from fedpd.privacy import PrivacyOptions
from fedpd.system import SystemOptions

# re-exported: build.py and flower/ read TOML text with it (tomli before Python 3.11)
if sys.version_info >= (3, 11):
    import tomllib  # noqa: F401
else:  # pragma: no cover
    import tomli as tomllib  # noqa: F401

SECTIONS = ("problem", "model", "algorithm", "solver", "sampler", "run", "attack", "privacy", "system", "asynchronous")
#: run options a resume may change: the target, and how the run is executed (not what it computes)
RESUMABLE = ("rounds", "device", "threads", "workers", "engine", "nodes", "node_timeout", "client_chunk",
             "allow_nonfinite", "tensorboard", "store_dir")


class RunOptions(Options):
    rounds: int = Field(100, ge=1, description="rounds to run")
    seed: int = Field(0, ge=0, le=SEED_MAX, description="the run's seed: sampling, coins and every client's streams")
    eval_every: int = Field(10, ge=1, description="metrics every this many rounds (and at the end)")
    checkpoint_every: int = Field(0, ge=0, description="0: checkpoint at every evaluation")
    dtype: Literal["auto", "float32", "float64"] = Field("auto", description="auto: float64 for built-in problems, "
                                                         "the problem's own (float32) for datasets")
    device: str = Field("cpu", description="cpu, cuda, cuda:N, mps or auto (the best present)")
    engine: Literal["inprocess", "loopback", "flower"] = Field(
        "inprocess", description="what runs the clients: inprocess (vectorised here), loopback (nodes in this process, "
        "by messages, with durable client stores: the remote engine's reference), flower (Flower's simulation runtime)")
    nodes: int = Field(2, ge=1, description="loopback / flower: nodes the clients are spread over (contiguous blocks); "
                       "the inprocess engine has none")
    node_timeout: float = Field(600.0, gt=0, description="remote engines: seconds to wait for a node's reply (and for "
                                "the nodes to connect) before its clients count as dropped out; run.workers: seconds "
                                "to wait for a worker's reply before the run stops (refused on loopback and with "
                                "run.workers = 1, which wait for nothing)")
    execution: Literal["auto", "vectorised", "per_client"] = Field(
        "auto", description="how client gradients are computed: vectorised over the clients of a chunk, or one client "
        "at a time through the module; auto: on a GPU vectorised, on the CPU vectorised up to 50 000 model parameters "
        "(fedpd.build.runs_per_client)")
    client_chunk: int = Field(0, ge=0, description="vectorised execution: clients computed together; 0: all "
                              "participants at once (refused with execution = per_client)")
    threads: int = Field(
        0,
        ge=0,
        le=THREADS_MAX,
        description="torch CPU threads; 0: automatic (fedpd.threads: 1 unless "
        "a local step is large, OMP_NUM_THREADS if set); changes no result",
    )
    workers: int | Literal["auto"] = Field(
        "auto", description="inprocess engine: how many worker processes of this machine (1 or more) the round's "
        "participants train on, each holding its own copy of the data; auto: one per usable core when a round's local "
        "work is large (fedpd.workers.PARALLEL_ROUND_FLOPS), else 1; changes no result")
    tensorboard: bool = Field(False, description="also write every metric as TensorBoard scalars into the run "
                              "directory (needs fedpd[tensorboard])")
    allow_nonfinite: bool = Field(False, description="run on when a metric becomes NaN or Inf (default: the run "
                                  "stops, exit status 3)")
    personal_eval: Literal["auto", "always", "never"] = Field(
        "auto", description="personal_* metrics (each client's model on its own test split): auto = when the "
        "algorithm has personal models; always = also the server model per client")
    # --- many clients --------------------------------------------------------------------
    store: Literal["auto", "memory", "disk"] = Field(
        "auto", description="inprocess engine: where clients' states live: memory, disk (files, rows on first "
        "participation), or auto = disk when they may exceed 1/8 of the available memory (resolved in the run's "
        "config.toml); a new run refuses disk on nodes, which keep their own files")
    store_dir: str = Field("", description="the disk store's directory; empty: <run directory>/store (a temporary "
                           "one for a run without a directory); a new run refuses it on nodes and with store = "
                           "memory")
    eval_batch_size: int = Field(0, ge=0, description="samples per evaluation chunk; 0: automatic, as many as keep "
                                 "the activations saved for the gradient within 32 MiB (at most 8192)")
    eval_clients: int = Field(0, ge=0, description="train/test metrics on a fixed seeded sample of this many clients, "
                              "at most the problem's (records then carry eval_clients); 0: every client")
    eval_metrics: list[str] | None = Field(None, description="the metrics taken at the model, any of train_loss, "
                                           "grad_norm_sq, test_loss, test_acc (grad_norm_sq: a backward over the "
                                           "training data); default: all")
    eval_train_samples: int | None = Field(None, ge=1, description="train_loss (and grad_norm_sq) on a fixed seeded "
                                           "sample of this many training samples (records then carry "
                                           "eval_train_samples); default: every sample")

    @field_validator("workers", mode="before")
    @classmethod
    def _workers_form(cls, value):
        if value != "auto" and (type(value) is not int or value < 1):
            raise ValueError(f"expected \"auto\" or a number of processes, 1 or more (got {value!r})")
        return value

    @model_validator(mode="after")
    def _workers_in_process(self):
        if self.workers != "auto" and self.engine != "inprocess":
            raise refuse("workers", f"worker processes are the inprocess engine's; run.engine = \"{self.engine}\" runs "
                         f"clients on its nodes (run.nodes; Flower: its own backend options) (allowed: \"auto\", or "
                         f"no run.workers)")
        return self

    @model_validator(mode="after")
    def _nodes_of_a_remote_engine(self):
        default = type(self).model_fields["nodes"].default
        if self.engine == "inprocess" and self.nodes != default:
            raise refuse("nodes", f"{self.nodes} nodes are the loopback and flower engines'; run.engine = "
                         f"\"inprocess\" runs every client in this process (allowed: no run.nodes — its default, "
                         f"{default} — or run.engine = \"loopback\" or \"flower\")")
        return self

    @field_validator("eval_metrics")
    @classmethod
    def _known_metrics(cls, value):
        from fedpd.evaluation import METRICS
        if value is None:
            return value
        allowed = ", ".join(METRICS)
        if not value:
            raise ValueError(f"choose at least one metric (allowed: {allowed})")
        for name in value:
            if name not in METRICS:
                raise ValueError(f"unknown metric {name!r} (allowed: {allowed})")
        if len(set(value)) < len(value):
            raise ValueError(f"a metric named twice in {value} (allowed: each of {allowed} once)")
        return value

    @model_validator(mode="after")
    def _train_samples_need_a_train_metric(self):
        if self.eval_train_samples is not None and self.eval_metrics is not None and \
                not {"train_loss", "grad_norm_sq"} & set(self.eval_metrics):
            raise refuse("eval_train_samples", "samples the training metrics, but run.eval_metrics has neither "
                         "train_loss nor grad_norm_sq (allowed: no run.eval_train_samples, or add train_loss)")
        return self

    @field_validator("store_dir")
    @classmethod
    def _a_path(cls, value: str) -> str:
        if "\0" in value:
            raise ValueError(f"{value!r} holds a NUL byte, which no path can (allowed: a directory path)")
        return value

    @field_validator("device")
    @classmethod
    def _device_form(cls, value: str) -> str:
        if not re.fullmatch(r"cpu|cuda|cuda:\d+|mps|auto", value):
            raise ValueError(f"unknown device {value!r} (allowed: cpu, cuda, cuda:N, mps, auto)")
        return value


def parse_value(text: str) -> Any:
    """A --set value: TOML syntax (1e-3, true, [1, 2], "s"), else a bare string. A bare nan or
    inf is the string (no option takes a non-finite number; the attacks are named so)."""
    try:
        value = parse_toml(f"v = {text}")["v"]
    except ConfigError as err:
        if "nested too deeply" in str(err) or "digits" in str(err):  # no string was meant either
            raise
        return text
    if isinstance(value, float) and not math.isfinite(value) and text.strip().lstrip("+-").isalpha():
        return text.strip()
    return value


class Unset(str):
    """An override that removes a key (``--unset SECTION.KEY``; a dotted KEY reaches into a table):
    e.g. a plug-in algorithm's own option when ``--set algorithm.name=fedavg`` switches to a
    built-in. A key the config does not hold is left as it is (nothing to remove)."""


def _unset(raw: dict, item: str) -> None:
    section, dot, name = item.strip().partition(".")
    if not dot or not name:
        raise ConfigError(f"--unset {item!r}: expected section.key (sections: {', '.join(SECTIONS)})")
    if section not in SECTIONS:
        raise ConfigError(f"--unset {item.strip()}: unknown section '{section}' (allowed: {', '.join(SECTIONS)})")
    table, (*parents, last) = raw.get(section), name.split(".")
    if not isinstance(table, dict):
        return
    raw[section] = table = dict(table)
    for part in parents:
        inner = table.get(part)
        if not isinstance(inner, dict):
            return
        table[part] = table = dict(inner)  # a copy: the caller's dict stays as it was
    table.pop(last, None)


def apply_overrides(raw: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """``raw`` with ``--set`` items (``section.key=value``) and :class:`Unset` items applied, in order."""
    raw = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    unset = {item.strip() for item in overrides if isinstance(item, Unset)}
    both = [item.partition("=")[0].strip() for item in overrides
            if not isinstance(item, Unset) and item.partition("=")[0].strip() in unset]
    if both:
        raise ConfigError(f"--unset {both[0]}: also given a value by --set {both[0]}=... (allowed: one of the two)")
    for item in overrides:
        if isinstance(item, Unset):
            _unset(raw, item)
            continue
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name:
            raise ConfigError(f"--set {item!r}: expected section.key=value (sections: {', '.join(SECTIONS)})")
        if section not in SECTIONS:
            raise ConfigError(f"--set {key}: unknown section '{section}' (allowed: {', '.join(SECTIONS)})")
        # a dotted name reaches into a table, as in TOML: algorithm.aggregator_options.f=1
        table, (*parents, last) = raw.setdefault(section, {}), name.split(".")
        for i, part in enumerate(parents):
            inner = table.get(part, {})
            if not isinstance(inner, dict):
                where = ".".join([section, *parents[:i + 1]])
                raise ConfigError(f"--set {key.strip()}: {where} is {inner!r}, not a table")
            table[part] = table = dict(inner)  # a copy: the caller's dict stays as it was
        try:
            table[last] = parse_value(value.strip())
        except ConfigError as err:
            raise ConfigError(f"--set {key.strip()}: {err}") from None
    return raw


class Config:
    """A validated config: ``raw[section]`` holds the section's raw dict (with its ``name``),
    ``names[section]`` the name as given, ``entries[section]`` the registry entry (built-in or
    plug-in) it names and ``options[section]`` its validated options model.

    ``plugin_path``: the directories plug-in modules are searched in (the config file's, the
    current one's; :func:`fedpd.plugins.default_path`); ``plugin_modules``: the plug-in modules
    the config imported (module -> where it came from)."""

    def __init__(self, raw: dict, plugin_path: tuple[str, ...] | None = None):
        unknown = [k for k in raw if k not in SECTIONS]
        if unknown:
            raise ConfigError(f"unknown section [{unknown[0]}] (allowed: {', '.join(SECTIONS)})")
        for k, v in raw.items():
            if not isinstance(v, dict):
                raise ConfigError(f"{k}: must be a table [{k}] (got {v!r})")
        self.raw = {s: dict(raw.get(s, {})) for s in SECTIONS}
        self._given = {s for s in ("system", "asynchronous") if s in raw}  # present, even empty: on
        self.plugin_path = tuple(plugin_path) if plugin_path is not None else plugins.default_path()
        plugins.search(self.plugin_path)
        self.names: dict[str, str] = {}
        self.entries: dict[str, names.Entry] = {}
        self.options: dict[str, BaseModel] = {}
        with plugins.recording() as used:
            for section in registry.TABLES:
                values = dict(self.raw[section])
                name = values.pop("name", registry.DEFAULT_NAMES.get(section))
                self.entries[section] = names.resolve(registry.KINDS[section], name, key=f"{section}.name")
                self.names[section] = name
                self.options[section] = validate(self.entries[section].options, values, section, also=("name",))
            self.options["run"] = validate(RunOptions, self.raw["run"], "run")
            self.options["privacy"] = validate(PrivacyOptions, self.raw["privacy"], "privacy")
            self.options["system"] = validate(SystemOptions, self.raw["system"], "system")
            self.options["asynchronous"] = validate(AsynchronousOptions, self.raw["asynchronous"], "asynchronous")
            self.model = dict(self.raw["model"])
            name = self.model.get("name", "auto")
            if name != "auto":  # the factory and its options, checked before anything is built
                self.entries["model"] = names.resolve(registry.KINDS["model"], name, key="model.name")
                check_model_options(self.entries["model"].build, name,
                                    {k: v for k, v in self.model.items() if k != "name"})
        self.plugin_modules = dict(used)

    @property
    def run(self) -> RunOptions:
        return self.options["run"]  # type: ignore[return-value]

    @property
    def system(self) -> SystemOptions | None:
        """The fleet's options (``[system]``), or None: no clock."""
        return self.options["system"] if "system" in self._given else None  # type: ignore[return-value]

    @property
    def asynchronous(self) -> AsynchronousOptions | None:
        """The asynchronous server's options (``[asynchronous]``), or None: synchronous rounds."""
        return self.options["asynchronous"] if "asynchronous" in self._given else None  # type: ignore[return-value]

    def section(self, name: str) -> dict:
        """The resolved section: its name (if any) and every option with defaults filled in."""
        if name == "model":
            return dict(self.model)
        opts = self.options[name].model_dump(exclude_none=True)
        return {"name": self.names[name], **opts} if name in self.names else opts

    def resolved(self) -> dict:
        return {s: self.section(s) for s in SECTIONS if self._shown(s)}

    def _shown(self, section: str) -> bool:
        """Whether the resolved config holds ``section``: [model] when given, [privacy] when on
        (so a run without differential privacy reads and resumes as before it existed)."""
        if section == "model":
            return bool(self.model)
        if section == "privacy":
            return self.options["privacy"].clip != "none"
        if section in ("system", "asynchronous"):  # absent: no clock, synchronous — every record as before
            return section in self._given
        return True

    def to_toml(self) -> str:
        return tomli_w.dumps(self.resolved())

    def fingerprint(self) -> dict:
        """What a checkpoint must match to be continued by this config: everything but the run
        options a resume may change (:data:`RESUMABLE`)."""
        out = self.resolved()
        out["run"] = {k: v for k, v in out["run"].items() if k not in RESUMABLE}
        return out


def first_difference(a, b, prefix: str = "") -> str:
    """The first key where two resolved configs differ ("" if none)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            where = first_difference(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else k)
            if where:
                return where
        return ""
    return "" if a == b else prefix


def load_config(source: str | Path | dict | Config, overrides: list[str] | tuple[str, ...] = (),
                plugin_path: tuple[str, ...] | list[str] | None = None) -> Config:
    """A validated config from a TOML file, a dict or a Config, with ``--set`` style overrides.

    ``plugin_path``: where plug-in modules are searched; default: a Config's own, else the
    config file's directory (for a file) and the current directory. A process that rebuilds a
    config elsewhere (a worker, a node) passes ``cfg.plugin_path`` and imports the same modules."""
    if isinstance(source, Config):
        plugin_path = source.plugin_path if plugin_path is None else plugin_path
        source = source.resolved()
    if isinstance(source, (str, Path)):
        plugin_path = plugins.default_path(source) if plugin_path is None else plugin_path
        source = load_toml(source)
    try:
        return Config(apply_overrides(source, overrides), plugin_path)
    except RecursionError:  # a dict from Python nested deeper than TOML could hold
        raise ConfigError("the config nests values too deeply to check (no config nests more than a few levels)") \
            from None
