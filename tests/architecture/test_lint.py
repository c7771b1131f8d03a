"""The project's lint rule (pyproject.toml's [tool.ruff]: pycodestyle and pyflakes, lines of at most
120 characters) holds over the package, the tests and the benchmarks, so the README's test command
and .ci/run fail on a violation."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from helpers import ROOT


def test_ruff_check_passes_over_the_package_the_tests_and_the_benchmarks():
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "benchmarks"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
