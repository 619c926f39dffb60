"""Kafka's ``KStreamKStreamJoinTest``: two streams of integer keys joined within 100 ms
windows (no grace), every record at timestamp 0, and the naming of the repartition topics
a rekeyed stream joins through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.errors import TopologyError
from tests.conformance.conftest import I, S
from topology import Consumed, JoinWindows, StreamJoined, StreamsBuilder

KEYS = (0, 1, 2, 3)
GOLDEN = Path(__file__).parent / "golden"


class StreamJoin:
    """``stream1.<kind>(stream2)`` within 100 ms, joined values ``<left>+<right>``."""

    def __init__(self, drive: Any, kind: str) -> None:
        builder = StreamsBuilder()
        stream1 = builder.stream("topic1", Consumed.with_(I, S))
        stream2 = builder.stream("topic2", Consumed.with_(I, S))
        joined = getattr(stream1, kind)(
            stream2,
            lambda v1, v2: f"{v1}+{v2}",
            JoinWindows.of_time_difference_with_no_grace(100),
            StreamJoined.with_(I, S, S),
        )
        joined.to("out")
        self.topology = builder.build()
        self.driver = drive(self.topology, **{"default.key.serde": "int"})
        self.left = self.driver.create_input_topic("topic1", I, S, start_timestamp=0)
        self.right = self.driver.create_input_topic("topic2", I, S, start_timestamp=0)
        self.out = self.driver.create_output_topic("out", I, S)

    def results(self) -> list[tuple[Any, Any, int]]:
        """What the join produced since the last call: (key, value, timestamp)."""
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


def join_steps(join: StreamJoin) -> None:
    """The steps ``testJoin`` and ``testOuterJoin`` share (the outer join emits nothing
    more within them: its non-joined records wait for their window to close)."""
    assert len(join.topology.copartition_groups) == 1
    with pytest.raises(TopologyError, match="topic1"):
        join.topology.check_copartitioning({"topic1": 2, "topic2": 3})
    for key in KEYS[:2]:
        join.left.pipe_input(key, f"A{key}")
    assert join.results() == []
    for key in KEYS[:2]:
        join.right.pipe_input(key, f"a{key}")
    assert join.results() == [(0, "A0+a0", 0), (1, "A1+a1", 0)]
    for key in KEYS:
        join.left.pipe_input(key, f"B{key}")
    assert join.results() == [(0, "B0+a0", 0), (1, "B1+a1", 0)]
    for key in KEYS:
        join.right.pipe_input(key, f"b{key}")
    assert join.results() == [
        (0, "A0+b0", 0),
        (0, "B0+b0", 0),
        (1, "A1+b1", 0),
        (1, "B1+b1", 0),
        (2, "B2+b2", 0),
        (3, "B3+b3", 0),
    ]
    for key in KEYS:
        join.left.pipe_input(key, f"C{key}")
    assert join.results() == [
        (0, "C0+a0", 0),
        (0, "C0+b0", 0),
        (1, "C1+a1", 0),
        (1, "C1+b1", 0),
        (2, "C2+b2", 0),
        (3, "C3+b3", 0),
    ]
    for key in KEYS[:2]:
        join.right.pipe_input(key, f"c{key}")
    assert join.results() == [
        (0, "A0+c0", 0),
        (0, "B0+c0", 0),
        (0, "C0+c0", 0),
        (1, "A1+c1", 0),
        (1, "B1+c1", 0),
        (1, "C1+c1", 0),
    ]


def test_join(drive: Any) -> None:
    """KStreamKStreamJoinTest.testJoin"""
    join_steps(StreamJoin(drive, "join"))


def test_outer_join(drive: Any) -> None:
    """KStreamKStreamJoinTest.testOuterJoin"""
    join_steps(StreamJoin(drive, "outer_join"))


def rekeyed_joins(named: bool) -> str:
    """A rekeyed stream joined with two others (named ``first-join``/``second-join``, or
    not), described."""
    builder = StreamsBuilder()
    stream1 = builder.stream("topic", Consumed.with_(S, S))
    stream2 = builder.stream("topic2", Consumed.with_(S, S))
    stream3 = builder.stream("topic3", Consumed.with_(S, S))
    rekeyed = stream1.map(lambda k, v: (v, k))
    windows = JoinWindows.of_time_difference_with_no_grace(100)
    joins = (
        (stream2, "out-one", "first-join"),
        (stream3, "out-two" if named else "out-to", "second-join"),
    )
    for other, out, name in joins:
        args = (StreamJoined.with_(S, S, S).with_name(name),) if named else ()
        rekeyed.join(other, lambda v1, v2: v1 + v2, windows, *args).to(out)
    return str(builder.build().describe())


def test_should_reuse_repartition_topic_with_generated_name() -> None:
    """KStreamKStreamJoinTest.shouldReuseRepartitionTopicWithGeneratedName"""
    expected = (GOLDEN / "kstream_kstream_join_generated_repartition.txt").read_text()
    assert rekeyed_joins(named=False) == expected


def test_should_create_repartition_topics_with_user_provided_name() -> None:
    """KStreamKStreamJoinTest.shouldCreateRepartitionTopicsWithUserProvidedName"""
    expected = (GOLDEN / "kstream_kstream_join_user_named_repartition.txt").read_text()
    assert rekeyed_joins(named=True) == expected
