"""Kafka's ``KStreamKTableLeftJoinTest``: the inner join's inputs
(:mod:`tests.conformance.test_kstream_ktable_join`), a left join: a stream record without
a table value joins ``null``."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import TopologyError
from tests.conformance.test_kstream_ktable_join import Join


def test_should_require_copartitioned_streams(drive: Any) -> None:
    """KStreamKTableLeftJoinTest.shouldRequireCopartitionedStreams"""
    topology = Join(drive, "left_join").topology
    assert len(topology.copartition_groups) == 1
    with pytest.raises(TopologyError, match="streamTopic"):
        topology.check_copartitioning({"streamTopic": 2, "tableTopic": 3})


def test_should_join_with_empty_table_on_stream_updates(drive: Any) -> None:
    """KStreamKTableLeftJoinTest.shouldJoinWithEmptyTableOnStreamUpdates"""
    join = Join(drive, "left_join")
    join.push_stream(2, "X")
    assert join.results() == [(0, "X0+None", 0), (1, "X1+None", 1)]


def test_should_not_join_on_table_updates(drive: Any) -> None:
    """KStreamKTableLeftJoinTest.shouldNotJoinOnTableUpdates"""
    join = Join(drive, "left_join")
    join.push_stream(2, "X")
    assert join.results() == [(0, "X0+None", 0), (1, "X1+None", 1)]
    join.push_table(2, "Y")
    assert join.results() == []
    join.push_stream(4, "X")
    assert join.results() == [
        (0, "X0+Y0", 0),
        (1, "X1+Y1", 1),
        (2, "X2+None", 2),
        (3, "X3+None", 3),
    ]
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


def test_should_join_regardless_if_match_found_on_stream_updates(drive: Any) -> None:
    """KStreamKTableLeftJoinTest.shouldJoinRegardlessIfMatchFoundOnStreamUpdates"""
    join = Join(drive, "left_join")
    join.push_table(2, "Y")
    assert join.results() == []
    join.push_stream(4, "X")
    assert join.results() == [
        (0, "X0+Y0", 0),
        (1, "X1+Y1", 1),
        (2, "X2+None", 2),
        (3, "X3+None", 3),
    ]


def test_should_clear_table_entry_on_null_value_updates(drive: Any) -> None:
    """KStreamKTableLeftJoinTest.shouldClearTableEntryOnNullValueUpdates"""
    join = Join(drive, "left_join")
    join.push_table(4, "Y")
    assert join.results() == []
    join.push_stream(4, "X")
    assert join.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1), (2, "X2+Y2", 2), (3, "X3+Y3", 3)]
    join.push_null_values_to_table()
    assert join.results() == []
    join.push_stream(4, "XX")
    assert join.results() == [
        (0, "XX0+None", 0),
        (1, "XX1+None", 1),
        (2, "XX2+Y2", 2),
        (3, "XX3+Y3", 3),
    ]
