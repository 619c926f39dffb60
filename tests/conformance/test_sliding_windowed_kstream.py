"""Kafka's ``SlidingWindowedKStreamImplTest``: count, reduce and aggregate over sliding
windows of a 100 ms time difference and 1,000 ms grace; each window's last update, and
the windows a materialized store holds.

Records: key 1 at 100, 150 and 500; key 2 at 200 and then 150.
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
    SlidingWindows,
    StreamsBuilder,
    ValueAndTimestamp,
)

INPUT = (("1", "1", 100), ("1", "2", 150), ("1", "3", 500), ("2", "10", 200), ("2", "20", 150))


def w(key: str, start: int, end: int) -> Windowed[str]:
    return Windowed(key, Window(start, end))


WINDOWS = [w("1", 0, 100), w("1", 101, 201), w("1", 50, 150), w("1", 400, 500)]
WINDOWS += [w("2", 100, 200), w("2", 50, 150), w("2", 151, 251)]
TIMES = [100, 150, 150, 500, 200, 150, 200]


def run(drive: Any, make: Any) -> tuple[Any, dict[Any, tuple[Any, int]]]:
    """Pipe the records through ``make(sliding-windowed stream)``; return the driver and
    each window's last update (value, timestamp)."""
    b = StreamsBuilder()
    last: dict[Any, tuple[Any, int]] = {}
    windowed = (
        b.stream("topic", Consumed.with_(S, S))
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(SlidingWindows.of_time_difference_and_grace(100, 1000))
    )
    make(windowed).to_stream().process(lambda: _Last(last))
    d = drive(b.build())
    topic = d.create_input_topic("topic", S, S)
    for key, value, ts in INPUT:
        topic.pipe_input(key, value, ts)
    return d, last


class _Last:
    def __init__(self, last: dict[Any, tuple[Any, int]]) -> None:
        self.last = last

    def init(self, context: Any) -> None:
        pass

    def process(self, record: Any) -> None:
        self.last[record.key] = (record.value, record.timestamp)

    def close(self) -> None:
        pass


def aggregate(s: Any, materialized: Materialized | None = None) -> Any:
    mat = materialized or Materialized.with_(S, S)
    return s.aggregate(lambda: "0", lambda k, v, agg: f"{agg}+{v}", mat)


@pytest.mark.parametrize(
    ("kafka_method", "make", "values"),
    [
        ("shouldCountSlidingWindows", lambda s: s.count(), [1, 1, 2, 1, 2, 1, 1]),
        (
            "shouldReduceSlidingWindows",
            lambda s: s.reduce(lambda a, v: f"{a}+{v}"),
            ["1", "2", "1+2", "3", "10+20", "20", "10"],
        ),
        (
            "shouldAggregateSlidingWindows",
            aggregate,
            ["0+1", "0+2", "0+1+2", "0+3", "0+10+20", "0+20", "0+10"],
        ),
    ],
)
def test_last_update_per_window(
    drive: Any, kafka_method: str, make: Any, values: list[Any]
) -> None:
    """SlidingWindowedKStreamImplTest.shouldCountSlidingWindows, shouldReduceSlidingWindows
    and shouldAggregateSlidingWindows: each window's last value and timestamp."""
    _, last = run(drive, make)
    assert last == dict(zip(WINDOWS, zip(values, TIMES, strict=True), strict=True))


STORED = [w("1", 0, 100), w("1", 50, 150), w("1", 101, 201), w("1", 400, 500)]
STORED += [w("2", 50, 150), w("2", 100, 200), w("2", 151, 251)]


def test_should_materialize_count(drive: Any) -> None:
    """SlidingWindowedKStreamImplTest.shouldMaterializeCount"""
    mat = Materialized.as_("count-store").with_key_serde(S).with_value_serde(L)
    d, _ = run(drive, lambda s: s.count(mat))
    plain = list(d.get_window_store("count-store").fetch_range("1", "2", 0, 1000))
    assert plain == list(zip(STORED, [1, 2, 1, 1, 1, 2, 1], strict=True))
    stamped = list(d.get_timestamped_window_store("count-store").fetch_range("1", "2", 0, 1000))
    times = [100, 150, 150, 500, 150, 200, 200]
    assert stamped == [
        (window, ValueAndTimestamp(count, ts))
        for window, count, ts in zip(STORED, [1, 2, 1, 1, 1, 2, 1], times, strict=True)
    ]


def test_should_materialize_reduced(drive: Any) -> None:
    """SlidingWindowedKStreamImplTest.shouldMaterializeReduced"""
    mat = Materialized.as_("reduced").with_key_serde(S).with_value_serde(S)
    d, _ = run(drive, lambda s: s.reduce(lambda a, v: f"{a}+{v}", mat))
    data = list(d.get_window_store("reduced").fetch_range("1", "2", 0, 1000))
    assert data == list(zip(STORED, ["1", "1+2", "2", "3", "20", "10+20", "10"], strict=True))
