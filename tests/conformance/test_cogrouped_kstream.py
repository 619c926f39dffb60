"""Kafka's ``CogroupedKStreamImplTest`` (KIP-150): grouped streams folded together into one
table, each with its own aggregator; the argument checks; the descriptions Kafka asserts
(one aggregate node per grouped stream sharing one store, a merge node, a repartition
topic for each re-keyed grouped stream).

Aggregators as Kafka's test's: ``STRING_AGGREGATOR`` appends the value, the ``SUM`` ones add
it as an integer, ``MockAggregator``'s ``TOSTRING_ADDER``/``TOSTRING_REMOVER`` append
``+value``/``-value``. Every behavioural scenario runs with the record cache on (Kafka's
test configuration) and off. The ``...WithOptimization`` description scenarios are left
out: the project has no ``topology.optimization`` (no repartition topics are merged).
"""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import TopologyError
from tests.conformance.cogroup_kit import (
    CACHED,
    GOLDEN,
    adder,
    piped,
    remover,
    string_aggregator,
    string_sum_aggregator,
    sum_aggregator,
    topic_cogrouped,
)
from tests.conformance.conftest import I, S
from topology import (
    CogroupedKStream,
    Consumed,
    Grouped,
    Materialized,
    Named,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
)


def golden(method: str) -> str:
    """Kafka's expected description of ``CogroupedKStreamImplTest.<method>``."""
    return (GOLDEN / f"cogrouped_kstream__{method}.txt").read_text()


@pytest.fixture
def cogrouped() -> CogroupedKStream[Any, Any]:
    """Kafka's ``setup``: a stream grouped by key, cogrouped with ``TOSTRING_ADDER``."""
    return topic_cogrouped()


# -- argument checks -----------------------------------------------------------------------


def test_should_throw_in_cogroup_if_kgrouped_stream_is_null(cogrouped: Any) -> None:
    """CogroupedKStreamImplTest.shouldThrowNPEInCogroupIfKGroupedStreamIsNull"""
    with pytest.raises(TopologyError, match="grouped_stream can't be None"):
        cogrouped.cogroup(None, adder)


def test_should_not_have_null_aggregator_on_cogroup(cogrouped: Any) -> None:
    """CogroupedKStreamImplTest.shouldNotHaveNullAggregatorOnCogroup"""
    grouped = cogrouped.patterns[0][0]
    with pytest.raises(TopologyError, match="aggregator can't be None"):
        cogrouped.cogroup(grouped, None)


def test_kgrouped_stream_should_not_have_null_aggregator_on_cogroup() -> None:
    """KGroupedStreamImplTest.shouldNotHaveNullAggregatorOnCogroup"""
    b = StreamsBuilder()
    grouped = b.stream("topic", Consumed.with_(S, S)).group_by_key()
    with pytest.raises(TopologyError, match=r"KGroupedStream.cogroup: aggregator can't be None"):
        grouped.cogroup(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kafka_method", "options"),
    [
        ("shouldNotHaveNullInitializerOnAggregate", {}),
        ("shouldNotHaveNullInitializerOnAggregateWitNamed", {"named": Named.as_("name")}),
        (
            "shouldNotHaveNullInitializerOnAggregateWitMaterialized",
            {"materialized": Materialized.as_("store")},
        ),
        (
            "shouldNotHaveNullInitializerOnAggregateWitNamedAndMaterialized",
            {"named": Named.as_("name"), "materialized": Materialized.as_("store")},
        ),
    ],
)
def test_should_not_have_null_initializer_on_aggregate(
    cogrouped: Any, kafka_method: str, options: dict[str, Any]
) -> None:
    """CogroupedKStreamImplTest.shouldNotHaveNullInitializerOnAggregate (and WitNamed,
    WitMaterialized, WitNamedAndMaterialized)"""
    with pytest.raises(TopologyError, match="CogroupedKStream.aggregate: initializer can't be"):
        cogrouped.aggregate(None, **options)


@pytest.mark.parametrize(
    ("kafka_method", "options", "message"),
    [
        ("shouldNotHaveNullNamedOnAggregate", {"named": 3}, "named must be a Named"),
        (
            "shouldNotHaveNullMaterializedOnAggregate",
            {"materialized": Named.as_("n")},
            "materialized must be a Materialized",
        ),
        (
            "shouldNotHaveNullNamedOnAggregateWithMateriazlied",
            {"named": Materialized.as_("store"), "materialized": Materialized.as_("store")},
            "named must be a Named",
        ),
        (
            "shouldNotHaveNullMaterializedOnAggregateWithNames",
            {"named": Named.as_("name"), "materialized": "store"},
            "materialized must be a Materialized",
        ),
    ],
)
def test_should_not_have_invalid_named_or_materialized_on_aggregate(
    cogrouped: Any, kafka_method: str, options: dict[str, Any], message: str
) -> None:
    """CogroupedKStreamImplTest.shouldNotHaveNullNamedOnAggregate (and NullMaterialized,
    NullNamedWithMateriazlied, NullMaterializedWithNames). In Python ``None`` is the option
    left out, so the checks refuse what is not a ``Named``/``Materialized`` instead."""
    with pytest.raises(TopologyError, match=message):
        cogrouped.aggregate(lambda: "", **options)


def test_should_not_have_null_window_on_windowed_by(cogrouped: Any) -> None:
    """CogroupedKStreamImplTest.shouldNotHaveNullWindowOnWindowedByTime (and BySession,
    BySliding: one ``windowed_by`` takes all three)"""
    with pytest.raises(TopologyError, match="windowed_by: windows can't be None"):
        cogrouped.windowed_by(None)
    with pytest.raises(TopologyError, match="expected TimeWindows, SlidingWindows"):
        cogrouped.windowed_by(Named.as_("not-windows"))
    for windows in (
        TimeWindows.of_size_with_no_grace(10),
        SlidingWindows.of_time_difference_with_no_grace(10),
        SessionWindows.of_inactivity_gap_with_no_grace(10),
    ):
        assert cogrouped.windowed_by(windows).windows is windows


# -- descriptions --------------------------------------------------------------------------


def two_streams(b: StreamsBuilder) -> tuple[Any, Any]:
    return b.stream("one", Consumed.with_(S, S)), b.stream("two", Consumed.with_(S, S))


def flipped(stream: Any) -> Any:
    return stream.map(lambda k, v: (v, k))


def test_should_name_processors_and_store_based_on_named_parameter() -> None:
    """CogroupedKStreamImplTest.shouldNameProcessorsAndStoreBasedOnNamedParameter"""
    b = StreamsBuilder()
    one, two = two_streams(b)
    table = (
        one.group_by_key()
        .cogroup(string_aggregator)
        .cogroup(two.group_by_key(), string_aggregator)
        .aggregate(lambda: "", Materialized.as_("store"), Named.as_("test"))
    )
    table.to_stream().to("output")
    method = "should_name_processors_and_store_based_on_named_parameter"
    assert str(b.build().describe()) == golden(method)


def test_should_name_repartition_topic() -> None:
    """CogroupedKStreamImplTest.shouldNameRepartitionTopic"""
    b = StreamsBuilder()
    one, two = two_streams(b)
    (
        flipped(one)
        .group_by_key(Grouped.as_("repartition-test"))
        .cogroup(string_aggregator)
        .cogroup(two.group_by_key(), string_aggregator)
        .aggregate(lambda: "")
        .to_stream()
        .to("output")
    )
    assert str(b.build().describe()) == golden("should_name_repartition_topic")


def test_should_insert_repartitions_topic_for_upstream_key_modification() -> None:
    """CogroupedKStreamImplTest.shouldInsertRepartitionsTopicForUpstreamKeyModification"""
    b = StreamsBuilder()
    one, two = two_streams(b)
    (
        flipped(one)
        .group_by_key()
        .cogroup(string_aggregator)
        .cogroup(two.group_by_key(), string_aggregator)
        .aggregate(lambda: "", Materialized.as_("store"), Named.as_("test"))
        .to_stream()
        .to("output")
    )
    method = "should_insert_repartitions_topic_for_upstream_key_modification"
    assert str(b.build().describe()) == golden(method)


def test_grouped_reused_in_same_cogroups() -> None:
    """CogroupedKStreamImplTest.shouldInsertRepartitionsTopicForUpstreamKeyModificationWith
    GroupedReusedInSameCogroups: two cogroups of the same grouped streams, a repartition
    topic each."""
    b = StreamsBuilder()
    one, two = two_streams(b)
    grouped_one, grouped_two = flipped(one).group_by_key(), two.group_by_key()
    tables = [
        grouped_one.cogroup(string_aggregator)
        .cogroup(grouped_two, string_aggregator)
        .aggregate(lambda: "")
        for _ in range(2)
    ]
    tables[1].to_stream().to("output")
    tables[0].to_stream().to("OUTPUT2")
    method = "should_insert_repartitions_topic_for_upstream_key_modification"
    assert str(b.build().describe()) == golden(f"{method}_with_grouped_reused_in_same_cogroups")


def test_grouped_reused_in_different_cogroups() -> None:
    """CogroupedKStreamImplTest.shouldInsertRepartitionsTopicForUpstreamKeyModificationWith
    GroupedReusedInDifferentCogroups"""
    b = StreamsBuilder()
    one, two = two_streams(b)
    three = b.stream("three", Consumed.with_(S, S))
    grouped_one = flipped(one).group_by_key()
    grouped_two, grouped_three = two.group_by_key(), three.group_by_key()
    grouped_one.cogroup(string_aggregator).cogroup(grouped_three, string_aggregator).aggregate(
        lambda: ""
    )
    grouped_one.cogroup(string_aggregator).cogroup(grouped_two, string_aggregator).aggregate(
        lambda: ""
    )
    method = "should_insert_repartitions_topic_for_upstream_key_modification"
    expected = golden(f"{method}_with_grouped_reused_in_different_cogroups")
    assert str(b.build().describe()) == expected


def test_grouped_reused() -> None:
    """CogroupedKStreamImplTest.shouldInsertRepartitionsTopicForUpstreamKeyModificationWith
    GroupedReused: a cogroup and a plain aggregate of one re-keyed grouped stream."""
    b = StreamsBuilder()
    one, two = two_streams(b)
    grouped_one = flipped(one).group_by_key()
    grouped_one.cogroup(string_aggregator).cogroup(two.group_by_key(), string_aggregator).aggregate(
        lambda: ""
    )
    grouped_one.aggregate(lambda: "", string_aggregator)
    method = "should_insert_repartitions_topic_for_upstream_key_modification"
    assert str(b.build().describe()) == golden(f"{method}_with_grouped_reused")


def test_should_insert_repartitions_topic_for_cogroups_used_twice() -> None:
    """CogroupedKStreamImplTest.shouldInsertRepartitionsTopicForCogroupsUsedTwice: one
    cogroup aggregated twice reads its one repartition topic twice."""
    b = StreamsBuilder()
    one = b.stream("one", Consumed.with_(S, S))
    cogrouped = flipped(one).group_by_key(Grouped.as_("foo")).cogroup(string_aggregator)
    cogrouped.aggregate(lambda: "")
    cogrouped.aggregate(lambda: "")
    topology = b.build()
    assert str(topology.describe()) == golden(
        "should_insert_repartitions_topic_for_cogroups_used_twice"
    )
    assert list(topology.repartition_topics) == ["foo-repartition"]


# -- behaviour -----------------------------------------------------------------------------


@CACHED
def test_should_cogroup_and_aggregate_single_kstreams(drive: Any, cached: bool) -> None:
    """CogroupedKStreamImplTest.shouldCogroupAndAggregateSingleKStreams"""
    b = StreamsBuilder()
    table = b.stream("one", Consumed.with_(S, S)).group_by_key().cogroup(string_aggregator)
    records = [("one", "k1", "A", 0), ("one", "k2", "B", 0), ("one", "k2", "B", 0)]
    records.append(("one", "k1", "A", 0))
    got = piped(drive, table.aggregate(lambda: ""), records, cached)
    assert got == [("k1", "A", 0), ("k2", "B", 0), ("k2", "BB", 0), ("k1", "AA", 0)]


@CACHED
def test_cogroup_handle_null_values(drive: Any, cached: bool) -> None:
    """CogroupedKStreamImplTest.testCogroupHandleNullValues: a null value is dropped."""
    b = StreamsBuilder()
    table = b.stream("one", Consumed.with_(S, S)).group_by_key().cogroup(string_aggregator)
    records = [("one", "k1", "A", 0), ("one", "k2", "B", 0), ("one", "k2", None, 0)]
    records += [("one", "k2", "B", 0), ("one", "k1", "A", 0)]
    got = piped(drive, table.aggregate(lambda: ""), records, cached)
    assert got == [("k1", "A", 0), ("k2", "B", 0), ("k2", "BB", 0), ("k1", "AA", 0)]


def two_cogrouped(b: StreamsBuilder, first: Any, second: Any, two_serde: Any = S) -> Any:
    one = b.stream("one", Consumed.with_(S, S)).group_by_key()
    two = b.stream("two", Consumed.with_(S, two_serde)).group_by_key()
    return one.cogroup(first).cogroup(two, second)


@CACHED
def test_should_cogroup_and_aggregate_two_kstreams_with_distinct_keys(
    drive: Any, cached: bool
) -> None:
    """CogroupedKStreamImplTest.shouldCogroupAndAggregateTwoKStreamsWithDistinctKeys: the
    aggregate keeps the latest timestamp of its records."""
    b = StreamsBuilder()
    table = two_cogrouped(b, string_aggregator, string_aggregator).aggregate(lambda: "")
    records = [("one", "k1", "A", t) for t in (0, 1, 10, 100)]
    records += [("two", "k2", "B", t) for t in (100, 200, 1, 500, 500, 100)]
    assert piped(drive, table, records, cached) == [
        ("k1", "A", 0),
        ("k1", "AA", 1),
        ("k1", "AAA", 10),
        ("k1", "AAAA", 100),
        ("k2", "B", 100),
        ("k2", "BB", 200),
        ("k2", "BBB", 200),
        ("k2", "BBBB", 500),
        ("k2", "BBBBB", 500),
        ("k2", "BBBBBB", 500),
    ]


SHARED_KEYS = [
    ("one", "k1", "A", 0),
    ("one", "k2", "A", 1),
    ("one", "k1", "A", 10),
    ("one", "k2", "A", 100),
    ("two", "k2", "B", 100),
    ("two", "k2", "B", 200),
    ("two", "k1", "B", 1),
    ("two", "k2", "B", 500),
    ("two", "k1", "B", 500),
    ("two", "k2", "B", 500),
    ("two", "k3", "B", 500),
    ("two", "k2", "B", 100),
]
#: what the string aggregators make of ``SHARED_KEYS``, from two grouped streams or three
SHARED_KEYS_OUTPUT = [
    ("k1", "A", 0),
    ("k2", "A", 1),
    ("k1", "AA", 10),
    ("k2", "AA", 100),
    ("k2", "AAB", 100),
    ("k2", "AABB", 200),
    ("k1", "AAB", 10),
    ("k2", "AABBB", 500),
    ("k1", "AABB", 500),
    ("k2", "AABBBB", 500),
    ("k3", "B", 500),
    ("k2", "AABBBBB", 500),
]


@CACHED
def test_should_cogroup_and_aggregate_two_kstreams_with_shared_keys(
    drive: Any, cached: bool
) -> None:
    """CogroupedKStreamImplTest.shouldCogroupAndAggregateTwoKStreamsWithSharedKeys (Kafka
    reads the first ten of the twelve updates; all twelve here)"""
    b = StreamsBuilder()
    table = two_cogrouped(b, string_aggregator, string_aggregator).aggregate(lambda: "")
    assert piped(drive, table, SHARED_KEYS, cached) == SHARED_KEYS_OUTPUT


SUMS = [
    ("k1", 1, 0),
    ("k2", 1, 1),
    ("k1", 2, 10),
    ("k2", 2, 100),
    ("k2", 4, 100),
    ("k2", 6, 200),
    ("k1", 4, 10),
    ("k2", 8, 500),
    ("k1", 6, 500),
    ("k2", 11, 500),
    ("k3", 2, 500),
    ("k2", 13, 500),
]
SUM_INPUT = [
    ("one", "k1", 1, 0),
    ("one", "k2", 1, 1),
    ("one", "k1", 1, 10),
    ("one", "k2", 1, 100),
    ("two", "k2", 2, 100),
    ("two", "k2", 2, 200),
    ("two", "k1", 2, 1),
    ("two", "k2", 2, 500),
    ("two", "k1", 2, 500),
    ("two", "k2", 3, 500),
    ("two", "k3", 2, 500),
    ("two", "k2", 2, 100),
]


@CACHED
def test_should_allow_different_output_type_in_cogroup(drive: Any, cached: bool) -> None:
    """CogroupedKStreamImplTest.shouldAllowDifferentOutputTypeInCoGroup: string values
    summed into an integer aggregate (Kafka reads the first ten updates)."""
    b = StreamsBuilder()
    cogrouped = two_cogrouped(b, string_sum_aggregator, string_sum_aggregator)
    table = cogrouped.aggregate(lambda: 0, Materialized.as_("store1").with_value_serde(I))
    records = [(topic, key, str(value), ts) for topic, key, value, ts in SUM_INPUT]
    assert piped(drive, table, records, cached, I) == SUMS


@CACHED
def test_should_cogroup_streams_with_different_input_types(drive: Any, cached: bool) -> None:
    """CogroupedKStreamImplTest.shouldCoGroupStreamsWithDifferentInputTypes: a string
    stream and an integer stream summed together."""
    b = StreamsBuilder()
    cogrouped = two_cogrouped(b, string_sum_aggregator, sum_aggregator, I)
    table = cogrouped.aggregate(lambda: 0, Materialized.as_("store1").with_value_serde(I))
    records = [(t, k, str(v) if t == "one" else v, ts) for t, k, v, ts in SUM_INPUT]
    assert piped(drive, table, records, cached, I, two=I) == SUMS


@CACHED
def test_cogroup_key_mixed_aggregators(drive: Any, cached: bool) -> None:
    """CogroupedKStreamImplTest.testCogroupKeyMixedAggregators: ``TOSTRING_REMOVER`` on
    one stream, ``TOSTRING_ADDER`` on the other."""
    b = StreamsBuilder()
    cogrouped = two_cogrouped(b, remover, adder)
    table = cogrouped.aggregate(lambda: "0", Materialized.as_("store1").with_value_serde(S))
    records = [("one", "k1", "1", 0), ("one", "k2", "1", 1), ("one", "k1", "1", 10)]
    records += [("one", "k2", "1", 100), ("two", "k1", "2", 500), ("two", "k2", "2", 500)]
    records += [("two", "k1", "2", 500), ("two", "k2", "2", 100)]
    assert piped(drive, table, records, cached) == [
        ("k1", "0-1", 0),
        ("k2", "0-1", 1),
        ("k1", "0-1-1", 10),
        ("k2", "0-1-1", 100),
        ("k1", "0-1-1+2", 500),
        ("k2", "0-1-1+2", 500),
        ("k1", "0-1-1+2+2", 500),
        ("k2", "0-1-1+2+2", 500),
    ]


@CACHED
def test_cogroup_with_three_grouped_streams(drive: Any, cached: bool) -> None:
    """CogroupedKStreamImplTest.testCogroupWithThreeGroupedStreams"""
    b = StreamsBuilder()
    three = b.stream("three", Consumed.with_(S, S)).group_by_key()
    cogrouped = two_cogrouped(b, string_aggregator, string_aggregator)
    table = cogrouped.cogroup(three, string_aggregator).aggregate(lambda: "")
    records = [
        ("three" if i >= 8 else topic, key, value, ts)
        for i, (topic, key, value, ts) in enumerate(SHARED_KEYS)
    ]
    assert piped(drive, table, records, cached) == SHARED_KEYS_OUTPUT


@CACHED
def test_cogroup_with_ktable_ktable_inner_join(drive: Any, cached: bool) -> None:
    """CogroupedKStreamImplTest.testCogroupWithKTableKTableInnerJoin: the cogroup's table
    joined with a source table, read through the cogroup's store."""
    b = StreamsBuilder()
    table1 = two_cogrouped(b, string_aggregator, string_aggregator).aggregate(
        lambda: "", Materialized.as_("store"), Named.as_("name")
    )
    table2 = b.table("three", Consumed.with_(S, S))
    joined = table1.join(table2, lambda v1, v2: f"{v1}+{v2}", Materialized.with_(S, S))
    records = [("one", "k1", "A", 5), ("two", "k2", "B", 6)]
    records += [("three", "k1", "C", 0), ("three", "k2", "D", 10)]
    assert piped(drive, joined, records, cached) == [("k1", "A+C", 5), ("k2", "B+D", 10)]
