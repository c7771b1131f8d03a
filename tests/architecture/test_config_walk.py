"""How far the run's whole config climbs back up the layers (docs/architecture.md, "Layers").

The walk starts at ``fedpd.runner.run`` with its ``cfg`` (the run's :class:`~fedpd.config.Config`)
and follows it through the calls, read from the source (an AST walk, as test_import_graph.py reads
imports): in a function it reaches, the config is the parameter it was handed in, and any local name
or ``self.`` attribute assigned from it (``x = cfg``, ``self.cfg, self.workdir = cfg, workdir``).
Each call that passes the config as an argument, positional or by keyword, to a function, class or
method of the package that the source names statically (a name defined or imported there,
``module.function``, ``Class.method``, ``self.method``) is followed into it, with the parameter it
binds. A call from one module into another is a *move back up*: every module imports only the
layers above it in the picture (no import cycle), so such a call hands the whole config to a layer
nearer config.py, where the composition root should have handed it only the options it uses. Each
call site counts once; calls within a module do not count."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from helpers import ROOT, write_package

SRC = ROOT / "src" / "fedpd"


@dataclass(frozen=True)
class Move:
    """A call that hands the config from ``caller`` (module, function) to ``callee`` in another module."""

    caller: tuple[str, str]
    line: int
    callee: tuple[str, str]

    def __str__(self) -> str:
        return f"{self.caller[0]}.{self.caller[1]}:{self.line} -> {self.callee[0]}.{self.callee[1]}"


class _Package:
    """The modules of a package: their top-level functions, classes and methods, and what their
    names import."""

    def __init__(self, root: Path):
        self.paths: dict[str, Path] = {}
        for path in root.rglob("*.py"):
            parts = path.relative_to(root.parent).with_suffix("").parts
            self.paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
        self.defs: dict[str, dict[str, ast.AST]] = {}
        self.imports: dict[str, dict[str, tuple[str, str | None]]] = {}
        for module, path in self.paths.items():
            tree = ast.parse(path.read_text(encoding="utf-8"))
            defs: dict[str, ast.AST] = {}
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    defs[node.name] = node
                if isinstance(node, ast.ClassDef):
                    defs.update({f"{node.name}.{sub.name}": sub for sub in node.body
                                 if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef))})
            self.defs[module] = defs
            self.imports[module] = self.imported(module, _outside_functions(tree))

    def imported(self, module: str, nodes) -> dict[str, tuple[str, str | None]]:
        """name -> (module, attribute or None for the module itself) for the import statements in ``nodes``."""
        package = module if self.paths[module].name == "__init__.py" else module.rpartition(".")[0]
        table: dict[str, tuple[str, str | None]] = {}
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.asname or alias.name.partition(".")[0]
                    table[name] = (alias.name if alias.asname else name, None)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, one level up per extra dot
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    table[alias.asname or alias.name] = (full, None) if full in self.paths else (base, alias.name)
        return table

    def find(self, module: str, name: str, depth: int = 0) -> tuple[str, str] | None:
        """Where ``module``'s ``name`` is defined (following re-exports)."""
        if module not in self.defs or depth > 8:
            return None
        if name in self.defs[module]:
            return module, name
        if self.imports[module].get(name, (None, None))[1] is not None:
            return self.find(*self.imports[module][name], depth + 1)
        return None


def _outside_functions(node: ast.AST):
    """The statements of ``node`` not inside a function or class (a module's own imports, also under
    ``if`` and ``try``)."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child
            yield from _outside_functions(child)


def _carriers(func: ast.AST, names: set[str]) -> tuple[set[str], set[str]]:
    """The local names and ``self.`` attributes of ``func`` that hold the config, given the
    parameters ``names`` that do."""
    local, attrs = set(names), set()
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        pairs = [(t, node.value) for t in node.targets]
        for target, value in list(pairs):  # a, b = x, y
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
                pairs += list(zip(target.elts, value.elts))
        for target, value in pairs:
            if isinstance(value, ast.Name) and value.id in local:
                if isinstance(target, ast.Name):
                    local.add(target.id)
                elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    attrs.add(target.attr)
    return local, attrs


def config_walk(root: Path = SRC, start: tuple[str, str] = ("fedpd.runner", "run"), carrier: str = "cfg") -> list[Move]:
    """Every move back up of the config ``carrier`` of ``start`` (the module docstring's walk)."""
    pkg = _Package(root)
    moves: dict[tuple, Move] = {}
    seen: set[tuple] = set()

    def visit(module: str, qual: str, names: frozenset[str]) -> None:
        if (module, qual, names) in seen:
            return
        seen.add((module, qual, names))
        func = pkg.defs[module][qual]
        cls = qual.partition(".")[0] if "." in qual else None
        imports = {**pkg.imports[module],
                   **pkg.imported(module, [n for n in ast.walk(func) if isinstance(n, (ast.Import, ast.ImportFrom))])}
        local, attrs = _carriers(func, set(names))

        def carries(arg: ast.AST) -> bool:
            if isinstance(arg, ast.Name):
                return arg.id in local
            return (isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "self"
                    and arg.attr in attrs)

        def callee(f: ast.AST) -> tuple[str, str] | None:
            if isinstance(f, ast.Name):
                if f.id in pkg.defs[module]:
                    return module, f.id
                where, attr = imports.get(f.id, (None, None))
                return pkg.find(where, attr) if attr else None
            if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
                return None
            base = f.value.id
            if base == "self" and cls:
                return (module, f"{cls}.{f.attr}") if f"{cls}.{f.attr}" in pkg.defs[module] else None
            if f"{base}.{f.attr}" in pkg.defs[module]:  # Class.method of this module
                return module, f"{base}.{f.attr}"
            where, attr = imports.get(base, (None, None))
            if where is None:
                return None
            if attr is None:  # module.function
                return pkg.find(where, f.attr)
            found = pkg.find(where, attr)  # ImportedClass.method
            if found and f"{found[1]}.{f.attr}" in pkg.defs[found[0]]:
                return found[0], f"{found[1]}.{f.attr}"
            return None

        for node in ast.walk(func):
            if not isinstance(node, ast.Call):
                continue
            given = [i for i, a in enumerate(node.args) if carries(a)]
            keywords = {k.arg for k in node.keywords if k.arg and carries(k.value)}
            target = callee(node.func) if given or keywords else None
            if target is None:
                continue
            tmodule, tqual = target
            if isinstance(pkg.defs[tmodule][tqual], ast.ClassDef):  # a class: its __init__
                if f"{tqual}.__init__" not in pkg.defs[tmodule]:
                    continue
                tqual = f"{tqual}.__init__"
            tdef = pkg.defs[tmodule][tqual]
            params = [a.arg for a in tdef.args.posonlyargs + tdef.args.args]
            if "." in tqual and params[:1] in (["self"], ["cls"]):
                params = params[1:]
            bound = {params[i] for i in given if i < len(params)} | keywords
            if not bound:
                continue
            if tmodule != module:
                moves.setdefault((module, qual, node.lineno, tmodule, tqual),
                                 Move((module, qual), node.lineno, (tmodule, tqual)))
            visit(tmodule, tqual, frozenset(bound))

    visit(*start, frozenset({carrier}))
    return sorted(moves.values(), key=lambda m: (m.caller, m.line, m.callee))


#: the bound the composition root keeps (docs/architecture.md states the measured number)
MOST_MOVES = 19


@functools.cache
def _runs_walk() -> tuple[Move, ...]:
    return tuple(config_walk())


def test_the_runs_config_climbs_back_up_fewer_than_20_times():
    moves = _runs_walk()
    shown = "\n".join(map(str, moves))
    assert any(m.callee == ("fedpd.simulation", "Simulation.__init__") for m in moves), shown  # the walk runs
    assert len(moves) <= MOST_MOVES, f"{len(moves)} moves back up:\n{shown}"
    doc = " ".join((SRC.parents[1] / "docs" / "architecture.md").read_text().split())
    assert f"Measured: {len(moves)} moves" in doc, "docs/architecture.md states another count of the walk"


def test_the_lowest_layers_get_options_not_the_config():
    """threads (the thread option and a FLOP estimate), workers, TensorBoard and the checks of a
    running loop receive values; the config is never rebuilt on the way (load_config)."""
    reached = {m.callee for m in _runs_walk()}
    assert not {m for m in reached if m[0] in ("fedpd.threads", "fedpd.workers", "fedpd.tensorboard", "fedpd.config")}
    assert not reached & {("fedpd.checks", "check_finite"), ("fedpd.checks", "check_run_options_used"),
                          ("fedpd.engines", "in_process")}


def test_the_walk_follows_parameters_aliases_attributes_and_classes(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__.py": "",
        "low.py": "def use(c, x=0):\n    return c\n\ndef value(n):\n    return n\n",
        "mid.py": ("from pkg import low\n\nclass Sim:\n    def __init__(self, config):\n"
                   "        self.config, self.n = config, 1\n        low.use(self.config)\n        self.step()\n\n"
                   "    def step(self):\n        low.value(self.n)\n"),
        "runner.py": ("from pkg.mid import Sim\n\ndef run(cfg):\n    other = cfg\n    helper(c=other)\n"
                      "    Sim(cfg)\n    from pkg.low import use, value\n    use(0, x=cfg)\n    value(cfg.run)\n\n"
                      "def helper(c):\n    from pkg import low\n    low.use(c)\n"),
    })
    moves = [str(m) for m in config_walk(pkg, ("pkg.runner", "run"))]
    assert moves == ["pkg.mid.Sim.__init__:6 -> pkg.low.use", "pkg.runner.helper:13 -> pkg.low.use",
                     "pkg.runner.run:6 -> pkg.mid.Sim.__init__", "pkg.runner.run:8 -> pkg.low.use"]
