"""Kafka's ``TimeWindowedCogroupedKStreamImplTest``: two grouped streams cogrouped over
500 ms time windows without grace (``topic`` with ``TOSTRING_ADDER``, ``topic2`` with
``TOSTRING_REMOVER``, from ``"0"``), emitting on every window update; the argument checks
and the description; and ``TopologyTest``'s time-windowed cogroup descriptions.

Every behavioural scenario runs with the record cache on (Kafka's test configuration) and
off. Kafka's assertions read the output's plain key, value and timestamp; so do these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.errors import TopologyError
from statestores.stores import Stores
from tests.conformance.conftest import S
from topology import Consumed, Grouped, Materialized, Named, StreamsBuilder, TimeWindows
from topology.api.windowed_serdes import TimeWindowedSerde

GOLDEN = Path(__file__).parent / "golden"
WINDOW_SIZE = 500


def adder(key: Any, value: Any, agg: Any) -> str:
    return f"{agg}+{value}"


def remover(key: Any, value: Any, agg: Any) -> str:
    return f"{agg}-{value}"


def init() -> str:
    return "0"


class Setup:
    """Kafka's ``setup``: ``topic`` and ``topic2`` grouped by key and cogrouped, windowed
    by 500 ms tumbling windows."""

    def __init__(self) -> None:
        self.builder = StreamsBuilder()
        stream = self.builder.stream("topic", Consumed.with_(S, S))
        stream2 = self.builder.stream("topic2", Consumed.with_(S, S))
        self.grouped = stream.group_by_key(Grouped.with_(S, S))
        grouped2 = stream2.group_by_key(Grouped.with_(S, S))
        self.cogrouped = self.grouped.cogroup(adder).cogroup(grouped2, remover)
        self.windowed = self.cogrouped.windowed_by(TimeWindows.of_size_with_no_grace(WINDOW_SIZE))

    def run(
        self, drive: Any, table: Any, records: list[tuple[str, str, str, int]], cached: bool
    ) -> list[tuple[str, str, int]]:
        """Send ``table`` to ``output``, pipe ``(topic, key, value, timestamp)``; return the
        output's (key, value, timestamp)."""
        table.to_stream().to("output")
        d = drive(self.builder.build(), **({} if cached else {"statestore.cache.max.bytes": 0}))
        topics = {name: d.create_input_topic(name, S, S) for name in ("topic", "topic2")}
        for topic, key, value, ts in records:
            topics[topic].pipe_input(key, value, ts)
        out = d.create_output_topic("output", TimeWindowedSerde(S, WINDOW_SIZE), S)
        return [(r.key.key, r.value, r.timestamp) for r in out.read_records_to_list()]


# -- argument checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kafka_method", "options"),
    [
        ("shouldNotHaveNullInitializerOnAggregate", {}),
        ("shouldNotHaveNullInitializerTwoOptionNamedOnAggregate", {"named": Named.as_("test")}),
        (
            "shouldNotHaveNullInitializerTwoOptionMaterializedOnAggregate",
            {"materialized": Materialized.as_("test")},
        ),
        (
            "shouldNotHaveNullInitializerThreeOptionOnAggregate",
            {"named": Named.as_("test"), "materialized": Materialized.as_("test")},
        ),
    ],
)
def test_should_not_have_null_initializer_on_aggregate(
    kafka_method: str, options: dict[str, Any]
) -> None:
    """TimeWindowedCogroupedKStreamImplTest.shouldNotHaveNullInitializerOnAggregate (and
    TwoOptionNamed, TwoOptionMaterialized, ThreeOption)"""
    with pytest.raises(TopologyError, match="initializer can't be None"):
        Setup().windowed.aggregate(None, **options)


@pytest.mark.parametrize(
    ("kafka_method", "options", "message"),
    [
        (
            "shouldNotHaveNullMaterializedOnTwoOptionAggregate",
            {"materialized": Named.as_("test")},
            "materialized must be a Materialized",
        ),
        ("shouldNotHaveNullNamedTwoOptionOnAggregate", {"named": 1}, "named must be a Named"),
        (
            "shouldNotHaveNullMaterializedOnAggregate",
            {"named": Named.as_("Test"), "materialized": "test"},
            "materialized must be a Materialized",
        ),
        (
            "shouldNotHaveNullNamedOnAggregate",
            {"named": Materialized.as_("test"), "materialized": Materialized.as_("test")},
            "named must be a Named",
        ),
    ],
)
def test_should_not_have_invalid_named_or_materialized_on_aggregate(
    kafka_method: str, options: dict[str, Any], message: str
) -> None:
    """TimeWindowedCogroupedKStreamImplTest.shouldNotHaveNullMaterializedOnTwoOptionAggregate
    (and NullNamedTwoOption, NullMaterialized, NullNamed): ``None`` is the option left out
    in Python, so what is not a ``Named``/``Materialized`` is refused instead."""
    with pytest.raises(TopologyError, match=message):
        Setup().windowed.aggregate(init, **options)


# -- descriptions --------------------------------------------------------------------------


def test_named_param_should_set_name() -> None:
    """TimeWindowedCogroupedKStreamImplTest.namedParamShouldSetName"""
    b = StreamsBuilder()
    grouped = b.stream("topic", Consumed.with_(S, S)).group_by_key(Grouped.with_(S, S))
    grouped.cogroup(adder).windowed_by(TimeWindows.of_size_with_no_grace(WINDOW_SIZE)).aggregate(
        init, named=Named.as_("foo")
    )
    expected = (GOLDEN / "time_windowed_cogrouped__named_param_should_set_name.txt").read_text()
    assert str(b.build().describe()) == expected


@pytest.mark.parametrize("named", [False, True], ids=["zero_arg", "named_materialized"])
def test_time_windowed_cogrouped_count_should_preserve_topology_structure(named: bool) -> None:
    """TopologyTest.timeWindowedCogroupedZeroArgCountShouldPreserveTopologyStructure (and
    NamedMaterializedCount: an in-memory store named ``aggregate-store``)"""
    b = StreamsBuilder()
    windowed = (
        b.stream("input-topic")
        .group_by_key()
        .cogroup(lambda k, v, agg: v)
        .windowed_by(TimeWindows.of_size_with_no_grace(1))
    )
    if named:
        supplier = Stores.in_memory_window_store("aggregate-store", 1, 1)
        windowed.aggregate(lambda: "", Materialized.as_(supplier))
    else:
        windowed.aggregate(lambda: "")
    kind = "named_materialized" if named else "zero_arg"
    path = (
        GOLDEN
        / f"topology__time_windowed_cogrouped_{kind}_count_should_preserve_topology_structure.txt"
    )
    assert str(b.build().describe()) == path.read_text()


# -- behaviour -----------------------------------------------------------------------------

CACHED = pytest.mark.parametrize("cached", [True, False], ids=["cached", "uncached"])


@CACHED
def test_time_window_aggregate_test_streams_test(drive: Any, cached: bool) -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateTestStreamsTest"""
    s = Setup()
    table = s.windowed.aggregate(init, Materialized.with_(S, S))
    records = [("topic", "k1", "A", 0), ("topic", "k2", "A", 0), ("topic", "k2", "A", 1)]
    records += [("topic", "k1", "A", 2), ("topic", "k1", "B", 3), ("topic", "k2", "B", 3)]
    records += [("topic", "k2", "B", 4), ("topic", "k1", "B", 4)]
    assert s.run(drive, table, records, cached) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 0),
        ("k2", "0+A+A", 1),
        ("k1", "0+A+A", 2),
        ("k1", "0+A+A+B", 3),
        ("k2", "0+A+A+B", 3),
        ("k2", "0+A+A+B+B", 4),
        ("k1", "0+A+A+B+B", 4),
    ]


MIX_INPUT = [("topic", "k1", "A", 0), ("topic", "k2", "A", 0), ("topic", "k2", "A", 1)]
MIX_INPUT += [("topic", "k1", "A", 2), ("topic2", "k1", "B", 3), ("topic2", "k2", "B", 3)]


@CACHED
def test_time_window_mix_aggregators_test(drive: Any, cached: bool) -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowMixAggregatorsTest"""
    s = Setup()
    table = s.windowed.aggregate(init, Materialized.with_(S, S))
    records = [*MIX_INPUT, ("topic2", "k2", "B", 4), ("topic2", "k1", "B", 4)]
    assert s.run(drive, table, records, cached) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 0),
        ("k2", "0+A+A", 1),
        ("k1", "0+A+A", 2),
        ("k1", "0+A+A-B", 3),
        ("k2", "0+A+A-B", 3),
        ("k2", "0+A+A-B-B", 4),
        ("k1", "0+A+A-B-B", 4),
    ]


@CACHED
def test_time_window_aggregate_many_windows_test(drive: Any, cached: bool) -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateManyWindowsTest"""
    s = Setup()
    table = (
        s.grouped.cogroup(adder)
        .windowed_by(TimeWindows.of_size_with_no_grace(500))
        .aggregate(init, Materialized.with_(S, S))
    )
    records = [("topic", "k1", "A", 0), ("topic", "k2", "A", 499), ("topic", "k2", "A", 500)]
    records.append(("topic", "k1", "A", 500))
    assert s.run(drive, table, records, cached) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 499),
        ("k2", "0+A", 500),
        ("k1", "0+A", 500),
    ]


@CACHED
def test_time_window_aggregate_overlapping_windows_test(drive: Any, cached: bool) -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateOverlappingWindowsTest:
    500 ms windows advancing by 200 ms."""
    s = Setup()
    windows = TimeWindows.of_size_with_no_grace(500).advance_by(200)
    table = s.grouped.cogroup(adder).windowed_by(windows).aggregate(init, Materialized.with_(S, S))
    records = [("topic", "k1", "A", 0), ("topic", "k2", "A", 0), ("topic", "k1", "B", 250)]
    records += [("topic", "k2", "B", 250), ("topic", "k2", "A", 500), ("topic", "k1", "A", 500)]
    assert s.run(drive, table, records, cached) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 0),
        ("k1", "0+A+B", 250),
        ("k1", "0+B", 250),
        ("k2", "0+A+B", 250),
        ("k2", "0+B", 250),
        ("k2", "0+B+A", 500),
        ("k2", "0+A", 500),
        ("k1", "0+B+A", 500),
        ("k1", "0+A", 500),
    ]


@CACHED
def test_time_window_mix_aggregators_many_windows_test(drive: Any, cached: bool) -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowMixAggregatorsManyWindowsTest"""
    s = Setup()
    table = s.windowed.aggregate(init, Materialized.with_(S, S))
    records = [*MIX_INPUT, ("topic2", "k2", "B", 501), ("topic2", "k1", "B", 501)]
    assert s.run(drive, table, records, cached) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 0),
        ("k2", "0+A+A", 1),
        ("k1", "0+A+A", 2),
        ("k1", "0+A+A-B", 3),
        ("k2", "0+A+A-B", 3),
        ("k2", "0-B", 501),
        ("k1", "0-B", 501),
    ]
