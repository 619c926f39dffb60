"""Kafka's ``KTableMapValuesTest``: ``KTable.map_values``, materialized or not, with and
without old values.

Kafka's test keeps the default cache size (10 MiB): a materialized ``map_values`` caches,
and the driver's commit after each record flushes it. Values arrive as strings and are
mapped to integers. The helpers (a capturing processor, value-getter probes) are those of
:mod:`tests.conformance.test_ktable_filter`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from tests.conformance.conftest import I, S
from tests.conformance.test_ktable_filter import (
    Captured,
    capture,
    first_changes,
    pipe_first,
    probes_of,
    read_getters,
    taken,
)
from topology import (
    Change,
    Consumed,
    KTable,
    Materialized,
    Produced,
    StreamsBuilder,
    ValueAndTimestamp,
)


def first_digit(value: str) -> int:
    """Kafka's ``value.charAt(0) - 48``."""
    return ord(value[0]) - 48


def negated(value: str) -> int:
    """Kafka's ``Integer.valueOf(value) * (-1)``."""
    return -int(value)


def as_int(name: str) -> Materialized:
    """Kafka's ``Materialized.as(name).withValueSerde(Serdes.Integer())``."""
    return Materialized.as_(name).with_value_serde(I)


def pipe_table(drive: Any, b: StreamsBuilder, table: KTable[Any, Any]) -> None:
    """Kafka's ``doTestKTable``: each first value of four keys, mapped, in input order."""
    table.to_stream().to("out", Produced.with_(S, I))
    d = drive(b.build())
    i = d.create_input_topic("topic1", S, S)
    for key, value, ts in [("A", "1", 5), ("B", "2", 25), ("C", "3", 20), ("D", "4", 10)]:
        i.pipe_input(key, value, ts)
    records = d.create_output_topic("out", S, I).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        ("A", 1, 5),
        ("B", 2, 25),
        ("C", 3, 20),
        ("D", 4, 10),
    ]


def test_ktable(drive: Any) -> None:
    """KTableMapValuesTest.testKTable: an unmaterialized map_values forwards each mapped
    update with its timestamp."""
    b = StreamsBuilder()
    table = b.table("topic1", Consumed.with_(S, S)).map_values(first_digit)
    pipe_table(drive, b, table)


def test_queryable_ktable(drive: Any) -> None:
    """KTableMapValuesTest.testQueryableKTable: materialized (and cached), the same."""
    b = StreamsBuilder()
    table = b.table("topic1", Consumed.with_(S, S)).map_values(first_digit, as_int("anyName"))
    assert table.queryable_store_name == "anyName"
    pipe_table(drive, b, table)


def test_queryable_value_getter(drive: Any) -> None:
    """KTableMapValuesTest.testQueryableValueGetter: the value getters of two materialized
    map_values read their stores: the mapped value and its update's timestamp; a deletion
    removes the key."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, S))
    t2 = t1.map_values(int, as_int("store2"))
    t3 = t1.map_values(negated, as_int("store3"))
    t4 = t1.map_values(int)
    names = [t.queryable_store_name for t in (t2, t3, t4)]
    assert names == ["store2", "store3", None]
    probes = probes_of(b, {"t2": t2, "t3": t3})
    d = drive(b.build())
    i = d.create_input_topic("topic1", S, S)
    vt, getters = ValueAndTimestamp, partial(read_getters, probes)

    for key, ts in [("A", 50), ("B", 10), ("C", 30)]:
        i.pipe_input(key, "01", ts)
    assert getters() == ([vt(1, 50), vt(1, 10), vt(1, 30)], [vt(-1, 50), vt(-1, 10), vt(-1, 30)])
    i.pipe_input("A", "02", 25)
    i.pipe_input("B", "02", 20)
    assert getters() == ([vt(2, 25), vt(2, 20), vt(1, 30)], [vt(-2, 25), vt(-2, 20), vt(-1, 30)])
    i.pipe_input("A", "03", 35)
    assert getters() == ([vt(3, 35), vt(2, 20), vt(1, 30)], [vt(-3, 35), vt(-2, 20), vt(-1, 30)])
    i.pipe_input("A", None, 1)
    assert getters() == ([None, vt(2, 20), vt(1, 30)], [None, vt(-2, 20), vt(-1, 30)])


def pipe_changes(drive: Any, b: StreamsBuilder, seen: Captured, old: bool) -> None:
    """The changes a map_values forwards over three keys' updates and a deletion: with the
    old values when ``old`` (Kafka's ``testSendingOldValues``), else without."""

    def before(value: int) -> int | None:
        return value if old else None

    d = drive(b.build())
    i = d.create_input_topic("topic1", S, S)
    pipe_first(i, "01")
    assert taken(seen) == first_changes(1)
    i.pipe_input("A", "02", 10)
    i.pipe_input("B", "02", 8)
    assert taken(seen) == [("A", Change(2, before(1)), 10), ("B", Change(2, before(1)), 8)]
    i.pipe_input("A", "03", 20)
    assert taken(seen) == [("A", Change(3, before(2)), 20)]
    i.pipe_input("A", None, 30)
    assert taken(seen) == [("A", Change(None, before(3)), 30)]


def test_not_sending_old_value(drive: Any) -> None:
    """KTableMapValuesTest.testNotSendingOldValue: by default neither the source table nor
    the map_values sends old values."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, S))
    t2 = t1.map_values(int)
    seen = capture(b, t2, "proc")
    assert (t1.params.send_old_values, t2.params.send_old_values) == (False, False)
    pipe_changes(drive, b, seen, old=False)


def test_enable_sending_old_values_on_parent_if_not_materialized(drive: Any) -> None:
    """KTableMapValuesTest.shouldEnableSendingOldValuesOnParentIfMapValuesNotMaterialized:
    an unmaterialized map_values computes its old values from its parent's, so the source
    table sends them too."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, S))
    t2 = t1.map_values(int)
    t2.enable_send_old_values()
    assert (t1.params.send_old_values, t2.params.send_old_values) == (True, True)
    pipe_changes(drive, b, capture(b, t2, "proc"), old=True)


def test_not_enable_sending_old_values_on_parent_if_materialized(drive: Any) -> None:
    """KTableMapValuesTest.shouldNotEnableSendingOldValuesOnParentIfMapValuesMaterialized:
    a materialized map_values reads its old values from its own store; the source table
    sends none."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, S))
    t2 = t1.map_values(int, as_int("bob"))
    t2.enable_send_old_values()
    assert (t1.params.send_old_values, t2.params.send_old_values) == (False, True)
    pipe_changes(drive, b, capture(b, t2, "proc"), old=True)
