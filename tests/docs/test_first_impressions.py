"""What a newcomer reads first: the README says what fedpd is before anything else and then gives
its two commands, unchanged (the second is the one .ci/run runs); the test suite's timings live
in CONTRIBUTING.md, which says where things go and how to run the quick tests; docs/README.md
says where to start and links every page of docs/."""

from __future__ import annotations

import re

import pytest

from doc_blocks import bash_blocks, clean_env, run_script
from helpers import ROOT

README = (ROOT / "README.md").read_text()
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
INDEX = ROOT / "docs" / "README.md"

#: what only a contributor needs: the suite's timings (CONTRIBUTING.md holds them)
TIMINGS = ("1 769 passed", "22½ minutes", "--cpu-times", "1 672 passed")


def test_the_readme_says_what_fedpd_is_first_then_its_two_commands():
    body = README.split("\n", 1)[1].lstrip()  # after the title
    first, rest = body.split("\n\n", 1)
    assert first.startswith("**fedpd** is a toolkit for federated optimisation"), first[:80]
    assert "```" not in first and len(first.split()) < 120
    commands = re.search(r"```bash\n(.*?)```", README, re.S).group(1).splitlines()
    assert rest.lstrip().startswith("```bash") and len(commands) == 2
    assert commands[0].endswith(".venv/bin/fedpd demo")
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("python3 -m venv")]
    assert ci == [commands[1]]  # CI runs the README's test command as written


def test_the_suite_timings_are_in_contributing_not_in_the_readme():
    text = CONTRIBUTING.read_text()
    for needle in TIMINGS:
        assert needle not in README and needle in text, needle
    assert "[CONTRIBUTING.md](CONTRIBUTING.md)" in README and "[docs/README.md](docs/README.md)" in README


def test_contributing_says_where_things_go_and_names_files_that_exist():
    text = CONTRIBUTING.read_text()
    headings = re.findall(r"^#+ (.*)$", text, re.M)
    for heading in ("Where each kind of thing goes", "What a module may import", "Tests", "The suite's timings"):
        assert heading in headings, heading
    for path in re.findall(r"`((?:src|tests|benchmarks|examples|docs)/[\w./]*)`", text):
        assert (ROOT / path).exists(), path
    for name in re.findall(r"`(\w+\.py)`", text):  # a module named bare is one of the package's
        assert list((ROOT / "src" / "fedpd").rglob(name)) or (ROOT / "tests" / name).exists(), name
    assert "docs/architecture.md" in text and "tests/architecture/test_import_graph.py" in text


def test_contributings_quick_test_command_runs_as_written(tmp_path):
    if not (ROOT / ".venv" / "bin" / "python").is_file():
        pytest.skip("the command names .venv/bin/python: this checkout has no .venv (the README's commands make it)")
    [block] = [b for b in bash_blocks(CONTRIBUTING, "Tests") if "-n 0" in b]
    done = run_script(block, ROOT, clean_env(tmp_path / "home"))
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-2000:]


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_docs_index_links_every_page_and_every_link_resolves():
    text = INDEX.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    targets = {(INDEX.parent / link.split("#")[0]).resolve() for link in links}
    pages = [p for p in (ROOT / "docs").glob("*.md") if p != INDEX] + [ROOT / "docs" / "reproductions" / "README.md"]
    assert not [p.name for p in pages if p.resolve() not in targets], "pages the index does not link"
    for link in links:
        path, _, anchor = link.partition("#")
        target = (INDEX.parent / path).resolve()
        assert target.is_file(), link
        if anchor:
            slugs = {_slug(h) for h in re.findall(r"^#+ (.*)$", target.read_text(), re.M)}
            assert anchor in slugs, link
    for subject in ("first run", "your own data", "algorithm", "Byzantine", "differential privacy", "deploy",
                    "reproduce", "fast"):
        assert subject in text, subject
