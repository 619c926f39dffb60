"""The README's examples run as pasted: every ``python`` block of the sections named here
is executed (each asserts the outputs it shows)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
#: Sections whose python blocks run without Spark or a storage root.
SECTIONS = ("## Kafka's DSL, operator for operator",)


def _blocks() -> list[tuple[str, str]]:
    text = README.read_text()
    found = []
    for heading in SECTIONS:
        start = text.index(heading + "\n")
        end = text.find("\n## ", start + len(heading))
        body = text[start : end if end >= 0 else len(text)]
        for i, code in enumerate(re.findall(r"```python\n(.*?)```", body, re.S)):
            found.append((f"{heading[3:]} #{i + 1}", code))
    return found


BLOCKS = _blocks()


def test_the_sections_have_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_a_readme_example_runs_as_pasted(where: str, code: str) -> None:
    exec(compile(code, f"README.md ({where})", "exec"), {"__name__": "readme"})
