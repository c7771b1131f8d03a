"""Every number a hand-written reading quotes agrees with the records.

A report folder docs/reproductions/NAME/ with a ``records/`` folder has a README.md generated from
those records, but for its section "## Reading" (up to "## Files"), which is hand-written
(reproduce/readings/NAME.md). tests/reproduce/test_run_records.py checks the generated part; this test checks
that every number the reading quotes is one the generated part of the README (tables, claims, budget)
or results.csv holds, at the precision the reading writes it.

The rule, for each number r the reading writes (signed: "+0.25", "−3", "-1e-8"; a range "a–b", "a-b" or
"a to b" is two numbers; "log10", "x0", "fedpd_fig2" are words, not numbers):

1. **Match.** r matches a generated number g when |g − r| ≤ half a unit of r's last written digit,
   i.e. g rounded to r's decimals (plain form) or significant digits (form "2.3e-15") is r:
   "0.49" matches 4.862e-01, "14.5" matches +14.47, "2e-15" matches 2.3e-15, "500" matches 500 only.
   Signs matter: "0.25" does not match -0.25 ("+0.25" and "0.25" are the same number). A percentage
   "81.2 %" also matches g = 0.812 (results.csv holds fractions). The generated numbers are those of
   the README outside the reading and every numeric cell of results.csv.
2. **Exempt: the experiment's settings.** r is exempt when it equals (exactly, as written) a numeric
   value of some record's config, the number of records or the number of seeds: "500 rounds",
   "p = 0.5", "20 clients", "10 seeds" state the experiment, they are not its results.
3. **Exempt: structure.** Removed before numbers are read: inline code (`...`), dates (2026-11-26,
   10:03), references (§3, eq. (10), Fig. 2, Table 1, Alg. 2, relations (11)–(14), any "(n)" of an
   integer alone) and years (integers 1900–2099 written without a decimal point).

Anything else that does not match fails the test, naming the number and its context; a number the
reading derives by hand (a ratio, a difference) must be written so that it is exempt, or the report
must print it.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pytest

from fedpd.reproduce import records

from helpers import ROOT

REPORTS = ROOT / "docs" / "reproductions"
FOLDERS = sorted(p.parent for p in REPORTS.glob("*/records") if p.is_dir())

# a number: optional sign glued to it, digits, decimals, exponent; not inside a word ("log10", "x0")
NUMBER = re.compile(r"(?<![\w.])([+\-−]?)(\d+)(?:\.(\d+))?(?:e([+\-−]?\d+))?(?![\w])(\s*%)?")
STRUCTURE = [
    r"`[^`]*`",                                         # inline code: identifiers, config keys
    r"\d{4}-\d\d-\d\d|\b\d\d:\d\d\b",                   # dates and times
    r"(?:§|\b(?:[Ee]qs?|Figs?|Figure|Tables?|Alg|Algorithm|Sections?|Sec|Theorem|Lemma|Prop|"
    r"Corollary|Assumption|relations?)\.?\s*)\(?\d+(?:\.\d+)*\)?",  # §3, eq. (10), Fig. 2, Alg. 2
    r"\(\d+\)",                                         # (11), (14): equation numbers
    r"(?<![\w.\-−])(?:19|20)\d\d(?![\w.])",             # years
]


def reading_and_generated(readme: str) -> tuple[str, str]:
    """The README's section "## Reading" (up to "## Files" or the end) and the rest of it."""
    m = re.search(r"^## Reading\n(.*?)(?=^## Files\b|\Z)", readme, re.S | re.M)
    return (m.group(1), readme[: m.start()] + readme[m.end():]) if m else ("", readme)


def numbers(text: str) -> list[tuple[float, float, bool, str]]:
    """(value, half a unit of the last written digit, is a percentage, context) of each number."""
    out = []
    for m in NUMBER.finditer(text):
        sign, whole, frac, exp, pct = m.groups()
        frac, exp = frac or "", int((exp or "0").replace("−", "-"))
        value = float(f"{whole}.{frac or 0}e{exp}") * (-1 if sign in "-−" and sign else 1)
        half = 0.5 * 10.0 ** (exp - len(frac))
        context = text[max(0, m.start() - 30): m.end() + 10].replace("\n", " ")
        out.append((value, half, bool(pct), context))
    return out


def values_of(tree) -> set[float]:
    """Every numeric leaf of a config (nested dicts and lists; booleans are not numbers)."""
    if isinstance(tree, dict):
        return set().union(*(values_of(v) for v in tree.values()))
    if isinstance(tree, (list, tuple)):
        return set().union(*(values_of(v) for v in tree))
    return {float(tree)} if isinstance(tree, (int, float)) and not isinstance(tree, bool) else set()


def unmatched(reading: str, generated: list[float], settings: set[float]) -> list[str]:
    """The numbers of ``reading`` that match none of ``generated`` and are not exempt (rules above)."""
    for pattern in STRUCTURE:
        reading = re.sub(pattern, " ", reading)
    bad = []
    for value, half, pct, context in numbers(reading):
        if value in settings:
            continue
        candidates = generated + ([100 * g for g in generated] if pct else [])
        if not any(abs(g - value) <= half * (1 + 1e-9) for g in candidates):  # signed: -0.25 is 0.5 from 0.25
            bad.append(f"{value:g} in '...{context}...'")
    return bad


def csv_values(path: Path) -> list[float]:
    out = []
    if path.is_file():
        for row in csv.reader(path.read_text().splitlines()):
            for cell in row:
                try:
                    out.append(float(cell))
                except ValueError:
                    pass
    return [v for v in out if math.isfinite(v)]


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_every_number_of_the_reading_is_in_the_records(folder):
    reading, generated = reading_and_generated((folder / "README.md").read_text())
    held = records.load(folder / "records")
    assert held, f"{folder}/records holds no record"
    settings = set().union(*(values_of(r.config) for r in held.values()))
    settings |= {float(len(held)), float(len({r.seed for r in held.values()}))}
    known = [v for v, *_ in numbers(generated)] + csv_values(folder / "results.csv")
    bad = unmatched(reading, known, settings)
    assert not bad, f"{folder.name}: the reading quotes numbers the report does not hold:\n  " + "\n  ".join(bad)


def test_a_folder_with_records_is_checked():
    assert REPORTS / "feddyn_fedpd" in FOLDERS  # the test applies to every folder with records/


GENERATED = """| setting | largest | last |
|---|---|---|
| a | 4.862e-01 ± 1.8e-01 | 2.3e-15 |
claim: difference = +14.47, 99 % CI [14.28, 14.66]; step -0.25; accuracy 0.8123; spread 0.0094–0.016
"""


def _check(text: str) -> list[str]:
    generated = [v for v, *_ in numbers(GENERATED)]
    return unmatched(text, generated, settings={500.0, 0.5, 20.0})


def test_the_matcher_passes_correctly_rounded_numbers():
    ok = ("After 500 rounds with p = 0.5 on 20 clients (§3, eq. (10), Fig. 2, 2026-11-26, Zhang 2021) "
          "the distance is 0.49 (4.9e-1), within 2e-15 and 2.3e-15, 14.5 to 14.7 orders above, "
          "+14.47; a step of −0.25; accuracy 81.2 % or 81 %; spread 0.009–0.016; `fedpd_fig2`, log10, x0.")
    assert _check(ok) == []


@pytest.mark.parametrize("wrong", [
    "the distance is 0.48",        # 0.4862 rounds to 0.49
    "within 2.4e-15",              # 2.3e-15
    "14.5 to 14.8 orders",         # the range's second end: 14.66 rounds to 14.7
    "a step of +0.25",             # signs matter: the step is -0.25
    "accuracy 81.3 %",             # 0.8123 is 81.2 %
    "after 400 rounds",            # not a setting, not a result
    "0.009-0.017",                 # a hyphen range is two numbers too
])
def test_the_matcher_fails_a_wrong_number(wrong):
    assert len(_check(wrong)) == 1, _check(wrong)


def test_settings_and_structure_are_exempt_only_as_written():
    assert _check("p = 0.5, 500 rounds, 20 clients, §4, eq. (12), Table 3, 1999") == []
    assert len(_check("p = 0.6, 501 rounds")) == 2
