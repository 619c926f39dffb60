"""Kafka's ``KTableFilterTest``: ``KTable.filter`` and ``filter_not``, materialized or not,
with and without old values.

As in Kafka's test, every scenario runs with ``statestore.cache.max.bytes=0``: no store has
a caching layer, so every update is forwarded as it is processed. The predicate keeps even
values. A ``capture`` processor under a table node plays Kafka's ``MockApiProcessor``: it
records the :class:`~topology.Change` values the node forwards.
"""

from __future__ import annotations

from typing import Any

import pytest

from common.config import StreamsDeprecationWarning
from tests.conformance.conftest import I, S
from topology import (
    Change,
    Consumed,
    KTable,
    Materialized,
    Processor,
    Produced,
    StreamsBuilder,
    ValueAndTimestamp,
)
from topology.graph.graph import ProcessorSpec

UNCACHED = {"statestore.cache.max.bytes": 0}
Captured = list[tuple[Any, Any, int]]


def even(key: str, value: int) -> bool:
    """Kafka's predicate: the value is even."""
    return value % 2 == 0


def accept(key: str, value: str) -> bool:
    """The skip-null scenarios' predicate: the value is ``accept`` in any case."""
    return value.lower() == "accept"


class _Capture(Processor[Any, Any, Any, Any]):
    def __init__(self, seen: Captured) -> None:
        self.seen = seen

    def process(self, record: Any) -> None:
        self.seen.append((record.key, record.value, record.timestamp))


class Probe(Processor[Any, Any, Any, Any]):
    """Holds a table's value getter, opened with this node's context (Kafka's test inits
    its getters with the table node's context)."""

    def __init__(self, table: KTable[Any, Any]) -> None:
        self.getter = table.value_getter().make()

    def init(self, context: Any) -> None:
        self.getter.init(context)

    def process(self, record: Any) -> None:
        pass


def probes_of(b: StreamsBuilder, tables: dict[str, KTable[Any, Any]]) -> dict[str, Probe]:
    """Add a :class:`Probe` under each table, connected to the stores its getter reads;
    return the probes by table name, filled once the driver has built the task."""
    probes: dict[str, Probe] = {}

    def make(name: str, table: KTable[Any, Any]) -> Probe:
        probes[name] = Probe(table)
        return probes[name]

    for name, table in tables.items():
        b.graph.add_processor(
            ProcessorSpec(
                name=f"probe-{name}",
                supplier=lambda name=name, table=table: make(name, table),  # type: ignore[misc]
                parents=(table.node,),
                stores=table.value_getter().store_names,
            )
        )
    return probes


def capture(b: StreamsBuilder, table: KTable[Any, Any], name: str) -> Captured:
    """Add a processor under ``table``'s node; return the list of what it receives."""
    seen: Captured = []
    b.graph.add_processor(
        ProcessorSpec(name=name, supplier=lambda: _Capture(seen), parents=(table.node,))
    )
    return seen


#: The first updates of Kafka's old-value scenarios: key and timestamp.
FIRST = [("A", 5), ("B", 10), ("C", 15)]


def pipe_first(i: Any, value: Any) -> None:
    """Pipe ``value`` for each of :data:`FIRST`."""
    for key, ts in FIRST:
        i.pipe_input(key, value, ts)


def first_changes(new: Any) -> Captured:
    """The change ``(new, None)`` of each of :data:`FIRST`."""
    return [(key, Change(new, None), ts) for key, ts in FIRST]


def read_getters(probes: dict[str, Probe]) -> tuple[list[Any], list[Any]]:
    """What the getters of ``t2`` and ``t3`` hold for keys A, B and C."""
    g2, g3 = probes["t2"].getter, probes["t3"].getter
    return [g2.get(k) for k in "ABC"], [g3.get(k) for k in "ABC"]


def taken(seen: Captured) -> Captured:
    """Return what ``seen`` holds and clear it (Kafka's ``checkAndClearProcessResult``)."""
    out = list(seen)
    seen.clear()
    return out


def pipe_pass_through(drive: Any, b: StreamsBuilder, filtered: Any, negated: Any) -> None:
    """Kafka's ``doTestKTable``: both filters' outputs over six updates."""
    filtered.to_stream().to("out2", Produced.with_(S, I))
    negated.to_stream().to("out3", Produced.with_(S, I))
    d = drive(b.build(), **UNCACHED)
    i = d.create_input_topic("topic1", S, I)
    for key, value, ts in [
        ("A", 1, 10),
        ("B", 2, 5),
        ("C", 3, 8),
        ("D", 4, 14),
        ("A", None, 18),
        ("B", None, 15),
    ]:
        i.pipe_input(key, value, ts)

    def read(topic: str) -> Captured:
        records = d.create_output_topic(topic, S, I).read_records_to_list()
        return [(r.key, r.value, r.timestamp) for r in records]

    assert read("out2") == [
        ("A", None, 10),
        ("B", 2, 5),
        ("C", None, 8),
        ("D", 4, 14),
        ("A", None, 18),
        ("B", None, 15),
    ]
    assert read("out3") == [
        ("A", 1, 10),
        ("B", None, 5),
        ("C", 3, 8),
        ("D", None, 14),
        ("A", None, 18),
        ("B", None, 15),
    ]


def test_pass_through_without_materialization(drive: Any) -> None:
    """KTableFilterTest.shouldPassThroughWithoutMaterialization: a filtered-out update, or
    a deletion, is forwarded as a deletion; no table is queryable."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, I))
    t2 = t1.filter(even)
    t3 = t1.filter_not(even)
    assert (t1.queryable_store_name, t2.queryable_store_name, t3.queryable_store_name) == (
        None,
        None,
        None,
    )
    pipe_pass_through(drive, b, t2, t3)


def test_pass_through_on_materialization(drive: Any) -> None:
    """KTableFilterTest.shouldPassThroughOnMaterialization: materialized without a cache,
    the filter forwards the same deletions, a never-seen key's included."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, I))
    t2 = t1.filter(even, Materialized.as_("store2"))
    t3 = t1.filter_not(even)
    assert (t1.queryable_store_name, t2.queryable_store_name, t3.queryable_store_name) == (
        None,
        "store2",
        None,
    )
    pipe_pass_through(drive, b, t2, t3)


def test_get_values_on_materialization(drive: Any) -> None:
    """KTableFilterTest.shouldGetValuesOnMaterialization: the value getters of a
    materialized filter and filter_not read their stores: the value and its timestamp, or
    nothing once filtered out or deleted."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, I))
    t2 = t1.filter(even, Materialized.as_("store2"))
    t3 = t1.filter_not(even, Materialized.as_("store3"))
    t4 = t1.filter_not(even)
    names = [t.queryable_store_name for t in (t1, t2, t3, t4)]
    assert names == [None, "store2", "store3", None]
    probes = probes_of(b, {"t2": t2, "t3": t3})
    d = drive(b.build(), **UNCACHED)
    i = d.create_input_topic("topic1", S, I)
    vt = ValueAndTimestamp

    for key, ts in [("A", 5), ("B", 10), ("C", 15)]:
        i.pipe_input(key, 1, ts)
    assert read_getters(probes) == ([None, None, None], [vt(1, 5), vt(1, 10), vt(1, 15)])
    i.pipe_input("A", 2, 10)
    i.pipe_input("B", 2, 5)
    assert read_getters(probes) == ([vt(2, 10), vt(2, 5), None], [None, None, vt(1, 15)])
    i.pipe_input("A", 3, 15)
    assert read_getters(probes) == ([None, vt(2, 5), None], [vt(3, 15), None, vt(1, 15)])
    i.pipe_input("A", None, 10)
    i.pipe_input("B", None, 20)
    assert read_getters(probes) == ([None, None, None], [None, None, vt(1, 15)])


def pipe_not_sending_old(drive: Any, b: StreamsBuilder, t1: Any, t2: Any) -> None:
    """Kafka's ``doTestNotSendingOldValue``: the source table and the filter forward
    changes without old values; the filter forwards every deletion."""
    p1, p2 = capture(b, t1, "proc1"), capture(b, t2, "proc2")
    d = drive(b.build(), **UNCACHED)
    i = d.create_input_topic("topic1", S, I)
    pipe_first(i, 1)
    assert taken(p1) == first_changes(1)
    assert taken(p2) == first_changes(None)
    i.pipe_input("A", 2, 15)
    i.pipe_input("B", 2, 8)
    assert taken(p1) == [("A", Change(2, None), 15), ("B", Change(2, None), 8)]
    assert taken(p2) == [("A", Change(2, None), 15), ("B", Change(2, None), 8)]
    i.pipe_input("A", 3, 20)
    assert taken(p1) == [("A", Change(3, None), 20)]
    assert taken(p2) == [("A", Change(None, None), 20)]
    i.pipe_input("A", None, 10)
    i.pipe_input("B", None, 20)
    assert taken(p1) == [("A", Change(None, None), 10), ("B", Change(None, None), 20)]
    assert taken(p2) == [("A", Change(None, None), 10), ("B", Change(None, None), 20)]


def test_not_send_old_values_without_materialization(drive: Any) -> None:
    """KTableFilterTest.shouldNotSendOldValuesWithoutMaterialization."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, I))
    pipe_not_sending_old(drive, b, t1, t1.filter(even))


def test_not_send_old_values_on_materialization(drive: Any) -> None:
    """KTableFilterTest.shouldNotSendOldValuesOnMaterialization: a materialized filter
    without a cache forwards each change as it stores it, a never-seen key's deletion too."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, I))
    pipe_not_sending_old(drive, b, t1, t1.filter(even, Materialized.as_("store2")))


def test_not_enable_sending_old_values_if_not_materialized_and_not_forced(drive: Any) -> None:
    """KTableFilterTest.shouldNotEnableSendingOldValuesIfNotAlreadyMaterializedAndNotForcedToMaterialize:
    over a source table that is not materialized, a filter sends no old values unless a
    downstream operator forces the source's materialization. This project's
    ``enable_send_old_values`` always forces it, so not forcing is not calling it: the
    source stays unmaterialized and no node sends old values."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, I))
    t2 = t1.filter(even)
    assert (t1.params.send_old_values, t2.params.send_old_values) == (False, False)
    assert t1.params.store_name is None
    pipe_not_sending_old(drive, b, t1, t2)


def pipe_sending_old(drive: Any, b: StreamsBuilder, t1: Any, t2: Any) -> None:
    """Kafka's ``doTestSendingOldValue``: the filter sends old values, so a filtered-out
    update of a key it never forwarded is not forwarded; the source sends its old values
    when it is asked to."""
    parent_old = t1.params.send_old_values
    p1, p2 = capture(b, t1, "proc1"), capture(b, t2, "proc2")
    d = drive(b.build(), **UNCACHED)
    i = d.create_input_topic("topic1", S, I)

    def old(value: int) -> int | None:
        return value if parent_old else None

    pipe_first(i, 1)
    assert taken(p1) == first_changes(1)
    assert taken(p2) == []
    i.pipe_input("A", 2, 15)
    i.pipe_input("B", 2, 8)
    assert taken(p1) == [("A", Change(2, old(1)), 15), ("B", Change(2, old(1)), 8)]
    assert taken(p2) == [("A", Change(2, None), 15), ("B", Change(2, None), 8)]
    i.pipe_input("A", 3, 20)
    assert taken(p1) == [("A", Change(3, old(2)), 20)]
    assert taken(p2) == [("A", Change(None, 2), 20)]
    i.pipe_input("A", None, 10)
    i.pipe_input("B", None, 20)
    assert taken(p1) == [("A", Change(None, old(3)), 10), ("B", Change(None, old(2)), 20)]
    assert taken(p2) == [("B", Change(None, 2), 20)]


def test_enable_send_old_values_when_not_materialized_but_forced(drive: Any) -> None:
    """KTableFilterTest.shouldEnableSendOldValuesWhenNotMaterializedAlreadyButForcedToMaterialize:
    asking an unmaterialized filter for old values materializes its source table; both
    send old values."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, I))
    t2 = t1.filter(even)
    t2.enable_send_old_values()
    assert (t1.params.send_old_values, t2.params.send_old_values) == (True, True)
    pipe_sending_old(drive, b, t1, t2)


def test_enable_send_old_values_when_materialized_and_forced(drive: Any) -> None:
    """KTableFilterTest.shouldEnableSendOldValuesWhenMaterializedAlreadyAndForcedToMaterialize:
    a materialized filter reads its old values from its own store; its source table is
    left alone and sends none."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, I))
    t2 = t1.filter(even, Materialized.as_("store2"))
    t2.enable_send_old_values()
    assert (t1.params.send_old_values, t2.params.send_old_values) == (False, True)
    pipe_sending_old(drive, b, t1, t2)


def test_send_old_values_when_enabled_on_upstream_materialization(drive: Any) -> None:
    """KTableFilterTest.shouldSendOldValuesWhenEnabledOnUpStreamMaterialization: over a
    materialized source table, old values are sent by both."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, I), Materialized.as_("store2"))
    t2 = t1.filter(even)
    t2.enable_send_old_values()
    assert (t1.params.send_old_values, t2.params.send_old_values) == (True, True)
    pipe_sending_old(drive, b, t1, t2)


def pipe_skip_null(drive: Any, b: StreamsBuilder, t1: Any, t2: Any) -> None:
    """Kafka's ``doTestSkipNullOnMaterialization`` where nulls are skipped: three rejected
    first updates reach the source's children, none the filter's."""
    p1, p2 = capture(b, t1, "proc1"), capture(b, t2, "proc2")
    d = drive(b.build(), **UNCACHED)
    i = d.create_input_topic("topic1", S, S)
    i.pipe_input("A", "reject", 5)
    i.pipe_input("B", "reject", 10)
    i.pipe_input("C", "reject", 20)
    assert taken(p1) == [
        ("A", Change("reject", None), 5),
        ("B", Change("reject", None), 10),
        ("C", Change("reject", None), 20),
    ]
    assert taken(p2) == []


def add(agg: str, value: str) -> str:
    """Kafka's ``MockReducer.STRING_ADDER``."""
    return f"{agg}+{value}"


def remove(agg: str, value: str) -> str:
    """Kafka's ``MockReducer.STRING_REMOVER``."""
    return f"{agg}-{value}"


def test_skip_null_to_repartition_without_materialization(drive: Any) -> None:
    """KTableFilterTest.shouldSkipNullToRepartitionWithoutMaterialization: a downstream
    group_by/reduce asks for old values, so the filter skips the deletions of keys it never
    forwarded."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, S))
    t2 = t1.filter(accept)
    t2.group_by(lambda k, v: (k, v)).reduce(add, remove)
    pipe_skip_null(drive, b, t1, t2)


def test_skip_null_to_repartition_on_materialization(drive: Any) -> None:
    """KTableFilterTest.shouldSkipNullToRepartitionOnMaterialization: the same with the
    filter and the reduce materialized."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, S))
    t2 = t1.filter(accept, Materialized.as_("store2"))
    t2.group_by(lambda k, v: (k, v)).reduce(add, remove, Materialized.as_("mock-result"))
    pipe_skip_null(drive, b, t1, t2)


def test_skip_null_if_materialized_downstream(drive: Any) -> None:
    """KTableFilterTest.shouldSkipNullIfVersionedDownstream, the filter's store a plain
    key-value store: materializing the filter's result does not stop it skipping the
    deletions (whether the input table is versioned decides). Kafka's case itself, the
    filter's store versioned, and shouldNotSkipNullIfVersionedUpstream are in
    ``test_ktable_versioned_semantics``."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, S), Materialized.as_("store"))
    t2 = t1.filter(accept, Materialized.as_("versioned"))
    t2.group_by(lambda k, v: (k, v)).reduce(add, remove)
    pipe_skip_null(drive, b, t1, t2)


def test_type_variance(drive: Any) -> None:
    """KTableFilterTest.testTypeVariance: a predicate over any key and value (here it
    rejects everything) chains through filter and filter_not, and the topology builds; an
    update is forwarded as a deletion."""

    def never(key: object, value: object) -> bool:
        return False

    b = StreamsBuilder()
    b.table("empty", Consumed.with_(I, S)).filter(never).filter_not(never).to_stream().to(
        "nirvana", Produced.with_(I, S)
    )
    d = drive(b.build(), **UNCACHED)
    d.create_input_topic("empty", I, S).pipe_input(1, "x", 0)
    assert d.create_output_topic("nirvana", I, S).read_key_values_to_list() == [(1, None)]


def materialized_filter_output(drive: Any, config: dict[str, Any]) -> Captured:
    """What a materialized filter forwards for a filtered-out key never seen, then a kept
    one, under ``config``."""
    b = StreamsBuilder()
    t2 = b.table("topic1", Consumed.with_(S, I)).filter(even, Materialized.as_("store2"))
    seen = capture(b, t2, "proc2")
    i = drive(b.build(), **config).create_input_topic("topic1", S, I)
    i.pipe_input("A", 1, 5)
    i.pipe_input("B", 2, 10)
    return seen


def test_deprecated_cache_key_still_sizes_the_cache(drive: Any) -> None:
    """KTableFilterTest's set-up with the deprecated key (StreamsConfigUtils.totalCacheSize:
    only cache.max.bytes.buffering set, it is used, with a warning): a size of 0 removes
    the caching layer, so the filtered-out key's deletion is forwarded."""
    with pytest.warns(StreamsDeprecationWarning, match=r"cache\.max\.bytes\.buffering"):
        seen = materialized_filter_output(drive, {"cache.max.bytes.buffering": 0})
    assert seen == [("A", Change(None, None), 5), ("B", Change(2, None), 10)]


def test_new_cache_key_wins_over_the_deprecated_one(drive: Any) -> None:
    """StreamsConfigUtils.totalCacheSize (KIP-770): with both keys set,
    statestore.cache.max.bytes is used and cache.max.bytes.buffering ignored. Here the
    store caches, and a cache forwards no deletion of a key it never held."""
    config = {"statestore.cache.max.bytes": 10485760, "cache.max.bytes.buffering": 0}
    with pytest.warns(StreamsDeprecationWarning, match="ignored"):
        seen = materialized_filter_output(drive, config)
    assert seen == [("B", Change(2, None), 10)]


@pytest.mark.parametrize("materialized_source", [True, False])
def test_a_filter_takes_old_values_from_a_stored_source(
    drive: Any, materialized_source: bool
) -> None:
    """KTableFilter's constructor (``parent.enableSendingOldValues(false)``): over a source
    table that has a store, the filter computes old values, so a filtered-out update of a
    key that never passed forwards nothing; over one without a store, it forwards the
    tombstone ``(key, None)``."""
    b = StreamsBuilder()
    materialized = (Materialized.as_("source"),) if materialized_source else ()
    source = b.table("topic1", Consumed.with_(S, I), *materialized)
    source.filter(even).to_stream().to("out", Produced.with_(S, I))
    d = drive(b.build(), **UNCACHED)
    topic = d.create_input_topic("topic1", S, I)
    topic.pipe_input("A", 1, 10)  # odd: filtered out, A never passed
    topic.pipe_input("B", 2, 11)
    out = d.create_output_topic("out", S, I).read_key_values_to_list()
    assert out == ([("B", 2)] if materialized_source else [("A", None), ("B", 2)])
