"""Cogroup (KIP-150) beyond Kafka's own scenarios (those are in
``tests/conformance/test_*cogrouped_kstream.py``): the DSL's errors, immutable handles, a
grouped stream cogrouped twice, co-partitioning, re-keyed streams through their
repartition topics, old values for a downstream regrouping, and the store a windowed
cogroup leaves."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import TopologyError
from statestores.api import Window, Windowed
from tests.topology.conftest import I, S
from topology import (
    Consumed,
    Grouped,
    Materialized,
    Produced,
    SessionWindows,
    StreamsBuilder,
    TimeWindows,
)
from topology.api.windowed_serdes import TimeWindowedSerde
from topology.graph.graph import ProcessorSpec


def append(key: Any, value: Any, agg: str) -> str:
    return agg + value


def shout(key: Any, value: Any, agg: str) -> str:
    return agg + value.upper()


def test_cogroup_refuses_what_is_not_a_grouped_stream_of_its_builder() -> None:
    b, other = StreamsBuilder(), StreamsBuilder()
    stream = b.stream("one")
    cogrouped = stream.group_by_key().cogroup(append)
    with pytest.raises(TopologyError, match="grouped_stream must be a KGroupedStream, got KStream"):
        cogrouped.cogroup(stream, append)
    foreign = other.stream("two").group_by_key()
    with pytest.raises(TopologyError, match="belongs to another StreamsBuilder"):
        cogrouped.cogroup(foreign, append)
    with pytest.raises(TopologyError, match="aggregator must be a function, got str"):
        cogrouped.cogroup(b.stream("three").group_by_key(), "append")  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="initializer must be a function"):
        cogrouped.aggregate("")  # type: ignore[arg-type]
    session = cogrouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(5))
    with pytest.raises(TopologyError, match="session_merger must be a function"):
        session.aggregate(lambda: "", 0)  # type: ignore[arg-type]


def test_a_window_store_shorter_than_the_windows_is_refused() -> None:
    b = StreamsBuilder()
    windowed = (
        b.stream("one")
        .group_by_key()
        .cogroup(append)
        .windowed_by(TimeWindows.of_size_and_grace(100, 10))
    )
    with pytest.raises(TopologyError, match="Store short: the retention period .50 ms."):
        windowed.aggregate(lambda: "", Materialized.as_("short").with_retention(50))


def test_cogroup_returns_a_new_handle_and_replaces_a_restated_aggregator(drive: Any) -> None:
    """``cogroup`` leaves the handle it was called on as it was; cogrouping a grouped stream
    again replaces its aggregator in its place (Kafka's ``LinkedHashMap.put``)."""
    b = StreamsBuilder()
    one = b.stream("one", Consumed.with_(S, S)).group_by_key()
    two = b.stream("two", Consumed.with_(S, S)).group_by_key()
    first = one.cogroup(append)
    both = first.cogroup(two, append)
    restated = both.cogroup(one, shout)
    assert [g for g, _ in first.patterns] == [one]
    assert [(g, f) for g, f in restated.patterns] == [(one, shout), (two, append)]
    restated.aggregate(lambda: "").to_stream().to("out")
    topology = b.build()
    aggregates = [n for n in topology.nodes if n.startswith("COGROUPKSTREAM-AGGREGATE-")]
    assert len(aggregates) == 2
    d = drive(topology)
    d.create_input_topic("one", S, S).pipe_input("k", "a", 1)
    d.create_input_topic("two", S, S).pipe_input("k", "b", 2)
    out = d.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.key, r.value) for r in out] == [("k", "A"), ("k", "Ab")]


def test_sources_of_a_cogroup_must_be_copartitioned() -> None:
    b = StreamsBuilder()
    one = b.stream("one").group_by_key()
    two = b.stream("two").group_by_key()
    rekeyed = b.stream("three").select_key(lambda k, v: v).group_by_key()
    one.cogroup(append).cogroup(two, append).cogroup(rekeyed, append).aggregate(lambda: "")
    topology = b.build()
    topology.check_copartitioning({"one": 4, "two": 4, "three": 1})
    with pytest.raises(
        TopologyError,
        match=r"Processor COGROUPKSTREAM-MERGE-\d+: its input topics are not co-partitioned "
        r"\(one=4, two=2\)",
    ):
        topology.check_copartitioning({"one": 4, "two": 2, "three": 1})
    (group,) = topology.copartition_groups
    internal = {n for n in group.source_nodes if n.endswith("-repartition-source")}
    assert len(internal) == 1  # the re-keyed stream's repartition topic, not "three"
    assert "KSTREAM-SOURCE-0000000002" not in group.source_nodes


def test_rekeyed_streams_are_cogrouped_through_their_repartition_topics(drive: Any) -> None:
    b = StreamsBuilder()
    orders = b.stream("orders", Consumed.with_(S, I)).group_by_key(Grouped.with_(S, I))
    refunds = (
        b.stream("refunds", Consumed.with_(S, S))
        .map(lambda k, v: (v, 1))
        .group_by_key(Grouped.as_("refunds-by-customer").with_value_serde(I))
    )
    (
        orders.cogroup(lambda k, v, total: total + v)
        .cogroup(refunds, lambda k, n, total: total - 10 * n)
        .aggregate(lambda: 0, Materialized.as_("balance").with_value_serde(I))
        .to_stream()
        .to("out", Produced.with_(S, I))
    )
    topology = b.build()
    assert list(topology.repartition_topics) == ["refunds-by-customer-repartition"]
    d = drive(topology)
    order_topic = d.create_input_topic("orders", S, I)
    refund_topic = d.create_input_topic("refunds", S, S)
    order_topic.pipe_input("ann", 100, 1)
    refund_topic.pipe_input("r1", "ann", 2)
    order_topic.pipe_input("bob", 5, 3)
    refund_topic.pipe_input("r2", "bob", 4)
    refund_topic.pipe_input("r3", None, 5)  # a null key after the re-keying: dropped
    out = d.create_output_topic("out", S, I).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in out] == [
        ("ann", 100, 1),
        ("ann", 90, 2),
        ("bob", 5, 3),
        ("bob", -5, 4),
    ]
    assert d.get_key_value_store("balance").get("ann") == 90


@pytest.mark.parametrize("cached", [True, False])
def test_a_regrouped_cogroup_sends_old_values_from_every_aggregate(
    drive: Any, cached: bool
) -> None:
    """``KTable.group_by`` asks the merge node for old values: every aggregate node of the
    cogroup sends them (Kafka's ``KTablePassThrough.enableSendingOldValues``)."""
    b = StreamsBuilder()
    one = b.stream("one", Consumed.with_(S, I)).group_by_key()
    two = b.stream("two", Consumed.with_(S, I)).group_by_key()
    table = (
        one.cogroup(lambda k, v, a: a + v)
        .cogroup(two, lambda k, v, a: a + 100 * v)
        .aggregate(lambda: 0, Materialized.with_(S, I))
    )
    table.group_by(lambda k, v: ("all", v), Grouped.with_(S, I)).reduce(
        lambda a, v: a + v, lambda a, v: a - v, Materialized.with_(S, I)
    ).to_stream().to("total", Produced.with_(S, I))
    d = drive(b.build(), **({} if cached else {"statestore.cache.max.bytes": 0}))
    one_topic, two_topic = d.create_input_topic("one", S, I), d.create_input_topic("two", S, I)
    one_topic.pipe_input("a", 1, 1)
    two_topic.pipe_input("a", 2, 2)
    one_topic.pipe_input("b", 3, 3)
    two_topic.pipe_input("b", 1, 4)
    totals = [r.value for r in d.create_output_topic("total", S, I).read_records_to_list()]
    assert totals[-1] == 201 + 103
    assert 201 in totals  # a's 1 replaced by 201, never added to it


def windowed_cogroup(b: StreamsBuilder, windows: TimeWindows, mat: Materialized) -> Any:
    one = b.stream("one", Consumed.with_(S, S)).group_by_key()
    two = b.stream("two", Consumed.with_(S, S)).group_by_key()
    return one.cogroup(append).cogroup(two, shout).windowed_by(windows).aggregate(lambda: "", mat)


def test_a_windowed_cogroup_keeps_one_window_store(drive: Any) -> None:
    b = StreamsBuilder()
    mat = Materialized.as_("windows").with_caching_disabled()
    windowed_cogroup(b, TimeWindows.of_size_and_grace(10, 100), mat)
    topology = b.build()
    assert list(topology.stores) == ["windows"]
    stores = [spec.stores for spec in topology.nodes.values() if isinstance(spec, ProcessorSpec)]
    assert stores.count(("windows",)) == 2
    d = drive(topology)
    one, two = d.create_input_topic("one", S, S), d.create_input_topic("two", S, S)
    one.pipe_input("k", "a", 1)
    two.pipe_input("k", "b", 12)
    two.pipe_input("k", "c", 3)
    fetched = list(d.get_window_store("windows").fetch_range("k", "k", 0, 20))
    assert fetched == [(Windowed("k", Window(0, 10)), "aC"), (Windowed("k", Window(10, 20)), "B")]


@pytest.mark.parametrize("cached", [True, False])
def test_each_aggregate_of_a_windowed_cogroup_observes_its_own_stream_time(
    drive: Any, cached: bool
) -> None:
    """As Kafka's ``KStreamWindowAggregate``: a window closes for a grouped stream by the
    records *that* stream's aggregate has seen, not the other's (the store keeps windows
    longer than they stay open here, so that it still holds the one a stream reopens)."""
    b = StreamsBuilder()
    mat = Materialized.with_(S, S).with_retention(100)
    table = windowed_cogroup(b, TimeWindows.of_size_with_no_grace(10), mat)
    table.to_stream().to("out")
    d = drive(b.build(), **({} if cached else {"statestore.cache.max.bytes": 0}))
    one, two = d.create_input_topic("one", S, S), d.create_input_topic("two", S, S)
    one.pipe_input("k", "a", 1)
    two.pipe_input("k", "b", 12)
    one.pipe_input("k", "c", 3)  # "one" has seen time 1 only: window [0, 10) is open to it
    two.pipe_input("k", "d", 4)  # "two" has seen time 12: [0, 10) is closed to it
    out = d.create_output_topic("out", TimeWindowedSerde(S, 10), S).read_records_to_list()
    assert [(r.key.window.start, r.value, r.timestamp) for r in out] == [
        (0, "a", 1),
        (10, "B", 12),
        (0, "ac", 3),
    ]
