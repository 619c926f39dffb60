"""streams-eos run / describe: loading a topology file, configuration, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.cli.run import build_config, load_topology_file
from streams.errors import ConfigError
from tests.clitools import cli

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "wordcount.py")


def test_describe_prints_the_topology_of_a_file(root: str) -> None:
    result = cli(root, "describe", EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Topologies:\n   Sub-topology: 0\n")
    assert "Sink: KSTREAM-SINK-0000000008 (topic: word-counts-out)" in result.stdout


def test_a_file_without_build_topology_is_refused_with_what_to_do(
    root: str, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("X = 1\n")
    result = cli(root, "describe", str(bad))
    assert result.returncode == 1
    assert "defines no build_topology() function" in result.stderr
    missing = cli(root, "run", str(tmp_path / "nope.py"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_config_layers_file_then_properties_then_flags(tmp_path: Path) -> None:
    module = load_topology_file(EXAMPLE)
    props = tmp_path / "app.properties"
    props.write_text("commit.interval.ms=500\nnum.stream.threads=1\n")
    config = build_config(
        module,
        root=str(tmp_path),
        properties=str(props),
        overrides=["commit.interval.ms=250"],
    )
    assert config.application_id == "wordcount"  # from the file's CONFIG
    assert config.processing_guarantee == "exactly_once_v2"
    assert config.commit_interval_ms == 250  # --config wins over the properties file
    assert config.topics_root == str(tmp_path)
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        build_config(module, root=None, properties=None, overrides=["oops"])
