"""``KTable.suppress`` through the TopologyTestDriver: what Kafka's ``SuppressScenarioTest``
leaves out (its scenarios are in :mod:`tests.conformance.test_suppress_scenario`)."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import StreamsError, TopologyError
from tests.topology.conftest import L, S
from topology import Consumed, Grouped, Materialized, Produced, StreamsBuilder
from topology.dsl.suppress import BufferConfig, Suppressed


def _records(d: Any, topic: str) -> list[tuple[Any, Any, int]]:
    records = d.create_output_topic(topic, S, L).read_records_to_list()
    return [(r.key, r.value, r.timestamp) for r in records]


def _table_counts(suppressed: Suppressed) -> StreamsBuilder:
    b = StreamsBuilder()
    counts = (
        b.table(
            "input",
            Consumed.with_(S, S),
            materialized=Materialized.with_(S, S).with_caching_disabled().with_logging_disabled(),
        )
        .group_by(lambda k, v: (v, k), Grouped.with_(S, S))
        .count()
    )
    counts.suppress(suppressed).to_stream().to("output-suppressed", Produced.with_(S, L))
    return b


def test_until_time_limit_emits_a_keys_latest_update_after_the_limit(drive: Any) -> None:
    d = drive(_table_counts(Suppressed.until_time_limit(2, BufferConfig.unbounded())).build())
    i = d.create_input_topic("input", S, S)
    i.pipe_input("k1", "v1", 0)
    i.pipe_input("k1", "v2", 1)
    i.pipe_input("k2", "v1", 2)
    assert _records(d, "output-suppressed") == [("v1", 1, 2)]
    i.pipe_input("tick", "tick", 3)  # stream time 3: v2 (first buffered at 1) is due
    assert _records(d, "output-suppressed") == [("v2", 1, 1)]
    i.pipe_input("tick", "tick", 4)  # tick was first buffered at 3: not yet
    assert _records(d, "output-suppressed") == []


def test_record_limit_emits_early_when_full(drive: Any) -> None:
    config = BufferConfig.max_records(1).emit_early_when_full()
    d = drive(_table_counts(Suppressed.until_time_limit(1 << 62, config)).build())
    i = d.create_input_topic("input", S, S)
    i.pipe_input("k1", "v1", 0)
    i.pipe_input("k1", "v2", 1)
    i.pipe_input("k2", "v1", 2)
    # consecutive updates to v1 are suppressed into the latter; the last stays buffered
    assert _records(d, "output-suppressed") == [("v1", 0, 1), ("v2", 1, 1)]
    i.pipe_input("x", "x", 3)
    assert _records(d, "output-suppressed") == [("v1", 1, 2)]


def test_shut_down_when_full_raises(drive: Any) -> None:
    config = BufferConfig.max_records(1).shut_down_when_full()
    d = drive(_table_counts(Suppressed.until_time_limit(1 << 62, config).with_name("sup")).build())
    i = d.create_input_topic("input", S, S)
    i.pipe_input("k1", "v1", 0)
    with pytest.raises(StreamsError, match=r"sup buffer exceeded its max capacity.*\[2/1\]"):
        i.pipe_input("k2", "v2", 1)


def test_byte_limit_emits_early(drive: Any) -> None:
    config = BufferConfig.max_bytes(1)
    d = drive(_table_counts(Suppressed.until_time_limit(1000, config)).build())
    d.create_input_topic("input", S, S).pipe_input("k1", "v1", 0)
    assert _records(d, "output-suppressed") == [("v1", 1, 0)]


def test_named_suppression_store_and_generated_names() -> None:
    b = _table_counts(Suppressed.until_time_limit(10, BufferConfig.unbounded()).with_name("sup"))
    assert "sup" in b.graph.nodes
    assert "sup-store" in b.graph.stores
    generated = _table_counts(Suppressed.until_time_limit(10, BufferConfig.unbounded()))
    assert [n for n in generated.graph.nodes if n.startswith("KTABLE-SUPPRESS-")] == [
        "KTABLE-SUPPRESS-0000000008"
    ]
    assert "KTABLE-SUPPRESS-STATE-STORE-0000000009" in generated.graph.stores


def test_until_window_closes_needs_a_windowed_table_and_a_strict_buffer() -> None:
    b = StreamsBuilder()
    table = b.table("t")
    with pytest.raises(TopologyError, match="windowed"):
        table.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    with pytest.raises(TopologyError, match="strict"):
        Suppressed.until_window_closes(BufferConfig.max_records(3))


def test_suppress_buffer_is_rebuilt_from_its_store(drive: Any) -> None:
    d = drive(_table_counts(Suppressed.until_time_limit(10, BufferConfig.unbounded())).build())
    d.create_input_topic("input", S, S).pipe_input("k1", "v1", 0)
    [(_, store)] = [
        (n, s) for n, s in d.get_all_state_stores().items() if n.startswith("KTABLE-SUPPRESS")
    ]
    [(key, value)] = list(store.all())
    assert (key, value.time, value.timestamp, value.change.new_value) == ("v1", 0, 0, 1)
