"""KIP-914's versioned semantics of table operators, from Kafka's ``KTableFilterTest``,
``KTableAggregateTest``, ``SuppressTopologyTest`` and ``InternalStreamsBuilderTest`` (their
versioned methods), and the ``isLatest`` flag of ``KTableSource``, ``KTableMapValues`` and
``KTableTransformValues`` (Kafka's processors, read as facts).

A table is versioned when its node is materialized in a versioned store, or, not
materialized itself, derives from a versioned table. An update a versioned store takes
into its history (older than its key's latest version) is forwarded as a non-latest
change: a filter over a versioned table forwards every deletion (its downstream store must
see it), ``group_by`` and the joins drop non-latest changes, ``suppress`` is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from common.errors import TopologyError
from statestores.stores import Stores
from tests.conformance.conftest import L, S
from tests.conformance.test_ktable_filter import accept, add, capture, remove, taken
from topology import (
    BufferConfig,
    Change,
    Consumed,
    Grouped,
    Materialized,
    Produced,
    StreamsBuilder,
    Suppressed,
)
from topology.api.record import NonLatestChange, make_change

UNCACHED = {"statestore.cache.max.bytes": 0}
FIVE_MINUTES = 300_000


def versioned(name: str, history: int = FIVE_MINUTES) -> Materialized:
    """``Materialized.as(Stores.persistentVersionedKeyValueStore(name, history))``."""
    return Materialized.as_(Stores.persistent_versioned_key_value_store(name, history))


def skip_null_run(drive: Any, b: StreamsBuilder, t1: Any, t2: Any) -> tuple[Any, Any]:
    """Kafka's ``doTestSkipNullOnMaterialization``: three rejected first updates; return
    what the source's and the filter's children received."""
    p1, p2 = capture(b, t1, "proc1"), capture(b, t2, "proc2")
    d = drive(b.build(), **UNCACHED)
    i = d.create_input_topic("topic1", S, S)
    for key, ts in (("A", 5), ("B", 10), ("C", 20)):
        i.pipe_input(key, "reject", ts)
    assert taken(p1) == [
        (k, Change("reject", None), t) for k, t in (("A", 5), ("B", 10), ("C", 20))
    ]
    return p1, p2


def test_not_skip_null_if_versioned_upstream(drive: Any) -> None:
    """KTableFilterTest.shouldNotSkipNullIfVersionedUpstream: a downstream reduce asks for
    old values, yet the filter over a versioned table forwards the three deletions."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, S), versioned("versioned"))
    t2 = t1.filter(accept)
    t2.group_by(lambda k, v: (k, v)).reduce(add, remove)
    _, p2 = skip_null_run(drive, b, t1, t2)
    assert taken(p2) == [(k, Change(None, None), t) for k, t in (("A", 5), ("B", 10), ("C", 20))]


def test_skip_null_if_versioned_downstream(drive: Any) -> None:
    """KTableFilterTest.shouldSkipNullIfVersionedDownstream: a filter materialized in a
    versioned store over a plain table still skips them (its input decides)."""
    b = StreamsBuilder()
    t1 = b.table("topic1", Consumed.with_(S, S), Materialized.as_("store"))
    t2 = t1.filter(accept, versioned("versioned"))
    t2.group_by(lambda k, v: (k, v)).reduce(add, remove)
    _, p2 = skip_null_run(drive, b, t1, t2)
    assert taken(p2) == []


def regroup(key: str, value: str) -> tuple[Any, str] | None:
    """``testAggOfVersionedStore``'s mapper (``null``: a null key, ``NULL``: no pair)."""
    if key == "null":
        return None, value
    return None if key == "NULL" else (value, value)


def test_agg_of_versioned_store(drive: Any) -> None:
    """KTableAggregateTest.testAggOfVersionedStore: the out-of-order updates of a versioned
    table (``A`` at 12 under its deletion at 15, ``B`` at 22 under 23) are not aggregated."""
    b = StreamsBuilder()
    (
        b.table("topic1", Consumed.with_(S, S), versioned("versioned"))
        .group_by(regroup, Grouped.with_(S, S))
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
    for key, value, ts in [("A", "1", 10), ("A", None, 15), ("A", "1", 12), ("B", "2", 20)]:
        topic.pipe_input(key, value, ts)
    for key, value, ts in [("null", "3", 25), ("B", "4", 23), ("NULL", "5", 24), ("B", "7", 22)]:
        topic.pipe_input(key, value, ts)
    out = d.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in out] == [
        ("1", "0+1", 10),
        ("1", "0+1-1", 15),
        ("2", "0+2", 20),
        ("2", "0+2-2", 23),
        ("4", "0+4", 23),
    ]


@pytest.mark.parametrize("count_store", [None, "count"])
def test_count_of_versioned_store(drive: Any, count_store: str | None) -> None:
    """KTableAggregateTest.testCountOfVersionedStore: ``A`` blue at 11, under blue at 12,
    is not counted (with the count in an internal store, or in a versioned one)."""
    b = StreamsBuilder()
    grouped = b.table("input", Consumed.with_(S, S), versioned("versioned")).group_by(
        lambda k, v: (v, v), Grouped.with_(S, S)
    )
    counts = grouped.count(None if count_store is None else versioned(count_store))
    counts.to_stream().to("out", Produced.with_(S, L))
    d = drive(b.build())
    topic = d.create_input_topic("input", S, S)
    for key, value, ts in [("A", "green", 10), ("B", "green", 9), ("A", "blue", 12)]:
        topic.pipe_input(key, value, ts)
    for key, value, ts in [("A", "blue", 11), ("C", "yellow", 15), ("D", "green", 11)]:
        topic.pipe_input(key, value, ts)
    out = d.create_output_topic("out", S, L).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in out] == [
        ("green", 1, 10),
        ("green", 2, 10),
        ("green", 1, 12),
        ("blue", 1, 12),
        ("yellow", 1, 15),
        ("green", 2, 12),
    ]


def test_throw_on_suppress_for_materialized_versioned_table() -> None:
    """SuppressTopologyTest.shouldThrowOnSuppressForMaterializedVersionedTable: refused
    when ``suppress`` is called, naming the node and the store."""
    table = StreamsBuilder().table("input", materialized=versioned("store", 0))
    with pytest.raises(TopologyError, match="non-versioned KTables.*versioned store store"):
        table.suppress(Suppressed.until_time_limit(0, BufferConfig.unbounded()))


def test_throw_on_suppress_for_non_materialized_versioned_table() -> None:
    """SuppressTopologyTest.shouldThrowOnSuppressForNonMaterializedVersionedTable: a filter
    inherits versioning from its table: refused when the topology is built."""
    b = StreamsBuilder()
    table = b.table("input", materialized=versioned("store", 0)).filter(lambda k, v: True)
    table.suppress(Suppressed.until_time_limit(0, BufferConfig.unbounded()))
    with pytest.raises(TopologyError, match="inherited from upstream.*upstream store store"):
        b.build()


def test_suppress_below_a_plain_materialization_of_a_versioned_table(drive: Any) -> None:
    """KTableImpl.suppress: a table materialized in a plain store below a versioned one is
    not versioned, so it can be suppressed (and the topology runs)."""
    b = StreamsBuilder()
    t = b.table("input", Consumed.with_(S, S), versioned("store", 0))
    mapped = t.map_values(str.upper, Materialized.as_("plain").with_value_serde(S))
    mapped.suppress(Suppressed.until_time_limit(0, BufferConfig.unbounded())).to_stream().to(
        "out", Produced.with_(S, S)
    )
    d = drive(b.build())
    d.create_input_topic("input", S, S).pipe_input("k", "v", 1)
    assert d.create_output_topic("out", S, S).read_key_values_to_map() == {"k": "V"}


def test_throw_on_versioned_store_supplier_for_global_table() -> None:
    """InternalStreamsBuilderTest.shouldThrowOnVersionedStoreSupplierForGlobalTable"""
    with pytest.raises(TopologyError, match="GlobalTables cannot be versioned.*store"):
        StreamsBuilder().global_table("table", materialized=versioned("store", 0))


def _filter_over(upstream: Callable[[StreamsBuilder, Any], Any]) -> bool:
    """Build ``upstream(builder, versioned table t1)`` then a filter under it; return
    whether the filter uses versioned semantics."""
    b = StreamsBuilder()
    t1 = b.table("t1", Consumed.with_(S, S), versioned("versioned"))
    t3 = upstream(b, t1).filter(lambda k, v: v is not None)
    b.build()
    return bool(t3.params.versioned_semantics)


def _t2(b: StreamsBuilder) -> Any:
    return b.table("t2", Consumed.with_(S, S), versioned("versioned2"))


FILTER_CASES: dict[str, tuple[Callable[[StreamsBuilder, Any], Any], bool]] = {
    "OnTableFilter": (lambda b, t: t, True),
    "WithIntermediateNode": (lambda b, t: t.map_values(lambda v: v + v), True),
    "WithMaterializedIntermediateNode": (
        lambda b, t: t.map_values(lambda v: v + v, Materialized.as_("unversioned")),
        False,
    ),
    "WithIntermediateNodeMaterializedAsVersioned": (
        lambda b, t: t.map_values(lambda v: v + v, versioned("versioned2")),
        True,
    ),
    "WithIntermediateAggregation": (lambda b, t: t.group_by(lambda k, v: (k, v)).count(), False),
    "WithIntermediateAggregationMaterializedAsVersioned": (
        lambda b, t: t.group_by(lambda k, v: (k, v)).count(versioned("versioned2")),
        True,
    ),
    "WithIntermediateJoin": (lambda b, t: t.join(_t2(b), lambda x, y: x + y), False),
    "WithIntermediateJoinMaterializedAsVersioned": (
        lambda b, t: t.join(_t2(b), lambda x, y: x + y, versioned("versioned3")),
        True,
    ),
    "WithIntermediateForeignKeyJoin": (
        lambda b, t: t.join(_t2(b), lambda v: v, lambda x, y: x + y),
        False,
    ),
    "WithIntermediateForeignKeyJoinMaterializedAsVersioned": (
        lambda b, t: t.join(_t2(b), lambda v: v, lambda x, y: x + y, versioned("versioned3")),
        True,
    ),
    "WithToStreamAndBack": (lambda b, t: t.to_stream().to_table(), False),
    "WithToStreamAndBackIfMaterializedAsVersioned": (
        lambda b, t: t.to_stream().to_table(materialized=versioned("versioned2")),
        True,
    ),
}


@pytest.mark.parametrize("case", list(FILTER_CASES))
def test_use_versioned_semantics_on_table_filter(case: str) -> None:
    """InternalStreamsBuilderTest.should{Set,NotSet}UseVersionedSemantics<case>: a filter
    uses versioned semantics iff its input is versioned (an aggregation, a join or a
    stream-to-table in between decides by its own store)."""
    upstream, expected = FILTER_CASES[case]
    assert _filter_over(upstream) is expected


class Changes:
    """Captures the changes a table node forwards, with their ``is_latest`` flag."""

    def __init__(self, b: StreamsBuilder, table: Any, name: str) -> None:
        self.seen = capture(b, table, name)

    def take(self) -> list[tuple[Any, Any, int]]:
        return taken(self.seen)


def test_source_forwards_out_of_order_updates_as_not_latest(drive: Any) -> None:
    """KTableSource.KTableSourceProcessor.process (KIP-914): a versioned table forwards an
    update older than its key's latest as not latest, its old value the latest value; one
    older than the history retention is neither put nor forwarded."""
    b = StreamsBuilder()
    t = b.table("t", Consumed.with_(S, S), versioned("v", 10))
    t.enable_send_old_values()
    seen = Changes(b, t, "seen")
    d = drive(b.build(), **UNCACHED)
    i = d.create_input_topic("t", S, S)
    for value, ts in [("a", 10), ("b", 30), ("c", 25), ("d", 5), (None, 28), ("e", 40)]:
        i.pipe_input("k", value, ts)
    assert seen.take() == [
        ("k", Change("a", None), 10),
        ("k", Change("b", "a"), 30),
        ("k", make_change("c", "b", False), 25),
        ("k", make_change(None, "b", False), 28),
        ("k", Change("e", "b"), 40),
    ]
    store = d.get_versioned_key_value_store("v")
    assert (store.get("k").value, store.get("k", 35).value, store.get("k", 25)) == ("e", "b", None)


@pytest.mark.parametrize("op", ["map_values", "transform_values"])
def test_materialized_versioned_operator_flags_its_own_puts(drive: Any, op: str) -> None:
    """KTableMapValues / KTableTransformValues process (KIP-914): materialized in a
    versioned store, the operator forwards ``isLatest`` from its own put (an out-of-order
    update of a plain table becomes not latest); not materialized, it passes its parent's
    flag on; a table-table join below drops what is not latest."""

    class Upper:
        def transform(self, key: str, value: str | None) -> str | None:
            return None if value is None else value.upper()

    b = StreamsBuilder()
    plain = b.table("t", Consumed.with_(S, S))
    if op == "map_values":
        upper = plain.map_values(str.upper, versioned("upper").with_value_serde(S))
    else:
        upper = plain.transform_values(Upper, versioned("upper").with_value_serde(S))
    lower = upper.map_values(str.lower)
    seen, below = Changes(b, upper, "seen"), Changes(b, lower, "below")
    other = b.table("o", Consumed.with_(S, S), Materialized.as_("o"))
    lower.join(other, lambda x, y: f"{x}+{y}").to_stream().to("out", Produced.with_(S, S))
    d = drive(b.build(), **UNCACHED)
    d.create_input_topic("o", S, S).pipe_input("k", "o", 0)
    i = d.create_input_topic("t", S, S)
    for value, ts in [("a", 10), ("b", 5), ("c", 20)]:
        i.pipe_input("k", value, ts)
    assert seen.take() == [
        ("k", Change("A", None), 10),
        ("k", make_change("B", None, False), 5),
        ("k", Change("C", None), 20),
    ]
    assert [type(c) for _, c, _ in below.take()] == [Change, NonLatestChange, Change]
    out = d.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.value, r.timestamp) for r in out] == [("a+o", 10), ("c+o", 20)]


def test_stream_aggregation_materialized_as_versioned(drive: Any) -> None:
    """KStreamAggregate.process with a versioned store (Kafka wires it through
    ``KeyValueStoreWrapper``): each count is a version of its key."""
    b = StreamsBuilder()
    counts = b.stream("s", Consumed.with_(S, S)).group_by_key().count(versioned("counts"))
    counts.to_stream().to("out", Produced.with_(S, L))
    d = drive(b.build())
    i = d.create_input_topic("s", S, S)
    for ts in (1, 2, 3):
        i.pipe_input("k", "x", ts)
    out = d.create_output_topic("out", S, L).read_records_to_list()
    assert [(r.value, r.timestamp) for r in out] == [(1, 1), (2, 2), (3, 3)]
    store = d.get_versioned_key_value_store("counts")
    assert (store.get("k").value, store.get("k", 2).value) == (3, 2)
