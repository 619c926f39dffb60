"""Kafka's ``KTableKTableInnerJoinTest``: two tables of integer keys joined, the result
written to a topic. A join result's timestamp is the larger of its two sides'; a side
deleted deletes the result (once); a record with a null key is dropped."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from common.errors import TopologyError
from tests.conformance.conftest import I, S
from topology import Consumed, Materialized, StreamsBuilder

KEYS = (0, 1, 2, 3)


class TableJoin:
    """``table1.<kind>(table2)`` (optionally materialized), to ``output``."""

    def __init__(self, drive: Any, kind: str = "join", *, materialized: bool = False) -> None:
        builder = StreamsBuilder()
        table1 = builder.table("topic1", Consumed.with_(I, S))
        table2 = builder.table("topic2", Consumed.with_(I, S))
        args = (Materialized.with_(I, S),) if materialized else ()
        joined = getattr(table1, kind)(table2, lambda v1, v2: f"{v1}+{v2}", *args)
        joined.to_stream().to("output")
        self.topology = builder.build()
        self.driver = drive(self.topology, **{"default.key.serde": "int"})
        self.left = self.driver.create_input_topic("topic1", I, S, start_timestamp=0)
        self.right = self.driver.create_input_topic("topic2", I, S, start_timestamp=0)
        self.out = self.driver.create_output_topic("output", I, S)

    def results(self) -> list[tuple[Any, Any, int]]:
        """What the join produced since the last call: (key, value, timestamp)."""
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


def inner_join_steps(join: TableJoin) -> None:
    """Kafka's ``doTestJoin`` of the inner join, step by step."""
    topology = join.topology
    assert len(topology.copartition_groups) == 1
    with pytest.raises(TopologyError, match="topic1"):
        topology.check_copartitioning({"topic1": 2, "topic2": 3})
    for i in range(2):
        join.left.pipe_input(KEYS[i], f"X{KEYS[i]}", 5 + i)
    join.left.pipe_input(None, "SomeVal", 42)  # dropped: a null key
    assert join.results() == []
    for i in range(2):
        join.right.pipe_input(KEYS[i], f"Y{KEYS[i]}", 10 * i)
    join.right.pipe_input(None, "AnotherVal", 73)
    assert join.results() == [(0, "X0+Y0", 5), (1, "X1+Y1", 10)]
    for key in KEYS:
        join.left.pipe_input(key, f"XX{key}", 7)
    assert join.results() == [(0, "XX0+Y0", 7), (1, "XX1+Y1", 10)]
    for key in KEYS:
        join.right.pipe_input(key, f"YY{key}", key * 5)
    assert join.results() == [
        (0, "XX0+YY0", 7),
        (1, "XX1+YY1", 7),
        (2, "XX2+YY2", 10),
        (3, "XX3+YY3", 15),
    ]
    for key in KEYS:
        join.left.pipe_input(key, f"XXX{key}", 6)
    assert join.results() == [
        (0, "XXX0+YY0", 6),
        (1, "XXX1+YY1", 6),
        (2, "XXX2+YY2", 10),
        (3, "XXX3+YY3", 15),
    ]
    join.right.pipe_input(KEYS[0], None, 5)
    join.right.pipe_input(KEYS[1], None, 7)
    assert join.results() == [(0, None, 6), (1, None, 7)]
    for key in KEYS:
        join.left.pipe_input(key, f"XXXX{key}", 13)
    assert join.results() == [(2, "XXXX2+YY2", 13), (3, "XXXX3+YY3", 15)]
    for key, ts in zip(KEYS, (0, 42, 5, 20), strict=True):
        join.left.pipe_input(key, None, ts)
    assert join.results() == [(2, None, 10), (3, None, 20)]


def test_join(drive: Any) -> None:
    """KTableKTableInnerJoinTest.testJoin"""
    inner_join_steps(TableJoin(drive))


def test_queryable_join(drive: Any) -> None:
    """KTableKTableInnerJoinTest.testQueryableJoin"""
    inner_join_steps(TableJoin(drive, materialized=True))


def test_should_log_and_meter_skipped_records_due_to_null_left_key(
    drive: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """KTableKTableInnerJoinTest.shouldLogAndMeterSkippedRecordsDueToNullLeftKey (through
    the driver: the record reaches the join through its table's source)"""
    join = TableJoin(drive)
    with caplog.at_level(logging.WARNING):
        join.left.pipe_input(None, "new", 0)
    assert join.results() == []
    assert join.driver.metrics().total("dropped-records-total") == 1
    assert any("Skipping record due to null key" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
