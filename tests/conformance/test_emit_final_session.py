"""The emit-on-window-close halves (KIP-825, ``EmitStrategy.ON_WINDOW_CLOSE``) of Kafka's
``KStreamSessionWindowAggregateProcessorTest``, whose emit-on-update halves live in
``test_kstream_session_window_aggregate.py``.

Kafka drives the processor by hand: gap 5 minutes, no grace, aggregate ``+1`` from 0,
merger ``a + b``, the emit interval 0 (every record looks for closed sessions). Here the
same records go through a topology. A session closes once observed stream time minus gap
minus grace passes its end; it then goes out once, stamped with its end, by end, start,
then key. Kafka never caches a closing session store; the scenarios run with the cache
asked for and not, and must not differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from statestores.api import Window, Windowed
from tests.conformance.conftest import L, S
from topology import EmitStrategy, Grouped, Materialized, Produced, StreamsBuilder
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import SessionWindows

CLOSE = EmitStrategy.on_window_close()
GAP = 5 * 60 * 1000
STORE = "session-store"
SESSION = WindowedSerdes.session_windowed_serde_from(S)
Rows = list[tuple[str, int | None, int]]
CACHING = pytest.mark.parametrize("caching", [True, False], ids=["cache", "no-cache"])


def _closing_sessions(b: StreamsBuilder, topic: str, store: str, caching: bool, **kw: Any) -> Any:
    """Kafka's closing session aggregation (``+1`` per record, merged sessions summed);
    the store keeps sessions three gaps, as Kafka's."""
    mat = Materialized.as_(store).with_value_serde(L).with_retention(3 * GAP)
    mat = mat.with_caching_enabled() if caching else mat.with_caching_disabled()
    windows = kw.get("windows") or SessionWindows.of_inactivity_gap_with_no_grace(GAP)
    return (
        b.stream(topic)
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(windows)
        .emit_strategy(CLOSE)
        .aggregate(lambda: 0, lambda k, v, agg: agg + 1, lambda k, a, b: a + b, mat)
    )


def _sessions(drive: Any, caching: bool, windows: SessionWindows | None = None) -> Any:
    b = StreamsBuilder()
    table = _closing_sessions(b, "topic", STORE, caching, windows=windows)
    table.to_stream().to("output", Produced.with_(SESSION, L))
    return drive(b.build())


def _pipe(d: Any, records: Sequence[tuple[str | None, int]], topic: str = "topic") -> None:
    i = d.create_input_topic(topic, S, S)
    for key, ts in records:
        i.pipe_input(key, "1", ts)


def _read(d: Any, topic: str = "output") -> Rows:
    records = d.create_output_topic(topic, SESSION, L).read_records_to_list()
    return [(str(r.key), r.value, r.timestamp) for r in records]


def _found(d: Any, key: str, earliest_end: int, latest_start: int) -> list[tuple[Any, int]]:
    return list(d.get_session_store(STORE).find_sessions(key, earliest_end, latest_start))


def _session(key: str, start: int, end: int) -> Windowed[str]:
    return Windowed(key, Window(start, end))


@CACHING
def test_single_session_when_within_gap(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldCreateSingleSessionWhenWithinGap
    (emit final): the two records make one session of 2 in the store; it is still open."""
    d = _sessions(drive, caching)
    _pipe(d, [("john", 0), ("john", 500)])
    assert _found(d, "john", 0, 2000) == [(_session("john", 0, 500), 2)]
    assert _read(d) == []


@CACHING
def test_merge_sessions(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldMergeSessions (emit final): a
    record between two sessions, within the gap of both, merges them into one of 3 (the
    merged session ends at ``GAP + 1``, still open at stream time ``GAP + 1``)."""
    d = _sessions(drive, caching)
    _pipe(d, [("mel", 0)])
    assert _found(d, "mel", 0, 0) == [(_session("mel", 0, 0), 1)]
    _pipe(d, [("mel", GAP + 1)])
    assert _found(d, "mel", GAP + 1, GAP + 1) == [(_session("mel", GAP + 1, GAP + 1), 1)]
    assert _found(d, "mel", 0, 0) == [(_session("mel", 0, 0), 1)]
    _pipe(d, [("mel", GAP // 2)])
    assert _found(d, "mel", 0, GAP + 1) == [(_session("mel", 0, GAP + 1), 3)]


@CACHING
def test_update_session_if_the_same_time(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldUpdateSessionIfTheSameTime (emit
    final): two records at 0 make the session ``[0, 0]`` of 2."""
    d = _sessions(drive, caching)
    _pipe(d, [("mel", 0), ("mel", 0)])
    assert _found(d, "mel", 0, 0) == [(_session("mel", 0, 0), 2)]
    assert _read(d) == []


@CACHING
def test_multiple_sessions_for_same_id_apart_by_gap(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest
    .shouldHaveMultipleSessionsForSameIdWhenTimestampApartBySessionGap (emit final): the
    record at ``GAP + 1`` closes ``[0, 0]``, the one at ``2 * (GAP + 1)`` closes
    ``[GAP + 1, GAP + 1]`` (2 records); the last session stays open."""
    d = _sessions(drive, caching)
    now = 2 * (GAP + 1)
    _pipe(d, [("mel", 0), ("mel", GAP + 1), ("mel", GAP + 1), ("mel", now), ("mel", now),
              ("mel", now)])  # fmt: skip
    assert _read(d) == [("[mel@0/0]", 1, 0), (f"[mel@{GAP + 1}/{GAP + 1}]", 2, GAP + 1)]


@CACHING
def test_remove_merged_sessions_from_store(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldRemoveMergedSessionsFromStateStore
    (emit final): ``[0, 0]`` is replaced by the merged ``[0, 100]``."""
    d = _sessions(drive, caching)
    _pipe(d, [("a", 0)])
    assert _found(d, "a", 0, 0) == [(_session("a", 0, 0), 1)]
    _pipe(d, [("a", 100)])
    assert _found(d, "a", 0, 100) == [(_session("a", 0, 100), 2)]


@CACHING
def test_multiple_sessions_and_merging(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldHandleMultipleSessionsAndMerging
    (emit final): the sessions of a, b and c at 0 close at stream time ``GAP + 1``, d's
    ``[0, GAP / 2]`` at ``GAP + 1 + GAP / 2``; by end, then key; the later ones stay open."""
    d = _sessions(drive, caching)
    g1, g2 = GAP + 1, GAP + 1 + GAP // 2
    _pipe(d, [("a", 0), ("b", 0), ("c", 0), ("d", 0), ("d", GAP // 2), ("a", g1), ("b", g1),
              ("a", g2), ("c", g2)])  # fmt: skip
    assert _read(d) == [
        ("[a@0/0]", 1, 0), ("[b@0/0]", 1, 0), ("[c@0/0]", 1, 0), (f"[d@0/{GAP // 2}]", 2, GAP // 2),
    ]  # fmt: skip


@CACHING
def test_aggregated_values_read_by_session(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldGetAggregatedValuesFromValueGetter
    (emit final): the closing table read by key and session (its value getter, through a
    join with a second session table): ``[0, 0]`` holds 1, ``[GAP + 1, GAP + 1]`` 2."""
    b = StreamsBuilder()
    aggregated = _closing_sessions(b, "topic", STORE, caching)
    mat = Materialized.as_("probe-store").with_value_serde(L).with_caching_disabled()
    probes = (
        b.stream("probe")
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(GAP))
        .aggregate(lambda: 0, lambda k, v, agg: agg + 1, lambda k, a1, a2: a1 + a2, mat)
    )
    probes.join(aggregated, lambda probe, value: value).to_stream().to(
        "read", Produced.with_(SESSION, L)
    )
    d = drive(b.build())
    _pipe(d, [("a", 0), ("a", GAP + 1), ("a", GAP + 1)])
    _pipe(d, [("a", 0), ("a", GAP + 1)], "probe")
    assert _read(d, "read") == [("[a@0/0]", 1, 0), (f"[a@{GAP + 1}/{GAP + 1}]", 2, GAP + 1)]


@CACHING
def test_no_new_session_forwarded_at_once(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest
    .shouldImmediatelyForwardNewSessionWhenNonCachedStore (emit final): Kafka's half
    returns at once, as a closing node forwards no update (``maybeForwardUpdate``): the
    new sessions of a, b and c go nowhere until they close, at stream time ``GAP + 1``."""
    d = _sessions(drive, caching)
    _pipe(d, [("a", 0), ("b", 0), ("c", 0)])
    assert _read(d) == []
    _pipe(d, [("z", GAP + 1)])
    assert _read(d) == [("[a@0/0]", 1, 0), ("[b@0/0]", 1, 0), ("[c@0/0]", 1, 0)]


@CACHING
def test_no_removed_session_forwarded_when_merging(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest
    .shouldImmediatelyForwardRemovedSessionsWhenMerging (emit final): no tombstone of the
    merged-away ``[0, 0]``, no update of ``[0, 5]``: only the merged session, once closed."""
    d = _sessions(drive, caching)
    _pipe(d, [("a", 0), ("a", 5)])
    assert _read(d) == []
    _pipe(d, [("z", GAP + 6)])
    assert _read(d) == [("[a@0/5]", 2, 5)]


@CACHING
def test_skipping_null_key(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest
    .shouldLogAndMeterWhenSkippingNullKeyWithBuiltInMetrics (emit final)."""
    d = _sessions(drive, caching)
    _pipe(d, [(None, 0)])
    assert _read(d) == []
    assert d.metrics().total("dropped-records-total") == 1


@CACHING
def test_skipping_late_record_with_zero_grace(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest
    .shouldLogAndMeterWhenSkippingLateRecordWithZeroGrace, its records through a closing
    node (gap 10, no grace; Kafka's processor drops late records the same way under both
    strategies): at stream time 11 ``[0, 0]`` has closed, so Late1 at 0 is dropped; the
    two sessions ``[0, 0]`` went out when dummy@11 closed them, by key bytes."""
    d = _sessions(drive, caching, SessionWindows.of_inactivity_gap_and_grace(10, 0))
    _pipe(d, [("dummy", 0), ("OnTime1", 0), ("dummy", 11), ("Late1", 0)])
    assert _read(d) == [("[OnTime1@0/0]", 1, 0), ("[dummy@0/0]", 1, 0)]
    assert d.metrics().total("dropped-records-total") == 1


@CACHING
def test_skipping_late_record_with_nonzero_grace(drive: Any, caching: bool) -> None:
    """KStreamSessionWindowAggregateProcessorTest
    .shouldLogAndMeterWhenSkippingLateRecordWithNonzeroGrace, its records through a
    closing node (gap 10, grace 1): ``[0, 0]`` is still open at stream time 11 (OnTime2
    at 0 is taken), closed at 12, when the three sessions ``[0, 0]`` go out; Late1 is
    dropped."""
    d = _sessions(drive, caching, SessionWindows.of_inactivity_gap_and_grace(10, 1))
    _pipe(d, [("dummy", 0), ("OnTime1", 0), ("dummy", 11), ("OnTime2", 0), ("dummy", 12),
              ("Late1", 0)])  # fmt: skip
    assert _read(d) == [("[OnTime1@0/0]", 1, 0), ("[OnTime2@0/0]", 1, 0), ("[dummy@0/0]", 1, 0)]
    assert d.metrics().total("dropped-records-total") == 1
