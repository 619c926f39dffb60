"""The emit-on-window-close halves (KIP-825, ``EmitStrategy.ON_WINDOW_CLOSE``) of Kafka's
windowed-aggregation tests: ``KStreamWindowAggregateTest``, ``TimeWindowedKStreamImplTest``
and ``SessionWindowedKStreamImplTest``, whose emit-on-update halves live in the modules
named after them. Each window goes out once, when stream time passes its end plus grace,
with its final aggregate and timestamp; the driver, as Kafka's, looks for closed windows
after every record (``__emit.interval.ms.kstreams.windowed.aggregation__`` = 0) unless a
scenario sets the interval. Kafka's processor-level scenarios (``shouldEmitWithInterval0``
...) are fed through a topology: the closing processor forwards the same records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.conformance.conftest import L, S
from topology import EmitStrategy, Grouped, Materialized, Produced, StreamsBuilder
from topology.api.emit import EMIT_INTERVAL_KEY
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import SessionWindows, TimeWindows, UnlimitedWindows

CLOSE = EmitStrategy.on_window_close()
DAY = 24 * 60 * 60 * 1000
WINDOWED = WindowedSerdes.time_windowed_serde_from(S, 10)
SESSION = WindowedSerdes.session_windowed_serde_from(S)
Rows = list[tuple[str, Any, int]]
CACHING = pytest.mark.parametrize("caching", [True, False], ids=["cache", "no-cache"])


def _concat(key: str, value: str, agg: str) -> str:
    """Kafka's ``MockAggregator.TOSTRING_ADDER``."""
    return f"{agg}+{value}"


def _mat(name: str, caching: bool) -> Materialized:
    mat = Materialized.as_(name).with_value_serde(S)
    return mat.with_caching_enabled() if caching else mat.with_caching_disabled()


def _closing(
    drive: Any,
    windows: TimeWindows,
    mat: Materialized,
    initial: str = "0",
    **config: Any,
) -> Any:
    b = StreamsBuilder()
    (
        b.stream("topic")
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(windows)
        .emit_strategy(CLOSE)
        .aggregate(lambda: initial, _concat, mat)
        .to_stream()
        .to("output", Produced.with_(WINDOWED, S))
    )
    return drive(b.build(), **config)


def _pipe(d: Any, records: Sequence[tuple[str | None, str, int]], topic: str = "topic") -> None:
    i = d.create_input_topic(topic, S, S)
    for key, value, ts in records:
        i.pipe_input(key, value, ts)


def _read(d: Any, serde: Any = WINDOWED, value_serde: Any = S) -> Rows:
    records = d.create_output_topic("output", serde, value_serde).read_records_to_list()
    return [(str(r.key), r.value, r.timestamp) for r in records]


def _dropped(d: Any) -> int:
    return int(d.metrics().total("dropped-records-total"))


def _grace5(drive: Any, caching: bool, **config: Any) -> Any:
    """The processor scenarios' windows: size 10, advance 5, grace 5, on Kafka's store of
    those scenarios (``getWindowStore``: the time-ordered store, retention one day)."""
    windows = TimeWindows.of_size_and_grace(10, 5).advance_by(5)
    mat = _mat("dummy-store-name", caching).with_retention(DAY)
    return _closing(drive, windows, mat, **{"default.dsl.store": "rocksDB", **config})


# -- KStreamWindowAggregateTest ---------------------------------------------------------------


@CACHING
def test_agg_basic(drive: Any, caching: bool) -> None:
    """KStreamWindowAggregateTest.testAggBasic (emit final): with grace 100 no window of
    the 18 records closes, so nothing is forwarded."""
    windows = TimeWindows.of_size_and_grace(10, 100).advance_by(5)
    d = _closing(drive, windows, _mat("topic1-Canonized", caching))
    _pipe(d, [
        ("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3), ("A", "1", 4),
        ("A", "1", 5), ("B", "2", 6), ("D", "4", 7), ("B", "2", 8), ("C", "3", 9),
        ("A", "1", 10), ("B", "2", 11), ("D", "4", 12), ("B", "2", 13), ("C", "3", 14),
        ("B", "1", 3), ("B", "2", 2), ("B", "3", 9),
    ])  # fmt: skip
    assert _read(d) == []


@CACHING
def test_skipping_null_key(drive: Any, caching: bool) -> None:
    """KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingNullKey (emit final): a
    null key is dropped and counted; it looks for no closed window."""
    windows = TimeWindows.of_size_with_no_grace(10).advance_by(5)
    d = _closing(drive, windows, _mat("topic1-Canonicalized", caching))
    _pipe(d, [(None, "1", 0)])
    assert _read(d) == []
    assert _dropped(d) == 1


@CACHING
def test_skipping_expired_window(drive: Any, caching: bool) -> None:
    """KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindow (emit final):
    grace 90, stream time 100: the records at 0..4 (and 5, 6 in ``[0, 10)``) are dropped;
    the record at 105 closes ``[5, 15)``, the one window that took records and closed."""
    windows = TimeWindows.of_size_and_grace(10, 90).advance_by(5)
    mat = _mat("topic1-Canonicalized", caching).with_logging_disabled().with_retention(100)
    d = _closing(drive, windows, mat, initial="")
    _pipe(d, [
        ("k", "100", 100), ("k", "0", 0), ("k", "1", 1), ("k", "2", 2), ("k", "3", 3),
        ("k", "4", 4), ("k", "5", 5), ("k", "6", 6), ("k", "105", 105), ("k", "106", 106),
    ])  # fmt: skip
    assert _dropped(d) == 7
    assert _read(d) == [("[k@5/15]", "+5+6", 6)]


@CACHING
def test_skipping_expired_window_by_grace(drive: Any, caching: bool) -> None:
    """KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace (emit
    final): tumbling windows of 10, grace 90, stream time 200: seven records dropped and
    ``[200, 210)`` never closes, so nothing is forwarded."""
    windows = TimeWindows.of_size_and_grace(10, 90).advance_by(10)
    d = _closing(drive, windows, _mat("topic1-Canonicalized", caching).with_logging_disabled())
    _pipe(d, [
        ("k", "100", 200), ("k", "0", 100), ("k", "1", 101), ("k", "2", 102),
        ("k", "3", 103), ("k", "4", 104), ("k", "5", 105), ("k", "6", 6),
    ])  # fmt: skip
    assert _dropped(d) == 7
    assert _read(d) == []


@CACHING
def test_not_emit_final_if_not_progress_enough(drive: Any, caching: bool) -> None:
    """KStreamWindowAggregateTest.shouldNotEmitFinalIfNotProgressEnough (emit final):
    the record at 15 closes ``[0, 10)`` (A and B); one at 15 again does not move stream
    time, one at 19 moves it without closing a window: nothing more."""
    d = _grace5(drive, caching)
    _pipe(d, [("A", "1", 0), ("B", "2", 5), ("C", "3", 15)])
    assert _read(d) == [("[A@0/10]", "0+1", 0), ("[B@0/10]", "0+2", 5)]
    _pipe(d, [("D", "4", 15)])
    assert _read(d) == []
    _pipe(d, [("E", "5", 19)])
    assert _read(d) == []


@CACHING
def test_emit_with_interval_0(drive: Any, caching: bool) -> None:
    """KStreamWindowAggregateTest.shouldEmitWithInterval0 (emit final): with the interval
    0 every record looks: by 20, ``[0, 10)`` and ``[5, 15)`` closed, by start then key."""
    d = _grace5(drive, caching, **{EMIT_INTERVAL_KEY: 0})
    _pipe(d, [("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15), ("D", "4", 20)])
    assert _read(d) == [
        ("[A@0/10]", "0+1+1", 5), ("[A@5/15]", "0+1", 5), ("[B@5/15]", "0+2", 10),
    ]  # fmt: skip


@CACHING
def test_emit_with_large_interval(drive: Any, caching: bool) -> None:
    """KStreamWindowAggregateTest.shouldEmitWithLargeInterval (emit final): with an
    interval of 1000 ms the first record looks (nothing closed yet) and books the next
    look a second later: nothing until the wall clock passes it; then the record at 20
    emits what closed, and the record at 40, 100 ms later, is throttled again."""
    d = _grace5(drive, caching, **{EMIT_INTERVAL_KEY: 1000}, initial_wall_clock_time_ms=0)
    _pipe(d, [("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15)])
    assert _read(d) == []
    d.advance_wall_clock_time(10_000)
    _pipe(d, [("D", "4", 20)])
    assert _read(d) == [
        ("[A@0/10]", "0+1+1", 5), ("[A@5/15]", "0+1", 5), ("[B@5/15]", "0+2", 10),
    ]  # fmt: skip
    d.advance_wall_clock_time(100)
    _pipe(d, [("E", "5", 40)])
    assert _read(d) == []


def test_throw_if_emit_final_used_with_unlimited_window() -> None:
    """KStreamWindowAggregateTest.showThrowIfEmitFinalUsedWithUnlimitedWindow (emit
    final): unlimited windows never close; Kafka refuses them (IllegalArgumentException)."""
    b = StreamsBuilder()
    windowed = b.stream("topic").group_by_key().windowed_by(UnlimitedWindows.of())
    with pytest.raises(ValueError, match="cannot be used for UnlimitedWindows"):
        windowed.emit_strategy(CLOSE)
    windowed.emit_strategy(EmitStrategy.on_window_update())  # on update: fine


# -- TimeWindowedKStreamImplTest ---------------------------------------------------------------

TW_DATA = [("1", "1", 10), ("1", "2", 15), ("1", "3", 500), ("2", "10", 550), ("2", "20", 500),
           ("2", "30", 1000)]  # fmt: skip
WINDOWED_500 = WindowedSerdes.time_windowed_serde_from(S, 500)


def _time_windowed(drive: Any, caching: bool, fold: Any, value_serde: Any) -> Rows:
    b = StreamsBuilder()
    windowed = (
        b.stream("topic")
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(TimeWindows.of_size_with_no_grace(500))
        .emit_strategy(CLOSE)
    )
    fold(windowed, caching).to_stream().to("output", Produced.with_(WINDOWED_500, value_serde))
    d = drive(b.build())
    _pipe(d, TW_DATA)
    return _read(d, WINDOWED_500, value_serde)


def _cache(mat: Materialized, caching: bool) -> Materialized:
    return mat.with_caching_enabled() if caching else mat.with_caching_disabled()


@CACHING
def test_count_windowed(drive: Any, caching: bool) -> None:
    """TimeWindowedKStreamImplTest.shouldCountWindowed (emit final): the record at 500
    closes ``[0, 500)``, the one at 1000 closes ``[500, 1000)`` (keys 1 then 2)."""
    rows = _time_windowed(
        drive,
        caching,
        lambda w, c: w.count(_cache(Materialized.as_("c").with_value_serde(L), c)),
        L,
    )
    assert rows == [("[1@0/500]", 2, 15), ("[1@500/1000]", 1, 500), ("[2@500/1000]", 2, 550)]


@CACHING
def test_reduce_windowed(drive: Any, caching: bool) -> None:
    """TimeWindowedKStreamImplTest.shouldReduceWindowed (emit final): each closed window's
    reduced value (``MockReducer.STRING_ADDER``), once."""
    rows = _time_windowed(
        drive,
        caching,
        lambda w, c: w.reduce(lambda a, b: f"{a}+{b}", _cache(Materialized.as_("r"), c)),
        S,
    )
    assert rows == [
        ("[1@0/500]", "1+2", 15), ("[1@500/1000]", "3", 500), ("[2@500/1000]", "10+20", 550),
    ]  # fmt: skip


@CACHING
def test_aggregate_windowed(drive: Any, caching: bool) -> None:
    """TimeWindowedKStreamImplTest.shouldAggregateWindowed (emit final): each closed
    window's aggregate (``MockAggregator.TOSTRING_ADDER`` from ``"0"``), once."""
    rows = _time_windowed(
        drive,
        caching,
        lambda w, c: w.aggregate(
            lambda: "0", _concat, _cache(Materialized.as_("a"), c).with_value_serde(S)
        ),
        S,
    )
    assert rows == [
        ("[1@0/500]", "0+1+2", 15), ("[1@500/1000]", "0+3", 500), ("[2@500/1000]", "0+10+20", 550),
    ]  # fmt: skip


# -- SessionWindowedKStreamImplTest ------------------------------------------------------------


@pytest.mark.parametrize("cache_bytes", [0, 10485760], ids=["caching-disabled", "caching-enabled"])
def test_count_session_windowed(drive: Any, cache_bytes: int) -> None:
    """SessionWindowedKStreamImplTest.shouldCountSessionWindowedWithCachingDisabled and
    ...WithCachingEnabled (emit final): gap 500, no grace: only ``[10, 15]`` of key 1
    closes (at 600, its end is before 600 - 500); key 2's sessions stay open."""
    b = StreamsBuilder()
    (
        b.stream("topic")
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(500))
        .emit_strategy(CLOSE)
        .count()
        .to_stream()
        .to("output", Produced.with_(SESSION, L))
    )
    d = drive(b.build(), **{"statestore.cache.max.bytes": cache_bytes})
    _pipe(d, [("1", "1", 10), ("1", "2", 15), ("1", "3", 600), ("2", "1", 600), ("2", "2", 599)])
    assert _read(d, SESSION, L) == [("[1@10/15]", 2, 15)]
