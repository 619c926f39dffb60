"""Invalid topologies raise TopologyError naming the node (acceptance 4); user function
errors name the processor and the function and keep the cause; timestamps and serdes."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path
from typing import Any

import pytest

import topology
from common.errors import (
    InvalidTimestampError,
    SerializationError,
    StreamsError,
    StreamsProcessingError,
    TopologyError,
)
from streams.testing import TopologyTestDriver
from tests.topology.conftest import I, S
from topology import (
    Consumed,
    LogAndSkipOnInvalidTimestamp,
    Materialized,
    Named,
    Processor,
    StreamsBuilder,
    UsePartitionTimeOnInvalidTimestamp,
)

# -- invalid topologies -----------------------------------------------------------------


def test_unknown_store_names_the_processor() -> None:
    b = StreamsBuilder()
    b.stream("in").process(Processor, "missing-store", named="my-proc")
    with pytest.raises(TopologyError, match=r"Processor my-proc: state store 'missing-store'"):
        b.build()


def test_duplicate_node_name_is_refused() -> None:
    b = StreamsBuilder()
    s = b.stream("in")
    s.map_values(str.upper, named="upper")
    with pytest.raises(TopologyError, match="Processor upper is already added"):
        s.map_values(str.lower, named=Named.as_("upper"))


def test_topic_read_twice_and_invalid_names_are_refused() -> None:
    b = StreamsBuilder()
    b.stream("in")
    with pytest.raises(TopologyError, match="topic in is already read"):
        b.stream(["other", "in"])
    with pytest.raises(TopologyError, match="name 'bad name' is invalid"):
        b.stream("x").filter(lambda k, v: True, named="bad name")


def test_explicit_naming_required_names_the_stateful_node() -> None:
    b = StreamsBuilder({"ensure.explicit.internal.resource.naming": "true"})
    b.stream("in").group_by(lambda k, v: v).count()
    with pytest.raises(TopologyError, match=r"Invalid topology: Following changelog topic"):
        b.build()
    ok = StreamsBuilder({"ensure.explicit.internal.resource.naming": True})
    ok.stream("in").group_by(lambda k, v: v).count(Materialized.as_("counts"))
    ok.build()


def test_copartitioning_check_names_the_joining_node() -> None:
    b = StreamsBuilder()
    left, right = b.stream("left"), b.stream("right")
    merged = left.merge(right, named="join-like")
    b.graph.add_copartition_group(merged.node, b.graph.source_nodes_of(merged.node))
    t = b.build()
    t.check_copartitioning({"left": 4, "right": 4})
    with pytest.raises(
        TopologyError, match="Processor join-like: its input topics are not co-partitioned"
    ):
        t.check_copartitioning({"left": 4, "right": 2})


def test_unknown_input_topic_and_unknown_child() -> None:
    b = StreamsBuilder()
    b.stream("in").to("out")
    with (
        TopologyTestDriver(b.build(), {"application.id": "x"}) as d,
        pytest.raises(StreamsError, match="Unknown topic: nope"),
    ):
        d.create_input_topic("nope", S, S).pipe_input("k", "v")


def test_processor_without_access_to_a_store(drive: Any) -> None:
    class Peeker(Processor[Any, Any, Any, Any]):
        def init(self, context: Any) -> None:
            context.get_state_store("counts")

    b = StreamsBuilder()
    s = b.stream("in")
    s.group_by_key().count(Materialized.as_("counts"))
    s.process(Peeker, named="peeker")
    with pytest.raises(
        TopologyError, match="Processor peeker has no access to state store 'counts'"
    ):
        drive(b.build())


# -- user code errors -------------------------------------------------------------------


def parse(value: str) -> int:
    return int(value)


def test_user_function_error_names_processor_function_and_keeps_cause(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").map_values(parse).to("out")
    d = drive(b.build())
    with pytest.raises(StreamsProcessingError) as info:
        d.create_input_topic("in", S, S).pipe_input("k", "not a number")
    message = str(info.value)
    assert message.startswith(
        "processor KSTREAM-MAPVALUES-0000000001: user function 'parse' (test_errors.py:"
    )
    assert "raised ValueError: invalid literal for int()" in message
    assert isinstance(info.value.__cause__, ValueError)


def test_processor_api_error_names_the_node(drive: Any) -> None:
    class Boom(Processor[Any, Any, Any, Any]):
        def process(self, record: Any) -> None:
            raise KeyError("gone")

    b = StreamsBuilder()
    b.stream("in").process(Boom, named="boom").to("out")
    d = drive(b.build())
    with pytest.raises(
        StreamsProcessingError, match="processor boom: processor .*Boom.* raised KeyError"
    ):
        d.create_input_topic("in", S, S).pipe_input("k", "v")


def test_aggregator_and_predicate_errors(drive: Any) -> None:
    b = StreamsBuilder()
    s = b.stream("in")
    s.filter(lambda k, v: 1 / 0 > 0, named="f")
    d = drive(b.build())
    with pytest.raises(
        StreamsProcessingError,
        match=r"processor f: user function '.*<lambda>' \(test_errors.py:\d+\) raised "
        r"ZeroDivisionError",
    ):
        d.create_input_topic("in", S, S).pipe_input("k", "v")


# -- timestamps and serdes --------------------------------------------------------------


def test_negative_timestamp_fails_by_default(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").to("out")
    d = drive(b.build())
    with pytest.raises(InvalidTimestampError, match="topic=in partition=0 offset=0 has invalid"):
        d.create_input_topic("in", S, S).pipe_input("k", "v", -1)


def test_timestamp_extractors(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream(
        "skip", Consumed.with_(S, S).with_timestamp_extractor(LogAndSkipOnInvalidTimestamp())
    ).to("out")
    b.stream(
        "part", Consumed.with_(S, S).with_timestamp_extractor(UsePartitionTimeOnInvalidTimestamp())
    ).to("out")

    class FromValue:
        def extract(self, record: Any, partition_time: int) -> int:
            return int(record.value)

    b.stream("value", Consumed.with_(S, S).with_timestamp_extractor(FromValue())).to("out")
    d = drive(b.build())
    d.create_input_topic("skip", S, S).pipe_input("a", "1", -5)
    part = d.create_input_topic("part", S, S)
    part.pipe_input("b", "2", 30)
    part.pipe_input("c", "3", -1)
    d.create_input_topic("value", S, S).pipe_input("d", "77", 1)
    records = d.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.key, r.timestamp) for r in records] == [("b", 30), ("c", 30), ("d", 77)]


def test_wallclock_extractor_by_configuration(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").to("out")
    d = drive(b.build(), **{"default.timestamp.extractor": "wallclock"})
    d.create_input_topic("in", S, S).pipe_input("k", "v", 5)
    assert d.create_output_topic("out", S, S).read_record().timestamp > 1_600_000_000_000


def test_bad_input_bytes_name_the_record(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, I)).to("out")
    d = drive(b.build())
    with pytest.raises(SerializationError, match=r"topic=in partition=0 offset=0"):
        d.create_input_topic("in", S, S).pipe_input("k", "not four bytes")


def test_sink_serde_mismatch_names_the_sink(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").map_values(len).to("out")
    d = drive(b.build())
    with pytest.raises(SerializationError, match="sink KSTREAM-SINK-0000000002: cannot serialize"):
        d.create_input_topic("in", S, S).pipe_input("k", "v")


# -- the import graph (acceptance 5) ----------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    for candidate in (
        ROOT.joinpath(*parts).with_suffix(".py"),
        ROOT.joinpath(*parts, "__init__.py"),
    ):
        if candidate.is_file():
            return candidate
    return None


def test_nothing_under_topology_imports_pyspark_or_runtime() -> None:
    """Walk the project import graph from every topology module (AST, all imports)."""
    start = [m.name for m in pkgutil.walk_packages(topology.__path__, "topology.")] + ["topology"]
    seen: dict[str, str] = {}
    todo = [(m, m) for m in start]
    while todo:
        name, via = todo.pop()
        if name in seen:
            continue
        seen[name] = via
        path = _module_file(name)
        if path is None:
            continue
        for imported in _imports(path):
            top = imported.split(".")[0]
            assert top != "pyspark", f"{name} imports {imported} (reached from {via})"
            if top in {"topology", "streams", "statestores", "runtime", "common"}:
                todo.append((imported, via))
    assert not [m for m in seen if m.split(".")[0] == "runtime" and _module_file(m)], (
        "topology must not reach runtime/"
    )
    for name in start:
        importlib.import_module(name)
    assert "topology.engine.task" in seen and "streams.testing" not in seen
    assert all(not m.startswith("pyspark") for m in sys.modules if m.startswith("topology"))
