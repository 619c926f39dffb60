"""Kafka's ``SessionWindowedKStreamImplTest``: count, reduce and aggregate over sessions of
a 500 ms inactivity gap without grace, emitting on every update, with the record cache on
and off.

Five records: key 1 at 10, 15 and 600 (two sessions), key 2 at 600 and then 599 (one
session, extended back). A session that a record merges is deleted downstream (a ``None``
for its old window) before the merged session is sent.
"""

from __future__ import annotations

from typing import Any

import pytest

from statestores.api import Window, Windowed
from tests.conformance.conftest import S
from topology import Consumed, Grouped, Materialized, SessionWindows, StreamsBuilder

INPUT = (("1", "1", 10), ("1", "2", 15), ("1", "3", 600), ("2", "1", 600), ("2", "2", 599))


def w(key: str, start: int, end: int) -> Windowed[str]:
    return Windowed(key, Window(start, end))


SESSIONS = [w("1", 10, 10), w("1", 10, 10), w("1", 10, 15), w("1", 600, 600)]
SESSIONS += [w("2", 600, 600), w("2", 600, 600), w("2", 599, 600)]


def run(drive: Any, make: Any, **config: Any) -> tuple[Any, list[tuple[Any, Any, int]]]:
    """Pipe the records through ``make(session-windowed stream)``; return the driver and
    the table's updates (key, value, timestamp)."""
    b = StreamsBuilder()
    seen: list[tuple[Any, Any, int]] = []
    windowed = (
        b.stream("topic", Consumed.with_(S, S))
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(500))
    )
    table = make(windowed)
    table.to_stream().process(lambda: _Capture(seen))
    d = drive(b.build(), **config)
    topic = d.create_input_topic("topic", S, S)
    for key, value, ts in INPUT:
        topic.pipe_input(key, value, ts)
    return d, seen


class _Capture:
    def __init__(self, seen: list[tuple[Any, Any, int]]) -> None:
        self.seen = seen

    def init(self, context: Any) -> None:
        pass

    def process(self, record: Any) -> None:
        self.seen.append((record.key, record.value, record.timestamp))

    def close(self) -> None:
        pass


TIMES = [10, 10, 15, 600, 600, 600, 600]


@pytest.mark.parametrize("cached", [True, False])
def test_should_count_session_windowed(drive: Any, cached: bool) -> None:
    """SessionWindowedKStreamImplTest.shouldCountSessionWindowedWithCachingEnabled and
    shouldCountSessionWindowedWithCachingDisabled (ON_WINDOW_UPDATE)"""
    config = {} if cached else {"statestore.cache.max.bytes": 0}
    _, seen = run(drive, lambda s: s.count(), **config)
    assert seen == list(zip(SESSIONS, [1, None, 2, 1, 1, None, 2], TIMES, strict=True))


def test_should_reduce_windowed(drive: Any) -> None:
    """SessionWindowedKStreamImplTest.shouldReduceWindowed (ON_WINDOW_UPDATE)"""
    _, seen = run(drive, lambda s: s.reduce(lambda a, v: f"{a}+{v}"))
    values = ["1", None, "1+2", "3", "1", None, "1+2"]
    assert seen == list(zip(SESSIONS, values, TIMES, strict=True))


def aggregate(s: Any, materialized: Materialized | None = None) -> Any:
    args = (materialized,) if materialized is not None else ()
    return s.aggregate(
        lambda: "0", lambda k, v, agg: f"{agg}+{v}", lambda k, a1, a2: f"{a1}+{a2}", *args
    )


def test_should_aggregate_session_windowed(drive: Any) -> None:
    """SessionWindowedKStreamImplTest.shouldAggregateSessionWindowed (ON_WINDOW_UPDATE)"""
    _, seen = run(drive, aggregate)
    values = ["0+1", None, "0+0+1+2", "0+3", "0+1", None, "0+0+1+2"]
    assert seen == list(zip(SESSIONS, values, TIMES, strict=True))


@pytest.mark.parametrize(
    ("store", "make", "values"),
    [
        ("count-store", lambda s: s.count(Materialized.as_("count-store")), [2, 1, 2]),
        (
            "reduced",
            lambda s: s.reduce(lambda a, v: f"{a}+{v}", Materialized.as_("reduced")),
            ["1+2", "3", "1+2"],
        ),
        (
            "aggregated",
            lambda s: aggregate(s, Materialized.as_("aggregated").with_value_serde(S)),
            ["0+0+1+2", "0+3", "0+0+1+2"],
        ),
    ],
)
def test_should_materialize(drive: Any, store: str, make: Any, values: list[Any]) -> None:
    """SessionWindowedKStreamImplTest.shouldMaterializeCount, shouldMaterializeReduced and
    shouldMaterializeAggregated (ON_WINDOW_UPDATE): the store holds the three sessions."""
    d, _ = run(drive, make)
    sessions = d.get_session_store(store)
    data = [*sessions.fetch("1"), *sessions.fetch("2")]
    assert data == list(
        zip([w("1", 10, 15), w("1", 600, 600), w("2", 599, 600)], values, strict=True)
    )
