"""Kafka's ``KStreamImplTest``: the stream operators' behaviour scenarios (sinks, dynamic
topics, merges, pattern sources)."""

from __future__ import annotations

import re
from typing import Any

from tests.conformance.conftest import S
from topology import Consumed, Produced, StreamsBuilder


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
