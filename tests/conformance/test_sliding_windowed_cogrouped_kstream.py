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

from typing import Any

import pytest

from statestores.api import Window, Windowed
from statestores.stores import Stores
from tests.conformance.cogroup_kit import (
    CACHED,
    INVALID_OPTION_CASES,
    NULL_INITIALIZER_CASES,
    Setup,
    adder,
    golden,
    init,
    named_foo,
    piped,
    preserved_structure,
    refused,
    unwindowed,
)
from tests.conformance.conftest import S
from topology import Materialized, SlidingWindows
from topology.api.windowed_serdes import TimeWindowedSerde

WINDOW_SIZE_MS = 500
#: Kafka's ``setup``: sliding windows of a 500 ms time difference and 2,000 ms grace
WINDOWS = SlidingWindows.of_time_difference_and_grace(WINDOW_SIZE_MS, 2000)


def run(drive: Any, table: Any, records: list[tuple[str, str, str, int]], cached: bool) -> Any:
    """Pipe ``(topic, key, value, timestamp)`` through ``table``; return the output's
    (windowed key, value, timestamp)."""
    key_serde = TimeWindowedSerde(S, WINDOW_SIZE_MS)
    return piped(drive, table, records, cached, key_serde=key_serde)


def w(key: str, start: int) -> Windowed[str]:
    """``key`` in the window read back from ``start`` (its end: start + 500)."""
    return Windowed(key, Window(start, start + WINDOW_SIZE_MS))


# -- argument checks -----------------------------------------------------------------------


@pytest.mark.parametrize(("kafka_method", "options"), NULL_INITIALIZER_CASES)
def test_should_not_have_null_initializer_on_aggregate(
    kafka_method: str, options: dict[str, Any]
) -> None:
    """SlidingWindowedCogroupedKStreamImplTest.shouldNotHaveNullInitializerOnAggregate (and
    TwoOptionNamed, TwoOptionMaterialized, ThreeOption)"""
    refused(WINDOWS, "initializer can't be None", None, **options)


@pytest.mark.parametrize(("kafka_method", "options", "message"), INVALID_OPTION_CASES)
def test_should_not_have_invalid_named_or_materialized_on_aggregate(
    kafka_method: str, options: dict[str, Any], message: str
) -> None:
    """SlidingWindowedCogroupedKStreamImplTest.shouldNotHaveNullMaterializedOnTwoOptionAggregate
    (and NullNamedTwoOption, NullMaterialized, NullNamed): ``None`` is the option left out
    in Python, so what is not a ``Named``/``Materialized`` is refused instead."""
    refused(WINDOWS, message, init, **options)


# -- descriptions --------------------------------------------------------------------------


def test_named_param_should_set_name() -> None:
    """SlidingWindowedCogroupedKStreamImplTest.namedParamShouldSetName"""
    expected = golden("sliding_windowed_cogrouped__named_param_should_set_name")
    assert named_foo(WINDOWS, init) == expected


@pytest.mark.parametrize("kind", ["zero_arg", "named_materialized"])
def test_sliding_windowed_cogrouped_count_should_preserve_topology_structure(kind: str) -> None:
    """TopologyTest.slidingWindowedCogroupedZeroArgCountShouldPreserveTopologyStructure (and
    NamedMaterializedCount: an in-memory store named ``aggregate-store``)"""
    named = kind == "named_materialized"
    store = Stores.in_memory_window_store("aggregate-store", 2, 1) if named else None
    windows = SlidingWindows.of_time_difference_with_no_grace(1)
    got = preserved_structure(windows, store, lambda: "")
    name = f"sliding_windowed_cogrouped_{kind}_count_should_preserve_topology_structure"
    assert got == golden(f"topology__{name}")


# -- behaviour -----------------------------------------------------------------------------


@CACHED
def test_sliding_window_aggregate_streams_test(drive: Any, cached: bool) -> None:
    """SlidingWindowedCogroupedKStreamImplTest.slidingWindowAggregateStreamsTest: each
    record's left window, its right window, and the windows it updates."""
    s = Setup(WINDOWS)
    table = s.windowed.aggregate(init, Materialized.with_(S, S))
    records = [("topic", "k1", "A", 500), ("topic", "k2", "A", 500), ("topic", "k2", "A", 501)]
    records += [("topic", "k1", "A", 502), ("topic", "k1", "B", 503), ("topic", "k2", "B", 503)]
    records += [("topic", "k2", "B", 504), ("topic", "k1", "B", 504)]
    assert run(drive, table, records, cached) == [
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
    s = Setup(WINDOWS)
    table = s.grouped.cogroup(adder).windowed_by(WINDOWS).aggregate(init, Materialized.with_(S, S))
    records = [("topic", "k1", "A", 500), ("topic", "k2", "A", 500), ("topic", "k1", "B", 750)]
    records += [("topic", "k2", "B", 750), ("topic", "k2", "A", 1000), ("topic", "k1", "A", 1000)]
    assert unwindowed(run(drive, table, records, cached)) == [
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
