"""Plug-ins: the code a config names from outside fedpd, found the same way in every process.

A config names a plug-in by an import path ``package.module:Attribute`` (that attribute of that
module) or by the name of an entry point of the group ``fedpd.plugins`` that an installed
distribution declares, named ``<kind>.<name>`` (``algorithm.my_fedavg = "mypkg.algos:MyFedAvg"``;
the kind is the config key it serves, :data:`KINDS`; the config then says ``name =
"my_fedavg"``). Which of a built-in, an import path or an entry point a name stands for, and
what a clash or an unknown name says, is decided in one place, :mod:`fedpd.names`; this module
only loads what it is asked for, from where and under the rules below.

**Where modules are found.** A config's *plug-in path* (``Config.plugin_path``) is the directory
of its config file (when it came from one) and the current directory; :func:`search` appends
them to ``sys.path`` (after everything else, so a user's file never hides an installed module).
A process that rebuilds a config elsewhere — a worker process, a Ray actor of Flower's
simulation, a resumed run — gets the same path (``load_config(..., plugin_path=...)``), so it
imports the same files.

**Who may import what.** A Flower SuperNode builds the problem and algorithm from the config the
server sends; :func:`restricted` limits plug-in imports to the module prefixes its node config
allows, and refuses anything else with one line naming the module. Built-in names are always
allowed.

**What is imported, and what is not.** Importing a module runs its top-level code: a plug-in
module is code its config runs, checked only after it is imported (:mod:`fedpd.names`). Before
an import fedpd can only read the name: a module of Python's standard library is refused then,
never imported — none holds a fedpd plug-in, and some act when imported (``this`` prints, and
``antigravity`` opens a web browser); a module that is not found runs nothing.

**What was run.** Resolutions made inside :func:`recording` are collected (the modules a config
imports), and :func:`fingerprint` gives each module's file and its SHA-256, which a run directory
keeps (``plugins.json``) so that ``--resume`` can say when the code changed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata as metadata
import re
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from fedpd.errors import ConfigError, reason

GROUP = "fedpd.plugins"
#: what an entry point's ``<kind>.`` prefix may say: the config keys that take a plug-in
KINDS = ("problem", "algorithm", "solver", "sampler", "attack", "aggregator", "pre_aggregation", "model", "dataset")
_IDENT = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_PATH = re.compile(rf"({_IDENT}):({_IDENT})")

_ALLOWED: ContextVar[tuple[str, ...] | None] = ContextVar("fedpd_plugins_allowed", default=None)
_RECORD: ContextVar[dict[str, str] | None] = ContextVar("fedpd_plugins_record", default=None)
_SEARCHED: list[str] = []  # directories this process appended to sys.path
_ENTRY_CACHE: dict[tuple[str, ...], dict[tuple[str, str], list[metadata.EntryPoint]]] = {}
_MALFORMED: dict[tuple[str, ...], list[metadata.EntryPoint]] = {}


class PluginError(ConfigError):
    """A plug-in that cannot be used; the message says why, without the config key (the caller
    puts it in front)."""


@dataclass(frozen=True)
class Plugin:
    """What an import path or entry point loaded: the object, how it was named (``origin``) and
    the module that holds it."""

    obj: Any
    origin: str
    module: str | None = None


def is_import_path(value) -> bool:
    return isinstance(value, str) and ":" in value


# --- the search path ------------------------------------------------------------------------
def default_path(config_file: str | Path | None = None) -> tuple[str, ...]:
    """The plug-in path of a config: its file's directory (if any), then the current directory."""
    dirs = [Path(config_file).resolve().parent] if config_file is not None else []
    return _unique([*map(str, dirs), str(Path.cwd())])


def search(path: Iterable[str]) -> None:
    """Make the modules in the directories ``path`` importable (appended to ``sys.path``)."""
    for directory in path:
        directory = str(Path(directory).resolve())
        if directory not in sys.path:
            sys.path.append(directory)
        if directory not in _SEARCHED:
            _SEARCHED.append(directory)


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


# --- who may import what --------------------------------------------------------------------
@contextmanager
def restricted(prefixes: Iterable[str] | None) -> Iterator[None]:
    """Within the block, only plug-in modules under ``prefixes`` (``mypkg`` allows ``mypkg`` and
    ``mypkg.sub``) may be imported; None: any."""
    token = _ALLOWED.set(None if prefixes is None else tuple(prefixes))
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def policy() -> tuple[str, ...] | None:
    """The module prefixes plug-ins may come from here (None: any)."""
    return _ALLOWED.get()


def parse_allowed(text: str) -> tuple[str, ...]:
    """``"mypkg, other"`` -> ("mypkg", "other") (a node config's ``allowed-plugins``)."""
    prefixes = tuple(p.strip() for p in str(text).split(",") if p.strip())
    for p in prefixes:
        if not re.fullmatch(_IDENT, p):
            raise ConfigError(f"allowed-plugins: {p!r} is not a module name (allowed: module prefixes like "
                              f"'mypkg,other.sub', comma-separated)")
    return prefixes


def _check_allowed(module: str) -> None:
    prefixes = _ALLOWED.get()
    if prefixes is None or any(module == p or module.startswith(p + ".") for p in prefixes):
        return
    raise PluginError(f"plug-in module {module!r} is not allowed on this node (its node config's allowed-plugins: "
                      f"{', '.join(prefixes) or 'none'})")


# --- recording what a config imports --------------------------------------------------------
@contextmanager
def recording() -> Iterator[dict[str, str]]:
    """Collect, in the returned dict, every plug-in module resolved within the block (module ->
    the origin it came by)."""
    used: dict[str, str] = {}
    token = _RECORD.set(used)
    try:
        yield used
    finally:
        _RECORD.reset(token)


def _record(found: Plugin) -> Plugin:
    used = _RECORD.get()
    if used is not None and found.module is not None:
        used.setdefault(found.module, found.origin)
    return found


# --- resolving ------------------------------------------------------------------------------
def load(path: str, origin: str = "import path") -> Plugin:
    """The attribute an import path ``package.module:Attribute`` names; :class:`PluginError`
    (one line) when the path is malformed, not allowed here, not found or fails to import."""
    match = _PATH.fullmatch(path.strip())
    if not match:
        raise PluginError(f"{path!r} is not an import path (expected package.module:Attribute, e.g. "
                          f"'my_algorithms:MyFedAvg')")
    module_name, attribute = match.groups()
    top = module_name.partition(".")[0]
    if top in sys.stdlib_module_names:
        raise PluginError(f"module {module_name!r} is part of Python's standard library, which holds no fedpd "
                          f"plug-ins (refused without importing it; allowed: a module of your own, or an installed "
                          f"package's)")
    module = _import(module_name)
    obj: Any = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"module {module_name!r} ({_file(module)}) has no attribute {attribute!r}")
        obj = getattr(obj, part)
    return _record(Plugin(obj, origin, module_name))


def _import(name: str):
    _check_allowed(name)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and (name == err.name or name.startswith(err.name + ".")):
            where = ", ".join(_SEARCHED) or "none"
            raise PluginError(f"no module named {name!r} (searched the plug-in path — {where} — and the installed "
                              f"packages)") from None
        raise PluginError(f"importing {name!r} failed: {reason(err, 300)}") from None
    except Exception as err:  # the user's module raised while being imported
        raise PluginError(f"importing {name!r} failed: {reason(err, 300)}") from None


def _file(module) -> str:
    return getattr(module, "__file__", None) or "no file"


def entry_points() -> dict[tuple[str, str], list[metadata.EntryPoint]]:
    """Every entry point of :data:`GROUP` by (kind, name): usually one, two or more where several
    distributions declare one name (an error only where the name is used, :mod:`fedpd.names`). One
    whose name is not ``<kind>.<name>`` names nothing a config can use: it is left out here, and
    :func:`malformed` lists it."""
    key = tuple(sys.path)
    if key not in _ENTRY_CACHE:
        found: dict[tuple[str, str], list[metadata.EntryPoint]] = {}
        bad: list[metadata.EntryPoint] = []
        for ep in metadata.entry_points(group=GROUP):
            kind, _, name = ep.name.partition(".")
            if kind not in KINDS or not name:
                bad.append(ep)
                continue
            same = found.setdefault((kind, name), [])
            if all(other.value != ep.value for other in same):
                same.append(ep)
        _ENTRY_CACHE.clear()
        _MALFORMED.clear()
        _ENTRY_CACHE[key], _MALFORMED[key] = found, bad
    return _ENTRY_CACHE[key]


def malformed() -> list[metadata.EntryPoint]:
    """The entry points of :data:`GROUP` whose name is not ``<kind>.<name>`` (what ``fedpd list``
    shows as unusable; a config that names one is told why it is unknown)."""
    entry_points()
    return _MALFORMED[tuple(sys.path)]


def misnamed(ep: metadata.EntryPoint) -> str:
    """Why a :func:`malformed` entry point cannot be used, in one line."""
    return (f"entry point {ep.name!r} of {dist(ep)} (group {GROUP}): its name must be <kind>.<name> with kind one of "
            f"{', '.join(KINDS)}")


def dist(ep: metadata.EntryPoint) -> str:
    """The distribution that declares ``ep``, in words ("distribution mydist 1.0")."""
    dist = getattr(ep, "dist", None)
    return f"distribution {dist.name} {dist.version}" if dist is not None else "an unnamed distribution"


def load_entry_point(ep: metadata.EntryPoint) -> Plugin:
    """What an entry point names, imported under the same rules as an import path."""
    return load(ep.value, f"entry point of {dist(ep)}")


# --- what was run ---------------------------------------------------------------------------
def fingerprint(modules: Iterable[str]) -> dict[str, dict]:
    """{module: {"file": path, "sha256": hex}} of imported plug-in modules (file None: no file)."""
    out = {}
    for name in modules:
        file = getattr(sys.modules.get(name), "__file__", None)
        out[name] = {"file": file, "sha256": _sha256(file) if file else None}
    return out


def roots(modules: Iterable[str]) -> tuple[str, ...]:
    """The directories the imported ``modules`` were found in (what ``sys.path`` needs to hold to
    import them again: the parent of a package's top directory)."""
    out = []
    for name in modules:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            depth = name.count(".") + (Path(file).name == "__init__.py")
            out.append(str(Path(file).resolve().parents[depth]))
    return _unique(out)


def _sha256(file: str) -> str | None:
    try:
        return hashlib.sha256(Path(file).read_bytes()).hexdigest()
    except OSError:
        return None


def changed(recorded: Mapping[str, Mapping]) -> list[str]:
    """The modules of a ``fingerprint`` whose file now differs (or is gone)."""
    return [name for name, entry in recorded.items()
            if entry.get("sha256") and _sha256(str(entry.get("file"))) != entry["sha256"]]
