"""The emit-on-window-close halves (KIP-825, ``EmitStrategy.ON_WINDOW_CLOSE``) of Kafka's
``KStreamSlidingWindowAggregateTest``, whose emit-on-update halves live in
``test_kstream_window_aggregate.py`` and ``tests/topology/test_windows.py``.

A sliding window ``[start, start + d]`` closes once stream time minus grace passes its
end; it then goes out once, with its final aggregate and the largest timestamp of its
records. Kafka runs each scenario with the store cached and not (``withCache``) and with
an in-order or a reverse store iterator; under emit-on-close Kafka always uses its own
time-ordered store (``Materialized.as("store-name")``), so the iterator flag changes
nothing and the scenarios here vary the cache only.

Kafka gathers the forwarded windows into sets by window start (or sorts them by key and
start); a window's emission is final, so here the facts are stronger: every window is
forwarded exactly once, listed by key and start.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from tests.conformance.conftest import S
from topology import EmitStrategy, Grouped, Materialized, Produced, StreamsBuilder
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import SlidingWindows

CLOSE = EmitStrategy.on_window_close()
Row = tuple[str, str, int]
CACHING = pytest.mark.parametrize("caching", [True, False], ids=["cache", "no-cache"])


def _concat(key: str, value: str, agg: str) -> str:
    """Kafka's ``MockAggregator.TOSTRING_ADDER`` (from ``MockInitializer.STRING_INIT``)."""
    return f"{agg}+{value}"


def _mat(name: str, caching: bool) -> Materialized:
    mat = Materialized.as_(name).with_value_serde(S)
    return mat.with_caching_enabled() if caching else mat.with_caching_disabled()


def _windowed(b: StreamsBuilder, topic: str, diff: int, grace: int | None) -> Any:
    windows = (
        SlidingWindows.of_time_difference_with_no_grace(diff)
        if grace is None
        else SlidingWindows.of_time_difference_and_grace(diff, grace)
    )
    return (
        b.stream(topic).group_by_key(Grouped.with_(S, S)).windowed_by(windows).emit_strategy(CLOSE)
    )


def _closing(
    drive: Any,
    diff: int,
    grace: int | None,
    caching: bool,
    *,
    store: str = "store-name",
    reduce: bool = False,
) -> Any:
    """A closing sliding-window aggregate (or reduce) of ``topic`` to ``output``."""
    b = StreamsBuilder()
    windowed = _windowed(b, "topic", diff, grace)
    if reduce:
        table = windowed.reduce(lambda a, v: f"{a}+{v}", _mat(store, caching))
    else:
        table = windowed.aggregate(lambda: "0", _concat, _mat(store, caching))
    table.to_stream().to("output", Produced.with_(_serde(diff), S))
    return drive(b.build())


def _pipe(d: Any, records: Sequence[tuple[str | None, str, int]], topic: str = "topic") -> None:
    i = d.create_input_topic(topic, S, S)
    for key, value, ts in records:
        i.pipe_input(key, value, ts)


def _serde(diff: int) -> Any:
    """The windowed serde of sliding windows of difference ``diff`` (end = start + diff)."""
    return WindowedSerdes.time_windowed_serde_from(S, diff)


def _read(d: Any, topic: str = "output", diff: int = 10) -> list[Row]:
    """The forwarded windows as ``(str(windowed key), value, timestamp)``, in order."""
    out = d.create_output_topic(topic, _serde(diff), S).read_records_to_list()
    return [(str(r.key), r.value, r.timestamp) for r in out]


def _by_key_and_start(rows: list[Row]) -> list[Row]:
    """Kafka's comparator: by key, then window start (stable otherwise)."""
    return sorted(rows, key=lambda r: (r[0].split("@")[0], int(r[0].split("@")[1].split("/")[0])))


def _dropped(d: Any) -> int:
    return int(d.metrics().total("dropped-records-total"))


@CACHING
def test_aggregate_small_input(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testAggregateSmallInput (emit final): difference
    10, grace 5; the record at 30 (close time 25) closes the six windows ending before 25."""
    d = _closing(drive, 10, 5, caching)
    _pipe(d, [("A", "1", 10), ("A", "2", 10), ("A", "3", 14), ("A", "4", 15), ("A", "5", 20),
              ("A", "6", 22), ("A", "7", 30)])  # fmt: skip
    assert _by_key_and_start(_read(d)) == [
        ("[A@0/10]", "0+1+2", 10), ("[A@4/14]", "0+1+2+3", 14), ("[A@5/15]", "0+1+2+3+4", 15),
        ("[A@10/20]", "0+1+2+3+4+5", 20), ("[A@11/21]", "0+3+4+5", 20),
        ("[A@12/22]", "0+3+4+5+6", 22),
    ]  # fmt: skip


@CACHING
def test_reduce_small_input(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testReduceSmallInput (emit final): the reduced
    value (``MockReducer.STRING_ADDER``) of each window closed by stream time 30."""
    d = _closing(drive, 10, 5, caching, reduce=True)
    _pipe(d, [("A", "1", 10), ("A", "2", 14), ("A", "3", 15), ("A", "4", 22), ("A", "5", 26),
              ("A", "6", 30)])  # fmt: skip
    assert _by_key_and_start(_read(d)) == [
        ("[A@0/10]", "1", 10), ("[A@4/14]", "1+2", 14), ("[A@5/15]", "1+2+3", 15),
        ("[A@11/21]", "2+3", 15), ("[A@12/22]", "2+3+4", 22),
    ]  # fmt: skip


@CACHING
def test_aggregate_large_input(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testAggregateLargeInput (emit final): grace 10;
    B@14, C@11, D@11, D@12 and D@16 come after their windows closed and are dropped (B@14
    still updates the open window ``[8, 18]``); each closed window goes out once."""
    d = _closing(drive, 10, 10, caching)
    _pipe(d, [
        ("A", "1", 10), ("A", "2", 20), ("A", "3", 22), ("A", "4", 15),
        ("B", "1", 12), ("B", "2", 13), ("B", "3", 18), ("B", "4", 19), ("B", "5", 25),
        ("B", "6", 14), ("C", "1", 11), ("C", "2", 15), ("C", "3", 16), ("C", "4", 21),
        ("C", "5", 23), ("D", "4", 11), ("D", "2", 12), ("D", "3", 29), ("D", "5", 16),
    ])  # fmt: skip
    assert _by_key_and_start(_read(d)) == [
        ("[A@0/10]", "0+1", 10), ("[A@5/15]", "0+1+4", 15),
        ("[B@2/12]", "0+1", 12), ("[B@3/13]", "0+1+2", 13), ("[B@8/18]", "0+1+2+3+6", 18),
        ("[C@5/15]", "0+2", 15), ("[C@6/16]", "0+2+3", 16),
    ]  # fmt: skip


@CACHING
def test_join(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testJoin (emit final): two closing sliding-window
    tables (difference 10, no grace) joined; each side forwards its closed windows, and
    the join reads the other side's window of the same start when one side emits."""
    b = StreamsBuilder()
    serde = _serde(10)
    table1 = _windowed(b, "topic1", 10, 0).aggregate(
        lambda: "0", _concat, _mat("store-name1", caching)
    )
    table2 = _windowed(b, "topic2", 10, 0).aggregate(
        lambda: "0", _concat, _mat("store-name2", caching)
    )
    table1.to_stream().to("table1", Produced.with_(serde, S))
    table2.to_stream().to("table2", Produced.with_(serde, S))
    joined = table1.join(table2, lambda p1, p2: f"{p1}%{p2}")
    joined.to_stream().to("joined", Produced.with_(serde, S))
    d = drive(b.build())

    _pipe(d, [("A", "1", 10), ("B", "2", 11), ("C", "3", 12)], "topic1")
    assert _read(d, "table1") == [("[A@0/10]", "0+1", 10), ("[B@1/11]", "0+2", 11)]
    assert _read(d, "table2") == _read(d, "joined") == []

    _pipe(d, [("A", "1", 15), ("B", "2", 16), ("C", "3", 19)], "topic1")
    assert _read(d, "table1") == [
        ("[C@2/12]", "0+3", 12), ("[A@5/15]", "0+1+1", 15), ("[B@6/16]", "0+2+2", 16),
    ]  # fmt: skip
    assert _read(d, "table2") == _read(d, "joined") == []

    _pipe(d, [("A", "a", 10), ("C", "c", 12)], "topic2")
    assert _read(d, "table1") == []
    assert _read(d, "table2") == [("[A@0/10]", "0+a", 10)]
    assert _read(d, "joined") == [("[A@0/10]", "0+1%0+a", 10)]

    _pipe(d, [("A", "a", 15), ("B", "b", 16), ("C", "c", 17)], "topic2")
    assert _read(d, "table1") == []
    assert _read(d, "table2") == [
        ("[C@2/12]", "0+c", 12), ("[A@5/15]", "0+a+a", 15), ("[B@6/16]", "0+b", 16),
    ]  # fmt: skip
    assert _read(d, "joined") == [
        ("[C@2/12]", "0+3%0+c", 12), ("[A@5/15]", "0+1+1%0+a+a", 15),
        ("[B@6/16]", "0+2+2%0+b", 16),
    ]  # fmt: skip


EARLY = [("A", "1", 0), ("A", "2", 5), ("A", "3", 6), ("A", "4", 3), ("A", "5", 13),
         ("A", "6", 10)]  # fmt: skip
EARLY_FINAL = [
    ("[A@0/50]", "0+1+2+3+4+5+6", 13), ("[A@1/51]", "0+2+3+4+5+6", 13),
    ("[A@4/54]", "0+2+3+5+6", 13), ("[A@6/56]", "0+3+5+6", 13), ("[A@7/57]", "0+5+6", 13),
    ("[A@11/61]", "0+5", 13),
]  # fmt: skip


@CACHING
def test_early_records_small_input(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testEarlyRecordsSmallInput (emit final):
    difference 50, grace 0; the records before 50 share the combined window ``[0, 50]``;
    the record at 70 closes every window ending before 70, its own stays open."""
    d = _closing(drive, 50, 0, caching, store="topic-Canonized")
    _pipe(d, [*EARLY, ("A", "7", 70)])
    assert _by_key_and_start(_read(d, diff=50)) == EARLY_FINAL


@CACHING
def test_early_no_grace_period_small_input(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testEarlyNoGracePeriodSmallInput (emit final):
    the same records through windows made with ``of_time_difference_with_no_grace(50)``."""
    d = _closing(drive, 50, None, caching, store="topic-Canonized")
    _pipe(d, [*EARLY, ("A", "6", 70)])
    assert _by_key_and_start(_read(d, diff=50)) == EARLY_FINAL


@CACHING
def test_early_records_repeated_input(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testEarlyRecordsRepeatedInput (emit final):
    difference 5, no grace; records repeated at 0, 2 and 4 fold into ``[0, 5]`` and
    ``[1, 6]``, which the record at 7 closes (``[2, 7]`` and later stay open)."""
    d = _closing(drive, 5, 0, caching, store="topic-Canonized")
    _pipe(d, [("A", "1", 0), ("A", "2", 2), ("A", "3", 4), ("A", "4", 0), ("A", "5", 2),
              ("A", "6", 2), ("A", "7", 0), ("A", "8", 7)])  # fmt: skip
    assert _by_key_and_start(_read(d, diff=5)) == [
        ("[A@0/5]", "0+1+2+3+4+5+6+7", 4),
        ("[A@1/6]", "0+2+3+5+6", 4),
    ]


@CACHING
def test_early_records_large_input(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testEarlyRecordsLargeInput (emit final):
    difference 10, grace 1; E@4 and E@2 arrive late: E@4 still updates ``[3, 13]``, E@2
    only closed windows (dropped); the record at 15 closes the windows ending before 14."""
    d = _closing(drive, 10, 1, caching)
    _pipe(d, [("E", "1", 0), ("E", "3", 5), ("E", "4", 6), ("E", "2", 3), ("E", "6", 13),
              ("E", "5", 10), ("E", "7", 4), ("E", "8", 2), ("E", "9", 15)])  # fmt: skip
    assert _by_key_and_start(_read(d)) == [
        ("[E@0/10]", "0+1+3+4+2", 6), ("[E@1/11]", "0+3+4+2", 6),
        ("[E@3/13]", "0+3+4+2+6+5+7", 13),
    ]  # fmt: skip


@CACHING
def test_early_no_grace_period_large_input(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testEarlyNoGracePeriodLargeInput (emit final):
    difference 10, no grace: by stream time 15 ``[4, 14]`` has closed too."""
    d = _closing(drive, 10, None, caching)
    _pipe(d, [("E", "1", 0), ("E", "3", 5), ("E", "4", 6), ("E", "2", 3), ("E", "6", 13),
              ("E", "5", 10), ("E", "7", 4), ("E", "8", 2), ("E", "9", 15)])  # fmt: skip
    assert _by_key_and_start(_read(d)) == [
        ("[E@0/10]", "0+1+3+4+2", 6), ("[E@1/11]", "0+3+4+2", 6),
        ("[E@3/13]", "0+3+4+2+6+5+7", 13), ("[E@4/14]", "0+3+4+6+5+7", 13),
    ]  # fmt: skip


@CACHING
def test_no_grace_period_small_input(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testNoGracePeriodSmallInput (emit final):
    difference 50, no grace, records from 100 on: stream time 113 closes the windows
    ending before 113, the three left windows of 100, 105 and 106."""
    d = _closing(drive, 50, None, caching, store="topic-Canonized")
    _pipe(d, [("A", "1", 100), ("A", "2", 105), ("A", "3", 106), ("A", "4", 103),
              ("A", "5", 113), ("A", "6", 110)])  # fmt: skip
    assert _by_key_and_start(_read(d, diff=50)) == [
        ("[A@50/100]", "0+1", 100), ("[A@55/105]", "0+1+2", 105),
        ("[A@56/106]", "0+1+2+3+4", 106),
    ]  # fmt: skip


@CACHING
def test_no_grace_period_large_input(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.testNoGracePeriodLargeInput (emit final):
    difference 10, no grace, records from 100 on; E@104 and E@102 arrive late."""
    d = _closing(drive, 10, None, caching)
    _pipe(d, [("E", "1", 100), ("E", "3", 105), ("E", "4", 106), ("E", "2", 103),
              ("E", "6", 113), ("E", "5", 110), ("E", "7", 104), ("E", "8", 102),
              ("E", "9", 115)])  # fmt: skip
    assert _by_key_and_start(_read(d)) == [
        ("[E@90/100]", "0+1", 100), ("[E@95/105]", "0+1+3", 105),
        ("[E@96/106]", "0+1+3+4+2", 106), ("[E@101/111]", "0+3+4+2", 106),
        ("[E@103/113]", "0+3+4+2+6+5+7", 113), ("[E@104/114]", "0+3+4+6+5+7", 113),
    ]  # fmt: skip


@CACHING
def test_skipping_null_key(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.shouldLogAndMeterWhenSkippingNullKey (emit
    final): a null key is dropped and counted; nothing is forwarded."""
    d = _closing(drive, 10, 100, caching, store="topic1-Canonized")
    _pipe(d, [(None, "1", 0)])
    assert _read(d) == []
    assert _dropped(d) == 1


@CACHING
def test_skipping_expired_window_by_grace(drive: Any, caching: bool) -> None:
    """KStreamSlidingWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace
    (emit final): difference 10, grace 90, stream time 200: the records at 100..105 and
    15 are dropped (7); the record at 300 closes ``[190, 200]``, the one at 400 closes
    ``[290, 300]``; ``[390, 400]`` stays open."""
    d = _closing(drive, 10, 90, caching)
    _pipe(d, [("k", "100", 200), ("k", "0", 100), ("k", "1", 101), ("k", "2", 102),
              ("k", "3", 103), ("k", "4", 104), ("k", "5", 105), ("k", "6", 15)])  # fmt: skip
    assert _dropped(d) == 7
    assert _read(d) == []
    _pipe(d, [("k", "101", 300), ("k", "102", 400)])
    assert _read(d) == [("[k@190/200]", "0+100", 200), ("[k@290/300]", "0+101", 300)]
    assert _dropped(d) == 7


RANDOM_INPUT = [
    ("A", 10), ("B", 15), ("C", 16), ("D", 18), ("E", 30), ("F", 40), ("G", 55), ("H", 56),
    ("I", 58), ("J", 58), ("K", 62), ("L", 63), ("M", 63), ("N", 63), ("O", 76), ("P", 77),
    ("Q", 80), ("R", 2), ("S", 3), ("T", 5), ("U", 8),
]  # fmt: skip


def _sorted_concat(key: str, value: str, agg: str) -> str:
    """Kafka's aggregator of the random test: the letters so far, sorted."""
    return "".join(sorted(agg + value))


@CACHING
@pytest.mark.parametrize("seed", [0, 17, 2024])
def test_aggregate_random_input(drive: Any, caching: bool, seed: int) -> None:
    """KStreamSlidingWindowAggregateTest.testAggregateRandomInput (emit final): the 21
    records in a shuffled order (fixed seeds: Kafka's test draws one), then V at 181.
    Difference 10, grace 100: nothing closes before V; V closes every window ending
    before 81, of which the store (retention 2 x 10 + 100 = 120) still holds those from
    52 on: each goes out once with its sorted letters."""
    b = StreamsBuilder()
    windowed = _windowed(b, "topic1", 10, 100)
    table = windowed.aggregate(lambda: "", _sorted_concat, _mat("store-name", caching))
    table.to_stream().to("output", Produced.with_(_serde(10), S))
    d = drive(b.build())
    shuffled = list(RANDOM_INPUT)
    random.Random(seed).shuffle(shuffled)
    _pipe(d, [("A", value, ts) for value, ts in shuffled], "topic1")
    assert _read(d) == []
    _pipe(d, [("A", "V", 181)], "topic1")
    assert _by_key_and_start(_read(d)) == [
        ("[A@52/62]", "GHIJK", 62), ("[A@53/63]", "GHIJKLMN", 63), ("[A@56/66]", "HIJKLMN", 63),
        ("[A@57/67]", "IJKLMN", 63), ("[A@59/69]", "KLMN", 63), ("[A@63/73]", "LMN", 63),
        ("[A@66/76]", "O", 76), ("[A@67/77]", "OP", 77), ("[A@70/80]", "OPQ", 80),
    ]  # fmt: skip
