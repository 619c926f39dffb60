"""Kafka's ``KStreamKStreamOuterJoinTest``: an outer join of two streams emits a record of
either side without a match (``+null`` / ``null+``) once its window has closed, in the
order of the join's shared store: by timestamp, the right side's before the left's, then
by key."""

from __future__ import annotations

from typing import Any

from tests.conformance.conftest import I, L, S
from topology import Consumed, JoinWindows, StreamJoined, StreamsBuilder


class OuterJoin:
    """``topic1`` (strings) outer-joined with ``topic2`` (longs) within ``windows``."""

    def __init__(self, drive: Any, windows: JoinWindows) -> None:
        b = StreamsBuilder()
        left = b.stream("topic1", Consumed.with_(I, S))
        right = b.stream("topic2", Consumed.with_(I, L))
        left.outer_join(
            right,
            lambda v1, v2: f"{'null' if v1 is None else v1}+{'null' if v2 is None else v2}",
            windows,
            StreamJoined.with_(I, S, L),
        ).to("out")
        self.driver = drive(b.build(), **{"default.key.serde": "int"})
        self.left = self.driver.create_input_topic("topic1", I, S)
        self.right = self.driver.create_input_topic("topic2", I, L)
        self.out = self.driver.create_output_topic("out", I, S)

    def results(self) -> list[tuple[Any, Any, int]]:
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


def test_outer_join_duplicates(drive: Any) -> None:
    """KStreamKStreamOuterJoinTest.testOuterJoinDuplicates"""
    join = OuterJoin(drive, JoinWindows.of_time_difference_and_grace(100, 10))
    join.left.pipe_input(0, "A0", 0)
    join.left.pipe_input(0, "A0-0", 0)
    join.right.pipe_input(1, 11, 0)
    join.right.pipe_input(1, 12, 0)
    join.right.pipe_input(1, 10, 111)
    join.right.pipe_input(3, 100, 211)
    assert join.results() == [
        (1, "null+11", 0),
        (1, "null+12", 0),
        (0, "A0+null", 0),
        (0, "A0-0+null", 0),
    ]
    join.left.pipe_input(2, "A2", 200)
    join.left.pipe_input(2, "A2-0", 200)
    join.right.pipe_input(2, 13, 201)
    join.right.pipe_input(2, 14, 201)
    assert join.results() == [
        (2, "A2+13", 201),
        (2, "A2-0+13", 201),
        (2, "A2+14", 201),
        (2, "A2-0+14", 201),
    ]
    join.right.pipe_input(3, 100, 1500)
    assert join.results() == [(1, "null+10", 111), (3, "null+100", 211)]


def _expired(drive: Any, windows: JoinWindows, *, left_first: bool, dummy_left: bool) -> None:
    """Records of one side without a match, expired by a record of either side."""
    join = OuterJoin(drive, windows)
    if left_first:
        for key, value, ts in ((0, "A0", 1), (1, "A1", 2), (0, "A0-0", 3)):
            join.left.pipe_input(key, value, ts)
        assert join.results() == []
        join.right.pipe_input(1, 11, 3)
        expired = [(0, "A0+null", 1), (0, "A0-0+null", 3)]
    else:
        for key, value, ts in ((0, 10, 1), (1, 11, 2), (0, 12, 3)):
            join.right.pipe_input(key, value, ts)
        assert join.results() == []
        join.left.pipe_input(1, "A1", 3)
        expired = [(0, "null+10", 1), (0, "null+12", 3)]
    assert join.results() == [(1, "A1+11", 3)]
    if dummy_left:
        join.left.pipe_input(2, "dummy", 401)
    else:
        join.right.pipe_input(2, 100, 401)
    assert join.results() == expired
    last = 401 if left_first and dummy_left else 402
    if dummy_left:
        join.right.pipe_input(2, 100, last)
    else:
        join.left.pipe_input(2, "dummy", last)
    assert join.results() == [(2, "dummy+100", last)]


def test_left_expired_non_joined_records_are_emitted_by_the_left_processor(drive: Any) -> None:
    """KStreamKStreamOuterJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor"""
    windows = JoinWindows.of_time_difference_with_no_grace(100)
    _expired(drive, windows, left_first=True, dummy_left=True)


def test_left_expired_non_joined_records_are_emitted_by_the_right_processor(
    drive: Any,
) -> None:
    """KStreamKStreamOuterJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedByTheRightProcessor"""
    windows = JoinWindows.of_time_difference_and_grace(100, 0)
    _expired(drive, windows, left_first=True, dummy_left=False)


def test_right_expired_non_joined_records_are_emitted_by_the_left_processor(drive: Any) -> None:
    """KStreamKStreamOuterJoinTest.testRightExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor"""
    windows = JoinWindows.of_time_difference_with_no_grace(100)
    _expired(drive, windows, left_first=False, dummy_left=True)


def test_right_expired_non_joined_records_are_emitted_by_the_right_processor(
    drive: Any,
) -> None:
    """KStreamKStreamOuterJoinTest.testRightExpiredNonJoinedRecordsAreEmittedByTheRightProcessor"""
    windows = JoinWindows.of_time_difference_and_grace(100, 0)
    _expired(drive, windows, left_first=False, dummy_left=False)
