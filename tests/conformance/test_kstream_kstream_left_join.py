"""Kafka's ``KStreamKStreamLeftJoinTest``: a left join of two streams emits a left record
without a match (``+null``) only once its window has closed (stream time past the window's
end and grace), from whichever side advances stream time; a right record without a match
is never emitted."""

from __future__ import annotations

from typing import Any

from tests.conformance.conftest import I, S
from topology import Consumed, JoinWindows, StreamJoined, StreamsBuilder


class LeftJoin:
    """``topic1.left_join(topic2)`` within ``windows``, values ``<left>+<right>``."""

    def __init__(self, drive: Any, windows: JoinWindows) -> None:
        b = StreamsBuilder()
        left = b.stream("topic1", Consumed.with_(I, S))
        right = b.stream("topic2", Consumed.with_(I, S))
        left.left_join(right, lambda v1, v2: f"{v1}+{v2}", windows, StreamJoined.with_(I, S, S)).to(
            "out"
        )
        self.driver = drive(b.build(), **{"default.key.serde": "int"})
        self.left = self.driver.create_input_topic("topic1", I, S)
        self.right = self.driver.create_input_topic("topic2", I, S)
        self.out = self.driver.create_output_topic("out", I, S)

    def results(self) -> list[tuple[Any, Any, int]]:
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


def test_left_join_duplicates(drive: Any) -> None:
    """KStreamKStreamLeftJoinTest.testLeftJoinDuplicates"""
    join = LeftJoin(drive, JoinWindows.of_time_difference_and_grace(100, 10))
    join.left.pipe_input(0, "A0", 0)
    join.left.pipe_input(0, "A0-0", 0)
    join.right.pipe_input(1, "a0", 111)
    join.right.pipe_input(2, "dummy", 500)
    assert join.results() == [(0, "A0+None", 0), (0, "A0-0+None", 0)]
    join.left.pipe_input(2, "A2", 1000)
    join.left.pipe_input(2, "A2-0", 1000)
    join.right.pipe_input(2, "a2", 1001)
    assert join.results() == [(2, "A2+a2", 1001), (2, "A2-0+a2", 1001)]
    join.right.pipe_input(3, "a3", 315)
    assert join.results() == []


def _expiry(drive: Any, first_dummy_left: bool) -> None:
    join = LeftJoin(drive, JoinWindows.of_time_difference_and_grace(100, 0))
    join.left.pipe_input(0, "A0", 1)
    join.left.pipe_input(1, "A1", 2)
    join.left.pipe_input(0, "A0-0", 3)
    assert join.results() == []
    join.right.pipe_input(1, "a1", 3)
    assert join.results() == [(1, "A1+a1", 3)]
    first, second = (join.left, join.right) if first_dummy_left else (join.right, join.left)
    first.pipe_input(2, "dummy", 401)
    assert join.results() == [(0, "A0+None", 1), (0, "A0-0+None", 3)]
    ts = 401 if first_dummy_left else 402
    second.pipe_input(2, "dummy", ts)
    assert join.results() == [(2, "dummy+dummy", ts)]


def test_left_expired_non_joined_records_are_emitted_by_the_left_processor(drive: Any) -> None:
    """KStreamKStreamLeftJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedByTheLeftProcessor"""
    _expiry(drive, first_dummy_left=True)


def test_left_expired_non_joined_records_are_emitted_by_the_right_processor(
    drive: Any,
) -> None:
    """KStreamKStreamLeftJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedByTheRightProcessor"""
    _expiry(drive, first_dummy_left=False)


def _right_never(drive: Any, windows: JoinWindows, first_dummy_left: bool) -> None:
    join = LeftJoin(drive, windows)
    join.right.pipe_input(0, "A0", 1)
    join.right.pipe_input(1, "A1", 2)
    join.right.pipe_input(0, "A0-0", 3)
    assert join.results() == []
    join.left.pipe_input(1, "a1", 3)
    assert join.results() == [(1, "a1+A1", 3)]
    first, second = (join.left, join.right) if first_dummy_left else (join.right, join.left)
    first.pipe_input(2, "dummy", 401)
    assert join.results() == []
    second.pipe_input(2, "dummy", 402)
    assert join.results() == [(2, "dummy+dummy", 402)]


def test_right_non_joined_records_are_never_emitted_by_the_left_processor(drive: Any) -> None:
    """KStreamKStreamLeftJoinTest.testRightNonJoinedRecordsAreNeverEmittedByTheLeftProcessor"""
    _right_never(drive, JoinWindows.of_time_difference_and_grace(100, 0), first_dummy_left=True)


def test_right_non_joined_records_are_never_emitted_by_the_right_processor(drive: Any) -> None:
    """KStreamKStreamLeftJoinTest.testRightNonJoinedRecordsAreNeverEmittedByTheRightProcessor"""
    _right_never(drive, JoinWindows.of_time_difference_with_no_grace(100), first_dummy_left=False)
