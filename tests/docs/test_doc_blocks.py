"""tests/doc_blocks.py finds a section's ```bash blocks, in order, and nothing else: not the
blocks of other languages, not those of the next section, and never a shell comment in a block
taken for a heading."""

from __future__ import annotations

import pytest

from doc_blocks import bash_blocks

DOC = """# Title

## 1. First
```bash
echo one
```

## 2. Second
Text.
```bash
# 1. not a heading: a comment
echo two
```
```toml
[x]
```
### 2.1 Inside
````bash
echo three
```
still three
````
## 3. Third
```bash
echo four
```
"""


def test_the_bash_blocks_of_a_section_and_its_subsections_in_order(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    assert bash_blocks(doc, "2. Second") == ["# 1. not a heading: a comment\necho two\n",
                                            "echo three\n```\nstill three\n"]
    assert bash_blocks(doc, "1.") == ["echo one\n"]
    assert bash_blocks(doc, "3. Third") == ["echo four\n"]
    with pytest.raises(LookupError, match="no heading"):
        bash_blocks(doc, "4.")
