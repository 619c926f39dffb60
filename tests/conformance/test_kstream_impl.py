"""Kafka's ``KStreamImplTest``: the stream operators' behaviour scenarios (sinks, dynamic
topics, merges, pattern sources)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from common.errors import TopologyError
from tests.conformance.conftest import I, L, S
from topology import (
    Consumed,
    FixedKeyProcessor,
    Grouped,
    JoinWindows,
    Materialized,
    Produced,
    Repartitioned,
    StreamJoined,
    StreamsBuilder,
)


class Seen:
    """Kafka's ``MockApiProcessorSupplier``: every record a ``foreach`` node saw, as
    (key, value, timestamp), in order, per node."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, Any, int]] = []

    def attach(self, stream: Any) -> None:
        stream.process(lambda: _Recorder(self.records))


class _Recorder:
    def __init__(self, records: list[tuple[Any, Any, int]]) -> None:
        self.records = records

    def init(self, context: Any) -> None:
        pass

    def process(self, record: Any) -> None:
        self.records.append((record.key, record.value, record.timestamp))

    def close(self) -> None:
        pass


def test_should_send_data_to_topic_using_produced(drive: Any) -> None:
    """KStreamImplTest.shouldSendDataToTopicUsingProduced"""
    b = StreamsBuilder()
    b.stream("topic", Consumed.with_(S, S)).to("to-topic", Produced.with_(S, S))
    seen = Seen()
    seen.attach(b.stream("to-topic", Consumed.with_(S, S)))
    d = drive(b.build())
    d.create_input_topic("topic", S, S, start_timestamp=0).pipe_input("e", "f")
    assert seen.records == [("e", "f", 0)]


def test_should_send_data_to_dynamic_topics(drive: Any) -> None:
    """KStreamImplTest.shouldSendDataToDynamicTopics"""
    b = StreamsBuilder()
    b.stream("topic", Consumed.with_(S, S)).to(
        lambda k, v, context: f"{context.topic}-{k}-{v[0]}", Produced.with_(S, S)
    )
    a, other = Seen(), Seen()
    a.attach(b.stream("topic-a-v", Consumed.with_(S, S)))
    other.attach(b.stream("topic-b-v", Consumed.with_(S, S)))
    d = drive(b.build())
    topic = d.create_input_topic("topic", S, S, start_timestamp=0)
    for key, value in (("a", "v1"), ("a", "v2"), ("b", "v1")):
        topic.pipe_input(key, value)
    assert a.records == [("a", "v1", 0), ("a", "v2", 0)]
    assert other.records == [("b", "v1", 0)]


def test_should_merge_two_streams(drive: Any) -> None:
    """KStreamImplTest.shouldMergeTwoStreams"""
    b = StreamsBuilder()
    seen = Seen()
    seen.attach(b.stream("topic-1").merge(b.stream("topic-2")))
    d = drive(b.build())
    one = d.create_input_topic("topic-1", S, S, start_timestamp=0)
    two = d.create_input_topic("topic-2", S, S, start_timestamp=0)
    one.pipe_input("A", "aa")
    two.pipe_input("B", "bb")
    two.pipe_input("C", "cc")
    one.pipe_input("D", "dd")
    assert seen.records == [("A", "aa", 0), ("B", "bb", 0), ("C", "cc", 0), ("D", "dd", 0)]


def test_should_merge_multiple_streams(drive: Any) -> None:
    """KStreamImplTest.shouldMergeMultipleStreams"""
    b = StreamsBuilder()
    sources = [b.stream(f"topic-{i}") for i in range(1, 5)]
    seen = Seen()
    seen.attach(sources[0].merge(sources[1]).merge(sources[2]).merge(sources[3]))
    d = drive(b.build())
    topics = {i: d.create_input_topic(f"topic-{i}", S, S) for i in range(1, 5)}
    piped = [(1, "A", "aa", 1), (2, "B", "bb", 9), (3, "C", "cc", 2), (4, "D", "dd", 8)]
    piped += [(4, "E", "ee", 3), (3, "F", "ff", 7), (2, "G", "gg", 4), (1, "H", "hh", 6)]
    for i, key, value, ts in piped:
        topics[i].pipe_input(key, value, ts)
    assert seen.records == [(key, value, ts) for _, key, value, ts in piped]


def test_should_process_from_source_that_match_pattern(drive: Any) -> None:
    """KStreamImplTest.shouldProcessFromSourceThatMatchPattern"""
    b = StreamsBuilder()
    seen = Seen()
    seen.attach(b.stream(re.compile(r"topic-\d")))
    d = drive(b.build())
    piped = [(3, "A", "aa", 1), (4, "B", "bb", 5), (5, "C", "cc", 10), (6, "D", "dd", 8)]
    piped += [(7, "E", "ee", 3)]
    for i, key, value, ts in piped:
        d.create_input_topic(f"topic-{i}", S, S).pipe_input(key, value, ts)
    assert seen.records == [(key, value, ts) for _, key, value, ts in piped]


UNCACHED = {"statestore.cache.max.bytes": 0}


def records(d: Any, topic: str, value_serde: Any = S) -> list[tuple[Any, Any, int]]:
    return [
        (r.key, r.value, r.timestamp)
        for r in d.create_output_topic(topic, S, value_serde).read_records_to_list()
    ]


class FromValue:
    """A ``default.timestamp.extractor``: the event time is the value's number after ``@``
    (``"a@7"`` -> 7); it fails on any other value."""

    def extract(self, record: Any, partition_time: int) -> int:
        return int(record.value.split("@")[1])


EXTRACTOR = {"default.timestamp.extractor": f"{__name__}:FromValue"}


def test_should_send_data_through_repartition_topic_using_repartitioned(drive: Any) -> None:
    """KStreamImplTest.shouldSendDataThroughRepartitionTopicUsingRepartitioned"""
    b = StreamsBuilder()
    seen = Seen()
    seen.attach(b.stream("topic", Consumed.with_(S, S)).repartition(Repartitioned.with_(S, S)))
    d = drive(b.build())
    d.create_input_topic("topic", S, S, start_timestamp=0).pipe_input("a", "b")
    assert seen.records == [("a", "b", 0)]


def test_should_use_record_metadata_timestamp_extractor_with_repartition(drive: Any) -> None:
    """KStreamImplTest.shouldUseRecordMetadataTimestampExtractorWithRepartition: the
    configured extractor reads the user's topics; a repartition topic's records keep the
    timestamp they were written with (Kafka's ``FailOnInvalidTimestamp`` there)."""
    b = StreamsBuilder()
    b.stream(["topic-1", "topic-2"], Consumed.with_(S, S)).to("topic-5")
    seen = Seen()
    moved = b.stream(["topic-3", "topic-4"], Consumed.with_(S, S)).map_values(lambda v: "moved")
    seen.attach(moved.repartition(Repartitioned.as_("topic-6")))
    d = drive(b.build(), **EXTRACTOR)
    d.create_input_topic("topic-1", S, S, start_timestamp=0).pipe_input("x", "a@3")
    d.create_input_topic("topic-4", S, S, start_timestamp=0).pipe_input("k", "b@7")
    assert records(d, "topic-5") == [("x", "a@3", 3)]
    assert seen.records == [("k", "moved", 7)]


def test_should_use_record_metadata_timestamp_extractor_when_internal_repartitioning_topic_created(
    drive: Any,
) -> None:
    """KStreamImplTest.shouldUseRecordMetadataTimestampExtractorWhenInternalRepartitioningTopicCreated
    (and ...WithRetention): the join's repartition topic is read with the records'
    timestamps, not through the configured extractor."""
    b = StreamsBuilder()
    stream = b.stream("topic-1", Consumed.with_(S, S))
    day = 24 * 3600 * 1000
    windows = JoinWindows.of_time_difference_and_grace(day, 3 * day)
    stream.map(lambda k, v: (v, v.split("@")[0].upper())).join(
        stream, lambda v1, v2: f"{v1}:{v2}", windows, StreamJoined.with_(S, S, S)
    ).to("output-topic", Produced.with_(S, S))
    d = drive(b.build(), **UNCACHED, **EXTRACTOR)
    topic = d.create_input_topic("topic-1", S, S)
    topic.pipe_input("a@5", "a@5")
    assert records(d, "output-topic") == [("a@5", "A:a@5", 5)]


def test_should_propagate_repartition_flag_after_global_ktable_join(drive: Any) -> None:
    """KStreamImplTest.shouldPropagateRepartitionFlagAfterGlobalKTableJoin: a key changed
    before a global-table join is still repartitioned before the grouping after it."""
    b = StreamsBuilder()
    table = b.global_table("globalTopic", Consumed.with_(S, S))
    (
        b.stream("topic", Consumed.with_(S, S))
        .select_key(lambda k, v: v)
        .join(table, lambda k, v: k + v, lambda v1, v2: v1 + v2)
        .group_by_key()
        .count()
        .to_stream()
        .to("output", Produced.with_(S, L))
    )
    topology = b.build()
    assert re.search(r"Sink: .*\(topic: .*-repartition\)", str(topology.describe()))
    d = drive(topology, **UNCACHED)
    d.create_input_topic("globalTopic", S, S).pipe_input("vv", "G")
    d.create_input_topic("topic", S, S).pipe_input("k", "v", 1)
    assert records(d, "output", L) == [("v", 1, 1)]


def _pipe_six(d: Any, topic: str) -> list[tuple[str, str, int]]:
    piped = [("A", "0", 5), ("B", "00", 100), ("C", "000", 0), ("D", "0000", 0)]
    piped += [("A", "00000", 10), ("A", "000000", 8)]
    source = d.create_input_topic(topic, S, S)
    for key, value, ts in piped:
        source.pipe_input(key, value, ts)
    return piped


def test_should_not_materialized_ktable_from_kstream(drive: Any) -> None:
    """KStreamImplTest.shouldNotMaterializedKTableFromKStream: ``to_table`` without a store
    forwards every update; nothing is stored."""
    b = StreamsBuilder()
    b.stream("input", Consumed.with_(S, S)).to_table().to_stream().to("output")
    topology = b.build()
    assert "KSTREAM-TOTABLE-0000000001 (stores: [])" in str(topology.describe())
    assert not topology.stores
    d = drive(topology)
    assert records(d, "output") == [] and _pipe_six(d, "input")
    assert [(k, len(v), ts) for k, v, ts in records(d, "output")] == [
        ("A", 1, 5), ("B", 2, 100), ("C", 3, 0), ("D", 4, 0), ("A", 5, 10), ("A", 6, 8),
    ]  # fmt: skip


class Length(FixedKeyProcessor[str, str, int]):
    def process(self, record: Any) -> None:
        self.context.forward(record.with_value(len(record.value)))


def test_should_process_values(drive: Any) -> None:
    """KStreamImplTest.shouldProcessValues"""
    b = StreamsBuilder()
    b.stream("input", Consumed.with_(S, S)).process_values(Length, named="fkp").to(
        "output", Produced.with_(S, I)
    )
    description = str(b.build().describe())
    assert "Processor: fkp (stores: [])\n      --> KSTREAM-SINK-0000000001" in description
    d = drive(b.build())
    piped = _pipe_six(d, "input")
    assert records(d, "output", I) == [(k, len(v), ts) for k, v, ts in piped]


def test_should_support_foreign_key_table_table_join_with_ktable_from_kstream(
    drive: Any,
) -> None:
    """KStreamImplTest.shouldSupportForeignKeyTableTableJoinWithKTableFromKStream"""
    b = StreamsBuilder()
    left = b.stream("input1", Consumed.with_(S, S)).to_table()
    right = b.stream("input2", Consumed.with_(S, S)).to_table()
    left.join(right, lambda v: v.split("|")[1], lambda v1, v2: f"({v1},{v2})").to_stream().to(
        "output"
    )
    d = drive(b.build(), **UNCACHED)
    lhs, rhs = d.create_input_topic("input1", S, S), d.create_input_topic("input2", S, S)
    out = d.create_output_topic("output", S, S)
    for key in ("rhs1", "rhs2", "rhs3"):
        rhs.pipe_input(key, key.replace("rhs", "rhsValue"))
    assert out.read_key_values_to_map() == {}
    lhs.pipe_input("lhs1", "lhsValue1|rhs1")
    lhs.pipe_input("lhs2", "lhsValue2|rhs2")
    assert out.read_key_values_to_map() == {
        "lhs1": "(lhsValue1|rhs1,rhsValue1)",
        "lhs2": "(lhsValue2|rhs2,rhsValue2)",
    }
    lhs.pipe_input("lhs3", "lhsValue3|rhs1")
    assert out.read_key_values_to_map() == {"lhs3": "(lhsValue3|rhs1,rhsValue1)"}
    lhs.pipe_input("lhs1", None)
    assert out.read_key_values_to_map() == {"lhs1": None}


def _pipe_joined(d: Any, left_topic: str, right_topic: str) -> None:
    """Kafka's rounds of the stream-table and table-table joins of ``to_table``."""
    left, right = d.create_input_topic(left_topic, S, S), d.create_input_topic(right_topic, S, S)
    out = d.create_output_topic("output", S, S)
    for key, value in (("lhs1", "rhsValue1"), ("rhs2", "rhsValue2"), ("lhs3", "rhsValue3")):
        right.pipe_input(key, value)
    assert out.read_key_values_to_map() == {}
    left.pipe_input("lhs1", "lhsValue1")
    left.pipe_input("lhs2", "lhsValue2")
    assert out.read_key_values_to_map() == {"lhs1": "lhsValue1+rhsValue1"}
    left.pipe_input("lhs3", "lhsValue3")
    assert out.read_key_values_to_map() == {"lhs3": "lhsValue3+rhsValue3"}
    left.pipe_input("lhs1", "lhsValue4")
    assert out.read_key_values_to_map() == {"lhs1": "lhsValue4+rhsValue1"}


def test_should_support_table_table_join_with_kstream_to_ktable(drive: Any) -> None:
    """KStreamImplTest.shouldSupportTableTableJoinWithKStreamToKTable"""
    b = StreamsBuilder()
    t1 = b.stream("left", Consumed.with_(S, S)).to_table()
    t2 = b.stream("right", Consumed.with_(S, S)).to_table()
    t1.join(t2, lambda v1, v2: f"{v1}+{v2}").to_stream().to("output")
    _pipe_joined(drive(b.build(), **UNCACHED), "left", "right")


def test_should_support_stream_table_join_with_kstream_to_ktable(drive: Any) -> None:
    """KStreamImplTest.shouldSupportStreamTableJoinWithKStreamToKTable"""
    b = StreamsBuilder()
    table = b.stream("tableTopic", Consumed.with_(S, S)).to_table()
    b.stream("streamTopic", Consumed.with_(S, S)).join(table, lambda v1, v2: f"{v1}+{v2}").to(
        "output"
    )
    _pipe_joined(drive(b.build(), **UNCACHED), "streamTopic", "tableTopic")


COLOURS = [("A", "green", 10), ("B", "green", 9), ("A", "blue", 12), ("C", "yellow", 15)]
COLOURS += [("D", "green", 11)]


def test_should_support_group_by_count_with_kstream_to_ktable(drive: Any) -> None:
    """KStreamImplTest.shouldSupportGroupByCountWithKStreamToKTable"""
    b = StreamsBuilder()
    (
        b.stream("input", Consumed.with_(S, S))
        .to_table()
        .group_by(lambda k, v: (v, v), Grouped.with_(S, S))
        .count()
        .to_stream()
        .to("output", Produced.with_(S, L))
    )
    d = drive(b.build(), **UNCACHED)
    topic = d.create_input_topic("input", S, S, start_timestamp=0)
    for key, value, ts in COLOURS:
        topic.pipe_input(key, value, ts)
    assert records(d, "output", L) == [
        ("green", 1, 10), ("green", 2, 10), ("green", 1, 12), ("blue", 1, 12),
        ("yellow", 1, 15), ("green", 2, 12),
    ]  # fmt: skip


def test_should_support_trigger_materialized_with_ktable_from_kstream(drive: Any) -> None:
    """KStreamImplTest.shouldSupportTriggerMaterializedWithKTableFromKStream"""
    b = StreamsBuilder()
    mat = Materialized.as_("store").with_key_serde(S).with_value_serde(I)
    (
        b.stream("input", Consumed.with_(S, S))
        .to_table()
        .map_values(lambda v: ord(v[0]) - ord("a"), mat)
        .to_stream()
        .to("output", Produced.with_(S, I))
    )
    d = drive(b.build(), **UNCACHED)
    topic = d.create_input_topic("input", S, S, start_timestamp=0)
    for key, value, ts in COLOURS:
        topic.pipe_input(key, value, ts)
    store = d.get_key_value_store("store")
    assert {k: store.get(k) for k in "ABCD"} == {"A": 1, "B": 6, "C": 24, "D": 6}
    assert records(d, "output", I) == [
        ("A", 6, 10), ("B", 6, 9), ("A", 1, 12), ("C", 24, 15), ("D", 6, 11),
    ]  # fmt: skip


def _null_argument_calls() -> list[tuple[str, Callable[[Any, Any], Any]]]:
    """(Kafka's message, a call passing None where the DSL needs it)."""
    windows = JoinWindows.of_time_difference_without_grace(100)
    return [
        ("predicate can't be None", lambda s, t: s.filter(None)),
        ("predicate can't be None", lambda s, t: s.filter_not(None)),
        ("mapper can't be None", lambda s, t: s.select_key(None)),
        ("mapper can't be None", lambda s, t: s.map(None)),
        ("mapper can't be None", lambda s, t: s.map_values(None)),
        ("mapper can't be None", lambda s, t: s.map_values(None, with_key=True)),
        ("mapper can't be None", lambda s, t: s.flat_map(None)),
        ("mapper can't be None", lambda s, t: s.flat_map_values(None)),
        ("printed can't be None", lambda s, t: s.print(None)),
        ("action can't be None", lambda s, t: s.foreach(None)),
        ("action can't be None", lambda s, t: s.peek(None)),
        ("other can't be None", lambda s, t: s.merge(None)),
        ("topic can't be None", lambda s, t: s.to(None)),
        ("selector can't be None", lambda s, t: s.group_by(None)),
        ("supplier can't be None", lambda s, t: s.process(None)),
        ("supplier can't be None", lambda s, t: s.process_values(None)),
        ("joiner can't be None", lambda s, t: s.join(s, None, windows)),
        ("joiner can't be None", lambda s, t: s.left_join(s, None, windows)),
        ("joiner can't be None", lambda s, t: s.outer_join(s, None, windows)),
        ("joiner can't be None", lambda s, t: s.join(t, None)),
        ("joiner can't be None", lambda s, t: s.left_join(t, None)),
        ("a stream-stream join needs JoinWindows", lambda s, t: s.join(s, str.__add__, None)),
    ]


@pytest.mark.parametrize(("message", "call"), _null_argument_calls())
def test_should_not_allow_null_arguments(drive: Any, message: str, call: Any) -> None:
    """KStreamImplTest.shouldNotAllowNull{Predicate,Mapper,Action,...}On{Filter,Map,...}:
    None where an operator needs a function, a stream or a topic is refused when the
    operator is recorded, naming the argument (Java's null checks of Named, Produced and
    the like have no Python counterpart: those arguments are optional)."""
    b = StreamsBuilder()
    stream, table = b.stream("topic"), b.table("table-topic")
    with pytest.raises(TopologyError, match=message):
        call(stream, table)
