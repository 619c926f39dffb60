"""Kafka's ``SlidingWindowedCogroupedKStreamImplTest``: two grouped streams cogrouped over
sliding windows of a 500 ms time difference and 2,000 ms grace (``topic`` with
``TOSTRING_ADDER``, ``topic2`` with ``TOSTRING_REMOVER``, from ``"0"``), emitting on every
window update; the argument checks and the description; and ``TopologyTest``'s sliding
cogroup descriptions.

The output is read with a time-windowed key serde of size 500, as Kafka's test reads it (a
window's end is its start + 500). Every behavioural scenario runs with the record cache on
(Kafka's test configuration) and off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.errors import TopologyError
from statestores.api import Window, Windowed
from statestores.stores import Stores
from tests.conformance.conftest import S
from topology import Consumed, Grouped, Materialized, Named, SlidingWindows, StreamsBuilder
from topology.api.windowed_serdes import TimeWindowedSerde

GOLDEN = Path(__file__).parent / "golden"
WINDOW_SIZE_MS = 500


def adder(key: Any, value: Any, agg: Any) -> str:
    return f"{agg}+{value}"


def remover(key: Any, value: Any, agg: Any) -> str:
    return f"{agg}-{value}"


def init() -> str:
    return "0"


def sliding() -> SlidingWindows:
    return SlidingWindows.of_time_difference_and_grace(WINDOW_SIZE_MS, 2000)


class Setup:
    """Kafka's ``setup``: ``topic`` and ``topic2`` grouped by key and cogrouped, windowed
    by sliding windows."""

    def __init__(self) -> None:
        self.builder = StreamsBuilder()
        stream = self.builder.stream("topic", Consumed.with_(S, S))
        stream2 = self.builder.stream("topic2", Consumed.with_(S, S))
        self.grouped = stream.group_by_key(Grouped.with_(S, S))
        grouped2 = stream2.group_by_key(Grouped.with_(S, S))
        cogrouped = self.grouped.cogroup(adder).cogroup(grouped2, remover)
        self.windowed = cogrouped.windowed_by(sliding())

    def run(
        self, drive: Any, table: Any, records: list[tuple[str, str, str, int]], cached: bool
    ) -> list[tuple[Any, str, int]]:
        """Send ``table`` to ``output``, pipe ``(topic, key, value, timestamp)``; return the
        output's (windowed key, value, timestamp)."""
        table.to_stream().to("output")
        d = drive(self.builder.build(), **({} if cached else {"statestore.cache.max.bytes": 0}))
        topics = {name: d.create_input_topic(name, S, S) for name in ("topic", "topic2")}
        for topic, key, value, ts in records:
            topics[topic].pipe_input(key, value, ts)
        out = d.create_output_topic("output", TimeWindowedSerde(S, WINDOW_SIZE_MS), S)
        return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


def w(key: str, start: int) -> Windowed[str]:
    """``key`` in the window read back from ``start`` (its end: start + 500)."""
    return Windowed(key, Window(start, start + WINDOW_SIZE_MS))


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
    """SlidingWindowedCogroupedKStreamImplTest.shouldNotHaveNullInitializerOnAggregate (and
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
    """SlidingWindowedCogroupedKStreamImplTest.shouldNotHaveNullMaterializedOnTwoOptionAggregate
    (and NullNamedTwoOption, NullMaterialized, NullNamed): ``None`` is the option left out
    in Python, so what is not a ``Named``/``Materialized`` is refused instead."""
    with pytest.raises(TopologyError, match=message):
        Setup().windowed.aggregate(init, **options)


# -- descriptions --------------------------------------------------------------------------


def test_named_param_should_set_name() -> None:
    """SlidingWindowedCogroupedKStreamImplTest.namedParamShouldSetName"""
    b = StreamsBuilder()
    grouped = b.stream("topic", Consumed.with_(S, S)).group_by_key(Grouped.with_(S, S))
    grouped.cogroup(adder).windowed_by(sliding()).aggregate(init, named=Named.as_("foo"))
    path = GOLDEN / "sliding_windowed_cogrouped__named_param_should_set_name.txt"
    assert str(b.build().describe()) == path.read_text()


@pytest.mark.parametrize("named", [False, True], ids=["zero_arg", "named_materialized"])
def test_sliding_windowed_cogrouped_count_should_preserve_topology_structure(named: bool) -> None:
    """TopologyTest.slidingWindowedCogroupedZeroArgCountShouldPreserveTopologyStructure (and
    NamedMaterializedCount: an in-memory store named ``aggregate-store``)"""
    b = StreamsBuilder()
    windowed = (
        b.stream("input-topic")
        .group_by_key()
        .cogroup(lambda k, v, agg: v)
        .windowed_by(SlidingWindows.of_time_difference_with_no_grace(1))
    )
    if named:
        supplier = Stores.in_memory_window_store("aggregate-store", 2, 1)
        windowed.aggregate(lambda: "", Materialized.as_(supplier))
    else:
        windowed.aggregate(lambda: "")
    kind = "named_materialized" if named else "zero_arg"
    name = f"topology__sliding_windowed_cogrouped_{kind}_count_should_preserve_topology_structure"
    assert str(b.build().describe()) == (GOLDEN / f"{name}.txt").read_text()


# -- behaviour -----------------------------------------------------------------------------

CACHED = pytest.mark.parametrize("cached", [True, False], ids=["cached", "uncached"])


@CACHED
def test_sliding_window_aggregate_streams_test(drive: Any, cached: bool) -> None:
    """SlidingWindowedCogroupedKStreamImplTest.slidingWindowAggregateStreamsTest: each
    record's left window, its right window, and the windows it updates."""
    s = Setup()
    table = s.windowed.aggregate(init, Materialized.with_(S, S))
    records = [("topic", "k1", "A", 500), ("topic", "k2", "A", 500), ("topic", "k2", "A", 501)]
    records += [("topic", "k1", "A", 502), ("topic", "k1", "B", 503), ("topic", "k2", "B", 503)]
    records += [("topic", "k2", "B", 504), ("topic", "k1", "B", 504)]
    assert s.run(drive, table, records, cached) == [
        # k1-A-500
        (w("k1", 0), "0+A", 500),
        # k2-A-500
        (w("k2", 0), "0+A", 500),
        # k2-A-501
        (w("k2", 501), "0+A", 501),
        (w("k2", 1), "0+A+A", 501),
        # k1-A-502
        (w("k1", 501), "0+A", 502),
        (w("k1", 2), "0+A+A", 502),
        # k1-B-503
        (w("k1", 501), "0+A+B", 503),
        (w("k1", 503), "0+B", 503),
        (w("k1", 3), "0+A+A+B", 503),
        # k2-B-503
        (w("k2", 501), "0+A+B", 503),
        (w("k2", 502), "0+B", 503),
        (w("k2", 3), "0+A+A+B", 503),
        # k2-B-504
        (w("k2", 502), "0+B+B", 504),
        (w("k2", 501), "0+A+B+B", 504),
        (w("k2", 504), "0+B", 504),
        (w("k2", 4), "0+A+A+B+B", 504),
        # k1-B-504
        (w("k1", 503), "0+B+B", 504),
        (w("k1", 501), "0+A+B+B", 504),
        (w("k1", 504), "0+B", 504),
        (w("k1", 4), "0+A+A+B+B", 504),
    ]


@CACHED
def test_sliding_window_aggregate_overlapping_windows_test(drive: Any, cached: bool) -> None:
    """SlidingWindowedCogroupedKStreamImplTest.slidingWindowAggregateOverlappingWindowsTest"""
    s = Setup()
    table = (
        s.grouped.cogroup(adder).windowed_by(sliding()).aggregate(init, Materialized.with_(S, S))
    )
    records = [("topic", "k1", "A", 500), ("topic", "k2", "A", 500), ("topic", "k1", "B", 750)]
    records += [("topic", "k2", "B", 750), ("topic", "k2", "A", 1000), ("topic", "k1", "A", 1000)]
    got = [(k.key, v, t) for k, v, t in s.run(drive, table, records, cached)]
    assert got == [
        ("k1", "0+A", 500),  # left window k1@500
        ("k2", "0+A", 500),  # left window k2@500
        ("k1", "0+B", 750),  # right window k1@500
        ("k1", "0+A+B", 750),  # left window k1@750
        ("k2", "0+B", 750),  # right window k2@500
        ("k2", "0+A+B", 750),  # left window k2@750
        ("k2", "0+B+A", 1000),  # right window k2@500 update
        ("k2", "0+A", 1000),  # right window k2@750
        ("k2", "0+A+B+A", 1000),  # left window k2@1000
        ("k1", "0+B+A", 1000),  # right window k1@500 update
        ("k1", "0+A", 1000),  # right window k1@750
        ("k1", "0+A+B+A", 1000),  # left window k1@1000
    ]
