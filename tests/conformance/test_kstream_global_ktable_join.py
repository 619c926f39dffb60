"""Kafka's ``KStreamGlobalKTableJoinTest`` (inner join of a stream with a global table).

The stream's values are ``<prefix><n>,FKey<n>``: the part after the comma names the global
table's key (no comma: the key mapper returns None and nothing joins). The stream's
timestamps advance by 1 ms from 0; the table's records carry none of their own.
"""

from __future__ import annotations

from typing import Any

from tests.conformance.conftest import I, S
from topology import Consumed, StreamsBuilder

KEYS = (0, 1, 2, 3)


def foreign_key(key: Any, value: str) -> str | None:
    """The global table's key in the stream value, after the comma (None: none)."""
    tokens = value.split(",")
    return tokens[1] if len(tokens) > 1 else None


class Join:
    """The scenario's topology in a driver: the stream ``join`` (or ``left_join``) the
    global table, joined values ``<stream value>+<table value>``."""

    def __init__(self, drive: Any, kind: str = "join") -> None:
        builder = StreamsBuilder()
        table = builder.global_table("globalTableTopic", Consumed.with_(S, S))
        stream = builder.stream("streamTopic", Consumed.with_(I, S))
        getattr(stream, kind)(table, foreign_key, lambda v1, v2: f"{v1}+{v2}").to("out")
        self.topology = builder.build()
        self.driver = drive(self.topology, **{"default.key.serde": "int"})
        self.stream = self.driver.create_input_topic(
            "streamTopic", I, S, start_timestamp=0, auto_advance_ms=1
        )
        self.table = self.driver.create_input_topic("globalTableTopic", S, S)
        self.out = self.driver.create_output_topic("out", I, S)

    def push_stream(
        self, count: int, prefix: str, *, foreign: bool, null_key: bool = False
    ) -> None:
        for i in range(count):
            value = f"{prefix}{KEYS[i]}" + (f",FKey{KEYS[i]}" if foreign else "")
            self.stream.pipe_input(None if null_key and i == 0 else KEYS[i], value)

    def push_table(self, count: int, prefix: str | None) -> None:
        for i in range(count):
            value = None if prefix is None else f"{prefix}{KEYS[i]}"
            self.table.pipe_input(f"FKey{KEYS[i]}", value)

    def results(self) -> list[tuple[Any, str, int]]:
        """What the join produced since the last call: (key, value, timestamp)."""
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


def test_should_not_require_copartitioning(drive: Any) -> None:
    """KStreamGlobalKTableJoinTest.shouldNotRequireCopartitioning"""
    join = Join(drive)
    # any partition counts: a global table is read whole by every task
    join.topology.check_copartitioning({"streamTopic": 3, "globalTableTopic": 7})


def test_should_not_join_with_empty_global_table_on_stream_updates(drive: Any) -> None:
    """KStreamGlobalKTableJoinTest.shouldNotJoinWithEmptyGlobalTableOnStreamUpdates"""
    join = Join(drive)
    join.push_stream(2, "X", foreign=True)
    assert join.results() == []


def test_should_not_join_on_global_table_updates(drive: Any) -> None:
    """KStreamGlobalKTableJoinTest.shouldNotJoinOnGlobalTableUpdates"""
    join = Join(drive)
    join.push_stream(2, "X", foreign=True)
    assert join.results() == []
    join.push_table(2, "Y")
    assert join.results() == []
    join.push_stream(4, "X", foreign=True)
    assert join.results() == [(0, "X0,FKey0+Y0", 2), (1, "X1,FKey1+Y1", 3)]
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


def test_should_join_only_if_match_found_on_stream_updates(drive: Any) -> None:
    """KStreamGlobalKTableJoinTest.shouldJoinOnlyIfMatchFoundOnStreamUpdates"""
    join = Join(drive)
    join.push_table(2, "Y")
    assert join.results() == []
    join.push_stream(4, "X", foreign=True)
    assert join.results() == [(0, "X0,FKey0+Y0", 0), (1, "X1,FKey1+Y1", 1)]


def test_should_clear_global_table_entry_on_null_value_updates(drive: Any) -> None:
    """KStreamGlobalKTableJoinTest.shouldClearGlobalTableEntryOnNullValueUpdates"""
    join = Join(drive)
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
    assert join.results() == [(2, "XX2,FKey2+Y2", 6), (3, "XX3,FKey3+Y3", 7)]


def test_should_not_join_on_null_key_mapper_values(drive: Any) -> None:
    """KStreamGlobalKTableJoinTest.shouldNotJoinOnNullKeyMapperValues"""
    join = Join(drive)
    join.push_table(4, "Y")
    assert join.results() == []
    join.push_stream(4, "XXX", foreign=False)
    assert join.results() == []


def test_should_join_on_null_key_with_non_null_key_mapper_values(drive: Any) -> None:
    """KStreamGlobalKTableJoinTest.shouldJoinOnNullKeyWithNonNullKeyMapperValues"""
    join = Join(drive)
    join.push_table(2, "Y")
    assert join.results() == []
    join.push_stream(4, "X", foreign=True, null_key=True)
    assert join.results() == [(None, "X0,FKey0+Y0", 0), (1, "X1,FKey1+Y1", 1)]
