"""Names: what a name in a config stands for, decided in one place.

Every config key that names something — ``problem.name``, ``algorithm.name``, ``solver.name``,
``sampler.name``, ``attack.name``, ``model.name``, ``algorithm.aggregator`` and
``problem.dataset`` — is resolved by :func:`resolve` with that key's :class:`Kind` (its built-in
table, declared beside the things it lists: :data:`fedpd.registry.KINDS`). The order:

1. an import path ``package.module:Attribute`` (the colon says so; no built-in name has one):
   that attribute;
2. a built-in name: the built-in — unless an installed entry point takes the same name, which is
   an error (a clash), not a choice;
3. the name of an entry point ``<kind>.<name>`` (group ``fedpd.plugins``): what it names —
   unless two distributions declare it (a clash);
4. anything else: unknown, with one line listing the built-ins and the installed names.

A plug-in (1 or 3) is then checked to be usable where a built-in is, all before it is called
(:func:`_plugin`): the kind's own check (an ``Algorithm`` or ``Attack`` subclass, a model factory's
signature), callable, ``Options`` a pydantic model — declared by the plug-in itself where the kind
asks for it (problems, solvers, samplers, aggregators: the marker of a plug-in of that kind;
``fedpd.NoOptions`` for none) — and a signature that takes what fedpd passes it (the kind's
arguments and the options as keywords). It is then made an :class:`Entry` like the built-ins.
What it returns is checked where it is built. Every message is one line and the same for every
kind; ``key`` puts the config key in front. How modules are found, which a node may import and
which were imported is :mod:`fedpd.plugins`' job (a module of the standard library is refused
there, before it is imported).
"""

from __future__ import annotations

import importlib.metadata as metadata
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pydantic import BaseModel

from fedpd import plugins
from fedpd.errors import ConfigError
from fedpd.options import NoOptions, Options

BUILT_IN = "built-in"


@dataclass(frozen=True)
class Entry:
    """A named thing a config can pick: what builds it, its options model and its one line."""

    name: str
    build: Callable
    options: type[Options]
    description: str
    origin: str = BUILT_IN  # or "import path", "entry point of distribution ..."
    module: str | None = None  # the plug-in's module (None: built-in)


@dataclass(frozen=True)
class Kind:
    """What a config key names: its built-ins and what a plug-in of it must be.

    ``plugin``: what a plug-in is, said when one is refused; ``check(obj, name)``: why ``obj``
    cannot be one (None: it can; asked first, of anything); ``options``: whether its ``Options``
    validates the config section (a model factory's signature does that instead); ``declared``:
    whether a plug-in must declare ``Options`` itself (the marker of a plug-in of this kind);
    ``args`` and ``keywords``: what fedpd calls a plug-in with besides its options (positional
    arguments, keywords; by name), checked against its signature — None: not checked here (a model
    factory's ``check`` does it)."""

    name: str  # one of plugins.KINDS
    builtins: Mapping[str, Entry]
    plugin: str = ""
    check: Callable[[Any, str], str | None] | None = None
    options: bool = True
    declared: bool = False
    args: tuple[str, ...] | None = ()
    keywords: tuple[str, ...] = ()

    @property
    def what_plugin_is(self) -> str:
        return self.plugin or f"a {self.name} plug-in is a class or a function"


def table(*things) -> dict[str, Entry]:
    """Built-ins that declare ``name``, ``Options`` and ``description`` (:func:`fedpd.options.declares`)."""
    return {t.name: Entry(t.name, t, t.Options, t.description) for t in things}


def resolve(kind: Kind, value, key: str | None = None) -> Entry:
    """The entry ``value`` names for ``kind`` (the order: this module's docstring). A one-line
    :class:`~fedpd.plugins.PluginError` otherwise; with ``key``, a ConfigError that names it."""
    try:
        return _resolve(kind, value)
    except plugins.PluginError as err:
        if key is None:
            raise
        raise ConfigError(f"{key}: {err}") from None


def _resolve(kind: Kind, value) -> Entry:
    if value is None:
        raise plugins.PluginError(f"missing (allowed: {_allowed(kind)})")
    if not isinstance(value, str):
        raise plugins.PluginError(f"expected a name, got {value!r}")
    if plugins.is_import_path(value):
        return _plugin(kind, value, plugins.load(value))
    declared = plugins.entry_points().get((kind.name, value))
    if value in kind.builtins:
        if declared:
            _one(kind, value, declared)  # raises: an entry point may not take a built-in's name
        return kind.builtins[value]
    if declared:
        return _plugin(kind, value, plugins.load_entry_point(_one(kind, value, declared)))
    misnamed = [ep for ep in plugins.malformed() if ep.name == value]
    hint = (f"; the entry point {value!r} of {plugins.dist(misnamed[0])} is installed, but an entry point's name "
            f"must be <kind>.<name>: {kind.name}.{value}" if misnamed else "")
    raise plugins.PluginError(f"unknown {kind.name} {value!r} (allowed: {_allowed(kind)}){hint}")


def _allowed(kind: Kind) -> str:
    names = [*kind.builtins, *(n for (k, n) in plugins.entry_points() if k == kind.name and n not in kind.builtins)]
    return f"{', '.join(names)}, or an import path package.module:Attribute"


def _one(kind: Kind, name: str, declared: list[metadata.EntryPoint]) -> metadata.EntryPoint:
    """The one entry point ``kind.name``: a PluginError when it takes a built-in's name or two
    distributions declare it — the one rule for every kind, applied where the name is used (a
    config names it, or a listing shows it)."""
    ep = declared[0]
    if name in kind.builtins:
        raise plugins.PluginError(f"entry point {ep.name!r} of {plugins.dist(ep)} clashes with the built-in "
                                  f"{kind.name} {name!r} (group {plugins.GROUP}; rename it in that distribution's "
                                  f"entry points)")
    if len(declared) > 1:
        raise plugins.PluginError(f"entry point {ep.name!r} is declared by both {plugins.dist(ep)} and "
                                  f"{plugins.dist(declared[1])} (group {plugins.GROUP}); uninstall or rename one")
    return ep


def entry_points(kind: Kind) -> dict[str, metadata.EntryPoint]:
    """The installed entry points of ``kind`` by name, not yet imported (a clash: PluginError)."""
    return {name: _one(kind, name, declared) for (k, name), declared in plugins.entry_points().items()
            if k == kind.name}


def installed(kind: Kind, unusable: dict[str, str] | None = None) -> dict[str, Entry]:
    """The installed plug-ins of ``kind`` as entries, each checked as :func:`resolve` checks it
    (what ``fedpd list`` shows after the built-ins). One that cannot be used (a clash, an import
    that fails, a check) raises its one line, or with ``unusable`` is left out and its line kept
    there by name, so a listing shows every one."""
    out = {}
    for (k, name), declared in plugins.entry_points().items():
        if k != kind.name:
            continue
        try:
            out[name] = _plugin(kind, name, plugins.load_entry_point(_one(kind, name, declared)))
        except plugins.PluginError as err:
            if unusable is None:
                raise
            unusable[name] = str(err)
    return out


def _plugin(kind: Kind, name: str, found: plugins.Plugin) -> Entry:
    """A plug-in as an :class:`Entry`, checked to be usable as the kind's built-ins are — before
    anything of it is called."""
    obj = found.obj
    wrong = kind.check(obj, name) if kind.check is not None else None
    if not wrong and not callable(obj):
        wrong = f"{name} is not callable (got {what(obj)}; {kind.what_plugin_is})"
    if wrong:
        raise plugins.PluginError(wrong)
    options = getattr(obj, "Options", None) if kind.options else NoOptions
    if options is None and kind.declared:
        raise plugins.PluginError(f"{name} declares no Options (got {what(obj)}): {kind.what_plugin_is}, and declares "
                                  f"its options as a pydantic model, Options = fedpd.NoOptions for none (or "
                                  f"@fedpd.declares(name, Options, description) on a function)")
    options = NoOptions if options is None else options
    if not (isinstance(options, type) and issubclass(options, BaseModel)):
        raise plugins.PluginError(f"{name}.Options must be a pydantic model (subclass fedpd.Options), got "
                                  f"{what(options)}")
    wrong = _call_problem(kind, obj, name, options)
    if wrong:
        raise plugins.PluginError(wrong)
    return Entry(name, obj, options, describe(obj), found.origin, found.module)


def _call_problem(kind: Kind, obj: Any, name: str, options: type[BaseModel]) -> str | None:
    """Why ``obj`` cannot be called as fedpd calls a plug-in of ``kind`` — the kind's arguments,
    then its options as keywords — read from its signature alone (None: it can)."""
    if kind.args is None:
        return None
    # the options as keywords, or what the model says its owner is built with (an algorithm's defence
    # keys arrive as one ``defence``: fedpd.algorithms.robust.DefenceOptions)
    fields = getattr(options, "constructor_keywords", None)
    keywords = [*kind.keywords, *(fields() if callable(fields) else options.model_fields)]
    call = ", ".join([*kind.args, *(f"{k}=..." for k in keywords)])
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{name} has no signature to check (got {what(obj)}); {kind.what_plugin_is}"
    try:
        signature.bind(*kind.args, **dict.fromkeys(keywords))
    except TypeError as err:
        text = str(signature)
        text = text if len(text) <= 80 else text[:75] + " ...)"
        return (f"{name}{text} cannot be called as fedpd calls a {kind.name} plug-in, ({call}): {err} "
                f"({kind.what_plugin_is})")
    return None


def describe(obj: Any) -> str:
    """A plug-in's one line: its ``description``, else its docstring's first line."""
    text = getattr(obj, "description", "") or (getattr(obj, "__doc__", "") or "").strip().split("\n")[0]
    return " ".join(str(text).split())


def what(obj) -> str:
    """``obj`` in words, for a message: "the class X", "the function f", "a str"."""
    if isinstance(obj, type):
        return f"the class {obj.__qualname__}"
    if inspect.isroutine(obj):
        return f"the function {obj.__qualname__}"
    return f"a {type(obj).__name__}"

