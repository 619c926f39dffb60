"""The distribution ships every package, the default configuration and the console script."""

from __future__ import annotations

import tomllib
from pathlib import Path

import streams
from common.conf import DEFAULTS_FILE, LOG4J2_FILE

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_directory_is_listed() -> None:
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("streams", "runtime", "topology", "statestores", "common")
        for init in (ROOT / top).rglob("__init__.py")
    }
    found.add("common.conf")  # conf/ ships as common.conf
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


def test_default_configuration_files_ship() -> None:
    assert DEFAULTS_FILE.is_file() and "application.id" in DEFAULTS_FILE.read_text()
    assert LOG4J2_FILE.is_file() and "rootLogger.level" in LOG4J2_FILE.read_text()


def test_console_script_and_public_names() -> None:
    assert PYPROJECT["project"]["scripts"]["streams-eos"] == "streams.cli:main"
    for name in streams.__all__:
        assert getattr(streams, name) is not None
