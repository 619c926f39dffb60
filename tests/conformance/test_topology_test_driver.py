"""Kafka's ``TopologyTestDriverTest``: the driver's order of outputs, its internal and
source topics fed back in, and punctuation.

Rewritten: the scenarios about output order, records sent back to the topology's own
topics, produced topic names, task idling, punctuation, a processor's life cycle and
record metadata, stores filled before input, global stores and clean-up on close that this
driver's API supports. Not rewritten: those about the Java API (serializers, store types,
state directories, regex source validation).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from common.errors import StreamsError
from statestores.stores import Stores
from tests.conformance.conftest import L, S
from topology import (
    Consumed,
    Materialized,
    Processor,
    Produced,
    PunctuationType,
    Record,
    StreamsBuilder,
)


class Recursive(Processor[str, str, str, str]):
    """Echoes each record to ``sink``, and first sends a ``recurse-`` copy of any record
    not already one back to the input topic (``recursiveSink``); with ``global_sink``
    every record also goes to the global topic."""

    global_sink = False

    def process(self, record: Record[str, str]) -> None:
        value = record.value or ""
        if not value.startswith("recurse-"):
            self.context.forward(record.with_value("recurse-" + value), "recursiveSink")
        self.context.forward(record, "sink")
        if self.global_sink:
            self.context.forward(record, "globalSink")


class RecursiveToGlobal(Recursive):
    global_sink = True


class GlobalPut(Processor[str, str, None, None]):
    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store("global-store")

    def process(self, record: Record[str, str]) -> None:
        self.store.put(record.key, record.value)


def _recursive(processor: type[Recursive]) -> StreamsBuilder:
    b = StreamsBuilder()
    stream = b.stream("input", Consumed.with_(S, S)).process(processor, named="recursive")
    stream.to("input", Produced.with_(S, S).with_name("recursiveSink"))
    stream.to("output", Produced.with_(S, S).with_name("sink"))
    if processor.global_sink:
        stream.to("global-topic", Produced.with_(S, S).with_name("globalSink"))
    return b


def test_should_enqueue_later_outputs_after_earlier_ones(drive: Any) -> None:
    """TopologyTestDriverTest.shouldEnqueueLaterOutputsAfterEarlierOnes"""
    d = drive(_recursive(Recursive).build())
    d.create_input_topic("input", S, S).pipe_input("B", "beta")
    # the echo of the input first, then the record the topology sent back to itself
    output = d.create_output_topic("output", S, S).read_key_values_to_list()
    assert output == [("B", "beta"), ("B", "recurse-beta")]


def test_should_apply_global_updates_correctly_in_recursive_topologies(drive: Any) -> None:
    """TopologyTestDriverTest.shouldApplyGlobalUpdatesCorrectlyInRecursiveTopologies"""
    b = _recursive(RecursiveToGlobal)
    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("global-store"), S, S)
    b.add_global_store(store.with_logging_disabled(), "global-topic", GlobalPut)
    d = drive(b.build())
    d.create_input_topic("input", S, S).pipe_input("A", "alpha")
    assert d.get_key_value_store("global-store").get("A") == "recurse-alpha"  # the last update
    events = d.create_output_topic("global-topic", S, S).read_key_values_to_list()
    assert events == [("A", "alpha"), ("A", "recurse-alpha")]


def test_should_forward_records_from_subtopology_to_subtopology(drive: Any) -> None:
    """TopologyTestDriverTest.shouldForwardRecordsFromSubtopologyToSubtopology"""
    b = StreamsBuilder()
    b.stream("source-topic-1", Consumed.with_(S, S)).to("sink-topic-1", Produced.with_(S, S))
    b.stream("sink-topic-1", Consumed.with_(S, S)).to("sink-topic-2", Produced.with_(S, S))
    d = drive(b.build())
    d.create_input_topic("source-topic-1", S, S).pipe_input("key1", "value1")
    for topic in ("sink-topic-1", "sink-topic-2"):
        assert d.create_output_topic(topic, S, S).read_key_value() == ("key1", "value1")


def test_should_capture_sink_topic_names_if_written_into(drive: Any) -> None:
    """TopologyTestDriverTest.shouldCaptureSinkTopicNamesIfWrittenInto"""
    b = StreamsBuilder()
    b.stream("source-topic-1", Consumed.with_(S, S)).to("sink-topic-1", Produced.with_(S, S))
    d = drive(b.build())
    assert d.producer_topics() == set()
    d.create_input_topic("source-topic-1", S, S).pipe_input("key1", "value1")
    assert "sink-topic-1" in d.producer_topics()


def test_should_capture_internal_topic_names_if_written_into(drive: Any) -> None:
    """TopologyTestDriverTest.shouldCaptureInternalTopicNamesIfWrittenInto"""
    b = StreamsBuilder()
    counts = (
        b.stream("source-topic-1", Consumed.with_(S, S))
        .select_key(lambda k, v: v)
        .group_by_key()
        .count(Materialized.as_("table1"))
    )
    b.table("source-topic-2", Consumed.with_(S, S), Materialized.as_("table2")).join(
        counts, lambda v: v, lambda v1, v2: v2, named="join"
    )
    d = drive(b.build())
    assert d.producer_topics() == set()
    d.create_input_topic("source-topic-1", S, S).pipe_input("key1", "value1")
    assert d.producer_topics() == {"app-table1-repartition", "app-table1-changelog"}
    d.create_input_topic("source-topic-2", S, S).pipe_input("key1", "value1")
    assert d.producer_topics() == {
        "app-table1-repartition",
        "app-table1-changelog",
        "app-table2-changelog",
        "app-join-subscription-registration-topic",
        "app-join-subscription-store-changelog",
        "app-join-subscription-response-topic",
    }


def test_should_capture_global_topic_name_if_written_into(drive: Any) -> None:
    """TopologyTestDriverTest.shouldCaptureGlobalTopicNameIfWrittenInto"""
    b = StreamsBuilder()
    b.global_table("source-topic-1", Consumed.with_(S, S), Materialized.as_("globalTable"))
    b.stream("source-topic-2", Consumed.with_(S, S)).to("source-topic-1", Produced.with_(S, S))
    d = drive(b.build())
    assert d.producer_topics() == set()
    d.create_input_topic("source-topic-2", S, S).pipe_input("key1", "value1")
    assert d.producer_topics() == {"source-topic-1"}
    assert d.get_key_value_store("globalTable").get("key1") == "value1"


def test_should_throw_for_unknown_topic(drive: Any) -> None:
    """TopologyTestDriverTest.shouldThrowForUnknownTopic"""
    b = StreamsBuilder()
    b.stream("source-topic-1", Consumed.with_(S, S)).to("sink-topic-1")
    d = drive(b.build())
    with pytest.raises(StreamsError, match="Unknown topic: unknownTopic"):
        d.create_input_topic("unknownTopic", S, S).pipe_input("k", "v")


def _punctuated(kind: PunctuationType) -> tuple[StreamsBuilder, list[int]]:
    """A processor scheduling a punctuator every 10 ms of ``kind``; returns the list the
    punctuator appends its timestamps to."""
    punctuated: list[int] = []

    class Punctuating(Processor[str, str, None, None]):
        def init(self, context: Any) -> None:
            super().init(context)
            context.schedule(10, kind, punctuated.append)

        def process(self, record: Record[str, str]) -> None:
            pass

    b = StreamsBuilder()
    b.stream("source-topic-1", Consumed.with_(S, S)).process(Punctuating)
    return b, punctuated


def test_should_punctuate_on_streams_time(drive: Any) -> None:
    """TopologyTestDriverTest.shouldPunctuateOnStreamsTime"""
    b, punctuated = _punctuated(PunctuationType.STREAM_TIME)
    d = drive(b.build())
    i = d.create_input_topic("source-topic-1", S, S)
    expected: list[int] = []
    for ts, fires in (
        (42, True),
        (42, False),
        (51, True),
        (52, False),
        (61, True),
        (65, False),
        (71, True),
        (72, False),
        (95, True),
        (101, True),
        (102, False),
    ):
        i.pipe_input("key1", "value1", ts)
        expected += [ts] if fires else []
        assert punctuated == expected, ts


def test_should_punctuate_on_wall_clock_time(drive: Any) -> None:
    """TopologyTestDriverTest.shouldPunctuateOnWallClockTime"""
    b, punctuated = _punctuated(PunctuationType.WALL_CLOCK_TIME)
    d = drive(b.build(), initial_wall_clock_time_ms=0)
    expected: list[int] = []
    for advance, fires_at in ((5, None), (9, 14), (1, None), (20, 35), (5, 40)):
        d.advance_wall_clock_time(advance)
        expected += [] if fires_at is None else [fires_at]
        assert punctuated == expected, advance


def test_should_respect_task_idling(drive: Any) -> None:
    """TopologyTestDriverTest.shouldRespectTaskIdling"""
    b = StreamsBuilder()
    one = b.stream("input1", Consumed.with_(S, S))
    one.merge(b.stream("input2", Consumed.with_(S, S))).to("output", Produced.with_(S, S))
    # the wall clock never moves by itself: with an idle time, a drained input holds the
    # task back until the clock is advanced past it
    d = drive(b.build(), **{"max.task.idle.ms": 1000})
    in1, in2 = d.create_input_topic("input1", S, S), d.create_input_topic("input2", S, S)
    out = d.create_output_topic("output", S, S)
    in1.pipe_input("A", "alpha")
    d.advance_wall_clock_time(1)
    assert out.read_key_values_to_list() == []  # one input has records, for 1 ms only
    in2.pipe_input("B", "beta")
    # both inputs have records: A (the earlier) is processed; then input1 is drained
    assert out.read_key_values_to_list() == [("A", "alpha")]
    d.advance_wall_clock_time(1000)  # the idle time has passed: B is processed
    assert out.read_key_values_to_list() == [("B", "beta")]


def _recorder(
    seen: list[tuple[str | None, str | None, int | None]],
) -> type[Processor[Any, Any, Any, Any]]:
    class Recording(Processor[str, str, None, None]):
        def process(self, record: Record[str, str]) -> None:
            seen.append((self.context.topic, record.key, self.context.offset))

    return Recording


def test_should_process_from_sources_that_match_multiple_pattern(drive: Any) -> None:
    """TopologyTestDriverTest.shouldProcessFromSourcesThatMatchMultiplePattern"""
    first: list[tuple[str | None, str | None, int | None]] = []
    second: list[tuple[str | None, str | None, int | None]] = []
    b = StreamsBuilder()
    b.stream(re.compile(r"source-topic-\d"), Consumed.with_(S, S)).process(_recorder(first))
    b.stream(re.compile(r"source-topic-[A-Z]"), Consumed.with_(S, S)).process(_recorder(second))
    d = drive(b.build())
    d.create_input_topic("source-topic-1", S, S).pipe_input("key1", "value1", 1)
    assert (first, second) == ([("source-topic-1", "key1", 0)], [])
    d.create_input_topic("source-topic-Z", S, S).pipe_input("key2", "value2", 2)
    assert (first, second) == ([("source-topic-1", "key1", 0)], [("source-topic-Z", "key2", 0)])


def test_should_process_from_source_that_match_pattern(drive: Any) -> None:
    """TopologyTestDriverTest.shouldProcessFromSourceThatMatchPattern"""
    b = StreamsBuilder()
    b.stream(re.compile(r"source-topic-\d"), Consumed.with_(S, S)).to("sink-topic-1")
    d = drive(b.build())
    d.create_input_topic("source-topic-1", S, S).pipe_input("key1", "value1")
    assert d.create_output_topic("sink-topic-1", S, S).read_key_value() == ("key1", "value1")


class CustomMaxAggregator(Processor[str, int, str, int]):
    """Kafka's ``CustomMaxAggregator``: keeps each key's largest value in ``aggStore`` and
    forwards the whole store every minute of wall-clock time and every 10 s of stream
    time."""

    def init(self, context: Any) -> None:
        super().init(context)
        context.schedule(60000, PunctuationType.WALL_CLOCK_TIME, self.flush_store)
        context.schedule(10000, PunctuationType.STREAM_TIME, self.flush_store)
        self.store = context.get_state_store("aggStore")

    def process(self, record: Record[str, int]) -> None:
        old = self.store.get(record.key)
        if old is None or record.value > old:
            self.store.put(record.key, record.value)

    def flush_store(self, timestamp: int) -> None:
        for key, value in list(self.store.all()):
            self.context.forward(Record(key, value, timestamp))


def _max_aggregator(drive: Any, *, caching: bool = False) -> tuple[Any, Any, Any, Any]:
    """Kafka's ``setup()``: the aggregator over ``input-topic``, ``a`` = 21 put in its store
    before any input; returns the driver, the input and output topics and the store."""
    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("aggStore"), S, L)
    b = StreamsBuilder().add_state_store(store.with_caching_enabled() if caching else store)
    b.stream("input-topic", Consumed.with_(S, L)).process(CustomMaxAggregator, "aggStore").to(
        "result-topic", Produced.with_(S, L)
    )
    d = drive(b.build(), initial_wall_clock_time_ms=0)
    kv = d.get_key_value_store("aggStore")
    kv.put("a", 21)
    return (
        d,
        d.create_input_topic("input-topic", S, L),
        d.create_output_topic("result-topic", S, L),
        kv,
    )


def test_should_flush_store_for_first_input(drive: Any) -> None:
    """TopologyTestDriverTest.shouldFlushStoreForFirstInput"""
    _, i, o, _ = _max_aggregator(drive)
    i.pipe_input("a", 1, 9999)
    assert o.read_key_value() == ("a", 21)
    assert o.is_empty()


@pytest.mark.parametrize(("value", "stored"), [(1, 21), (42, 42)])
def test_should_not_update_store_for_smaller_value_and_should_for_larger(
    drive: Any, value: int, stored: int
) -> None:
    """TopologyTestDriverTest.shouldNotUpdateStoreForSmallerValue and
    shouldNotUpdateStoreForLargerValue (which, despite its name, updates it)"""
    _, i, o, kv = _max_aggregator(drive)
    i.pipe_input("a", value, 9999)
    assert kv.get("a") == stored
    assert o.read_key_value() == ("a", stored)
    assert o.is_empty()


def test_should_update_store_for_new_key(drive: Any) -> None:
    """TopologyTestDriverTest.shouldUpdateStoreForNewKey"""
    _, i, o, kv = _max_aggregator(drive)
    i.pipe_input("b", 21, 9999)
    assert kv.get("b") == 21
    assert o.read_key_values_to_list() == [("a", 21), ("b", 21)]


def test_should_punctuate_if_even_time_advances(drive: Any) -> None:
    """TopologyTestDriverTest.shouldPunctuateIfEvenTimeAdvances"""
    _, i, o, _ = _max_aggregator(drive)
    i.pipe_input("a", 1, 9999)
    assert o.read_key_value() == ("a", 21)
    i.pipe_input("a", 1, 9999)
    assert o.is_empty()
    i.pipe_input("a", 1, 10000)
    assert o.read_key_value() == ("a", 21)
    assert o.is_empty()


def test_should_punctuate_if_wall_clock_time_advances(drive: Any) -> None:
    """TopologyTestDriverTest.shouldPunctuateIfWallClockTimeAdvances"""
    d, _, o, _ = _max_aggregator(drive)
    d.advance_wall_clock_time(60000)
    assert o.read_key_value() == ("a", 21)
    assert o.is_empty()


def test_should_allow_pre_populating_states_stores_with_caching_enabled(drive: Any) -> None:
    """TopologyTestDriverTest.shouldAllowPrePopulatingStatesStoresWithCachingEnabled: a
    value put into a caching store before any input is read back and processed."""
    _, i, o, kv = _max_aggregator(drive, caching=True)
    assert kv.get("a") == 21
    i.pipe_input("a", 1, 9999)
    assert o.read_key_value() == ("a", 21)


def test_should_feed_store_from_global_ktable(drive: Any) -> None:
    """TopologyTestDriverTest.shouldFeedStoreFromGlobalKTable"""
    b = StreamsBuilder()
    b.global_table("topic", Consumed.with_(S, S), Materialized.as_("globalStore"))
    d = drive(b.build())
    store = d.get_key_value_store("globalStore")
    assert store is not None and "globalStore" in d.get_all_state_stores()
    d.create_input_topic("topic", S, S).pipe_input("k1", "value1")
    assert store.get("k1") == "value1"


def test_should_return_all_stores_names(drive: Any) -> None:
    """TopologyTestDriverTest.shouldReturnAllStoresNames: local and global stores."""
    b = StreamsBuilder()
    local = Stores.key_value_store_builder(Stores.in_memory_key_value_store("store"), S, S)
    b.add_state_store(local)
    b.stream("sourceTopicName", Consumed.with_(S, S)).process(_recorder([]), "store")
    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("globalStore"), S, S)
    b.add_global_store(store.with_logging_disabled(), "globalTopicName", _recorder([]))
    assert set(drive(b.build()).get_all_state_stores()) == {"store", "globalStore"}


def test_should_clean_up_persistent_state_stores_on_close(drive: Any) -> None:
    """TopologyTestDriverTest.shouldCleanUpPersistentStateStoresOnClose: a new driver of
    the same application does not see what a closed one stored."""
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("store"), S, L)
    b = StreamsBuilder().add_state_store(store)

    class Put(Processor[str, int, None, None]):
        def init(self, context: Any) -> None:
            super().init(context)
            self.store = context.get_state_store("store")

        def process(self, record: Record[str, int]) -> None:
            self.store.put(record.key, record.value)

    b.stream("input-topic", Consumed.with_(S, L)).process(Put, "store")
    topology = b.build()
    first = drive(topology, **{"application.id": "test-TopologyTestDriver-cleanup"})
    assert first.get_key_value_store("store").get("a") is None
    first.create_input_topic("input-topic", S, L).pipe_input("a", 1)
    assert first.get_key_value_store("store").get("a") == 1
    first.close()
    second = drive(topology, **{"application.id": "test-TopologyTestDriver-cleanup"})
    assert second.get_key_value_store("store").get("a") is None


def test_should_init_and_close_processor(drive: Any) -> None:
    """TopologyTestDriverTest.shouldInitProcessor and shouldCloseProcessor: the driver
    initializes each processor when it starts and closes it when it is closed."""
    events: list[str] = []

    class Tracked(Processor[str, str, None, None]):
        def init(self, context: Any) -> None:
            super().init(context)
            events.append("init")

        def process(self, record: Record[str, str]) -> None:
            events.append("process")

        def close(self) -> None:
            events.append("close")

    b = StreamsBuilder()
    b.stream("source-topic-1", Consumed.with_(S, S)).process(Tracked)
    d = drive(b.build())
    assert events == ["init"]
    d.close()
    assert events == ["init", "close"]


def test_should_set_record_metadata(drive: Any) -> None:
    """TopologyTestDriverTest.shouldSetRecordMetadata: the processor sees the record's
    topic, partition, offset, timestamp and headers."""
    seen: list[tuple[Any, ...]] = []

    class Metadata(Processor[str, str, None, None]):
        def process(self, record: Record[str, str]) -> None:
            c = self.context
            seen.append((c.topic, c.partition, c.offset, record.timestamp, record.headers))

    b = StreamsBuilder()
    b.stream("source-topic-1", Consumed.with_(S, S)).process(Metadata)
    d = drive(b.build())
    topic = d.create_input_topic("source-topic-1", S, S)
    topic.pipe_input("key1", "value1", 42)
    topic.pipe_input("key1", "value2", 7)
    assert [s[:4] for s in seen] == [("source-topic-1", 0, 0, 42), ("source-topic-1", 0, 1, 7)]
