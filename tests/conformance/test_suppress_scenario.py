"""Kafka's ``SuppressScenarioTest``: ``KTable.suppress`` end to end through the driver.

Each scenario pipes Kafka's inputs and expects Kafka's outputs as ``(key, value,
timestamp)``. Not rewritten: ``shouldWorkWithCogrouped`` (this DSL has no ``cogroup``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.conftest import L, S
from topology import Consumed, Grouped, Materialized, Produced, StreamsBuilder
from topology.api.windows import MAX_TIME, SessionWindows, SlidingWindows, TimeWindows
from topology.dsl.ktable import KTable
from topology.dsl.suppress import BufferConfig, Suppressed

#: The application id the Kafka test runs under (its driver's default,
#: ``dummy-topology-test-driver-app-id-<random int>``): a buffered record's size counts its
#: topic's name, here the count's repartition topic, so a byte limit depends on it.
KAFKA_APP_ID = "dummy-topology-test-driver-app-id-1748392013"


def _records(d: Any, topic: str, value_serde: Any = L) -> list[tuple[Any, Any, int | None]]:
    records = d.create_output_topic(topic, S, value_serde).read_records_to_list()
    return [(r.key, r.value, r.timestamp) for r in records]


def _value_counts(suppressed: Suppressed, *, materialized: bool = False) -> StreamsBuilder:
    """A table's values counted (``input`` re-grouped by value), suppressed to
    ``output-suppressed``, raw to ``output-raw``."""
    b = StreamsBuilder()
    counts = (
        b.table(
            "input",
            Consumed.with_(S, S),
            Materialized.with_(S, S).with_caching_disabled().with_logging_disabled(),
        )
        .group_by(lambda k, v: (v, k), Grouped.with_(S, S))
        .count(Materialized.with_(S, L) if materialized else None)
    )
    counts.suppress(suppressed).to_stream().to("output-suppressed", Produced.with_(S, L))
    counts.to_stream().to("output-raw", Produced.with_(S, L))
    return b


def _pipe_three(d: Any) -> Any:
    i = d.create_input_topic("input", S, S)
    i.pipe_input("k1", "v1", 0)
    i.pipe_input("k1", "v2", 1)
    i.pipe_input("k2", "v1", 2)
    assert _records(d, "output-raw") == [("v1", 1, 0), ("v1", 0, 1), ("v2", 1, 1), ("v1", 1, 2)]
    return i


def test_should_immediately_emit_events_with_zero_emit_after(drive: Any) -> None:
    """SuppressScenarioTest.shouldImmediatelyEmitEventsWithZeroEmitAfter"""
    d = drive(_value_counts(Suppressed.until_time_limit(0, BufferConfig.unbounded())).build())
    i = _pipe_three(d)
    assert _records(d, "output-suppressed") == [
        ("v1", 1, 0),
        ("v1", 0, 1),
        ("v2", 1, 1),
        ("v1", 1, 2),
    ]
    i.pipe_input("x", "x", 3)
    assert _records(d, "output-raw") == [("x", 1, 3)]
    assert _records(d, "output-suppressed") == [("x", 1, 3)]
    i.pipe_input("x", "y", 4)
    assert _records(d, "output-raw") == [("x", 0, 4), ("y", 1, 4)]
    assert _records(d, "output-suppressed") == [("x", 0, 4), ("y", 1, 4)]


def test_should_suppress_intermediate_events_with_time_limit(drive: Any) -> None:
    """SuppressScenarioTest.shouldSuppressIntermediateEventsWithTimeLimit"""
    d = drive(_value_counts(Suppressed.until_time_limit(2, BufferConfig.unbounded())).build())
    i = _pipe_three(d)
    assert _records(d, "output-suppressed") == [("v1", 1, 2)]
    i.pipe_input("tick", "tick", 3)  # only advances stream time
    assert _records(d, "output-raw") == [("tick", 1, 3)]
    assert _records(d, "output-suppressed") == [("v2", 1, 1)]
    i.pipe_input("tick", "tock", 4)
    assert _records(d, "output-raw") == [("tick", 0, 4), ("tock", 1, 4)]
    # tick was first buffered at 3: still buffered at stream time 4
    assert _records(d, "output-suppressed") == []


def test_should_suppress_intermediate_events_with_record_limit(drive: Any) -> None:
    """SuppressScenarioTest.shouldSuppressIntermediateEventsWithRecordLimit"""
    config = BufferConfig.max_records(1).emit_early_when_full()
    d = drive(
        _value_counts(Suppressed.until_time_limit(MAX_TIME, config), materialized=True).build()
    )
    i = _pipe_three(d)
    # consecutive updates of v1 suppressed into the latter; the last one stays buffered
    assert _records(d, "output-suppressed") == [("v1", 0, 1), ("v2", 1, 1)]
    i.pipe_input("x", "x", 3)
    assert _records(d, "output-raw") == [("x", 1, 3)]
    assert _records(d, "output-suppressed") == [("v1", 1, 2)]


def test_should_suppress_intermediate_events_with_bytes_limit(drive: Any) -> None:
    """SuppressScenarioTest.shouldSuppressIntermediateEventsWithBytesLimit"""
    # each buffered update is a little over 100 bytes: its record context (the
    # repartition topic's name above all) counts
    config = BufferConfig.max_bytes(200).emit_early_when_full()
    topology = _value_counts(Suppressed.until_time_limit(MAX_TIME, config)).build()
    d = drive(topology, **{"application.id": KAFKA_APP_ID})
    i = _pipe_three(d)
    assert _records(d, "output-suppressed") == [("v1", 0, 1), ("v2", 1, 1)]
    i.pipe_input("x", "x", 3)
    assert _records(d, "output-raw") == [("x", 1, 3)]
    assert _records(d, "output-suppressed") == [("v1", 1, 2)]


def _windowed_counts(windows: Any) -> StreamsBuilder:
    b = StreamsBuilder()
    counts = (
        b.stream("input", Consumed.with_(S, S))
        .group_by(lambda k, v: k, Grouped.with_(S, S))
        .windowed_by(windows)
        .count(Materialized.as_("counts").with_caching_disabled())
    )
    final = Suppressed.until_window_closes(BufferConfig.unbounded())
    for table, topic in ((counts.suppress(final), "output-suppressed"), (counts, "output-raw")):
        table.to_stream().map(lambda k, v: (str(k), v)).to(topic, Produced.with_(S, L))
    return b


def _pipe_k1(d: Any, *timestamps: int) -> None:
    i = d.create_input_topic("input", S, S)
    for ts in timestamps:
        i.pipe_input("k1", "v1", ts)


def test_should_support_final_results_for_time_windows(drive: Any) -> None:
    """SuppressScenarioTest.shouldSupportFinalResultsForTimeWindows"""
    d = drive(_windowed_counts(TimeWindows.of_size_and_grace(2, 1)).build())
    _pipe_k1(d, 0, 1, 2, 1, 0, 5, 0)  # the last is out of the grace period: dropped
    assert _records(d, "output-raw") == [
        ("[k1@0/2]", 1, 0),
        ("[k1@0/2]", 2, 1),
        ("[k1@2/4]", 1, 2),
        ("[k1@0/2]", 3, 1),
        ("[k1@0/2]", 4, 1),
        ("[k1@4/6]", 1, 5),
    ]
    assert _records(d, "output-suppressed") == [("[k1@0/2]", 4, 1), ("[k1@2/4]", 1, 2)]


def test_should_support_final_results_for_time_windows_with_large_jump(drive: Any) -> None:
    """SuppressScenarioTest.shouldSupportFinalResultsForTimeWindowsWithLargeJump"""
    d = drive(_windowed_counts(TimeWindows.of_size_and_grace(2, 2)).build())
    # the 0 after 4 is dropped: stream time 4 closed its window
    _pipe_k1(d, 0, 1, 2, 0, 3, 0, 4, 0, 30)
    assert _records(d, "output-raw") == [
        ("[k1@0/2]", 1, 0),
        ("[k1@0/2]", 2, 1),
        ("[k1@2/4]", 1, 2),
        ("[k1@0/2]", 3, 1),
        ("[k1@2/4]", 2, 3),
        ("[k1@0/2]", 4, 1),
        ("[k1@4/6]", 1, 4),
        ("[k1@30/32]", 1, 30),
    ]
    assert _records(d, "output-suppressed") == [
        ("[k1@0/2]", 4, 1),
        ("[k1@2/4]", 2, 3),
        ("[k1@4/6]", 1, 4),
    ]


def test_should_support_final_results_for_sliding_windows(drive: Any) -> None:
    """SuppressScenarioTest.shouldSupportFinalResultsForSlidingWindows"""
    d = drive(_windowed_counts(SlidingWindows.of_time_difference_and_grace(5, 15)).build())
    # 5 is dropped (stream time 24 closed its windows); 90 flushes the rest
    _pipe_k1(d, 10, 11, 10, 13, 10, 24, 5, 7, 90)
    raw = sorted(_records(d, "output-raw"), key=lambda r: (r[0], r[2]))
    assert raw == [
        ("[k1@11/16]", 1, 11),
        ("[k1@11/16]", 2, 13),
        ("[k1@12/17]", 1, 13),
        ("[k1@19/24]", 1, 24),
        ("[k1@5/10]", 1, 10),
        ("[k1@5/10]", 2, 10),
        ("[k1@5/10]", 3, 10),
        ("[k1@5/10]", 4, 10),
        ("[k1@5/10]", 5, 10),
        ("[k1@6/11]", 2, 11),
        ("[k1@6/11]", 3, 11),
        ("[k1@6/11]", 4, 11),
        ("[k1@6/11]", 5, 11),
        ("[k1@8/13]", 4, 13),
        ("[k1@8/13]", 5, 13),
        ("[k1@85/90]", 1, 90),
    ]
    assert _records(d, "output-suppressed") == [
        ("[k1@5/10]", 5, 10),
        ("[k1@6/11]", 5, 11),
        ("[k1@8/13]", 5, 13),
        ("[k1@11/16]", 2, 13),
        ("[k1@12/17]", 1, 13),
        ("[k1@19/24]", 1, 24),
    ]


def test_should_support_final_results_for_session_windows(drive: Any) -> None:
    """SuppressScenarioTest.shouldSupportFinalResultsForSessionWindows"""
    d = drive(_windowed_counts(SessionWindows.of_inactivity_gap_with_no_grace(5)).build())
    i = d.create_input_topic("input", S, S)
    i.pipe_input("k1", "v1", 0)
    i.pipe_input("k1", "v1", 5)
    i.pipe_input("k1", "v1", 1)  # out of order, admitted: the session is still open
    i.pipe_input("k2", "v1", 11)  # any key advances stream time
    i.pipe_input("k1", "v1", 5)  # late for the closed first session: dropped
    i.pipe_input("k1", "v1", 30)
    assert _records(d, "output-raw") == [
        ("[k1@0/0]", 1, 0),
        ("[k1@0/0]", None, 0),
        ("[k1@0/5]", 2, 5),
        ("[k1@0/5]", None, 5),
        ("[k1@0/5]", 3, 5),
        ("[k2@11/11]", 1, 11),
        ("[k1@30/30]", 1, 30),
    ]
    assert _records(d, "output-suppressed") == [("[k1@0/5]", 3, 5), ("[k2@11/11]", 1, 11)]


def test_should_work_before_group_by(drive: Any) -> None:
    """SuppressScenarioTest.shouldWorkBeforeGroupBy"""
    b = StreamsBuilder()
    (
        b.table("topic", Consumed.with_(S, S))
        .suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()))
        .group_by(lambda k, v: (k, v), Grouped.with_(S, S))
        .count()
        .to_stream()
        .to("output", Produced.with_(S, L))
    )
    d = drive(b.build())
    i = d.create_input_topic("topic", S, S)
    i.pipe_input("A", "a", 0)
    i.pipe_input("tick", "tick", 10)
    assert _records(d, "output") == [("A", 1, 0)]


def _outer_joined(*, suppress_left: bool) -> StreamsBuilder:
    b = StreamsBuilder()
    left: KTable[Any, Any] = b.table("left", Consumed.with_(S, S))
    right: KTable[Any, Any] = b.table("right", Consumed.with_(S, S))
    suppressed = Suppressed.until_time_limit(10, BufferConfig.unbounded())
    if suppress_left:
        left = left.suppress(suppressed)
    else:
        right = right.suppress(suppressed)
    joined = left.outer_join(right, lambda lv, rv: f"({_java(lv)},{_java(rv)})")
    joined.to_stream().to("output", Produced.with_(S, S))
    return b


def _java(value: Any) -> str:
    return "null" if value is None else str(value)


@pytest.mark.parametrize(
    "suppress_left",
    [
        pytest.param(False, id="SuppressScenarioTest.shouldWorkBeforeJoinRight"),
        pytest.param(True, id="SuppressScenarioTest.shouldWorkBeforeJoinLeft"),
    ],
)
def test_should_work_before_join(drive: Any, suppress_left: bool) -> None:
    """SuppressScenarioTest.shouldWorkBeforeJoinRight (the right table suppressed) and
    SuppressScenarioTest.shouldWorkBeforeJoinLeft (the left one, the same steps mirrored)."""
    d = drive(_outer_joined(suppress_left=suppress_left).build())
    right = d.create_input_topic("right", S, S)
    left = d.create_input_topic("left", S, S)
    held, other = (left, right) if suppress_left else (right, left)

    def joined(held_value: str | None, other_value: str | None) -> str:
        pair = (held_value, other_value) if suppress_left else (other_value, held_value)
        return f"({_java(pair[0])},{_java(pair[1])})"

    held.pipe_input("B", "1", 0)
    held.pipe_input("A", "1", 0)
    assert _records(d, "output", S) == []  # buffered
    held.pipe_input("tick", "tick", 10)  # flushes the buffer
    assert _records(d, "output", S) == [("A", joined("1", None), 0), ("B", joined("1", None), 0)]
    held.pipe_input("A", "2", 11)
    assert _records(d, "output", S) == []  # buffered
    other.pipe_input("A", "a", 12)  # joins the suppressed value emitted before
    assert _records(d, "output", S) == [("A", joined("1", "a"), 12)]
    other.pipe_input("B", "b", 12)  # B is not buffered: read through to the upstream table
    assert _records(d, "output", S) == [("B", joined("1", "b"), 12)]
    other.pipe_input("A", "b", 13)
    assert _records(d, "output", S) == [("A", joined("1", "b"), 13)]
    held.pipe_input("tick", "tick1", 21)
    assert _records(d, "output", S) == [
        ("tick", joined("tick1", None), 21),
        ("A", joined("2", "b"), 13),
    ]
