"""The README and docs/ say one thing where they state a fact the code decides."""

from __future__ import annotations

import re

import pytest

from fedpd.config import RESUMABLE

from helpers import ROOT


def stated_list(doc: str) -> list[str]:
    """The keys a doc lists after the marker word "RESUMABLE:" (up to the end of the sentence)."""
    text = " ".join((ROOT / doc).read_text().split())
    found = re.findall(r"RESUMABLE: ((?:`[a-z_.]+`,? ?)+)", text)
    assert len(found) == 1, f"{doc}: expected one 'RESUMABLE: `run.…`, …' list, found {len(found)}"
    return re.findall(r"`([a-z_.]+)`", found[0])


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_the_docs_list_what_a_resume_may_change_as_the_code_does(doc):
    assert stated_list(doc) == [f"run.{k}" for k in RESUMABLE]
