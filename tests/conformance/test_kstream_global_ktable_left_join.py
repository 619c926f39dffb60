"""Kafka's ``KStreamGlobalKTableLeftJoinTest``: the same inputs as the inner join's
(:mod:`tests.conformance.test_kstream_global_ktable_join`), a left join: a stream record
without a table match joins ``null``; one whose key mapper returns null is dropped, unless
its own key is null (then it joins ``null``)."""

from __future__ import annotations

from typing import Any

from tests.conformance.test_kstream_global_ktable_join import Join


def test_should_not_require_copartitioning(drive: Any) -> None:
    """KStreamGlobalKTableLeftJoinTest.shouldNotRequireCopartitioning"""
    Join(drive, "left_join").topology.check_copartitioning(
        {"streamTopic": 3, "globalTableTopic": 7}
    )


def test_should_not_join_with_empty_global_table_on_stream_updates(drive: Any) -> None:
    """KStreamGlobalKTableLeftJoinTest.shouldNotJoinWithEmptyGlobalTableOnStreamUpdates"""
    join = Join(drive, "left_join")
    join.push_stream(2, "X", foreign=True)
    assert join.results() == [(0, "X0,FKey0+None", 0), (1, "X1,FKey1+None", 1)]


def test_should_not_join_on_global_table_updates(drive: Any) -> None:
    """KStreamGlobalKTableLeftJoinTest.shouldNotJoinOnGlobalTableUpdates"""
    join = Join(drive, "left_join")
    join.push_stream(2, "X", foreign=True)
    assert join.results() == [(0, "X0,FKey0+None", 0), (1, "X1,FKey1+None", 1)]
    join.push_table(2, "Y")
    assert join.results() == []
    join.push_stream(4, "X", foreign=True)
    assert join.results() == [
        (0, "X0,FKey0+Y0", 2),
        (1, "X1,FKey1+Y1", 3),
        (2, "X2,FKey2+None", 4),
        (3, "X3,FKey3+None", 5),
    ]
    join.push_table(4, "YY")
    assert join.results() == []
    join.push_stream(4, "X", foreign=True)
    assert join.results() == [
        (0, "X0,FKey0+YY0", 6),
        (1, "X1,FKey1+YY1", 7),
        (2, "X2,FKey2+YY2", 8),
        (3, "X3,FKey3+YY3", 9),
    ]
    join.push_table(4, "YYY")
    assert join.results() == []


def test_should_join_regardless_if_match_found_on_stream_updates(drive: Any) -> None:
    """KStreamGlobalKTableLeftJoinTest.shouldJoinRegardlessIfMatchFoundOnStreamUpdates"""
    join = Join(drive, "left_join")
    join.push_table(2, "Y")
    assert join.results() == []
    join.push_stream(4, "X", foreign=True)
    assert join.results() == [
        (0, "X0,FKey0+Y0", 0),
        (1, "X1,FKey1+Y1", 1),
        (2, "X2,FKey2+None", 2),
        (3, "X3,FKey3+None", 3),
    ]


def test_should_clear_global_table_entry_on_null_value_updates(drive: Any) -> None:
    """KStreamGlobalKTableLeftJoinTest.shouldClearGlobalTableEntryOnNullValueUpdates"""
    join = Join(drive, "left_join")
    join.push_table(4, "Y")
    assert join.results() == []
    join.push_stream(4, "X", foreign=True)
    assert join.results() == [
        (0, "X0,FKey0+Y0", 0),
        (1, "X1,FKey1+Y1", 1),
        (2, "X2,FKey2+Y2", 2),
        (3, "X3,FKey3+Y3", 3),
    ]
    join.push_table(2, None)
    assert join.results() == []
    join.push_stream(4, "XX", foreign=True)
    assert join.results() == [
        (0, "XX0,FKey0+None", 4),
        (1, "XX1,FKey1+None", 5),
        (2, "XX2,FKey2+Y2", 6),
        (3, "XX3,FKey3+Y3", 7),
    ]


def test_should_not_join_on_null_key_mapper_values(drive: Any) -> None:
    """KStreamGlobalKTableLeftJoinTest.shouldNotJoinOnNullKeyMapperValues"""
    join = Join(drive, "left_join")
    join.push_table(4, "Y")
    assert join.results() == []
    join.push_stream(4, "XXX", foreign=False)
    assert join.results() == []


def test_should_join_on_null_key_with_non_null_key_mapper_values(drive: Any) -> None:
    """KStreamGlobalKTableLeftJoinTest.shouldJoinOnNullKeyWithNonNullKeyMapperValues"""
    join = Join(drive, "left_join")
    join.push_table(4, "Y")
    assert join.results() == []
    join.push_stream(4, "X", foreign=True, null_key=True)
    assert join.results() == [
        (None, "X0,FKey0+Y0", 0),
        (1, "X1,FKey1+Y1", 1),
        (2, "X2,FKey2+Y2", 2),
        (3, "X3,FKey3+Y3", 3),
    ]


def test_should_join_a_null_key_record_whose_key_mapper_returns_null(drive: Any) -> None:
    """KStreamKTableJoinProcessor.maybeDropRecord (KIP-962): in a left join, a record
    with a null key and a value is never dropped; its key mapper returning null, it joins
    null."""
    join = Join(drive, "left_join")
    join.push_table(4, "Y")
    join.push_stream(2, "Z", foreign=False, null_key=True)
    assert join.results() == [(None, "Z0+None", 0)]
