"""Kafka's ``KTableAggregateTest``: a table regrouped and aggregated (adder and subtractor),
counted; a key kept by the regrouping sends its old and new value together (KIP-904), a
key moved sends the subtraction and the addition as two records."""

from __future__ import annotations

from typing import Any

from tests.conformance.conftest import L, S
from topology import Consumed, Grouped, Materialized, Produced, StreamsBuilder


def regroup(key: str, value: str) -> tuple[Any, str] | None:
    """``testAggRepartition``'s mapper: ``null`` maps to a null key, ``NULL`` to no pair,
    any other key to the value."""
    if key == "null":
        return None, value
    if key == "NULL":
        return None
    return value, value


def aggregated(drive: Any, mapper: Any, records: list[tuple[str, str | None, int]]) -> list[Any]:
    """Aggregate ``topic1`` regrouped by ``mapper`` into ``0+a-a+b...``; return the
    table's updates (key, value, timestamp)."""
    b = StreamsBuilder()
    (
        b.table("topic1", Consumed.with_(S, S))
        .group_by(mapper, Grouped.with_(S, S))
        .aggregate(
            lambda: "0",
            lambda k, v, agg: f"{agg}+{v}",
            lambda k, v, agg: f"{agg}-{v}",
            Materialized.as_("topic1-Canonized").with_value_serde(S),
        )
        .to_stream()
        .to("out", Produced.with_(S, S))
    )
    d = drive(b.build())
    topic = d.create_input_topic("topic1", S, S)
    for key, value, ts in records:
        topic.pipe_input(key, value, ts)
    return [
        (r.key, r.value, r.timestamp)
        for r in d.create_output_topic("out", S, S).read_records_to_list()
    ]


def test_agg_basic(drive: Any) -> None:
    """KTableAggregateTest.testAggBasic"""
    records = [("A", "1", 10), ("B", "2", 15), ("A", "3", 20), ("B", "4", 18)]
    records += [("C", "5", 5), ("D", "6", 25), ("B", "7", 15), ("C", "8", 10)]
    assert aggregated(drive, lambda k, v: (k, v), records) == [
        ("A", "0+1", 10),
        ("B", "0+2", 15),
        ("A", "0+1-1+3", 20),
        ("B", "0+2-2+4", 18),
        ("C", "0+5", 5),
        ("D", "0+6", 25),
        ("B", "0+2-2+4-4+7", 18),
        ("C", "0+5-5+8", 10),
    ]


def test_agg_repartition(drive: Any) -> None:
    """KTableAggregateTest.testAggRepartition"""
    records = [("A", "1", 10), ("A", None, 15), ("A", "1", 12), ("B", "2", 20)]
    records += [("null", "3", 25), ("B", "4", 23), ("NULL", "5", 24), ("B", "7", 22)]
    assert aggregated(drive, regroup, records) == [
        ("1", "0+1", 10),
        ("1", "0+1-1", 15),
        ("1", "0+1-1+1", 15),
        ("2", "0+2", 20),
        ("2", "0+2-2", 23),
        ("4", "0+4", 23),
        ("4", "0+4-4", 23),
        ("7", "0+7", 22),
    ]


def counted(drive: Any, materialized: Materialized | None) -> list[Any]:
    """``count-test-input`` regrouped by value and counted."""
    b = StreamsBuilder()
    grouped = b.table("count-test-input", Consumed.with_(S, S)).group_by(
        lambda k, v: (v, v), Grouped.with_(S, S)
    )
    table = grouped.count(materialized) if materialized is not None else grouped.count()
    table.to_stream().to("out", Produced.with_(S, L))
    d = drive(b.build())
    topic = d.create_input_topic("count-test-input", S, S)
    for key, value, ts in [("A", "green", 10), ("B", "green", 9), ("A", "blue", 12)]:
        topic.pipe_input(key, value, ts)
    for key, value, ts in [("C", "yellow", 15), ("D", "green", 11)]:
        topic.pipe_input(key, value, ts)
    return [
        (r.key, r.value, r.timestamp)
        for r in d.create_output_topic("out", S, L).read_records_to_list()
    ]


COUNTS = [
    ("green", 1, 10),
    ("green", 2, 10),
    ("green", 1, 12),
    ("blue", 1, 12),
    ("yellow", 1, 15),
    ("green", 2, 12),
]


def test_count(drive: Any) -> None:
    """KTableAggregateTest.testCount"""
    assert counted(drive, Materialized.as_("count")) == COUNTS


def test_count_with_internal_store(drive: Any) -> None:
    """KTableAggregateTest.testCountWithInternalStore"""
    assert counted(drive, None) == COUNTS


def test_remove_old_before_add_new(drive: Any) -> None:
    """KTableAggregateTest.testRemoveOldBeforeAddNew"""
    b = StreamsBuilder()
    (
        b.table("count-test-input", Consumed.with_(S, S))
        .group_by(lambda k, v: (k[0], k[1]), Grouped.with_(S, S))
        .aggregate(
            lambda: "",
            lambda k, v, agg: agg + v,
            lambda k, v, agg: agg.replace(v, ""),
            Materialized.as_("someStore").with_value_serde(S),
        )
        .to_stream()
        .to("out", Produced.with_(S, S))
    )
    d = drive(b.build())
    topic = d.create_input_topic("count-test-input", S, S)
    for key, value, ts in [("11", "A", 10), ("12", "B", 8), ("11", None, 12), ("12", "C", 6)]:
        topic.pipe_input(key, value, ts)
    out = d.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in out] == [
        ("1", "1", 10),
        ("1", "12", 10),
        ("1", "2", 12),
        ("1", "2", 12),
    ]


def test_should_not_send_transient_state_if_not_upgrading(drive: Any) -> None:
    """KTableAggregateTest.testShouldNotSendTransientStateIfNotUpgrading: a key the
    regrouping keeps is subtracted and added in one step (no count of 0 in between)."""
    b = StreamsBuilder()
    (
        b.table("input-topic", Consumed.with_(S, S))
        .group_by(lambda k, v: (k, v), Grouped.with_(S, S))
        .count()
        .to_stream()
        .to("output-topic", Produced.with_(S, L))
    )
    d = drive(b.build())
    topic = d.create_input_topic("input-topic", S, S)
    topic.pipe_input("1", "", 8)
    topic.pipe_input("1", "", 9)
    out = d.create_output_topic("output-topic", S, L).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in out] == [("1", 1, 8), ("1", 1, 9)]
