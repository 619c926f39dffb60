"""Kafka's ``KTableKTableLeftJoinTest`` and ``KTableKTableOuterJoinTest``: the inner join's
steps (:mod:`tests.conformance.test_ktable_ktable_inner_join`) as a left and as an outer
join. A missing side joins ``null``; the left join ends when its left side is deleted,
the outer join only when both are."""

from __future__ import annotations

import random
from typing import Any

import pytest

from common.errors import TopologyError
from common.serdes import Serdes
from statestores.stores import Stores
from tests.conformance.test_ktable_ktable_inner_join import KEYS, TableJoin
from topology import Consumed, Grouped, Materialized, StreamsBuilder


def outer_steps(join: TableJoin, *, outer: bool) -> None:
    """Kafka's ``testJoin`` of the left (``outer`` False) or outer join."""
    assert len(join.topology.copartition_groups) == 1
    with pytest.raises(TopologyError, match="topic1"):
        join.topology.check_copartitioning({"topic1": 2, "topic2": 3})
    for i in range(2):
        join.left.pipe_input(KEYS[i], f"X{KEYS[i]}", 5 + i)
    join.left.pipe_input(None, "SomeVal", 42)
    assert join.results() == [(0, "X0+None", 5), (1, "X1+None", 6)]
    for i in range(2):
        join.right.pipe_input(KEYS[i], f"Y{KEYS[i]}", 10 * i)
    join.right.pipe_input(None, "AnotherVal", 73)
    assert join.results() == [(0, "X0+Y0", 5), (1, "X1+Y1", 10)]
    for key in KEYS:
        join.left.pipe_input(key, f"XX{key}", 7)
    assert join.results() == [
        (0, "XX0+Y0", 7),
        (1, "XX1+Y1", 10),
        (2, "XX2+None", 7),
        (3, "XX3+None", 7),
    ]
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
    assert join.results() == [(0, "XXX0+None", 6), (1, "XXX1+None", 7)]
    for key in KEYS:
        join.left.pipe_input(key, f"XXXX{key}", 13)
    assert join.results() == [
        (0, "XXXX0+None", 13),
        (1, "XXXX1+None", 13),
        (2, "XXXX2+YY2", 13),
        (3, "XXXX3+YY3", 15),
    ]
    for key, ts in zip(KEYS, (0, 42, 5, 20), strict=True):
        join.left.pipe_input(key, None, ts)
    last = [(2, "None+YY2", 10), (3, "None+YY3", 20)] if outer else [(2, None, 10), (3, None, 20)]
    assert join.results() == [(0, None, 0), (1, None, 42), *last]


def test_left_join(drive: Any) -> None:
    """KTableKTableLeftJoinTest.testJoin"""
    outer_steps(TableJoin(drive, "left_join"), outer=False)


def test_outer_join(drive: Any) -> None:
    """KTableKTableOuterJoinTest.testJoin"""
    outer_steps(TableJoin(drive, "outer_join"), outer=True)


def test_should_not_throw_when_multi_cache_evictions(drive: Any) -> None:
    """KTableKTableLeftJoinTest.shouldNotThrowIllegalStateExceptionWhenMultiCacheEvictions:
    seven tables, an aggregation and six chained left joins (one of a join), 7,000 random
    updates through the caches; nothing fails."""
    lk, s = Serdes.Long(), Serdes.String()
    consumed = Consumed.with_(lk, s)
    b = StreamsBuilder()

    def table(topic: str) -> Any:
        return b.table(
            topic,
            consumed,
            Materialized.as_(Stores.in_memory_key_value_store(f"{topic}-base-store")),
        )

    agg = (
        table("agg")
        .group_by(lambda k, v: (k, v), Grouped.with_(lk, s))
        .reduce(
            lambda a, v: a + v,
            lambda a, v: a + v,
            Materialized.as_(Stores.in_memory_key_value_store("agg-store")),
        )
    )
    one, two, three, four, five, six = (
        table(t)
        for t in ("tableOne", "tableTwo", "tableThree", "tableFour", "tableFive", "tableSix")
    )
    joiner = lambda v1, v2: f"{v1}+{v2}"  # noqa: E731
    eight = six.left_join(one.map_values(str.upper), joiner)
    (
        agg.left_join(one, joiner)
        .left_join(two, joiner)
        .left_join(three, joiner)
        .left_join(four, joiner)
        .left_join(five, joiner)
        .left_join(eight, joiner)
        .map_values(str.upper)
    )
    driver = drive(b.build())
    values = ["a", "AA", "BBB", "CCCC", "DD", "EEEEEEEE", "F", "GGGGGGGGGGGGGGG", "HHH", "J"]
    rng = random.Random(7)
    topics = {t: driver.create_input_topic(t, lk, s) for t in ("agg", "tableOne", "tableTwo")}
    topics.update(
        {
            t: driver.create_input_topic(t, lk, s)
            for t in ("tableThree", "tableFour", "tableFive", "tableSix")
        }
    )
    for _ in range(1000):
        for topic in topics.values():
            topic.pipe_input(rng.randrange(1000), rng.choice(values))
