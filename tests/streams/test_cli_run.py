"""streams-eos run / describe: loading a topology file, configuration, clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import cloudpickle

from common.errors import ConfigError
from runtime.app.topology_file import build_config, generated_records, load_topology_file
from tests.clitools import cli

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "wordcount.py")


def test_describe_prints_the_topology_of_a_file(root: str) -> None:
    result = cli(root, "describe", EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Topologies:\n   Sub-topology: 0\n")
    assert "Sink: KSTREAM-SINK-0000000008 (topic: word-counts-out)" in result.stdout
    # then how its records run under the file's configuration
    assert "\n\nProcessing (processing.engine=columnar):\n  Sub-topology: 0\n" in result.stdout
    assert "word-counts-repartition-sink: batch, combined per key on Spark" in result.stdout
    record = cli(root, "describe", EXAMPLE, "--config", "processing.engine=record")
    assert record.stdout.endswith(
        "Processing (processing.engine=record):\n  every record one at a time\n"
    )


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


def test_generate_may_give_timestamps_json_values_and_several_topics(tmp_path: Path) -> None:
    file = tmp_path / "gen.py"
    file.write_text(
        "def build_topology():\n"
        "    raise NotImplementedError\n"
        "def generate(n):\n"
        "    return {'table': [('k', {'b': 1, 'a': None}, 5)], 'stream': [('k', 'v')] * n}\n"
    )
    records = generated_records(load_topology_file(str(file)), 2)
    assert list(records) == ["table", "stream"]  # produced in this order
    assert records["table"] == [(b"k", b'{"a":null,"b":1}', 5)]
    assert records["stream"] == [(b"k", b"v", None), (b"k", b"v", None)]


def test_generate_without_input_or_with_bad_records_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "gen.py"
    file.write_text(
        "def build_topology():\n    raise NotImplementedError\n"
        "def generate(n):\n    return [('k', 'v')]\n"
    )
    module = load_topology_file(str(file))
    with pytest.raises(ConfigError, match="define INPUT"):
        generated_records(module, 1)
    module.__dict__["INPUT"] = "in"
    assert generated_records(module, 1) == {"in": [(b"k", b"v", None)]}
    module.__dict__["generate"] = lambda n: ["kv"]
    with pytest.raises(ConfigError, match=r"expected \(key, value\) or"):
        generated_records(module, 1)


def test_a_topology_file_ships_by_value_to_workers_that_cannot_import_it(
    tmp_path: Path,
) -> None:
    flash_sale = str(Path(EXAMPLE).with_name("flash_sale.py"))
    module = load_topology_file(flash_sale)
    pickled = tmp_path / "topology.pkl"
    pickled.write_bytes(cloudpickle.dumps(module.build_topology()))
    code = f"import pickle; pickle.loads(open({str(pickled)!r}, 'rb').read())"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


FAILING = """
from topology import StreamsBuilder

CONFIG = {"application.id": "failing", "default.key.serde": "string",
          "default.value.serde": "string", "commit.interval.ms": 100}
TOPICS = {"in": 2, "out": 2}
INPUT = "in"


def generate(n):
    return [(f"k{i}", "boom" if i == 7 else f"v{i}") for i in range(n)]


def check(value):
    if value == "boom":
        raise ValueError(f"cannot handle {value!r}")
    return value.upper()


def build_topology():
    b = StreamsBuilder()
    b.stream("in").map_values(check).to("out")
    return b.build()
"""


def test_a_run_that_fails_prints_its_error_first_and_last_and_logs_the_rest(
    root: str, tmp_path: Path
) -> None:
    """A log-and-fail stop: one line naming the processor, function and record error,
    first and last; the tracebacks (Python's and Spark's) are in the log file it names."""
    file = tmp_path / "failing.py"
    file.write_text(FAILING)
    state = tmp_path / "state"
    result = cli(
        root, "run", str(file), "--generate", "20", "--until-idle", "--config", f"state.dir={state}"
    )
    assert result.returncode == 1
    log_file = state / "failing" / "logs" / "streams-eos.log"
    err = [line for line in result.stderr.splitlines() if "incubator modules" not in line]
    bars = [line for line in err if line.startswith("producing to in [")]
    assert bars and "20/20 in " in bars[-1]
    error = (
        "error: processor KSTREAM-MAPVALUES-0000000001: user function 'check' "
        f"({file.name}:14) raised ValueError: cannot handle 'boom'"
    )
    assert [line for line in err if line not in bars] == [
        f"log: {log_file} (--verbose: logs on the terminal)",
        "produced 20 records to in",
        error,
        f"details (tracebacks): {log_file}",
        error,
    ], result.stderr
    logged = log_file.read_text()
    assert "Traceback" in logged and "ValueError: cannot handle 'boom'" in logged
