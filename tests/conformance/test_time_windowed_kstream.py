"""Kafka's ``TimeWindowedKStreamImplTest``: count, reduce and aggregate over 500 ms tumbling
windows without grace, emitting on every window update, with the record cache on and off.

Six records: key 1 at 10, 15 and 500; key 2 at 550, 500 and 1000. The window [0, 500) of
key 1 closes when stream time reaches 500; the record of key 2 at 500 arrives after stream
time 550, inside its still open window [500, 1000).
"""

from __future__ import annotations

from typing import Any

import pytest

from statestores.api import Window, Windowed
from tests.conformance.conftest import L, S
from topology import (
    Consumed,
    Grouped,
    Materialized,
    StreamsBuilder,
    TimeWindows,
    ValueAndTimestamp,
)

INPUT = (("1", "1", 10), ("1", "2", 15), ("1", "3", 500), ("2", "10", 550), ("2", "20", 500))
INPUT += (("2", "30", 1000),)
K1_W0, K1_W1 = Windowed("1", Window(0, 500)), Windowed("1", Window(500, 1000))
K2_W1, K2_W2 = Windowed("2", Window(500, 1000)), Windowed("2", Window(1000, 1500))


def windowed_stream(b: StreamsBuilder) -> Any:
    return (
        b.stream("topic", Consumed.with_(S, S))
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(TimeWindows.of_size_with_no_grace(500))
    )


def run(drive: Any, b: StreamsBuilder, **config: Any) -> Any:
    """Pipe the six records; return the driver."""
    d = drive(b.build(), **config)
    topic = d.create_input_topic("topic", S, S)
    for key, value, ts in INPUT:
        topic.pipe_input(key, value, ts)
    return d


def capture(table: Any, seen: list[tuple[Any, Any]]) -> None:
    """Record each update of ``table`` as (windowed key, value)."""
    table.to_stream().foreach(lambda k, v: seen.append((k, v)))


UPDATES = [K1_W0, K1_W0, K1_W1, K2_W1, K2_W1, K2_W2]


def updates(drive: Any, make: Any, cached: bool) -> list[tuple[Any, Any]]:
    b = StreamsBuilder()
    seen: list[Any] = []
    capture(make(windowed_stream(b)), seen)
    # a cache flushed at every commit (the driver's, after each record) holds nothing back
    run(drive, b, **({} if cached else {"statestore.cache.max.bytes": 0}))
    return seen


@pytest.mark.parametrize("cached", [True, False])
def test_should_count_windowed(drive: Any, cached: bool) -> None:
    """TimeWindowedKStreamImplTest.shouldCountWindowed (ON_WINDOW_UPDATE)"""
    got = updates(drive, lambda w: w.count(), cached)
    assert got == list(zip(UPDATES, [1, 2, 1, 1, 2, 1], strict=True))


@pytest.mark.parametrize("cached", [True, False])
def test_should_reduce_windowed(drive: Any, cached: bool) -> None:
    """TimeWindowedKStreamImplTest.shouldReduceWindowed (ON_WINDOW_UPDATE)"""
    got = updates(drive, lambda w: w.reduce(lambda a, v: f"{a}+{v}"), cached)
    assert got == list(zip(UPDATES, ["1", "1+2", "3", "10", "10+20", "30"], strict=True))


@pytest.mark.parametrize("cached", [True, False])
def test_should_aggregate_windowed(drive: Any, cached: bool) -> None:
    """TimeWindowedKStreamImplTest.shouldAggregateWindowed (ON_WINDOW_UPDATE)"""
    mat = Materialized.with_(S, S)
    mat = mat.with_caching_enabled() if cached else mat.with_caching_disabled()
    got = updates(
        drive, lambda w: w.aggregate(lambda: "0", lambda k, v, a: f"{a}+{v}", mat), cached
    )
    values = ["0+1", "0+1+2", "0+3", "0+10", "0+10+20", "0+30"]
    assert got == list(zip(UPDATES, values, strict=True))


def test_should_materialize_count(drive: Any) -> None:
    """TimeWindowedKStreamImplTest.shouldMaterializeCount (ON_WINDOW_UPDATE, no cache): the
    store holds only the windows its retention (size + grace) keeps at stream time 1000;
    ``get_window_store`` shows plain values, ``get_timestamped_window_store`` each window's
    value with its last update's timestamp."""
    b = StreamsBuilder()
    mat = Materialized.as_("count-store").with_key_serde(S).with_value_serde(L)
    windowed_stream(b).count(mat.with_caching_disabled())
    d = run(drive, b)
    assert list(d.get_window_store("count-store").fetch_range("1", "2", 0, 1000)) == [(K2_W2, 1)]
    timestamped = d.get_timestamped_window_store("count-store")
    assert list(timestamped.fetch_range("1", "2", 0, 1000)) == [(K2_W2, ValueAndTimestamp(1, 1000))]
