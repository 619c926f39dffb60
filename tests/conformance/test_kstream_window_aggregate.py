"""Kafka's ``KStreamWindowAggregateTest``: time-windowed aggregations through the DSL and
the driver, and joins of windowed tables read by key and window.

Kafka runs each scenario under two emit strategies; this project has one, Kafka's
``ON_WINDOW_UPDATE`` (every update of a window is forwarded), so each scenario is Kafka's
emit-on-update case, with the store cached and not (Kafka's ``withCache``) where Kafka
varies it: the driver flushes the cache after each record, as Kafka's does. The
processor-level scenarios (``shouldEmitWithInterval0``...) are fed through a topology: an
emit-on-update processor forwards the same updates either way. The sliding-window join
(``KStreamSlidingWindowAggregateTest.testJoin``) is here too: it reads a windowed table by
key and window the same way.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.conftest import S
from topology import Grouped, Materialized, Produced, StreamsBuilder
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import SlidingWindows, TimeWindows

WINDOWED = WindowedSerdes.time_windowed_serde_from(S, 10)
Rows = list[tuple[str, str, int]]


def _concat(key: str, value: str, agg: str) -> str:
    """Kafka's ``MockAggregator.TOSTRING_ADDER`` (from ``MockInitializer.STRING_INIT``)."""
    return f"{agg}+{value}"


def _windowed_table(
    b: StreamsBuilder,
    topic: str,
    windows: TimeWindows | SlidingWindows,
    materialized: Materialized,
    initial: str = "0",
) -> Any:
    return (
        b.stream(topic)
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(windows)
        .aggregate(lambda: initial, _concat, materialized.with_value_serde(S))
    )


def _cached(name: str, caching: bool) -> Materialized:
    mat = Materialized.as_(name)
    return mat.with_caching_enabled() if caching else mat.with_caching_disabled()


def _pipe(d: Any, topic: str, records: list[tuple[str | None, str, int]]) -> None:
    i = d.create_input_topic(topic, S, S)
    for key, value, ts in records:
        i.pipe_input(key, value, ts)


def _read(d: Any, topic: str) -> Rows:
    records = d.create_output_topic(topic, WINDOWED, S).read_records_to_list()
    return [(str(r.key), r.value, r.timestamp) for r in records]


def _single(drive: Any, windows: TimeWindows, materialized: Materialized, **init: str) -> Any:
    b = StreamsBuilder()
    table = _windowed_table(b, "topic", windows, materialized, **init)
    table.to_stream().to("output", Produced.with_(WINDOWED, S))
    return drive(b.build())


def _joined(drive: Any, windows: TimeWindows | SlidingWindows, mat1: Any, mat2: Any) -> Any:
    """Kafka's testJoin topology: two windowed tables, each one's updates to its topic
    (``table1``, ``table2``) and their inner join's to ``joined``."""
    b = StreamsBuilder()
    table1 = _windowed_table(b, "topic1", windows, mat1)
    table2 = _windowed_table(b, "topic2", windows, mat2)
    table1.to_stream().to("table1", Produced.with_(WINDOWED, S))
    table2.to_stream().to("table2", Produced.with_(WINDOWED, S))
    joined = table1.join(table2, lambda p1, p2: f"{p1}%{p2}")
    joined.to_stream().to("joined", Produced.with_(WINDOWED, S))
    return drive(b.build())


def _dropped(d: Any) -> int:
    return int(d.metrics().total("dropped-records-total"))


@pytest.mark.parametrize("caching", [True, False])
def test_agg_basic(drive: Any, caching: bool) -> None:
    """KStreamWindowAggregateTest.testAggBasic: hopping windows (size 10, advance 5, grace
    100) forward every update, out-of-order records included."""
    windows = TimeWindows.of_size_and_grace(10, 100).advance_by(5)
    d = _single(drive, windows, _cached("topic1-Canonized", caching))
    _pipe(d, "topic", [
        ("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3), ("A", "1", 4),
        ("A", "1", 5), ("B", "2", 6), ("D", "4", 7), ("B", "2", 8), ("C", "3", 9),
        ("A", "1", 10), ("B", "2", 11), ("D", "4", 12), ("B", "2", 13), ("C", "3", 14),
        ("B", "1", 3), ("B", "2", 2), ("B", "3", 9),
    ])  # fmt: skip
    assert _read(d, "output") == [
        ("[A@0/10]", "0+1", 0), ("[B@0/10]", "0+2", 1), ("[C@0/10]", "0+3", 2),
        ("[D@0/10]", "0+4", 3), ("[A@0/10]", "0+1+1", 4),
        ("[A@0/10]", "0+1+1+1", 5), ("[A@5/15]", "0+1", 5),
        ("[B@0/10]", "0+2+2", 6), ("[B@5/15]", "0+2", 6),
        ("[D@0/10]", "0+4+4", 7), ("[D@5/15]", "0+4", 7),
        ("[B@0/10]", "0+2+2+2", 8), ("[B@5/15]", "0+2+2", 8),
        ("[C@0/10]", "0+3+3", 9), ("[C@5/15]", "0+3", 9),
        ("[A@5/15]", "0+1+1", 10), ("[A@10/20]", "0+1", 10),
        ("[B@5/15]", "0+2+2+2", 11), ("[B@10/20]", "0+2", 11),
        ("[D@5/15]", "0+4+4", 12), ("[D@10/20]", "0+4", 12),
        ("[B@5/15]", "0+2+2+2+2", 13), ("[B@10/20]", "0+2+2", 13),
        ("[C@5/15]", "0+3+3", 14), ("[C@10/20]", "0+3", 14),
        ("[B@0/10]", "0+2+2+2+1", 8),
        ("[B@0/10]", "0+2+2+2+1+2", 8),
        ("[B@0/10]", "0+2+2+2+1+2+3", 9), ("[B@5/15]", "0+2+2+2+2+3", 13),
    ]  # fmt: skip


@pytest.mark.parametrize("caching", [True, False])
def test_join(drive: Any, caching: bool) -> None:
    """KStreamWindowAggregateTest.testJoin (emit on update): two hopping-windowed tables
    joined; an update of one side reads the other side's aggregate of the same key and
    window from its window store, stamped with the larger of both timestamps."""
    windows = TimeWindows.of_size_and_grace(10, 100).advance_by(5)
    mat1, mat2 = _cached("topic1-Canonized", caching), _cached("topic2-Canonized", caching)
    d = _joined(drive, windows, mat1, mat2)

    _pipe(d, "topic1", [("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3), ("A", "1", 9)])
    assert _read(d, "table1") == [
        ("[A@0/10]", "0+1", 0), ("[B@0/10]", "0+2", 1), ("[C@0/10]", "0+3", 2),
        ("[D@0/10]", "0+4", 3), ("[A@0/10]", "0+1+1", 9), ("[A@5/15]", "0+1", 9),
    ]  # fmt: skip
    assert _read(d, "table2") == _read(d, "joined") == []

    _pipe(d, "topic1", [("A", "1", 5), ("B", "2", 6), ("D", "4", 7), ("B", "2", 8), ("C", "3", 9)])
    assert _read(d, "table1") == [
        ("[A@0/10]", "0+1+1+1", 9), ("[A@5/15]", "0+1+1", 9),
        ("[B@0/10]", "0+2+2", 6), ("[B@5/15]", "0+2", 6),
        ("[D@0/10]", "0+4+4", 7), ("[D@5/15]", "0+4", 7),
        ("[B@0/10]", "0+2+2+2", 8), ("[B@5/15]", "0+2+2", 8),
        ("[C@0/10]", "0+3+3", 9), ("[C@5/15]", "0+3", 9),
    ]  # fmt: skip
    assert _read(d, "table2") == _read(d, "joined") == []

    _pipe(
        d, "topic2", [("A", "a", 0), ("B", "b", 1), ("C", "c", 2), ("D", "d", 20), ("A", "a", 20)]
    )
    assert _read(d, "table1") == []
    assert _read(d, "table2") == [
        ("[A@0/10]", "0+a", 0), ("[B@0/10]", "0+b", 1), ("[C@0/10]", "0+c", 2),
        ("[D@15/25]", "0+d", 20), ("[D@20/30]", "0+d", 20),
        ("[A@15/25]", "0+a", 20), ("[A@20/30]", "0+a", 20),
    ]  # fmt: skip
    assert _read(d, "joined") == [
        ("[A@0/10]", "0+1+1+1%0+a", 9),
        ("[B@0/10]", "0+2+2+2%0+b", 8),
        ("[C@0/10]", "0+3+3%0+c", 9),
    ]

    _pipe(
        d, "topic2", [("A", "a", 5), ("B", "b", 6), ("D", "d", 7), ("D", "d", 18), ("A", "a", 21)]
    )
    assert _read(d, "table1") == []
    assert _read(d, "table2") == [
        ("[A@0/10]", "0+a+a", 5), ("[A@5/15]", "0+a", 5),
        ("[B@0/10]", "0+b+b", 6), ("[B@5/15]", "0+b", 6),
        ("[D@0/10]", "0+d", 7), ("[D@5/15]", "0+d", 7),
        ("[D@10/20]", "0+d", 18), ("[D@15/25]", "0+d+d", 20),
        ("[A@15/25]", "0+a+a", 21), ("[A@20/30]", "0+a+a", 21),
    ]  # fmt: skip
    assert _read(d, "joined") == [
        ("[A@0/10]", "0+1+1+1%0+a+a", 9), ("[A@5/15]", "0+1+1%0+a", 9),
        ("[B@0/10]", "0+2+2+2%0+b+b", 8), ("[B@5/15]", "0+2+2%0+b", 8),
        ("[D@0/10]", "0+4+4%0+d", 7), ("[D@5/15]", "0+4%0+d", 7),
    ]  # fmt: skip


def test_skipping_null_key(drive: Any) -> None:
    """KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingNullKey: a record with a null
    key is dropped and counted, nothing forwarded."""
    windows = TimeWindows.of_size_with_no_grace(10).advance_by(5)
    d = _single(drive, windows, Materialized.as_("topic1-Canonicalized"))
    _pipe(d, "topic", [(None, "1", 0)])
    assert _read(d, "output") == []
    assert _dropped(d) == 1


def test_skipping_expired_window(drive: Any) -> None:
    """KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindow: with grace 90
    and stream time 100, records at 0..4 find every window closed and 5, 6 keep only
    ``[5, 15)``; the 7 dropped records are counted."""
    windows = TimeWindows.of_size_and_grace(10, 90).advance_by(5)
    mat = Materialized.as_("topic1-Canonicalized").with_logging_disabled().with_retention(100)
    d = _single(drive, windows, mat, initial="")
    _pipe(d, "topic", [
        ("k", "100", 100), ("k", "0", 0), ("k", "1", 1), ("k", "2", 2), ("k", "3", 3),
        ("k", "4", 4), ("k", "5", 5), ("k", "6", 6), ("k", "105", 105), ("k", "106", 106),
    ])  # fmt: skip
    assert _dropped(d) == 7
    assert _read(d, "output") == [
        ("[k@95/105]", "+100", 100), ("[k@100/110]", "+100", 100),
        ("[k@5/15]", "+5", 5), ("[k@5/15]", "+5+6", 6),
        ("[k@100/110]", "+100+105", 105), ("[k@105/115]", "+105", 105),
        ("[k@100/110]", "+100+105+106", 106), ("[k@105/115]", "+105+106", 106),
    ]  # fmt: skip


def test_skipping_expired_window_by_grace(drive: Any) -> None:
    """KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace:
    tumbling windows of 10 with grace 90 at stream time 200 drop the records at 100..105
    (their window ``[100, 110)`` closed at 200) and the one at 6."""
    windows = TimeWindows.of_size_and_grace(10, 90).advance_by(10)
    mat = Materialized.as_("topic1-Canonicalized").with_logging_disabled()
    d = _single(drive, windows, mat, initial="")
    _pipe(d, "topic", [
        ("k", "100", 200), ("k", "0", 100), ("k", "1", 101), ("k", "2", 102),
        ("k", "3", 103), ("k", "4", 104), ("k", "5", 105), ("k", "6", 6),
    ])  # fmt: skip
    assert _dropped(d) == 7
    assert _read(d, "output") == [("[k@200/210]", "+100", 200)]


def _grace5(drive: Any) -> Any:
    """The processor scenarios' windows: size 10, advance 5, grace 5; no cache."""
    windows = TimeWindows.of_size_and_grace(10, 5).advance_by(5)
    return _single(drive, windows, Materialized.as_("dummy-store-name").with_caching_disabled())


def test_emit_every_update_while_stream_time_barely_moves(drive: Any) -> None:
    """KStreamWindowAggregateTest.shouldNotEmitFinalIfNotProgressEnough (on update): each
    record's windows are forwarded at once, whether stream time moves or not."""
    d = _grace5(drive)
    _pipe(d, "topic", [("A", "1", 0), ("B", "2", 5), ("C", "3", 15)])
    assert _read(d, "output") == [
        ("[A@0/10]", "0+1", 0), ("[B@0/10]", "0+2", 5), ("[B@5/15]", "0+2", 5),
        ("[C@10/20]", "0+3", 15), ("[C@15/25]", "0+3", 15),
    ]  # fmt: skip
    _pipe(d, "topic", [("D", "4", 15)])
    assert _read(d, "output") == [("[D@10/20]", "0+4", 15), ("[D@15/25]", "0+4", 15)]
    _pipe(d, "topic", [("E", "5", 19)])
    assert _read(d, "output") == [("[E@10/20]", "0+5", 19), ("[E@15/25]", "0+5", 19)]


def test_emit_every_update_whatever_the_interval(drive: Any) -> None:
    """KStreamWindowAggregateTest.shouldEmitWithInterval0 and shouldEmitWithLargeInterval
    (on update; the first's records are the second's up to 20): the emit interval only
    matters when emitting final results; every update is forwarded at once."""
    d = _grace5(drive)
    _pipe(d, "topic", [("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15)])
    assert _read(d, "output") == [
        ("[A@0/10]", "0+1", 0), ("[A@0/10]", "0+1+1", 5), ("[A@5/15]", "0+1", 5),
        ("[B@5/15]", "0+2", 10), ("[B@10/20]", "0+2", 10),
        ("[C@10/20]", "0+3", 15), ("[C@15/25]", "0+3", 15),
    ]  # fmt: skip
    _pipe(d, "topic", [("D", "4", 20)])
    assert _read(d, "output") == [("[D@15/25]", "0+4", 20), ("[D@20/30]", "0+4", 20)]
    _pipe(d, "topic", [("E", "5", 40)])
    assert _read(d, "output") == [("[E@35/45]", "0+5", 40), ("[E@40/50]", "0+5", 40)]


# -- a sliding-windowed table read by key and window ----------------------------------------


def test_sliding_windows_join(drive: Any) -> None:
    """KStreamSlidingWindowAggregateTest.testJoin (emit on update, no cache): two
    sliding-windowed tables (difference 10, grace 100) joined; an update reads the other
    side's window with the same start."""
    windows = SlidingWindows.of_time_difference_and_grace(10, 100)
    mat1 = Materialized.as_("store-name1").with_caching_disabled()
    mat2 = Materialized.as_("store-name2").with_caching_disabled()
    d = _joined(drive, windows, mat1, mat2)

    _pipe(d, "topic1", [("A", "1", 10), ("B", "2", 11), ("C", "3", 12)])
    assert _read(d, "table1") == [
        ("[A@0/10]", "0+1", 10), ("[B@1/11]", "0+2", 11), ("[C@2/12]", "0+3", 12),
    ]  # fmt: skip
    assert _read(d, "table2") == _read(d, "joined") == []

    _pipe(d, "topic1", [("A", "1", 15), ("B", "2", 16), ("C", "3", 19)])
    assert _read(d, "table1") == [
        ("[A@11/21]", "0+1", 15), ("[A@5/15]", "0+1+1", 15),
        ("[B@12/22]", "0+2", 16), ("[B@6/16]", "0+2+2", 16),
        ("[C@13/23]", "0+3", 19), ("[C@9/19]", "0+3+3", 19),
    ]  # fmt: skip
    assert _read(d, "table2") == _read(d, "joined") == []

    _pipe(d, "topic2", [("A", "a", 10), ("C", "c", 12)])
    assert _read(d, "table1") == []
    assert _read(d, "table2") == [("[A@0/10]", "0+a", 10), ("[C@2/12]", "0+c", 12)]
    assert _read(d, "joined") == [("[A@0/10]", "0+1%0+a", 10), ("[C@2/12]", "0+3%0+c", 12)]

    _pipe(d, "topic2", [("A", "a", 15), ("B", "b", 16), ("C", "c", 17)])
    assert _read(d, "table1") == []
    assert _read(d, "table2") == [
        ("[A@11/21]", "0+a", 15), ("[A@5/15]", "0+a+a", 15), ("[B@6/16]", "0+b", 16),
        ("[C@13/23]", "0+c", 17), ("[C@7/17]", "0+c+c", 17),
    ]  # fmt: skip
    assert _read(d, "joined") == [
        ("[A@11/21]", "0+1%0+a", 15), ("[A@5/15]", "0+1+1%0+a+a", 15),
        ("[B@6/16]", "0+2+2%0+b", 16), ("[C@13/23]", "0+3%0+c", 19),
    ]  # fmt: skip
