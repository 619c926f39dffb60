"""Time and sliding windowed aggregations through the TopologyTestDriver, with exact
outputs; the expected values are Kafka's own (``KStreamWindowAggregateTest``,
``KStreamSlidingWindowAggregateTest``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from common.errors import StreamsProcessingError, TopologyError
from common.serdes import Serdes
from statestores.api import Window, Windowed
from statestores.stores import Stores
from tests.topology.conftest import L, S
from topology import Grouped, Materialized, Produced, StreamsBuilder
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import SlidingWindows, TimeWindows, UnlimitedWindows


def _concat(key: str, value: str, agg: str) -> str:
    return f"{agg}+{value}"


def _out(d: Any, size: int, value_serde: Any = S) -> list[tuple[str, Any, int]]:
    serde = WindowedSerdes.time_windowed_serde_from(S, size)
    records = d.create_output_topic("out", serde, value_serde).read_records_to_list()
    return [(str(r.key), r.value, r.timestamp) for r in records]


def _hopping_aggregate(materialized: Materialized) -> StreamsBuilder:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(TimeWindows.of_size_and_grace(10, 100).advance_by(5))
        .aggregate(lambda: "0", _concat, materialized)
        .to_stream()
        .to("out", Produced.with_(WindowedSerdes.time_windowed_serde_from(S, 10), S))
    )
    return b


@pytest.mark.parametrize("caching", [True, False])
def test_hopping_aggregate_matches_kafka(drive: Any, caching: bool) -> None:
    mat = Materialized.as_("topic1-Canonized").with_value_serde(S)
    d = drive(_hopping_aggregate(mat if caching else mat.with_caching_disabled()).build())
    i = d.create_input_topic("in", S, S)
    for key, value, ts in [
        ("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3), ("A", "1", 4),
        ("A", "1", 5), ("B", "2", 6), ("D", "4", 7), ("B", "2", 8), ("C", "3", 9),
        ("A", "1", 10), ("B", "2", 11), ("D", "4", 12), ("B", "2", 13), ("C", "3", 14),
        ("B", "1", 3), ("B", "2", 2), ("B", "3", 9),
    ]:  # fmt: skip
        i.pipe_input(key, value, ts)
    assert _out(d, 10) == [
        ("[A@0/10]", "0+1", 0),
        ("[B@0/10]", "0+2", 1),
        ("[C@0/10]", "0+3", 2),
        ("[D@0/10]", "0+4", 3),
        ("[A@0/10]", "0+1+1", 4),
        ("[A@0/10]", "0+1+1+1", 5),
        ("[A@5/15]", "0+1", 5),
        ("[B@0/10]", "0+2+2", 6),
        ("[B@5/15]", "0+2", 6),
        ("[D@0/10]", "0+4+4", 7),
        ("[D@5/15]", "0+4", 7),
        ("[B@0/10]", "0+2+2+2", 8),
        ("[B@5/15]", "0+2+2", 8),
        ("[C@0/10]", "0+3+3", 9),
        ("[C@5/15]", "0+3", 9),
        ("[A@5/15]", "0+1+1", 10),
        ("[A@10/20]", "0+1", 10),
        ("[B@5/15]", "0+2+2+2", 11),
        ("[B@10/20]", "0+2", 11),
        ("[D@5/15]", "0+4+4", 12),
        ("[D@10/20]", "0+4", 12),
        ("[B@5/15]", "0+2+2+2+2", 13),
        ("[B@10/20]", "0+2+2", 13),
        ("[C@5/15]", "0+3+3", 14),
        ("[C@10/20]", "0+3", 14),
        ("[B@0/10]", "0+2+2+2+1", 8),
        ("[B@0/10]", "0+2+2+2+1+2", 8),
        ("[B@0/10]", "0+2+2+2+1+2+3", 9),
        ("[B@5/15]", "0+2+2+2+2+3", 13),
    ]
    store = d.get_timestamped_window_store("topic1-Canonized")
    assert list(store.fetch("B", 0, 10)) == [
        (0, ("0+2+2+2+1+2+3", 9)),
        (5, ("0+2+2+2+2+3", 13)),
        (10, ("0+2+2", 13)),
    ]
    assert d.metrics().total("dropped-records-total") == 0


def test_tumbling_count_window_boundaries(drive: Any) -> None:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10)))
        .count(Materialized.as_("counts").with_caching_disabled())
        .to_stream()
        .to("out", Produced.with_(WindowedSerdes.time_windowed_serde_from(S, 10), L))
    )
    d = drive(b.build())
    i = d.create_input_topic("in", S, S)
    for key, ts in [("a", 0), ("a", 9), ("a", 10), ("b", 19), ("a", 20), (None, 21)]:
        i.pipe_input(key, "v", ts)
    # a record exactly at 10 opens [10, 20): windows are [start, end)
    assert _out(d, 10, L) == [
        ("[a@0/10]", 1, 0),
        ("[a@0/10]", 2, 9),
        ("[a@10/20]", 1, 10),
        ("[b@10/20]", 1, 19),
        ("[a@20/30]", 1, 20),
    ]
    assert d.metrics().total("dropped-records-total") == 1  # the null key


def test_hopping_count_record_on_a_boundary_lands_in_every_window_holding_it(
    drive: Any,
) -> None:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10).advance_by(3))
        .count(Materialized.with_(S, L).with_caching_disabled())
        .to_stream()
        .to("out", Produced.with_(WindowedSerdes.time_windowed_serde_from(S, 10), L))
    )
    d = drive(b.build())
    d.create_input_topic("in", S, S).pipe_input("k", "v", 12)
    # windows aligned to the epoch: starts 3, 6, 9, 12 hold 12 ([0, 10) does not)
    assert _out(d, 10, L) == [
        ("[k@3/13]", 1, 12),
        ("[k@6/16]", 1, 12),
        ("[k@9/19]", 1, 12),
        ("[k@12/22]", 1, 12),
    ]


def test_late_records_dropped_and_counted_out_of_order_within_grace_accepted(
    drive: Any,
) -> None:
    """Kafka's ``shouldLogAndMeterWhenSkippingExpiredWindow``: one drop per closed window."""
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 90).advance_by(5))
        .aggregate(
            lambda: "",
            _concat,
            Materialized.as_("topic1-Canonicalized")
            .with_value_serde(S)
            .with_caching_disabled()
            .with_logging_disabled()
            .with_retention(100),
        )
        .to_stream()
        .map(lambda k, v: (str(k), v))
        .to("out")
    )
    d = drive(b.build())
    i = d.create_input_topic("in", S, S)
    i.pipe_input("k", "100", 100)
    for ts in range(7):
        i.pipe_input("k", str(ts), ts)
    records = d.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        ("[k@95/105]", "+100", 100),
        ("[k@100/110]", "+100", 100),
        ("[k@5/15]", "+5", 5),
        ("[k@5/15]", "+5+6", 6),
    ]
    assert d.metrics().total("dropped-records-total") == 7


def test_grace_boundary_window_end_plus_grace_equal_to_stream_time_is_closed(
    drive: Any,
) -> None:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 5))
        .count(Materialized.with_(S, L).with_caching_disabled())
        .to_stream()
        .to("out", Produced.with_(WindowedSerdes.time_windowed_serde_from(S, 10), L))
    )
    d = drive(b.build())
    i = d.create_input_topic("in", S, S)
    i.pipe_input("k", "v", 14)  # stream time 14: [0, 10) still open (10 + 5 > 14)
    i.pipe_input("k", "v", 3)  # out of order, within grace: accepted
    i.pipe_input("k", "v", 15)  # stream time 15: [0, 10) closes (10 + 5 <= 15)
    i.pipe_input("k", "v", 4)  # late: dropped
    assert _out(d, 10, L) == [("[k@10/20]", 1, 14), ("[k@0/10]", 1, 3), ("[k@10/20]", 2, 15)]
    assert d.metrics().total("dropped-records-total") == 1


def test_windowed_reduce_and_unlimited_windows(drive: Any) -> None:
    b = StreamsBuilder()
    grouped = b.stream("in").group_by(lambda k, v: v[0], Grouped.with_(S, S))
    (
        grouped.windowed_by(TimeWindows.of_size_with_no_grace(10))
        .reduce(lambda a, v: a + v, Materialized.with_(S, S).with_caching_disabled())
        .to_stream()
        .to("out", Produced.with_(WindowedSerdes.time_windowed_serde_from(S, 10), S))
    )
    (
        grouped.windowed_by(UnlimitedWindows.of().starting_at(5))
        .count(Materialized.as_("forever").with_caching_disabled())
        .to_stream()
        .map(lambda k, v: (f"{k.key}@{k.window.start}", v))
        .to("forever-out", Produced.with_(S, L))
    )
    d = drive(b.build())
    i = d.create_input_topic("in", S, S)
    for value, ts in [("ab", 1), ("ac", 2), ("bx", 3), ("ay", 12)]:
        i.pipe_input(None, value, ts)
    assert _out(d, 10) == [
        ("[a@0/10]", "ab", 1),
        ("[a@0/10]", "abac", 2),
        ("[b@0/10]", "bx", 3),
        ("[a@10/20]", "ay", 12),
    ]
    # records before the unlimited window's start fall in no window
    assert d.create_output_topic("forever-out", S, L).read_key_values_to_list() == [("a@5", 1)]


def test_windowed_results_to_topic_with_kafka_byte_layout(drive: Any) -> None:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(TimeWindows.of_size_with_no_grace(100))
        .count()
        .to_stream()
        .to("out")  # the table's key serde: time-windowed over the grouping's
    )
    d = drive(b.build())
    d.create_input_topic("in", S, S).pipe_input("k", "v", 250)
    raw = d.create_output_topic("out", Serdes.Bytes(), L).read_record()
    assert raw.key == b"k" + (200).to_bytes(8, "big")
    serde = WindowedSerdes.time_windowed_serde_from(S, 100)
    assert serde.deserialize("out", raw.key) == Windowed("k", Window(200, 300))
    session = WindowedSerdes.session_windowed_serde_from(S)
    data = session.serialize("t", Windowed("k", Window(5, 9)))
    assert data == b"k" + (9).to_bytes(8, "big") + (5).to_bytes(8, "big")
    assert session.deserialize("t", data) == Windowed("k", Window(5, 9))


def test_retention_smaller_than_size_plus_grace_raises_naming_the_store() -> None:
    b = StreamsBuilder()
    windowed = b.stream("in").group_by_key().windowed_by(TimeWindows.of_size_and_grace(10, 5))
    with pytest.raises(TopologyError, match="Store short-store: the retention period"):
        windowed.count(Materialized.as_("short-store").with_retention(14))
    sliding = (
        b.stream("in2")
        .group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(10, 5))
    )
    with pytest.raises(TopologyError, match="Store s2"):
        sliding.count(Materialized.as_("s2").with_retention(24))
    with pytest.raises(TopologyError, match="Store s3"):
        sliding.count(Materialized.as_(Stores.in_memory_window_store("s3", 20, 10)))


def test_window_specs_validate_and_accept_timedelta() -> None:
    assert TimeWindows.of_size_and_grace(timedelta(seconds=1), 10).size_ms == 1000
    with pytest.raises(ValueError, match="advance"):
        TimeWindows.of_size_with_no_grace(10).advance_by(11)
    with pytest.raises(ValueError, match="larger than zero"):
        TimeWindows.of_size_with_no_grace(0)
    with pytest.raises(ValueError, match="negative"):
        SlidingWindows.of_time_difference_and_grace(10, -1)
    windows = TimeWindows.of_size_with_no_grace(10).advance_by(5).windows_for(12)
    assert windows == {5: Window(5, 15), 10: Window(10, 20)}


def test_aggregator_error_names_the_processor(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(10)).aggregate(
        lambda: 0, lambda k, v, a: 1 // 0, Materialized.with_(S, L), named="boom"
    )
    d = drive(b.build())
    with pytest.raises(StreamsProcessingError, match="boom"):
        d.create_input_topic("in", S, S).pipe_input("k", "v", 1)


# -- sliding windows: Kafka's KStreamSlidingWindowAggregateTest --------------------------


def _sliding(d_maker: Any, diff: int, grace: int, reduce: bool = False) -> Any:
    b = StreamsBuilder()
    windowed = (
        b.stream("in")
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(SlidingWindows.of_time_difference_and_grace(diff, grace))
    )
    mat = Materialized.as_(Stores.in_memory_window_store("Reverse", 50_000, diff))
    table = (
        windowed.reduce(lambda a, v: f"{a}+{v}", mat)
        if reduce
        else windowed.aggregate(lambda: "0", _concat, mat.with_value_serde(S))
    )
    table.to_stream().to("out", Produced.with_(WindowedSerdes.time_windowed_serde_from(S, diff), S))
    return d_maker(b.build())


def _final(d: Any, diff: int) -> dict[int, tuple[str, int]]:
    serde = WindowedSerdes.time_windowed_serde_from(S, diff)
    return {
        r.key.window.start: (r.value, r.timestamp)
        for r in d.create_output_topic("out", serde, S).read_records_to_list()
    }


def test_sliding_aggregate_small_input(drive: Any) -> None:
    d = _sliding(drive, 10, 50)
    i = d.create_input_topic("in", S, S)
    for value, ts in [("1", 10), ("2", 15), ("3", 20), ("4", 22), ("5", 30)]:
        i.pipe_input("A", value, ts)
    assert _final(d, 10) == {
        0: ("0+1", 10),
        5: ("0+1+2", 15),
        10: ("0+1+2+3", 20),
        11: ("0+2+3", 20),
        12: ("0+2+3+4", 22),
        16: ("0+3+4", 22),
        20: ("0+3+4+5", 30),
        21: ("0+4+5", 30),
        23: ("0+5", 30),
    }


def test_sliding_reduce_small_input(drive: Any) -> None:
    d = _sliding(drive, 10, 50, reduce=True)
    i = d.create_input_topic("in", S, S)
    for value, ts in [("1", 10), ("2", 14), ("3", 15), ("4", 22), ("5", 26), ("6", 30)]:
        i.pipe_input("A", value, ts)
    assert _final(d, 10) == {
        0: ("1", 10),
        4: ("1+2", 14),
        5: ("1+2+3", 15),
        11: ("2+3", 15),
        12: ("2+3+4", 22),
        15: ("3+4", 22),
        16: ("4+5", 26),
        20: ("4+5+6", 30),
        23: ("5+6", 30),
        27: ("6", 30),
    }


def test_sliding_aggregate_large_out_of_order_input(drive: Any) -> None:
    d = _sliding(drive, 10, 50)
    i = d.create_input_topic("in", S, S)
    for key, value, ts in [
        ("A", "1", 10), ("A", "2", 20), ("A", "3", 22), ("A", "4", 15),
        ("B", "1", 12), ("B", "2", 13), ("B", "3", 18), ("B", "4", 19), ("B", "5", 25),
        ("B", "6", 14),
        ("D", "4", 11), ("D", "2", 12), ("D", "3", 29), ("D", "5", 16),
    ]:  # fmt: skip
        i.pipe_input(key, value, ts)
    serde = WindowedSerdes.time_windowed_serde_from(S, 10)
    records = d.create_output_topic("out", serde, S).read_records_to_list()
    actual = sorted(
        ((r.key.key, r.key.window.start, r.key.window.end, r.value, r.timestamp) for r in records),
        key=lambda t: (t[0], t[1]),
    )
    assert actual == [
        ("A", 0, 10, "0+1", 10),
        ("A", 5, 15, "0+1+4", 15),
        ("A", 10, 20, "0+1+2", 20),
        ("A", 10, 20, "0+1+2+4", 20),
        ("A", 11, 21, "0+2", 20),
        ("A", 11, 21, "0+2+4", 20),
        ("A", 12, 22, "0+2+3", 22),
        ("A", 12, 22, "0+2+3+4", 22),
        ("A", 16, 26, "0+2+3", 22),
        ("A", 21, 31, "0+3", 22),
        ("B", 2, 12, "0+1", 12),
        ("B", 3, 13, "0+1+2", 13),
        ("B", 4, 14, "0+1+2+6", 14),
        ("B", 8, 18, "0+1+2+3", 18),
        ("B", 8, 18, "0+1+2+3+6", 18),
        ("B", 9, 19, "0+1+2+3+4", 19),
        ("B", 9, 19, "0+1+2+3+4+6", 19),
        ("B", 13, 23, "0+2", 13),
        ("B", 13, 23, "0+2+3", 18),
        ("B", 13, 23, "0+2+3+4", 19),
        ("B", 13, 23, "0+2+3+4+6", 19),
        ("B", 14, 24, "0+3", 18),
        ("B", 14, 24, "0+3+4", 19),
        ("B", 14, 24, "0+3+4+6", 19),
        ("B", 15, 25, "0+3+4+5", 25),
        ("B", 19, 29, "0+4", 19),
        ("B", 19, 29, "0+4+5", 25),
        ("B", 20, 30, "0+5", 25),
        ("D", 1, 11, "0+4", 11),
        ("D", 2, 12, "0+4+2", 12),
        ("D", 6, 16, "0+4+2+5", 16),
        ("D", 12, 22, "0+2", 12),
        ("D", 12, 22, "0+2+5", 16),
        ("D", 13, 23, "0+5", 16),
        ("D", 19, 29, "0+3", 29),
    ]


def test_sliding_early_records(drive: Any) -> None:
    d = _sliding(drive, 50, 200)
    i = d.create_input_topic("in", S, S)
    for value, ts in [("1", 0), ("2", 5), ("3", 6), ("4", 3), ("5", 13), ("6", 10)]:
        i.pipe_input("A", value, ts)
    assert _final(d, 50) == {
        0: ("0+1+2+3+4+5+6", 13),
        1: ("0+2+3+4+5+6", 13),
        4: ("0+2+3+5+6", 13),
        6: ("0+3+5+6", 13),
        7: ("0+5+6", 13),
        11: ("0+5", 13),
    }


def test_sliding_early_records_repeated(drive: Any) -> None:
    d = _sliding(drive, 5, 20)
    i = d.create_input_topic("in", S, S)
    for value, ts in [("1", 0), ("2", 2), ("3", 4), ("4", 0), ("5", 2), ("6", 2), ("7", 0)]:
        i.pipe_input("A", value, ts)
    assert _final(d, 5) == {
        0: ("0+1+2+3+4+5+6+7", 4),
        1: ("0+2+3+5+6", 4),
        3: ("0+3", 4),
    }


def test_sliding_late_record_dropped_and_counted(drive: Any) -> None:
    d = _sliding(drive, 10, 5)
    i = d.create_input_topic("in", S, S)
    i.pipe_input("A", "1", 100)
    i.pipe_input("A", "2", 84)  # even its right window [85, 95] is closed at 100 - 5
    # 90 joins [90, 100] and opens its right window [91, 101]; its left window [80, 90]
    # is closed: that part is dropped
    i.pipe_input("A", "3", 90)
    assert _final(d, 10) == {90: ("0+1+3", 100), 91: ("0+1", 100)}
    assert d.metrics().total("dropped-records-total") == 2
