"""No import cycle in src/fedpd: data flows one way (config -> build -> engines -> run loop).

The import graph is read from the source (an AST walk), so a lazy import inside a function counts
as much as one at the top of a module: a cycle hidden in a function is still two modules that
cannot be understood, tested or split apart one without the other."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT, write_package

SRC = ROOT / "src" / "fedpd"


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package ``root`` it imports (anywhere in its body).

    ``import a.b``, ``from a.b import c`` (``a.b.c`` when that is a module) and relative imports
    are resolved to the longest module name of the package they name. Importing a submodule runs
    its package's ``__init__`` anyway, so only an import that names the package itself
    (``from fedpd import __version__``) is an edge to an ``__init__``."""
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, one level up per extra dot
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle ``[a, b, ..., a]`` of ``graph``, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return []


def test_fedpd_has_no_import_cycle():
    graph = import_graph(SRC)
    assert len(graph) > 50 and graph["fedpd.runner"]  # the walk found the package and its imports
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_run_is_built_below_the_engines():
    """build.py (config -> the run's objects) reaches no engine, runtime or run loop, so a node
    can build its clients with it; only runner.py and the ServerApp reach the run loop."""
    graph = import_graph(SRC)

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    above = {"fedpd.engine", "fedpd.engines", "fedpd.simulation", "fedpd.runner", "fedpd.remote.engine",
             "fedpd.remote.node", "fedpd.flower.clientapp", "fedpd.flower.serverapp", "fedpd.flower.simulation"}
    assert not reach("fedpd.build") & above
    assert "fedpd.build" in reach("fedpd.remote.node")
    assert {m for m, deps in graph.items() if "fedpd.runner" in deps} <= {
        "fedpd", "fedpd.cli", "fedpd.demo", "fedpd.flower.serverapp", "fedpd.reproduce.execute",
        "fedpd.reproduce.verify", "fedpd.results.figures", "fedpd.sweep"}


def test_the_data_and_the_upload_screen_are_read_without_the_attacks():
    """Data poisoning lives beside the data (problems/poisoning.py) and the upload screen beside
    the protocol (screen.py): no problem, nor the evaluation, nor the screen reaches the attack
    catalogue, which imports them."""
    graph = import_graph(SRC)
    below = [m for m in graph if m.startswith("fedpd.problems.")] + ["fedpd.evaluation", "fedpd.screen"]
    assert "fedpd.problems.poisoning" in graph["fedpd.attacks.data"]  # the walk sees the attacks' imports
    for start in below:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        assert not {m for m in seen if m.split(".")[:2] == ["fedpd", "attacks"]}, start


#: docs/architecture.md's picture of the layers, top first: a module imports only its own layer and those above
LAYERS = (
    ("fedpd.config", "fedpd.registry", "fedpd.options", "fedpd.names", "fedpd.plugins"),
    ("fedpd.build",),
    ("fedpd.engines", "fedpd.engine", "fedpd.workers", "fedpd.remote.engine", "fedpd.remote.node",
     "fedpd.flower.transport", "fedpd.flower.clientapp", "fedpd.flower.warm", "fedpd.flower.simulation"),
    ("fedpd.simulation", "fedpd.handover"),
    ("fedpd.runner",),
    ("fedpd.flower.serverapp",),
)
#: above the run loop: the package's front door, the command line and its tools, reading runs back
TOOLS = ("fedpd", "fedpd.__main__", "fedpd.cli", "fedpd.demo", "fedpd.sweep", "fedpd.flower.deploy",
         "fedpd.reproduce", "fedpd.results")


def against_the_layers(graph: dict[str, set[str]]) -> list[str]:
    """The imports of ``graph`` against :data:`LAYERS`: a layer importing one below it, a module
    beside the layers (protocol, store, checks, ...) importing a layer below the top box, anything
    but the tools importing a tool."""
    layer = {m: i for i, modules in enumerate(LAYERS) for m in modules}

    def tool(m: str) -> bool:
        return m in TOOLS or m.startswith(tuple(f"{t}." for t in TOOLS if t != "fedpd"))

    out = []
    for m, deps in sorted(graph.items()):
        for d in sorted(deps):
            if tool(m):
                continue
            if tool(d) or (layer.get(d, 0) > layer[m] if m in layer else layer.get(d, 0) > 0):
                out.append(f"{m} -> {d}")
    return out


def test_no_module_imports_against_the_layers():
    """The composition root, its engines and the run loop import down the picture only: the checks,
    the thread rule and the other modules beside the layers take values, not an engine; the run
    loop does not read runs back through results/ (the run directory's names are rundir.py's)."""
    graph = import_graph(SRC)
    assert {m for layer in LAYERS for m in layer} <= set(graph)
    assert against_the_layers(graph) == []
    graph["fedpd.checks"].add("fedpd.engines")  # what the rule catches
    graph["fedpd.runner"].add("fedpd.results.runs")
    graph["fedpd.build"].add("fedpd.simulation")
    assert against_the_layers(graph) == ["fedpd.build -> fedpd.simulation", "fedpd.checks -> fedpd.engines",
                                         "fedpd.runner -> fedpd.results.runs"]


def test_the_checker_finds_a_cycle_through_a_lazy_relative_import(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.sub import b\n",
        "sub/__init__.py": "",
        "sub/b.py": "import os\n\ndef f():\n    from ..c import g\n    return g\n",
        "c.py": "def g():\n    from . import a\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"} and graph["pkg.a"] == {"pkg.sub.b"}
    cycle = find_cycle(graph)
    assert cycle[0] == cycle[-1] and set(cycle) == {"pkg.a", "pkg.sub.b", "pkg.c"}


def test_the_checker_passes_a_package_without_a_cycle(tmp_path):
    pkg = write_package(tmp_path, {
        "__init__.py": "from pkg.a import f\n",  # a package __init__ importing its own modules is no cycle
        "a.py": "from pkg.b import g\nfrom pkg import b\n\ndef f():\n    import pkg.c.d\n",
        "b.py": "import numpy\n\ndef g():\n    pass\n",
        "c/__init__.py": "",
        "c/d.py": "from ..b import g\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.b", "pkg.c.d"} and graph["pkg.c.d"] == {"pkg.b"}
    assert find_cycle(graph) == []


def test_the_benchmark_scripts_have_no_import_cycle():
    """benchmarks/ is a folder of scripts that import each other by their bare names (the folder
    is on sys.path when one runs): flower_lenet_app.py and parallel_clients.py did, both ways;
    the LeNet workload they share is benchmarks/lenet_workload.py."""
    root = SRC.parents[1] / "benchmarks"
    scripts = {path.stem: path for path in root.glob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in scripts}
    for name, path in scripts.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                continue
            graph[name] |= {t.partition(".")[0] for t in targets if t.partition(".")[0] in scripts} - {name}
    assert "lenet_workload" in graph["flower_lenet_app"] and "flower_lenet_app" in graph["parallel_clients"]
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)
