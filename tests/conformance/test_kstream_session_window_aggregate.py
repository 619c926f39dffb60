"""Kafka's ``KStreamSessionWindowAggregateProcessorTest``: session aggregations through the
DSL and the driver, and a session-windowed table read by key and session.

Kafka drives the processor by hand (gap 5 minutes, aggregate ``+1`` from 0, merger
``a + b``) under two emit strategies; this project has Kafka's ``ON_WINDOW_UPDATE``, so each
scenario is Kafka's emit-on-update case fed through a topology. Kafka's cached cases
flush the cache once at the end; the driver flushes it after every record (as Kafka's
``TopologyTestDriver`` does), so there the facts are each session's *last* forwarded
update and the store's contents, which are what Kafka's cache hands on.
"""

from __future__ import annotations

from typing import Any

from statestores.api import Window, Windowed
from tests.conformance.conftest import L, S
from topology import Grouped, Materialized, Produced, StreamsBuilder
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import SessionWindows

GAP = 5 * 60 * 1000
STORE = "session-store"
SESSION = WindowedSerdes.session_windowed_serde_from(S)
Rows = list[tuple[str, int | None, int]]


def _session_table(b: StreamsBuilder, topic: str, windows: SessionWindows, store: str) -> Any:
    """Kafka's session aggregation of the processor test: ``+1`` per record, merged
    sessions summed; the store keeps sessions three gaps, without a cache (the driver
    commits after each record)."""
    mat = Materialized.as_(store).with_value_serde(L).with_caching_disabled()
    mat = mat.with_retention(3 * GAP)
    return (
        b.stream(topic)
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(windows)
        .aggregate(lambda: 0, lambda k, v, agg: agg + 1, lambda k, a, b: a + b, mat)
    )


def _sessions(drive: Any, windows: SessionWindows | None = None) -> Any:
    b = StreamsBuilder()
    table = _session_table(
        b, "topic", windows or SessionWindows.of_inactivity_gap_with_no_grace(GAP), STORE
    )
    table.to_stream().to("output", Produced.with_(SESSION, L))
    return drive(b.build())


def _pipe(d: Any, topic: str, records: list[tuple[str | None, int]]) -> None:
    i = d.create_input_topic(topic, S, S)
    for key, ts in records:
        i.pipe_input(key, "1", ts)


def _read(d: Any, topic: str = "output") -> Rows:
    records = d.create_output_topic(topic, SESSION, L).read_records_to_list()
    return [(str(r.key), r.value, r.timestamp) for r in records]


def _last_updates(d: Any) -> dict[str, tuple[int, int]]:
    """Each live session's last forwarded update ``(value, timestamp)``: a session merged
    away (its last update a tombstone) is left out, as Kafka's cache leaves it out."""
    last: dict[str, tuple[int | None, int]] = {}
    for key, value, ts in _read(d):
        last[key] = (value, ts)
    return {k: (v, ts) for k, (v, ts) in last.items() if v is not None}


def _found(d: Any, key: str, earliest_end: int, latest_start: int) -> list[tuple[Any, int]]:
    return list(d.get_session_store(STORE).find_sessions(key, earliest_end, latest_start))


def _session(key: str, start: int, end: int) -> Windowed[str]:
    return Windowed(key, Window(start, end))


def test_single_session_when_within_gap(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldCreateSingleSessionWhenWithinGap."""
    d = _sessions(drive)
    _pipe(d, "topic", [("john", 0), ("john", 500)])
    assert _found(d, "john", 0, 2000) == [(_session("john", 0, 500), 2)]


def test_merge_sessions(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldMergeSessions: a record between two
    sessions, within the gap of both, merges them into one."""
    d = _sessions(drive)
    _pipe(d, "topic", [("mel", 0)])
    assert _found(d, "mel", 0, 0) == [(_session("mel", 0, 0), 1)]
    _pipe(d, "topic", [("mel", GAP + 1)])
    assert _found(d, "mel", GAP + 1, GAP + 1) == [(_session("mel", GAP + 1, GAP + 1), 1)]
    assert _found(d, "mel", 0, 0) == [(_session("mel", 0, 0), 1)]
    _pipe(d, "topic", [("mel", GAP // 2)])
    assert _found(d, "mel", 0, GAP + 1) == [(_session("mel", 0, GAP + 1), 3)]


def test_update_session_if_the_same_time(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldUpdateSessionIfTheSameTime."""
    d = _sessions(drive)
    _pipe(d, "topic", [("mel", 0), ("mel", 0)])
    assert _found(d, "mel", 0, 0) == [(_session("mel", 0, 0), 2)]


def test_multiple_sessions_for_same_id_apart_by_gap(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest
    .shouldHaveMultipleSessionsForSameIdWhenTimestampApartBySessionGap: records more than a
    gap apart open new sessions of the same key, each stamped with its end."""
    d = _sessions(drive)
    now = 2 * (GAP + 1)
    _pipe(
        d,
        "topic",
        [("mel", 0), ("mel", GAP + 1), ("mel", GAP + 1), ("mel", now), ("mel", now), ("mel", now)],
    )
    assert _last_updates(d) == {
        "[mel@0/0]": (1, 0),
        f"[mel@{GAP + 1}/{GAP + 1}]": (2, GAP + 1),
        f"[mel@{now}/{now}]": (3, now),
    }


def test_remove_merged_sessions_from_store(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldRemoveMergedSessionsFromStateStore."""
    d = _sessions(drive)
    _pipe(d, "topic", [("a", 0)])
    assert _found(d, "a", 0, 0) == [(_session("a", 0, 0), 1)]
    _pipe(d, "topic", [("a", 100)])
    assert _found(d, "a", 0, 100) == [(_session("a", 0, 100), 2)]


def test_multiple_sessions_and_merging(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldHandleMultipleSessionsAndMerging:
    the sessions left, each with its aggregate, stamped with its end."""
    d = _sessions(drive)
    g1, g2 = GAP + 1, GAP + 1 + GAP // 2
    _pipe(d, "topic", [
        ("a", 0), ("b", 0), ("c", 0), ("d", 0), ("d", GAP // 2),
        ("a", g1), ("b", g1), ("a", g2), ("c", g2),
    ])  # fmt: skip
    assert _last_updates(d) == {
        "[a@0/0]": (1, 0),
        "[b@0/0]": (1, 0),
        "[c@0/0]": (1, 0),
        f"[d@0/{GAP // 2}]": (2, GAP // 2),
        f"[b@{g1}/{g1}]": (1, g1),
        f"[a@{g1}/{g2}]": (2, g2),
        f"[c@{g2}/{g2}]": (1, g2),
    }


def test_aggregated_values_read_by_session(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldGetAggregatedValuesFromValueGetter:
    the session table read by key and session (its value getter, here through a join with
    a second session table whose sessions are the same): ``[0, 0]`` holds 1, ``[g+1, g+1]``
    holds 2, each stamped with the session's end."""
    b = StreamsBuilder()
    windows = SessionWindows.of_inactivity_gap_with_no_grace(GAP)
    aggregated = _session_table(b, "topic", windows, STORE)
    probes = _session_table(b, "probe", windows, "probe-store")
    read = probes.join(aggregated, lambda probe, value: value)
    read.to_stream().to("read", Produced.with_(SESSION, L))
    d = drive(b.build())
    _pipe(d, "topic", [("a", 0), ("a", GAP + 1), ("a", GAP + 1)])
    _pipe(d, "probe", [("a", 0), ("a", GAP + 1)])
    assert _read(d, "read") == [("[a@0/0]", 1, 0), (f"[a@{GAP + 1}/{GAP + 1}]", 2, GAP + 1)]


def test_forward_new_session_at_once_without_cache(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldImmediatelyForwardNewSessionWhenNonCachedStore."""
    d = _sessions(drive)
    _pipe(d, "topic", [("a", 0), ("b", 0), ("c", 0)])
    assert _read(d) == [("[a@0/0]", 1, 0), ("[b@0/0]", 1, 0), ("[c@0/0]", 1, 0)]


def test_forward_removed_sessions_at_once_when_merging(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldImmediatelyForwardRemovedSessionsWhenMerging."""
    d = _sessions(drive)
    _pipe(d, "topic", [("a", 0), ("a", 5)])
    assert _read(d) == [("[a@0/0]", 1, 0), ("[a@0/0]", None, 0), ("[a@0/5]", 2, 5)]


def test_skipping_null_key(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldLogAndMeterWhenSkippingNullKeyWithBuiltInMetrics."""
    d = _sessions(drive)
    _pipe(d, "topic", [(None, 0)])
    assert _read(d) == []
    assert d.metrics().total("dropped-records-total") == 1


def test_skipping_late_record_with_zero_grace(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldLogAndMeterWhenSkippingLateRecordWithZeroGrace:
    gap 10, no grace: at stream time 11 the session ``[0, 0]`` has closed (0 + 10 < 11)."""
    d = _sessions(drive, SessionWindows.of_inactivity_gap_and_grace(10, 0))
    _pipe(d, "topic", [("dummy", 0), ("OnTime1", 0), ("dummy", 11), ("Late1", 0)])
    assert _read(d) == [("[dummy@0/0]", 1, 0), ("[OnTime1@0/0]", 1, 0), ("[dummy@11/11]", 1, 11)]
    assert d.metrics().total("dropped-records-total") == 1


def test_skipping_late_record_with_nonzero_grace(drive: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldLogAndMeterWhenSkippingLateRecordWithNonzeroGrace:
    gap 10, grace 1: ``[0, 0]`` is still open at stream time 11, closed at 12."""
    d = _sessions(drive, SessionWindows.of_inactivity_gap_and_grace(10, 1))
    _pipe(d, "topic", [
        ("dummy", 0), ("OnTime1", 0), ("dummy", 11), ("OnTime2", 0), ("dummy", 12), ("Late1", 0),
    ])  # fmt: skip
    assert _read(d)[3] == ("[OnTime2@0/0]", 1, 0)
    assert d.metrics().total("dropped-records-total") == 1
