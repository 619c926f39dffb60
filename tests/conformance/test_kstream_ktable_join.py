"""Kafka's ``KStreamKTableJoinTest`` (a stream joined with a table, inner), the scenarios
without a versioned table.

A stream of integer keys ``0..3`` and values ``<prefix><key>`` at timestamp ``key``; a
table of the same keys. A table update never joins; a stream record joins the table's
value of its key at that moment, at the stream record's timestamp.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from common.errors import TopologyError
from tests.conformance.conftest import I, S
from topology import Consumed, Joined, StreamsBuilder

KEYS = (0, 1, 2, 3)


class Join:
    """``stream.<kind>(table)``, joined values ``<stream value>+<table value>``."""

    def __init__(self, drive: Any, kind: str = "join") -> None:
        builder = StreamsBuilder()
        stream = builder.stream("streamTopic", Consumed.with_(I, S))
        table = builder.table("tableTopic", Consumed.with_(I, S))
        getattr(stream, kind)(table, lambda v1, v2: f"{v1}+{v2}").to("out")
        self.topology = builder.build()
        self.driver = drive(self.topology, **{"default.key.serde": "int"})
        self.stream = self.driver.create_input_topic("streamTopic", I, S, start_timestamp=0)
        self.table = self.driver.create_input_topic("tableTopic", I, S, start_timestamp=0)
        self.out = self.driver.create_output_topic("out", I, S)

    def push_stream(self, count: int, prefix: str) -> None:
        for i in range(count):
            self.stream.pipe_input(KEYS[i], f"{prefix}{KEYS[i]}", KEYS[i])

    def push_table(self, count: int, prefix: str) -> None:
        # Kafka's test gives table records random timestamps: they never show in a result
        for i in range(count):
            self.table.pipe_input(KEYS[i], f"{prefix}{KEYS[i]}", 1_000 + 7 * i)

    def push_null_values_to_table(self) -> None:
        for i in range(2):
            self.table.pipe_input(KEYS[i], None)

    def results(self) -> list[tuple[Any, str, int]]:
        """What the join produced since the last call: (key, value, timestamp)."""
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


def test_should_require_copartitioned_streams(drive: Any) -> None:
    """KStreamKTableJoinTest.shouldRequireCopartitionedStreams"""
    topology = Join(drive).topology
    assert len(topology.copartition_groups) == 1
    with pytest.raises(TopologyError, match="streamTopic"):
        topology.check_copartitioning({"streamTopic": 2, "tableTopic": 3})
    topology.check_copartitioning({"streamTopic": 3, "tableTopic": 3})


def test_should_not_join_with_empty_table_on_stream_updates(drive: Any) -> None:
    """KStreamKTableJoinTest.shouldNotJoinWithEmptyTableOnStreamUpdates"""
    join = Join(drive)
    join.push_stream(2, "X")
    assert join.results() == []


def test_should_not_join_on_table_updates(drive: Any) -> None:
    """KStreamKTableJoinTest.shouldNotJoinOnTableUpdates"""
    join = Join(drive)
    join.push_stream(2, "X")
    assert join.results() == []
    join.push_table(2, "Y")
    assert join.results() == []
    join.push_stream(4, "X")
    assert join.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1)]
    join.push_table(4, "YY")
    assert join.results() == []
    join.push_stream(4, "X")
    assert join.results() == [
        (0, "X0+YY0", 0),
        (1, "X1+YY1", 1),
        (2, "X2+YY2", 2),
        (3, "X3+YY3", 3),
    ]
    join.push_table(4, "YYY")
    assert join.results() == []


def test_should_join_only_if_match_found_on_stream_updates(drive: Any) -> None:
    """KStreamKTableJoinTest.shouldJoinOnlyIfMatchFoundOnStreamUpdates"""
    join = Join(drive)
    join.push_table(2, "Y")
    assert join.results() == []
    join.push_stream(4, "X")
    assert join.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1)]


def test_should_clear_table_entry_on_null_value_updates(drive: Any) -> None:
    """KStreamKTableJoinTest.shouldClearTableEntryOnNullValueUpdates"""
    join = Join(drive)
    join.push_table(4, "Y")
    assert join.results() == []
    join.push_stream(4, "X")
    assert join.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1), (2, "X2+Y2", 2), (3, "X3+Y3", 3)]
    join.push_null_values_to_table()
    assert join.results() == []
    join.push_stream(4, "XX")
    assert join.results() == [(2, "XX2+Y2", 2), (3, "XX3+Y3", 3)]


@pytest.mark.parametrize(("key", "value"), [(None, "A"), (1, None)])
def test_should_log_and_meter_when_skipping_null_left_key_or_value(
    drive: Any, caplog: pytest.LogCaptureFixture, key: Any, value: Any
) -> None:
    """KStreamKTableJoinTest.shouldLogAndMeterWhenSkippingNullLeftKey and
    shouldLogAndMeterWhenSkippingNullLeftValue"""
    join = Join(drive)
    join.push_table(2, "Y")
    with caplog.at_level(logging.WARNING):
        join.stream.pipe_input(key, value, 0)
    assert join.results() == []
    assert join.driver.metrics().total("dropped-records-total") == 1
    assert any(
        "Skipping record due to null join key or value" in r.getMessage()
        and "topic=[streamTopic] partition=[0] offset=[0]" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


def rekeyed_joins(joined: tuple[Joined | None, Joined | None]) -> str:
    """The topology of Kafka's repartition-naming scenarios, described."""
    builder = StreamsBuilder()
    stream_a = builder.stream("topic", Consumed.with_(S, S))
    table_b = builder.table("topic2", Consumed.with_(S, S))
    table_c = builder.table("topic3", Consumed.with_(S, S))
    rekeyed = stream_a.map(lambda k, v: (v, k))
    for table, out, named in ((table_b, "out-one", joined[0]), (table_c, "out-two", joined[1])):
        args = (named,) if named is not None else ()
        rekeyed.join(table, lambda v1, v2: v1 + v2, *args).to(out)
    return str(builder.build().describe())


def test_should_reuse_repartition_topic_with_generated_name() -> None:
    """KStreamKTableJoinTest.shouldReuseRepartitionTopicWithGeneratedName"""
    assert rekeyed_joins((None, None)) == GENERATED


def test_should_create_repartition_topics_with_user_provided_name() -> None:
    """KStreamKTableJoinTest.shouldCreateRepartitionTopicsWithUserProvidedName"""
    joined = (Joined.with_(S, S, S, "first-join"), Joined.with_(S, S, S, "second-join"))
    assert rekeyed_joins(joined) == USER_NAMED


GENERATED = """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [topic])
      --> KSTREAM-MAP-0000000007
    Processor: KSTREAM-MAP-0000000007 (stores: [])
      --> KSTREAM-FILTER-0000000009
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-FILTER-0000000009 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- KSTREAM-MAP-0000000007
    Sink: KSTREAM-SINK-0000000008 (topic: KSTREAM-MAP-0000000007-repartition)
      <-- KSTREAM-FILTER-0000000009

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000010 (topics: [KSTREAM-MAP-0000000007-repartition])
      --> KSTREAM-JOIN-0000000011, KSTREAM-JOIN-0000000016
    Processor: KSTREAM-JOIN-0000000011 (stores: [topic2-STATE-STORE-0000000001])
      --> KSTREAM-SINK-0000000012
      <-- KSTREAM-SOURCE-0000000010
    Processor: KSTREAM-JOIN-0000000016 (stores: [topic3-STATE-STORE-0000000004])
      --> KSTREAM-SINK-0000000017
      <-- KSTREAM-SOURCE-0000000010
    Source: KSTREAM-SOURCE-0000000002 (topics: [topic2])
      --> KTABLE-SOURCE-0000000003
    Source: KSTREAM-SOURCE-0000000005 (topics: [topic3])
      --> KTABLE-SOURCE-0000000006
    Sink: KSTREAM-SINK-0000000012 (topic: out-one)
      <-- KSTREAM-JOIN-0000000011
    Sink: KSTREAM-SINK-0000000017 (topic: out-two)
      <-- KSTREAM-JOIN-0000000016
    Processor: KTABLE-SOURCE-0000000003 (stores: [topic2-STATE-STORE-0000000001])
      --> none
      <-- KSTREAM-SOURCE-0000000002
    Processor: KTABLE-SOURCE-0000000006 (stores: [topic3-STATE-STORE-0000000004])
      --> none
      <-- KSTREAM-SOURCE-0000000005

"""

USER_NAMED = """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [topic])
      --> KSTREAM-MAP-0000000007
    Processor: KSTREAM-MAP-0000000007 (stores: [])
      --> first-join-repartition-filter, second-join-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: first-join-repartition-filter (stores: [])
      --> first-join-repartition-sink
      <-- KSTREAM-MAP-0000000007
    Processor: second-join-repartition-filter (stores: [])
      --> second-join-repartition-sink
      <-- KSTREAM-MAP-0000000007
    Sink: first-join-repartition-sink (topic: first-join-repartition)
      <-- first-join-repartition-filter
    Sink: second-join-repartition-sink (topic: second-join-repartition)
      <-- second-join-repartition-filter

  Sub-topology: 1
    Source: first-join-repartition-source (topics: [first-join-repartition])
      --> first-join
    Source: KSTREAM-SOURCE-0000000002 (topics: [topic2])
      --> KTABLE-SOURCE-0000000003
    Processor: first-join (stores: [topic2-STATE-STORE-0000000001])
      --> KSTREAM-SINK-0000000012
      <-- first-join-repartition-source
    Sink: KSTREAM-SINK-0000000012 (topic: out-one)
      <-- first-join
    Processor: KTABLE-SOURCE-0000000003 (stores: [topic2-STATE-STORE-0000000001])
      --> none
      <-- KSTREAM-SOURCE-0000000002

  Sub-topology: 2
    Source: second-join-repartition-source (topics: [second-join-repartition])
      --> second-join
    Source: KSTREAM-SOURCE-0000000005 (topics: [topic3])
      --> KTABLE-SOURCE-0000000006
    Processor: second-join (stores: [topic3-STATE-STORE-0000000004])
      --> KSTREAM-SINK-0000000017
      <-- second-join-repartition-source
    Sink: KSTREAM-SINK-0000000017 (topic: out-two)
      <-- second-join
    Processor: KTABLE-SOURCE-0000000006 (stores: [topic3-STATE-STORE-0000000004])
      --> none
      <-- KSTREAM-SOURCE-0000000005

"""
