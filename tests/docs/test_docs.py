"""The documentation (``docs/``, built by ``make docs``): its Python examples run as
pasted, its references miss no configuration key, command, option or error, and the site
builds with MkDocs' strict checks.

A page's ``python`` blocks run in order, in a directory of the page's own (its working
directory, and on ``sys.path``): a block after ``<!-- file: NAME -->`` is written there as
NAME (a topology file the next blocks import), and a block after ``<!-- not run: WHY -->``
is skipped, saying why it cannot run here (an excerpt of a larger file, a cluster's job).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streams import reference
from streams.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_BLOCK = re.compile(r"(?:<!-- (not run|file): ([^>]*?) -->\n)?```python\n(.*?)```", re.S)
PAGES = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))


def blocks(page: str) -> list[tuple[str, str, str]]:
    """The page's python blocks: (what the line before says: "", "not run" or "file", its
    argument, the code)."""
    text = (DOCS / page).read_text()
    found = _BLOCK.finditer(text)
    return [(m.group(1) or "", (m.group(2) or "").strip(), m.group(3)) for m in found]


def test_the_pages_have_examples_and_each_skipped_one_says_why() -> None:
    found = [b for page in PAGES for b in blocks(page)]
    assert len([b for b in found if not b[0]]) >= 10
    assert all(len(arg) > 5 for kind, arg, _ in found if kind == "not run")


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)])
def test_the_python_examples_of_a_page_run_as_pasted(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if any("StreamsApp(" in code for kind, _, code in blocks(page) if kind != "not run"):
        # the session's Spark first, started from the project's directory: its Python
        # workers (and the task hosts they fork) keep the directory Spark started in, and
        # later tests' topologies are imported there by module
        request.getfixturevalue("spark")
    monkeypatch.chdir(tmp_path)  # what an example writes goes there
    monkeypatch.syspath_prepend(str(tmp_path))
    for i, (kind, arg, code) in enumerate(blocks(page), 1):
        if kind == "not run":
            continue
        if kind == "file":
            (tmp_path / arg).write_text(code)
        compiled = compile(code, f"docs/{page} (block {i})", "exec")
        exec(compiled, {"__name__": f"docs_example_{i}"})


def test_every_configuration_key_has_its_meaning_in_the_reference() -> None:
    keys = reference.config_keys()
    assert len(keys) >= 50
    unplaced = [k.name for k in keys if k.name not in reference.KAFKA_ORIGIN]
    assert not unplaced, f"keys not placed in streams.reference.KAFKA_ORIGIN: {unplaced}"
    assert not set(reference.KAFKA_ORIGIN) - {k.name for k in keys}  # no stale entry
    missing = [k.name for k in keys if not k.meaning or not k.allowed]
    assert not missing, f"keys without a meaning in conf/streams-defaults.properties: {missing}"
    text = reference.config_markdown()
    assert all(f"### `{k.name}`" in text for k in keys)


def test_every_command_and_option_has_help_in_the_reference() -> None:
    commands = reference.commands()
    assert {c.name for c in commands} == set(COMMANDS)
    bare = [(c.name, flags) for c in commands for flags, _, text in c.options if not text]
    assert not bare, f"options without help: {bare}"
    assert all(c.description or c.summary for c in commands)
    text = reference.cli_markdown()
    assert all(f"### `streams-eos {c.name}`" in text for c in commands)


def test_every_public_name_is_in_the_api_reference() -> None:
    import streams  # noqa: PLC0415 - the facade, whose names are checked

    names = reference.public_names()
    assert set(names) == set(streams.__all__)
    text = reference.api_markdown()
    assert all(f"::: {module}.{name}" in text for name, module in names.items())


def test_every_error_says_what_it_means() -> None:
    errors = reference.errors()
    assert len(errors) >= 20
    assert not [name for name, text in errors if len(text) < 10]


def test_every_page_is_in_the_navigation_and_the_site_builds_strictly(tmp_path: Path) -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert not [p for p in pages if f": {p}" not in nav], "pages missing from mkdocs.yml's nav"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    page = (tmp_path / "examples" / "index.html").read_text()
    assert "<svg" in page and "word-counts-repartition" in page  # the word count's picture


def test_the_readme_is_short_its_example_builds_and_its_links_lead_somewhere() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert readme.startswith("# spark-streams-eos\n\n```bash\nmake demo")
    (example,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    build = namespace["build_topology"]
    assert callable(build)
    assert "word-counts-repartition" in str(build().describe())
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert links and all((ROOT / link).is_file() for link in links), links
