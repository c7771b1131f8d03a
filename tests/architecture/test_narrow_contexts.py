"""Rules see what messages give them. A client rule gets its own data, ids, round and streams; a
server rule the uploads, their senders' ids, the round and N. No algorithm module reads the
problem (every client's data) or the client store, except in the named evaluation path
(``evaluation_model`` and ``personal_models``), which is never part of a round."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import fedpd
from fedpd.context import ClientContext, ServerContext

ALGORITHMS = sorted((Path(fedpd.__file__).parent / "algorithms").glob("*.py"))
FORBIDDEN_MODULES = ("fedpd.problems", "fedpd.store", "fedpd.evaluation", "fedpd.runner", "fedpd.engine",
                     "fedpd.protocol")
#: attributes through which every client's data or state could be reached
FORBIDDEN_ATTRIBUTES = {"problem", "_problem", "store", "train", "test", "offsets", "engine"}
EVALUATION_PATH = {"evaluation_model", "personal_models"}


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(FORBIDDEN_MODULES):
            found.append(f"line {node.lineno}: imports {node.module}")
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: imports {a.name}" for a in node.names if a.name.startswith(FORBIDDEN_MODULES)
            ]
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name in EVALUATION_PATH:
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
                found.append(f"line {node.lineno}: {fn.name} reads .{node.attr}")
            if isinstance(node, ast.arg) and node.arg in ("problem", "store"):
                found.append(f"line {node.lineno}: {fn.name} takes {node.arg}")
    return found


@pytest.mark.parametrize("path", ALGORITHMS, ids=lambda p: p.name)
def test_algorithm_modules_read_no_other_clients_data_or_store(path):
    assert violations(path) == []


def test_the_guard_catches_a_rule_that_reads_the_problem(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from fedpd.store import MemoryStore\n"
                   "class A:\n"
                   "    def aggregate(self, server, uploads, ctx):\n"
                   "        return ctx.problem.train.sizes\n"
                   "    def personal_models(self, server, clients, problem=None):\n"
                   "        return problem.train.x\n")
    found = violations(bad)
    assert any("imports fedpd.store" in f for f in found)
    assert any("aggregate reads .problem" in f for f in found) and any("aggregate reads .train" in f for f in found)
    assert not any("personal_models" in f for f in found)  # the evaluation path may


def test_contexts_carry_only_what_a_message_gives():
    # the run's seed: a server rule's own stream (bucketing's permutation), the same a message's config gives
    assert {f.name for f in dataclasses.fields(ServerContext)} == {"ids", "round", "num_clients", "seed"}
    client = {f.name for f in dataclasses.fields(ClientContext)}
    assert client == {"ids", "round", "data", "solver", "seed", "_calls"}
