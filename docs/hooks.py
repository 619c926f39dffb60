"""The documentation build's hooks (``mkdocs.yml``): generated parts put into the pages.

A page names what goes where with an HTML comment on a line of its own:

* ``<!-- reference: config -->``, ``<!-- reference: cli -->``, ``<!-- reference: errors -->``,
  ``<!-- reference: api -->``: the references :mod:`streams.reference` generates from the
  code;
* ``<!-- picture: examples/wordcount.py -->``: the picture of a topology file's topology
  (``streams-eos describe FILE --format svg``), drawn into the page; a name that a block
  of the page was given (``<!-- file: NAME -->`` before its fence) is that block.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from streams import reference
from streams.cli.describe import describe_file

ROOT = Path(__file__).resolve().parents[1]
_MARKER = re.compile(r"^<!-- (reference|picture): ([\w./-]+) -->$", re.MULTILINE)
_FILE = re.compile(r"^<!-- file: ([\w./-]+) -->\n```python\n(.*?)```", re.MULTILINE | re.S)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each marker of the page with what it names."""
    with tempfile.TemporaryDirectory() as here:
        for name, code in _FILE.findall(markdown):
            (Path(here) / name).write_text(code)
        return _MARKER.sub(lambda m: generated(m.group(1), m.group(2), Path(here)), markdown)


def generated(kind: str, name: str, page_files: Path) -> str:
    """What the marker ``<!-- kind: name -->`` stands for (``page_files``: the files the
    page's blocks were given)."""
    if kind == "reference":
        makers = {
            "config": reference.config_markdown,
            "cli": reference.cli_markdown,
            "errors": reference.errors_markdown,
            "api": reference.api_markdown,
        }
        if name not in makers:
            raise ValueError(f"no reference named {name!r} (one of {', '.join(makers)})")
        return makers[name]()
    path = page_files / name if (page_files / name).is_file() else ROOT / name
    return picture_html(path)


def picture_html(path: Path) -> str:
    """The SVG picture of the topology file at ``path``, in a block of its own."""
    svg = describe_file(str(path), "svg")
    return f'<div class="topology-picture" markdown="0">\n{svg}</div>\n'
