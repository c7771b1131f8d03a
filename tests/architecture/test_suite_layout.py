"""The tests mirror the package: every test module sits in the folder of the package area it tests
(tests/defences/, tests/engines/, ...), named by the behaviour it checks, and shares code only
through the modules at tests/'s top (helpers.py, doc_blocks.py, ...), never by importing another
test module. pytest imports each test module by its file name (the default import mode; the folders
have no ``__init__.py``), so no two may share one. The slow modules tests/conftest.py schedules by
path exist, and no test or package source says which issue asked for it."""

from __future__ import annotations

import ast
import re

from helpers import ROOT, TESTS

MODULES = sorted(TESTS.rglob("test_*.py"))


def test_every_test_module_sits_in_an_area_folder_under_a_name_of_its_own():
    assert len(MODULES) > 100
    top = [p.name for p in MODULES if p.parent == TESTS]
    assert not top, f"test modules at tests/'s top (move each into its area's folder): {top}"
    names = [p.name for p in MODULES]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
    assert not list(TESTS.rglob("__init__.py"))  # the file-name import mode: no packages below tests/


def test_no_test_module_imports_another():
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported = [node.module]
            elif isinstance(node, ast.Import):
                imported = [a.name for a in node.names]
            else:
                continue
            assert not any(m.split(".")[-1].startswith("test_") or m.startswith("tests") for m in imported), \
                f"{path.relative_to(ROOT)} imports {imported}: share the code through a module at tests/'s top"


def test_the_modules_conftest_schedules_exist():
    """Read from tests/conftest.py's source (``import conftest`` may find another folder's)."""
    tree = ast.parse((TESTS / "conftest.py").read_text())
    lists = {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name) and t.id in ("RAY_MODULES", "SPLIT_MODULES", "LONGEST")}
    assert len(lists) == 3, lists
    named = [m for names in lists.values() for m in names]
    missing = [m for m in named if not (TESTS / m).is_file()]
    assert not missing, f"tests/conftest.py schedules modules that are not there: {missing}"


def test_no_issue_numbers_in_the_tests_or_the_package():
    said = re.compile(r"\b[Ii]ssues? \d+")
    files = [p for root in (TESTS, ROOT / "src" / "fedpd") for p in sorted(root.rglob("*.py"))]
    places = [f"{p.relative_to(ROOT)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
              if said.search(line)]
    assert not places, "say what is tested, not which issue asked for it: " + ", ".join(places)
