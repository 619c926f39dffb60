"""Kafka's ``TimeWindowedCogroupedKStreamImplTest``: two grouped streams cogrouped over
500 ms time windows without grace (``topic`` with ``TOSTRING_ADDER``, ``topic2`` with
``TOSTRING_REMOVER``, from ``"0"``), emitting on every window update; the argument checks
and the description; and ``TopologyTest``'s time-windowed cogroup descriptions.

Every behavioural scenario runs with the record cache on (Kafka's test configuration) and
off. Kafka's assertions read the output's plain key, value and timestamp; so do these.
"""

from __future__ import annotations

from typing import Any

import pytest

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
from topology import Materialized, TimeWindows
from topology.api.windowed_serdes import TimeWindowedSerde

WINDOW_SIZE = 500
#: Kafka's ``setup``: 500 ms tumbling windows
WINDOWS = TimeWindows.of_size_with_no_grace(WINDOW_SIZE)


def run(drive: Any, table: Any, records: list[tuple[str, str, str, int]], cached: bool) -> Any:
    """Pipe ``(topic, key, value, timestamp)`` through ``table``; return the output's
    (key, value, timestamp)."""
    key_serde = TimeWindowedSerde(S, WINDOW_SIZE)
    return unwindowed(piped(drive, table, records, cached, key_serde=key_serde))


# -- argument checks -----------------------------------------------------------------------


@pytest.mark.parametrize(("kafka_method", "options"), NULL_INITIALIZER_CASES)
def test_should_not_have_null_initializer_on_aggregate(
    kafka_method: str, options: dict[str, Any]
) -> None:
    """TimeWindowedCogroupedKStreamImplTest.shouldNotHaveNullInitializerOnAggregate (and
    TwoOptionNamed, TwoOptionMaterialized, ThreeOption)"""
    refused(WINDOWS, "initializer can't be None", None, **options)


@pytest.mark.parametrize(("kafka_method", "options", "message"), INVALID_OPTION_CASES)
def test_should_not_have_invalid_named_or_materialized_on_aggregate(
    kafka_method: str, options: dict[str, Any], message: str
) -> None:
    """TimeWindowedCogroupedKStreamImplTest.shouldNotHaveNullMaterializedOnTwoOptionAggregate
    (and NullNamedTwoOption, NullMaterialized, NullNamed): ``None`` is the option left out
    in Python, so what is not a ``Named``/``Materialized`` is refused instead."""
    refused(WINDOWS, message, init, **options)


# -- descriptions --------------------------------------------------------------------------


def test_named_param_should_set_name() -> None:
    """TimeWindowedCogroupedKStreamImplTest.namedParamShouldSetName"""
    expected = golden("time_windowed_cogrouped__named_param_should_set_name")
    assert named_foo(WINDOWS, init) == expected


@pytest.mark.parametrize("kind", ["zero_arg", "named_materialized"])
def test_time_windowed_cogrouped_count_should_preserve_topology_structure(kind: str) -> None:
    """TopologyTest.timeWindowedCogroupedZeroArgCountShouldPreserveTopologyStructure (and
    NamedMaterializedCount: an in-memory store named ``aggregate-store``)"""
    named = kind == "named_materialized"
    store = Stores.in_memory_window_store("aggregate-store", 1, 1) if named else None
    got = preserved_structure(TimeWindows.of_size_with_no_grace(1), store, lambda: "")
    name = f"time_windowed_cogrouped_{kind}_count_should_preserve_topology_structure"
    assert got == golden(f"topology__{name}")


# -- behaviour -----------------------------------------------------------------------------


@CACHED
def test_time_window_aggregate_test_streams_test(drive: Any, cached: bool) -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateTestStreamsTest"""
    s = Setup(WINDOWS)
    table = s.windowed.aggregate(init, Materialized.with_(S, S))
    records = [("topic", "k1", "A", 0), ("topic", "k2", "A", 0), ("topic", "k2", "A", 1)]
    records += [("topic", "k1", "A", 2), ("topic", "k1", "B", 3), ("topic", "k2", "B", 3)]
    records += [("topic", "k2", "B", 4), ("topic", "k1", "B", 4)]
    assert run(drive, table, records, cached) == [
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
MIX_OUTPUT = [
    ("k1", "0+A", 0),
    ("k2", "0+A", 0),
    ("k2", "0+A+A", 1),
    ("k1", "0+A+A", 2),
    ("k1", "0+A+A-B", 3),
    ("k2", "0+A+A-B", 3),
]


@CACHED
def test_time_window_mix_aggregators_test(drive: Any, cached: bool) -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowMixAggregatorsTest"""
    s = Setup(WINDOWS)
    table = s.windowed.aggregate(init, Materialized.with_(S, S))
    records = [*MIX_INPUT, ("topic2", "k2", "B", 4), ("topic2", "k1", "B", 4)]
    assert run(drive, table, records, cached) == [
        *MIX_OUTPUT,
        ("k2", "0+A+A-B-B", 4),
        ("k1", "0+A+A-B-B", 4),
    ]


@CACHED
def test_time_window_aggregate_many_windows_test(drive: Any, cached: bool) -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateManyWindowsTest"""
    s = Setup(WINDOWS)
    table = (
        s.grouped.cogroup(adder)
        .windowed_by(TimeWindows.of_size_with_no_grace(500))
        .aggregate(init, Materialized.with_(S, S))
    )
    records = [("topic", "k1", "A", 0), ("topic", "k2", "A", 499), ("topic", "k2", "A", 500)]
    records.append(("topic", "k1", "A", 500))
    assert run(drive, table, records, cached) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 499),
        ("k2", "0+A", 500),
        ("k1", "0+A", 500),
    ]


@CACHED
def test_time_window_aggregate_overlapping_windows_test(drive: Any, cached: bool) -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateOverlappingWindowsTest:
    500 ms windows advancing by 200 ms."""
    s = Setup(WINDOWS)
    windows = TimeWindows.of_size_with_no_grace(500).advance_by(200)
    table = s.grouped.cogroup(adder).windowed_by(windows).aggregate(init, Materialized.with_(S, S))
    records = [("topic", "k1", "A", 0), ("topic", "k2", "A", 0), ("topic", "k1", "B", 250)]
    records += [("topic", "k2", "B", 250), ("topic", "k2", "A", 500), ("topic", "k1", "A", 500)]
    assert run(drive, table, records, cached) == [
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
    s = Setup(WINDOWS)
    table = s.windowed.aggregate(init, Materialized.with_(S, S))
    records = [*MIX_INPUT, ("topic2", "k2", "B", 501), ("topic2", "k1", "B", 501)]
    assert run(drive, table, records, cached) == [
        *MIX_OUTPUT,
        ("k2", "0-B", 501),
        ("k1", "0-B", 501),
    ]
