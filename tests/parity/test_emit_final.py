"""Parity of emit on window close (KIP-825, ``EmitStrategy.on_window_close()``): hopping,
sliding and session windows forward each window once, its final aggregate, when stream
time passes its end plus grace; records arriving after that are dropped.

On Spark the hopping count takes two paths, batch by batch: a batch without headers is
counted inside Arrow, one with headers folded per key and window; both emit each window
with the headers of the record that closed it, as the driver's record-at-a-time path.

Both runs look for closed windows after every record (the internal emit interval set to
0, as the driver's default), so what goes out does not depend on the wall clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.parity.harness import LONG, STR, Case, Snapshot, check_parity, rec
from topology import (
    EmitStrategy,
    Materialized,
    Produced,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
    Topology,
)
from topology.api.emit import EMIT_INTERVAL_KEY

CLOSE = EmitStrategy.on_window_close()
#: Look for closed windows after every record, on the driver and on Spark alike.
CONFIG = {EMIT_INTERVAL_KEY: 0}

# Stream time goes 0 .. 52 with records out of order; the records at 3, 6, 18 and 20
# (after stream time 21, 31, 31 and 52) are late for the windows below and are dropped.
TIMES = [0, 2, 4, 7, 9, 12, 11, 15, 21, 3, 24, 31, 6, 18, 27, 26, 38, 44, 35, 52, 20, 47]


def _long(data: bytes) -> int:
    value = LONG.deserialize("", data)
    assert value is not None
    return value


def _windowed(k: Any, v: Any) -> tuple[str, Any]:
    return str(k), v


def _inputs(times: list[int], *, headers: bool = False) -> list[Any]:
    """Three keys, in an order that is neither round-robin nor by key; with ``headers``,
    every third record carries one (a window goes out with its closing record's)."""
    return [
        rec(
            "in",
            "abc"[(i * i + i // 3) % 3],
            f"v{i}",
            ts,
            [("seq", str(i).encode())] if headers and i % 3 == 1 else [],
        )
        for i, ts in enumerate(times)
    ]


def _once_per_window(s: Snapshot) -> None:
    """Each window went out once; the keys include every one of the three input keys."""
    out = s.outputs["out"]
    assert out and all(len(records) == 1 for records in out.values()), out
    assert {k.decode()[1] for k in out if k is not None} == {"a", "b", "c"}


def _hopping() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 4).advance_by(5))
        .emit_strategy(CLOSE)
        .count(Materialized.as_("hopping-final"))
        .to_stream()
        .map(_windowed)
        .to("out", Produced.with_(STR, LONG))
    )
    return b.build()


def _check_hopping(s: Snapshot) -> None:
    _once_per_window(s)
    keys = {k.decode() for k in s.outputs["out"] if k is not None}
    assert {"[a@0/10]", "[a@5/15]"} <= keys or {"[b@0/10]", "[b@5/15]"} <= keys
    # every window closed by stream time 52 - 4 went out; none that is still open
    assert all(int(k.split("/")[1][:-1]) <= 48 for k in keys)
    # the windows closed by 48 would hold 35 counts; the late records at 3, 6, 18, 35
    # and 20 miss 1 + 2 + 2 + 1 + 2 of them
    assert sum(s.values("out", _long)) == 35 - 8
    headers = [hs for records in s.outputs["out"].values() for _, _, hs in records]
    assert () in headers and any(headers)  # the closing records' headers, some none


HOPPING = Case(
    name="emit-final-hopping-count",
    build=_hopping,
    inputs=_inputs(TIMES, headers=True),
    outputs=("out",),
    max_poll_records=2,
    config=CONFIG,
    check=_check_hopping,
)


def _sliding() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(5, 6))
        .emit_strategy(CLOSE)
        .reduce(lambda a, v: f"{a}|{v}", Materialized.as_("sliding-final"))
        .to_stream()
        .map(_windowed)
        .to("out")
    )
    return b.build()


def _check_sliding(s: Snapshot) -> None:
    _once_per_window(s)
    assert any("|" in v for v in s.values("out"))
    late = {"v9", "v12", "v13", "v20"}  # the records at 3, 6, 18 and 20: dropped
    assert not any(late & set(v.split("|")) for v in s.values("out"))


SLIDING = Case(
    name="emit-final-sliding-reduce",
    build=_sliding,
    inputs=_inputs(TIMES),
    outputs=("out",),
    max_poll_records=5,
    config=CONFIG,
    check=_check_sliding,
)


def _session() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(4, 3))
        .emit_strategy(CLOSE)
        .aggregate(
            lambda: "",
            lambda k, v, agg: agg + v[1:] + ",",
            lambda k, a, b: a + b,
            Materialized.as_("session-final"),
        )
        .to_stream()
        .map(_windowed)
        .to("out")
    )
    return b.build()


def _check_session(s: Snapshot) -> None:
    _once_per_window(s)
    values = s.values("out")
    assert None not in values  # no tombstones of merged sessions: only final sessions
    assert max(v.count(",") for v in values) >= 3  # sessions grew and merged
    assert not any("12" in v.split(",") for v in values)  # the record at 2 after 40: late


SESSION = Case(
    name="emit-final-session-aggregate",
    build=_session,
    inputs=_inputs([0, 2, 5, 1, 9, 20, 12, 16, 13, 30, 18, 40, 2, 33, 36, 11, 49, 44, 60, 41]),
    outputs=("out",),
    max_poll_records=3,
    config=CONFIG,
    check=_check_session,
)

CASES = [HOPPING, SLIDING, SESSION]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_parity(case: Case, spark: Any, tmp_path: Path) -> None:
    check_parity(case, spark, str(tmp_path))
