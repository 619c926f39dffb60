"""Kafka's ``SessionWindowedCogroupedKStreamImplTest``: grouped streams cogrouped into
sessions (``topic`` with ``TOSTRING_ADDER``, ``topic2`` with ``TOSTRING_REMOVER``, from
``"0"``, sessions merged as ``agg1+agg2``), emitting on every session update: a session a
record extends or merges is deleted (a tombstone at its end) before the new one is sent;
the argument checks and the description; and ``TopologyTest``'s session cogroup
descriptions.

Every behavioural scenario runs with the record cache on (Kafka's test configuration) and
off. Kafka's assertions read the output's plain key, value and timestamp; so do these.
"""

from __future__ import annotations

from typing import Any

import pytest

from statestores.stores import Stores
from tests.conformance.cogroup_kit import (
    CACHED,
    Setup,
    adder,
    golden,
    init,
    merger,
    named_foo,
    piped,
    preserved_structure,
    refused,
    unwindowed,
)
from tests.conformance.conftest import S
from topology import Materialized, Named, SessionWindows
from topology.api.windowed_serdes import SessionWindowedSerde

DAY = 24 * 60 * 60 * 1000
#: Kafka's ``setup``: sessions of a 100 ms gap and a day's grace
WINDOWS = SessionWindows.of_inactivity_gap_and_grace(100, DAY)


def run(drive: Any, table: Any, records: list[tuple[str, str, str, int]], cached: bool) -> Any:
    """Pipe ``(topic, key, value, timestamp)`` through ``table``; return the output's
    (key, value, timestamp)."""
    key_serde = SessionWindowedSerde(S)
    return unwindowed(piped(drive, table, records, cached, key_serde=key_serde))


# -- argument checks -----------------------------------------------------------------------

NAMED, MAT = Named.as_("name"), Materialized.as_("test")


@pytest.mark.parametrize(
    ("kafka_method", "args", "message"),
    [
        ("shouldNotHaveNullInitializerOnAggregate", (None, merger), "initializer can't be"),
        ("shouldNotHaveNullSessionMergerOnAggregate", (init, None), "session_merger can't be"),
        ("shouldNotHaveNullSessionMerger2OnAggregate", (init, None, MAT), "session_merger can't"),
        ("shouldNotHaveNullInitializer2OnAggregate", (None, merger, MAT), "initializer can't be"),
        (
            "shouldNotHaveNullSessionMerger3OnAggregate",
            (init, None, MAT, NAMED),
            "session_merger can't be",
        ),
        (
            "shouldNotHaveNullInitializer3OnAggregate",
            (None, merger, MAT, NAMED),
            "initializer can't be",
        ),
        ("shouldNotHaveNullMaterializedOnAggregate", (init, merger, NAMED), "materialized must"),
        ("shouldNotHaveNullMaterialized2OnAggregate", (init, merger, "x", NAMED), "materialized"),
        ("shouldNotHaveNullNamedOnAggregate", (init, merger, MAT, MAT), "named must be a Named"),
        ("shouldNotHaveNullNamed2OnAggregate", (init, merger, None, 2), "named must be a Named"),
    ],
)
def test_should_not_have_null_arguments_on_aggregate(
    kafka_method: str, args: tuple[Any, ...], message: str
) -> None:
    """SessionWindowedCogroupedKStreamImplTest.shouldNotHaveNull{Initializer,SessionMerger,
    Materialized,Named}[2,3]OnAggregate: a missing initializer or merger is refused; as
    ``None`` is the option left out in Python, a ``Named``/``Materialized`` of the wrong
    type is refused instead of a null one."""
    refused(WINDOWS, message, *args)


# -- descriptions --------------------------------------------------------------------------


def test_named_param_should_set_name() -> None:
    """SessionWindowedCogroupedKStreamImplTest.namedParamShouldSetName"""
    windows = SessionWindows.of_inactivity_gap_with_no_grace(1)
    expected = golden("session_windowed_cogrouped__named_param_should_set_name")
    assert named_foo(windows, init, merger) == expected


@pytest.mark.parametrize("kind", ["zero_arg", "named_materialized"])
def test_session_windowed_cogrouped_count_should_preserve_topology_structure(kind: str) -> None:
    """TopologyTest.sessionWindowedCogroupedZeroArgCountShouldPreserveTopologyStructure (and
    NamedMaterializedCount: an in-memory store named ``aggregate-store``)"""
    named = kind == "named_materialized"
    store = Stores.in_memory_session_store("aggregate-store", 1) if named else None
    windows = SessionWindows.of_inactivity_gap_with_no_grace(1)
    got = preserved_structure(windows, store, lambda: "", lambda k, a, b: "")
    name = f"session_windowed_cogrouped_{kind}_count_should_preserve_topology_structure"
    assert got == golden(f"topology__{name}")


# -- behaviour -----------------------------------------------------------------------------


def single(s: Setup) -> Any:
    """``topic`` alone cogrouped into sessions of a 500 ms gap without grace."""
    return (
        s.grouped.cogroup(adder)
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(500))
        .aggregate(init, merger, Materialized.with_(S, S))
    )


@CACHED
def test_session_window_aggregate_test(drive: Any, cached: bool) -> None:
    """SessionWindowedCogroupedKStreamImplTest.sessionWindowAggregateTest"""
    s = Setup(WINDOWS)
    records = [("topic", "k1", "A", 0), ("topic", "k2", "A", 0), ("topic", "k1", "B", 599)]
    records.append(("topic", "k2", "B", 607))
    assert run(drive, single(s), records, cached) == [
        ("k1", "0+A", 0),
        ("k2", "0+A", 0),
        ("k1", "0+B", 599),
        ("k2", "0+B", 607),
    ]


@CACHED
def test_session_window_aggregate2_test(drive: Any, cached: bool) -> None:
    """SessionWindowedCogroupedKStreamImplTest.sessionWindowAggregate2Test: a second record
    at the same time joins its session, whose window stays the same (no tombstone)."""
    s = Setup(WINDOWS)
    records = [("topic", "k1", "A", 0), ("topic", "k1", "A", 0), ("topic", "k2", "B", 599)]
    records.append(("topic", "k1", "B", 607))
    got = run(drive, single(s), records, cached)
    assert got == [
        ("k1", "0+A", 0),
        ("k1", "0+0+A+A", 0),
        ("k2", "0+B", 599),
        ("k1", "0+B", 607),
    ]


@CACHED
def test_session_window_aggregate_test2_streams_test(drive: Any, cached: bool) -> None:
    """SessionWindowedCogroupedKStreamImplTest.sessionWindowAggregateTest2StreamsTest"""
    s = Setup(WINDOWS)
    table = s.windowed.aggregate(init, merger, Materialized.with_(S, S))
    records = [("topic", "k1", "A", t) for t in (0, 84, 113, 199)]
    records += [("topic", "k1", "B", 300), ("topic", "k2", "B", 301), ("topic", "k2", "B", 400)]
    records.append(("topic", "k1", "B", 400))
    assert run(drive, table, records, cached) == [
        ("k1", "0+A", 0),
        ("k1", None, 0),
        ("k1", "0+0+A+A", 84),
        ("k1", None, 84),
        ("k1", "0+0+0+A+A+A", 113),
        ("k1", None, 113),
        ("k1", "0+0+0+0+A+A+A+A", 199),
        ("k1", "0+B", 300),
        ("k2", "0+B", 301),
        ("k2", None, 301),
        ("k2", "0+0+B+B", 400),
        ("k1", None, 300),
        ("k1", "0+0+B+B", 400),
    ]


MIX_INPUT = [("topic", "k1", "A", 0), ("topic", "k2", "A", 0), ("topic", "k2", "A", 1)]
MIX_INPUT += [("topic", "k1", "A", 2), ("topic2", "k1", "B", 3)]
MIX_OUTPUT = [
    ("k1", "0+A", 0),
    ("k2", "0+A", 0),
    ("k2", None, 0),
    ("k2", "0+0+A+A", 1),
    ("k1", None, 0),
    ("k1", "0+0+A+A", 2),
    ("k1", None, 2),
    ("k1", "0+0+0+A+A-B", 3),
]


@CACHED
def test_session_window_mix_aggregators_test(drive: Any, cached: bool) -> None:
    """SessionWindowedCogroupedKStreamImplTest.sessionWindowMixAggregatorsTest"""
    s = Setup(WINDOWS)
    table = s.windowed.aggregate(init, merger, Materialized.with_(S, S))
    records = [*MIX_INPUT, ("topic2", "k2", "B", 3), ("topic2", "k2", "B", 444)]
    records.append(("topic2", "k1", "B", 444))
    assert run(drive, table, records, cached) == [
        *MIX_OUTPUT,
        ("k2", None, 1),
        ("k2", "0+0+0+A+A-B", 3),
        ("k2", "0-B", 444),
        ("k1", "0-B", 444),
    ]


@CACHED
def test_session_window_mix_aggregators_many_windows_test(drive: Any, cached: bool) -> None:
    """SessionWindowedCogroupedKStreamImplTest.sessionWindowMixAggregatorsManyWindowsTest"""
    s = Setup(WINDOWS)
    table = s.windowed.aggregate(init, merger, Materialized.with_(S, S))
    records = [*MIX_INPUT, ("topic2", "k2", "B", 500), ("topic2", "k2", "B", 501)]
    records.append(("topic2", "k1", "B", 501))
    assert run(drive, table, records, cached) == [
        *MIX_OUTPUT,
        ("k2", "0-B", 500),
        ("k2", None, 500),
        ("k2", "0+0-B-B", 501),
        ("k1", "0-B", 501),
    ]
