"""Kafka's ``KStreamKTableJoinTest`` scenarios with a versioned table and a grace period
(KIP-914, KIP-923), with ``StreamTableJoinIntegrationTest`` and
``StreamTableJoinWithGraceIntegrationTest`` (the versioned ones, rewritten on the test
driver) and the versioned-table facts of ``KTableSource`` (an update older than the
history retention is not forwarded).

A stream record is joined with the table *as of its timestamp*; with a grace period it
waits in the join's buffer until stream time passes it by the grace, then is joined in
timestamp order, and a record already later than that is joined at once.
"""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import TopologyError
from statestores.stores import Stores
from tests.conformance.conftest import I, L, S
from topology import Consumed, Joined, Materialized, Produced, StreamsBuilder

KEYS = (0, 1, 2, 3)
GRACE_MSG = "KTable must be versioned to use a grace period in a stream table join."


class GraceJoin:
    """Kafka's ``makeJoin(grace)``: ``stream.join(table, X+Y, Joined(..., "Grace",
    grace))`` over a table in the versioned store ``V-grace`` (5 minutes of history)."""

    def __init__(self, drive: Any, grace: int) -> None:
        builder = StreamsBuilder()
        stream = builder.stream("streamTopic", Consumed.with_(I, S))
        supplier = Stores.persistent_versioned_key_value_store("V-grace", 300_000)
        table = builder.table("tableTopic2", Consumed.with_(I, S), Materialized.as_(supplier))
        joined = Joined.with_(I, S, S, "Grace", grace)
        stream.join(table, lambda v1, v2: f"{v1}+{v2}", joined).to("out")
        self.topology = builder.build()
        self.driver = drive(self.topology, **{"default.key.serde": "int"})
        self.stream = self.driver.create_input_topic("streamTopic", I, S)
        self.table = self.driver.create_input_topic("tableTopic2", I, S)
        self.out = self.driver.create_output_topic("out", I, S)

    def push_stream(self, count: int, prefix: str) -> None:
        for i in range(count):
            self.stream.pipe_input(KEYS[i], f"{prefix}{KEYS[i]}", i)

    def push_table(self, count: int, prefix: str) -> None:
        for i in range(count):
            self.table.pipe_input(KEYS[i], f"{prefix}{KEYS[i]}", 0)

    def results(self) -> list[tuple[Any, str, int]]:
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


def test_should_delay_join_by_grace_period(drive: Any) -> None:
    """KStreamKTableJoinTest.shouldDelayJoinByGracePeriod"""
    j = GraceJoin(drive, 2)
    j.push_table(4, "Y")
    assert j.results() == []
    j.push_stream(4, "X")
    assert j.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1)]
    j.push_table(4, "YY")
    assert j.results() == []
    j.push_stream(4, "X")
    assert j.results() == [(0, "X0+YY0", 0), (1, "X1+YY1", 1)]
    j.stream.pipe_input(5, "test", 7)
    assert j.results() == [
        (2, "X2+YY2", 2),
        (2, "X2+YY2", 2),
        (3, "X3+YY3", 3),
        (3, "X3+YY3", 3),
    ]
    j.push_table(4, "YYY")
    assert j.results() == []


def test_should_handle_late_joins_with_grace_period(drive: Any) -> None:
    """KStreamKTableJoinTest.shouldHandleLateJoinsWithGracePeriod"""
    j = GraceJoin(drive, 2)
    j.push_table(4, "Y")
    assert j.results() == []
    j.push_stream(4, "X")  # four into the buffer, the first two evicted
    assert j.results() == [(0, "X0+Y0", 0), (1, "X1+Y1", 1)]
    j.push_stream(1, "X")  # late: joined at once, nothing else evicted
    assert j.results() == [(0, "X0+Y0", 0)]


def test_should_describe_the_grace_buffer(drive: Any) -> None:
    """KStreamImpl.doStreamTableJoin: the join node is connected to the table's store and
    to its ``<join name>-Buffer`` store."""
    j = GraceJoin(drive, 2)
    text = str(j.topology.describe())
    assert "Processor: Grace (stores: [V-grace, Grace-Buffer])" in text
    assert "Processor: KTABLE-SOURCE-0000000002 (stores: [V-grace])" in text


def test_should_fail_if_table_is_not_versioned() -> None:
    """KStreamKTableJoinTest.shouldFailIfTableIsNotVersioned"""
    builder = StreamsBuilder()
    stream = builder.stream("topic", Consumed.with_(S, S))
    table = builder.table("topic2", Consumed.with_(S, S))
    with pytest.raises(TopologyError, match=GRACE_MSG):
        stream.join(table, lambda a, b: a + b, Joined.with_(S, S, S, "first-join", 6))


def test_should_fail_if_table_is_not_versioned_but_materialization_is_inherited() -> None:
    """KStreamKTableJoinTest.shouldFailIfTableIsNotVersionedButMaterializationIsInherited"""
    builder = StreamsBuilder()
    stream = builder.stream("topic", Consumed.with_(S, S))
    source = builder.table(
        "topic2", Consumed.with_(S, S), Materialized.as_(Stores.in_memory_key_value_store("tableB"))
    )
    table = source.filter(lambda k, v: True)
    with pytest.raises(TopologyError, match=GRACE_MSG):
        stream.join(table, lambda a, b: a + b, Joined.with_(S, S, S, "first-join", 6))
        builder.build()


def test_should_not_fail_if_table_is_versioned_but_materialization_is_inherited(
    drive: Any,
) -> None:
    """KStreamKTableJoinTest.shouldNotFailIfTableIsVersionedButMaterializationIsInherited
    (and the inherited table is read as of the record's time, through the filter)"""
    builder = StreamsBuilder()
    stream = builder.stream("topic", Consumed.with_(S, S))
    supplier = Stores.persistent_versioned_key_value_store("tableB", 300_000)
    source = builder.table("topic2", Consumed.with_(S, S), Materialized.as_(supplier))
    table = source.filter(lambda k, v: v != "hidden")
    joined = Joined.with_(S, S, S, "first-join", 6)
    stream.join(table, lambda a, b: a + b, joined).to("out-one")
    driver = drive(builder.build())
    left = driver.create_input_topic("topic", S, S)
    right = driver.create_input_topic("topic2", S, S)
    out = driver.create_output_topic("out-one", S, S)
    right.pipe_input("k", "a", 1)
    right.pipe_input("k", "hidden", 5)
    left.pipe_input("k", "x", 3)
    left.pipe_input("k", "y", 6)
    left.pipe_input("j", "z", 20)  # evicts both
    assert out.read_key_values_to_list() == [("k", "xa")]


def test_should_fail_if_grace_period_is_longer_than_history_retention() -> None:
    """KStreamKTableJoinTest.shouldFailIfGracePeriodIsLongerThanHistoryRetention"""
    builder = StreamsBuilder()
    stream = builder.stream("topic", Consumed.with_(S, S))
    supplier = Stores.persistent_versioned_key_value_store("tableB", 300_000)
    table = builder.table("topic2", Consumed.with_(S, S), Materialized.as_(supplier))
    with pytest.raises(TopologyError, match="History retention must be at least grace period."):
        stream.join(table, lambda a, b: a + b, Joined.with_(S, S, S, "first-join", 360_000))
        builder.build()


def test_should_fail_if_grace_period_is_longer_than_history_retention_and_inherited_store() -> None:
    """KStreamKTableJoinTest.shouldFailIfGracePeriodIsLongerThanHistoryRetentionAndInheritedStore"""
    builder = StreamsBuilder()
    stream = builder.stream("topic", Consumed.with_(S, S))
    supplier = Stores.persistent_versioned_key_value_store("V-grace", 0)
    source = builder.table("topic2", Consumed.with_(S, S), Materialized.as_(supplier))
    table = source.filter(lambda k, v: True)
    with pytest.raises(TopologyError, match="History retention must be at least grace period."):
        stream.join(table, lambda a, b: a + b, Joined.with_(S, S, S, "first-join", 6))
        builder.build()


#: AbstractJoinIntegrationTest.input: (topic, value, timestamp), all of key 0
INPUT = [
    ("left", None, 1),
    ("right", None, 2),
    ("left", "A", 3),
    ("right", "a", 4),
    ("left", "B", 5),
    ("right", "b", 6),
    ("left", None, 7),
    ("right", None, 8),
    ("left", "C", 9),
    ("right", "c", 10),
    ("right", None, 11),
    ("left", None, 12),
    ("right", None, 13),
    ("right", "d", 7),  # out of order, null the latest
    ("left", "D", 6),
    ("left", None, 2),
    ("right", None, 3),
    ("right", "e", 14),
    ("left", "E", 15),
    ("left", None, 10),  # out of order, non-null the latest
    ("right", None, 9),
    ("left", "F", 4),
    ("right", "f", 3),
]


def _run(drive: Any, *, left: bool, grace: int | None, cache: bool) -> list[Any]:
    builder = StreamsBuilder()
    stream = builder.stream("left", Consumed.with_(L, S))
    supplier = Stores.persistent_versioned_key_value_store("table-store", 300_000)
    table = builder.table("right", Consumed.with_(L, S), Materialized.as_(supplier))
    joined = Joined.with_(L, S, S, "Grace", grace) if grace is not None else None
    method = stream.left_join if left else stream.join
    method(table, lambda a, b: f"{a}-{'null' if b is None else b}", joined).to(
        "out", Produced.with_(L, S)
    )
    config = {"statestore.cache.max.bytes": 10 << 20 if cache else 0}
    driver = drive(builder.build(), **config)
    topics = {t: driver.create_input_topic(t, L, S) for t in ("left", "right")}
    out = driver.create_output_topic("out", L, S)
    steps = []
    for topic, value, ts in INPUT:
        topics[topic].pipe_input(0, value, ts)
        steps.append([(r.value, r.timestamp) for r in out.read_records_to_list()])
    return steps


def _expected(results: dict[int, tuple[str, int]]) -> list[Any]:
    return [[results[i]] if i in results else [] for i in range(len(INPUT))]


@pytest.mark.parametrize("cache", [True, False])
def test_inner_with_versioned_store(drive: Any, cache: bool) -> None:
    """StreamTableJoinIntegrationTest.testInnerWithVersionedStore"""
    expected = {4: ("B-a", 5), 14: ("D-b", 6), 18: ("E-e", 15), 21: ("F-a", 4)}
    assert _run(drive, left=False, grace=None, cache=cache) == _expected(expected)


@pytest.mark.parametrize("cache", [True, False])
def test_left_with_versioned_store(drive: Any, cache: bool) -> None:
    """StreamTableJoinIntegrationTest.testLeftWithVersionedStore"""
    expected = {
        2: ("A-null", 3),
        4: ("B-a", 5),
        8: ("C-null", 9),
        14: ("D-b", 6),
        18: ("E-e", 15),
        21: ("F-a", 4),
    }
    assert _run(drive, left=True, grace=None, cache=cache) == _expected(expected)


@pytest.mark.parametrize("cache", [True, False])
def test_inner_with_versioned_store_and_grace(drive: Any, cache: bool) -> None:
    """StreamTableJoinWithGraceIntegrationTest.testInnerWithVersionedStore"""
    expected = {8: ("B-a", 5), 14: ("D-b", 6), 21: ("F-a", 4)}
    assert _run(drive, left=False, grace=2, cache=cache) == _expected(expected)


@pytest.mark.parametrize("cache", [True, False])
def test_left_with_versioned_store_and_grace(drive: Any, cache: bool) -> None:
    """StreamTableJoinWithGraceIntegrationTest.testLeftWithVersionedStore"""
    expected = {
        4: ("A-null", 3),
        8: ("B-a", 5),
        14: ("D-b", 6),
        18: ("C-null", 9),
        21: ("F-a", 4),
    }
    assert _run(drive, left=True, grace=2, cache=cache) == _expected(expected)


class VersionedTable:
    """``builder.table(topic, Materialized.as_(versioned store))`` and its changes."""

    def __init__(self, drive: Any, retention: int = 100) -> None:
        builder = StreamsBuilder()
        supplier = Stores.persistent_versioned_key_value_store("versioned", retention)
        table = builder.table("topic", Consumed.with_(S, S), Materialized.as_(supplier))
        table.to_stream().to("out")
        self.driver = drive(builder.build())
        self.input = self.driver.create_input_topic("topic", S, S)
        self.out = self.driver.create_output_topic("out", S, S)
        self.store = self.driver.get_versioned_key_value_store("versioned")

    def results(self) -> list[tuple[str, str | None, int]]:
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


def test_versioned_table_source_does_not_forward_expired_updates(drive: Any) -> None:
    """KTableSource.KTableSourceProcessor.process: a versioned store's put that returns
    PUT_RETURN_CODE_NOT_PUT (older than the history retention) is not forwarded"""
    t = VersionedTable(drive)
    t.input.pipe_input("a", "1", 10)
    t.input.pipe_input("b", "2", 500)
    t.input.pipe_input("a", "old", 300)  # 500 - 100 > 300: not put, not forwarded
    t.input.pipe_input("a", "3", 400)  # within the history retention
    assert t.results() == [("a", "1", 10), ("b", "2", 500), ("a", "3", 400)]
    found = t.store.get("a")
    assert (found.value, found.timestamp) == ("3", 400)


def test_versioned_table_source_forwards_out_of_order_updates_it_keeps(drive: Any) -> None:
    """KTableSource.KTableSourceProcessor.process: an out-of-order update within the history
    retention is put (as an older version, the latest unchanged) and forwarded, with
    ``isLatest`` false in Kafka"""
    t = VersionedTable(drive)
    t.input.pipe_input("a", "new", 50)
    t.input.pipe_input("a", "older", 20)
    t.input.pipe_input("a", None, 60)
    assert t.results() == [("a", "new", 50), ("a", "older", 20), ("a", None, 60)]
    assert t.store.get("a") is None
    found = t.store.get("a", 30)
    assert (found.value, found.timestamp, found.valid_to) == ("older", 20, 50)


def test_versioned_table_source_columnar_equals_records(drive: Any) -> None:
    """VersionedKeyValueStoreIntegrationTest.shouldPutGetAndDelete: the table's versions
    after many updates of few keys (batched by the columnar engine)"""
    t = VersionedTable(drive, retention=1_000)
    for i in range(30):
        t.input.pipe_input("abc"[i % 3], None if i % 7 == 6 else f"v{i}", 100 + (i * 37) % 50)
    history = [t.store.get_versions(k, ascending=True) for k in "abc"]
    assert [len(h) for h in history] == [8, 9, 9]  # the distinct times of values
    assert t.store.get("b", 120) is not None
