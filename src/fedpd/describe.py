"""``fedpd list`` and ``fedpd show``: what a config can name, and every option of one entry with its
type, default, allowed range and meaning.

Everything is read from the pydantic option models that validate configs
(``fedpd.registry.CATALOG[section][name].options`` and ``.description``: every config section's
entries, the aggregators and the models; ``RunOptions`` for ``[run]``), so the listing cannot
drift from what the validator accepts. Plug-ins installed through entry points (group
``fedpd.plugins``) are listed with their section's built-ins, with where they come from; ``fedpd
show SECTION package.module:Attribute`` shows a plug-in given by its import path. Option
descriptions are the models' ``Field(description=...)``, written beside each option
(``tests/run/test_cli_ux.py`` checks that every option has one).
"""

from __future__ import annotations

import difflib
import inspect
import re
import shutil
import sys
import textwrap
import types
import typing
from dataclasses import dataclass

import annotated_types
from pydantic import BaseModel

from fedpd.errors import ConfigError
from fedpd.plugins import is_import_path

#: words for a section in `fedpd list` (plural) and `fedpd show` (singular)
PLURAL = {"problem": "problems", "algorithm": "algorithms", "solver": "solvers", "sampler": "samplers",
          "attack": "attacks", "model": "models", "aggregator": "aggregators", "dataset": "datasets", "run": "run",
          "privacy": "privacy", "system": "system", "asynchronous": "asynchronous"}

#: the sections with one fixed set of options (no entries to name): (where the options are, what the section is)
FIXED = {"run": ("fedpd.config:RunOptions", "every run's [run] options (rounds, seed, threads, tensorboard, ...)"),
         "privacy": ("fedpd.privacy:PrivacyOptions", "[privacy]: client-level differential privacy for any run whose "
                     "server step reads the mean of the uploads (clip, noise_multiplier, delta, accountant, ...; "
                     "docs/privacy.md)"),
         "system": ("fedpd.system:SystemOptions", "[system]: simulated devices, links, availability and a clock "
                    "(sim_time_s), with deadlines and over-selection for synchronous rounds (docs/systems.md)"),
         "asynchronous": ("fedpd.asynchronous:AsynchronousOptions", "[asynchronous]: FedBuff or FedAsync on "
                          "[system]'s clock in place of synchronous rounds (docs/systems.md)")}


#: what ``fedpd show`` says first where it is not the list's line
SHOWN = {
    "run": "[run]: the options every run has",
    "privacy": "[privacy]: client-level differential privacy for any run (off unless clip is set; docs/privacy.md)",
}


def fixed_options(section: str):
    """The options model of a :data:`FIXED` section."""
    import importlib

    module, _, name = FIXED[section][0].partition(":")
    return getattr(importlib.import_module(module), name)

#: `fedpd list`'s word for the pre-aggregation steps a robust rule may take (not a config section:
#: they are named in algorithm.aggregator_options.pre)
PRE = "pre-aggregation"


@dataclass
class OptionRow:
    name: str
    type: str
    default: str
    allowed: str
    description: str


def tables() -> dict[str, dict]:
    """Every kind of entry a config names (``registry.CATALOG``: the aggregators and models too),
    each followed by the plug-ins installed for it (entry points of ``fedpd.plugins``) that can be
    used."""
    return catalogue()[0]


def catalogue() -> tuple[dict[str, dict], dict[str, dict[str, str]]]:
    """(:func:`tables`, the installed plug-ins of each section that cannot be used: name -> the one
    line why — a clash, an import that fails, a check — every one, not only the first)."""
    from fedpd import names, plugins, registry

    plugins.search(plugins.default_path())
    out, unusable = {}, {}
    # problem.dataset: the installed loaders (fedpd's own datasets are what fedpd data list shows)
    for section, table in [*registry.CATALOG.items(), ("dataset", {})]:
        unusable[section] = {}
        out[section] = {**table, **names.installed(registry.KINDS[section], unusable[section])}
    return out, unusable


def pre_aggregation_steps() -> dict:
    """The pre-aggregation steps by name: the built-ins, then the installed plug-ins that can be used."""
    from fedpd import names, plugins
    from fedpd.preaggregators import KIND

    plugins.search(plugins.default_path())
    return {**KIND.builtins, **names.installed(KIND, {})}


def entry_description(section: str, entry) -> str:
    """The entry's one line; a plug-in's says where it comes from."""
    from fedpd.names import BUILT_IN

    if entry.origin == BUILT_IN:
        return entry.description
    return f"{entry.description} [{entry.module}: {entry.origin}]".strip()


def section_names() -> list[str]:
    return [*tables(), *FIXED]


def _section_key(word: str) -> str | None:
    """A section from its singular or plural name ("algorithm", "algorithms")."""
    for section in section_names():
        if word in (section, PLURAL.get(section, section + "s")):
            return section
    return None


def find(name: str) -> list[tuple[str, str]]:
    """(section, name) of every entry called ``name``."""
    return [(section, name) for section, table in tables().items() if name in table]


def _type_text(annotation) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:  # list[Annotated[int, Field(ge=0)]]: an int, its range the field's
        return _type_text(args[0])
    if origin is typing.Literal:
        return "str"
    if origin in (typing.Union, types.UnionType):
        inner = [_type_text(a) for a in args if a is not type(None)]
        return " or ".join(inner) + (" or unset" if type(None) in args else "")
    if origin in (list, tuple):
        return f"list of {_type_text(args[0])}" if args else "list"
    if origin is dict or annotation is dict:
        return "table"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    return getattr(annotation, "__name__", str(annotation))


def _literal_values(annotation) -> list:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return list(typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return [v for a in typing.get_args(annotation) for v in _literal_values(a)]
    return []


def _value_text(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return str(value.model_dump())
    return str(value)


def _range_text(metadata, key: str = "x") -> str:
    low = high = ""
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            low = f"{m.ge} ≤"
        elif isinstance(m, annotated_types.Gt):
            low = f"{m.gt} <"
        elif isinstance(m, annotated_types.Le):
            high = f"≤ {m.le}"
        elif isinstance(m, annotated_types.Lt):
            high = f"< {m.lt}"
    if low and high:
        return f"{low} {key} {high}"
    if low:
        return {"≤": "≥", "<": ">"}[low.split()[-1]] + " " + low.split()[0]
    return high


def option_rows(section: str, name: str | None, model: type[BaseModel]) -> list[OptionRow]:
    rows = []
    for key, field in model.model_fields.items():
        if field.is_required():
            default = "required"
        elif field.default_factory is not None:
            default = _value_text(field.default_factory())
        else:
            default = _value_text(field.default)
        values = _literal_values(field.annotation)
        allowed = " | ".join(str(v) for v in values) if values else _range_text(field.metadata, key)
        if values and type(None) in typing.get_args(field.annotation):
            allowed += " (or unset)"
        description = field.description or ""
        rows.append(OptionRow(key, _type_text(field.annotation), default, allowed, description))
    return rows


def model_option_rows(name: str, factory) -> list[OptionRow]:
    """A model factory's options: its parameters after (input_shape, num_classes)."""
    from fedpd.models import model_options

    rows = []
    for p in inspect.signature(factory).parameters.values():
        if p.name in model_options(factory):
            default = "required" if p.default is inspect.Parameter.empty else _value_text(p.default)
            if p.annotation is not inspect.Parameter.empty:
                typ = p.annotation if isinstance(p.annotation, str) else _type_text(p.annotation)
            else:
                typ = "" if p.default in (inspect.Parameter.empty, None) else type(p.default).__name__
            rows.append(OptionRow(p.name, typ, default, "", ""))
    return rows


def _doc_paragraph(obj) -> str:
    """The first paragraph of ``obj``'s docstring (the paper and equations it implements)."""
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):  # e.g. a functools.partial of a generic class
        return ""
    target = obj
    doc = inspect.getdoc(target) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    if "module docstring" in first:  # e.g. Fed+: the module says what the paper is
        module = inspect.getmodule(target)
        first = " ".join((inspect.getdoc(module) or "").split("\n\n")[0].split()) if module else first
    return _plain(first)


def _plain(text: str) -> str:
    """Docstring markup dropped for the terminal: :data:`X` -> X, ``x`` -> x."""
    return re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "")


def _width() -> int:
    """The terminal's width ($COLUMNS when set, 80 when not a terminal), at least 40."""
    return max(40, shutil.get_terminal_size((80, 24)).columns)


def _wrap(text: str, width: int, indent: int, first: str | None = None) -> str:
    """``text`` filled to ``width`` columns, every line indented by ``indent`` spaces, or the first
    line starting with ``first`` (then the text follows on the same line)."""
    lead = " " * indent
    return textwrap.fill(text, width=width, initial_indent=lead if first is None else first,
                         subsequent_indent=lead, break_on_hyphens=False, break_long_words=True) or (first or "")


def print_list(section: str | None = None, file=None) -> None:
    """One line per entry (name and description, wrapped to the terminal), every section or one;
    an installed plug-in that cannot be used is listed with why (``!``), and a note on stderr
    counts them."""
    from fedpd import plugins

    out = file or sys.stdout
    width = _width()
    found, unusable = catalogue()
    for sec, table in found.items():
        broken = unusable[sec]
        if section not in (None, sec) or (sec == "dataset" and not table and not broken and section is None):
            continue
        print(f"{PLURAL.get(sec, sec + 's')}:", file=out)
        if sec == "dataset":
            print(_wrap("installed loaders problem.dataset can name (fedpd's own datasets: fedpd data list)"
                        + ("" if table or broken else ": none"), width, 2), file=out)
            if not table and not broken:
                continue
        pad = min(max(len(k) for k in [*table, *broken]) + 4, width // 3)
        lines = [*((name, entry_description(sec, entry)) for name, entry in table.items()),
                 *((name, f"! cannot be used: {why}") for name, why in broken.items())]
        for name, text in lines:
            first = f"  {name:<{pad - 4}}  "
            if len(first) > pad:  # a long name: the description starts on the next line
                print(first.rstrip(), file=out)
                first = " " * pad
            print(_wrap(text, width, pad, first), file=out)
    misnamed = plugins.malformed() if section is None else []
    if misnamed:
        print("entry points that name nothing:", file=out)
        for ep in misnamed:
            print(_wrap(f"! {plugins.misnamed(ep)}", width, 4, "  "), file=out)
    count = sum(len(b) for s, b in unusable.items() if section in (None, s)) + len(misnamed)
    if count:
        print(f"fedpd: note: {count} installed plug-in{'s' if count > 1 else ''} cannot be used (marked ! in the "
              f"listing)", file=sys.stderr)
    if section in (None, PRE):
        steps = pre_aggregation_steps()
        print(f"{PRE}:", file=out)
        print(_wrap('steps before any robust rule: algorithm.aggregator_options.pre = "nnm" (or a list, run in '
                    'order; fedpd list NAME)', width, 2), file=out)
        pad = min(max(map(len, steps)) + 4, width // 3)
        for name, entry in steps.items():
            print(_wrap(entry_description(PRE, entry), width, pad, f"  {name:<{pad - 4}}  "), file=out)
    for fixed, (_, text) in FIXED.items():
        if section in (None, fixed):
            print(f"{fixed}:", file=out)
            print(_wrap(f"{text}: fedpd show {fixed}", width, 2), file=out)
    if section is None:
        print(_wrap("The options of one entry with their defaults, ranges and meaning: fedpd list NAME "
                    "(e.g. fedpd list fedpd), or fedpd show SECTION NAME.", width, 0), file=out)


def _print_options(rows: list[OptionRow], width: int, out) -> None:
    """Each option as the TOML line that sets its default, then its type and range, then what it
    means, wrapped to ``width``."""
    for r in rows:
        head = f"  {r.name} = {r.default}" if r.default != "required" else f"  {r.name}  (required)"
        kind = r.allowed if " | " in r.allowed else ", ".join(x for x in (r.type, r.allowed) if x)
        if kind:
            gap = max(2, 36 - len(head))
            if len(head) + gap + len(kind) <= width:
                head = head + " " * gap + kind
            else:  # the type and range on lines of their own
                head = _wrap(head.strip(), width, 4, "  ") + "\n" + _wrap(kind, width, 6)
        elif len(head) > width:
            head = _wrap(head.strip(), width, 4, "  ")
        print(head, file=out)
        if r.description:
            print(_wrap(r.description, width, 6), file=out)


def show(section: str, name: str | None, file=None) -> None:
    """Print one entry: its description, its source (docstring) and its options."""
    out = file or sys.stdout
    width = _width()
    if section in FIXED:
        text = SHOWN.get(section, FIXED[section][1])
        print(_wrap(text, width, 2, ""), file=out)
        _print_options(option_rows(section, None, fixed_options(section)), width, out)
        return
    if section == PRE:
        from fedpd.preaggregators import PreOptions

        entry = pre_aggregation_steps()[name]
        print(_wrap(f"{PRE} {name}: {entry_description(PRE, entry)}", width, 2, ""), file=out)
        for paragraph in (inspect.getdoc(entry.build) or "").split("\n\n"):  # the whole docstring: its equations
            paragraph = _plain(paragraph)
            if paragraph.startswith(" "):  # an equation, as laid out
                print("\n".join("  " + line for line in paragraph.splitlines()), file=out)
            else:
                print(_wrap(" ".join(paragraph.split()), width, 2), file=out)
        print(_wrap(f'algorithm.aggregator_options.pre = "{name}" (or a list of steps, run in order) before any '
                    f'robust rule (fedpd list aggregators: all but mean), with these [algorithm.aggregator_options] '
                    f'(the keys this step reads; Krum and Bulyan read n_byzantine too):', width, 2, ""), file=out)
        rows = option_rows("aggregator", None, PreOptions)[:1]  # pre itself
        _print_options(rows + option_rows("aggregator", name, entry.options), width, out)
        return
    entry = lookup(section, name)
    description = entry_description(section, entry)
    print(_wrap(f"{section} {name}: {description}", width, 2, ""), file=out)
    if section == "model":
        factory = entry.build
        rows = model_option_rows(name, factory)
        doc = _doc_paragraph(factory)
        header = f'[model] with name = "{name}" (problem "dataset")'
    elif section == "dataset":
        doc = _doc_paragraph(entry.build)
        if doc and doc != description:
            print(_wrap(doc, width, 2), file=out)
        print(_wrap(f'[problem] with name = "dataset" and dataset = "{name}": its options are the problem\'s '
                    f'(fedpd show problem dataset); fedpd data split {name} shows how it splits', width, 2, ""),
              file=out)
        return
    elif section == "aggregator":
        from fedpd.preaggregators import PreOptions

        rows = option_rows(section, name, entry.options)
        if getattr(entry.build, "robust", True):  # the pre-aggregation chain any robust rule may take
            own = {r.name for r in rows}
            rows += [r for r in option_rows(section, name, PreOptions) if r.name not in own]
        doc = _doc_paragraph(entry.build)
        header = f'algorithm.aggregator = "{name}", with [algorithm.aggregator_options]'
    else:
        rows = option_rows(section, name, entry.options)
        doc = _doc_paragraph(entry.build)
        header = f'[{section}] with name = "{name}"'
    if doc and doc != description:
        print(_wrap(doc, width, 2), file=out)
    print(_wrap(f"{header}: " + ("options and their defaults:" if rows else "no other options"), width, 2, ""),
          file=out)
    _print_options(rows, width, out)


def resolve(word: str) -> list[tuple[str, str | None]]:
    """What ``fedpd list WORD`` names: a section (name None) or the entries called WORD."""
    if word in pre_aggregation_steps():
        return [(PRE, word)]
    if word in (PRE, PRE + "s"):
        return [(PRE, None)]
    section = _section_key(word)
    found = find(word)
    if section is not None and not (found and word == section):  # `fedpd list dataset`: the problem
        return [(section, None)]
    if found:
        return found
    if is_import_path(word):  # what it is depends on the key a config gives it to
        raise ConfigError(f"fedpd list: {word!r} is an import path; show it with its section: fedpd show SECTION "
                          f"{word} (sections: {', '.join(s for s in section_names() if s not in ('run', 'privacy'))})")
    names = sorted({n for t in tables().values() for n in t} | set(section_names())
                   | {PLURAL.get(s, s + "s") for s in section_names()})
    lower = {n.lower(): n for n in names}  # names are lower case: FedPD means fedpd
    close = [lower[c] for c in difflib.get_close_matches(word.lower(), list(lower), n=3)]
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(f"fedpd list: no section or entry named {word!r} ({hint}allowed: a section — "
                      f"{', '.join(PLURAL.get(s, s + 's') for s in section_names())} — or a name they list)")


def check_show(section_word: str, name: str | None) -> tuple[str, str | None]:
    section = _section_key(section_word)
    if section is None:
        raise ConfigError(f"fedpd show: unknown section {section_word!r} "
                          f"(allowed: {', '.join(section_names())})")
    if section in FIXED:
        if name is not None:
            raise ConfigError(f"fedpd show {section}: takes no NAME ([{section}] has no entries)")
        return section, None
    table = tables()[section]
    if name is None:
        raise ConfigError(f"fedpd show {section}: missing NAME (allowed: {', '.join(table)}, or an import path "
                          f"package.module:Attribute)")
    if name not in table and not is_import_path(name):
        own = "; fedpd's own datasets: fedpd data list" if section == "dataset" else ""
        raise ConfigError(
            f"fedpd show {section}: unknown {section} {name!r} (allowed: {', '.join(table) or 'none installed'}, "
            f"or an import path package.module:Attribute{own})"
        )
    lookup(section, name)  # an import path that does not name a usable plug-in: one line
    return section, name


def lookup(section: str, name: str):
    """The entry ``name`` names in ``section``: listed, or a plug-in by its import path."""
    from fedpd import names, registry

    table = tables()[section]
    if name in table:
        return table[name]
    try:
        return names.resolve(registry.KINDS[section], name)
    except ConfigError as err:
        raise ConfigError(f"fedpd show {section} {name}: {err}") from None
