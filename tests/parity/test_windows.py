"""Parity of windowed aggregations: tumbling, hopping, sliding and session windows, and
suppress until the window closes (late records dropped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.parity.harness import LONG, STR, Case, Snapshot, check_parity, rec
from topology import (
    BufferConfig,
    Materialized,
    Produced,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    Topology,
)


def _long(data: bytes) -> int:
    return int(LONG.deserialize("", data))


def _windowed(k: Any, v: Any) -> tuple[str, Any]:
    return str(k), v


def _keys(s: Snapshot, topic: str) -> list[str]:
    return [k.decode() for k in s.outputs[topic] if k is not None]


# stream time goes 0 .. 31; a record at 3 after 31 is late for every window here
TIMES = [0, 2, 4, 7, 9, 12, 11, 15, 21, 3, 24, 31, 3, 18]


def _inputs(times: list[int]) -> list[Any]:
    return [rec("in", "ab"[i % 2] if i % 5 else "a", f"v{i}", ts) for i, ts in enumerate(times)]


def _tumbling() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 5))
        .count(Materialized.as_("tumbling"))
        .to_stream()
        .map(_windowed)
        .to("out", Produced.with_(STR, LONG))
    )
    return b.build()


def _check_tumbling(s: Snapshot) -> None:
    assert {"[a@0/10]", "[a@20/30]", "[b@30/40]"} <= set(_keys(s, "out"))
    # the records at 3 after stream time 21 and 31 are late: window 0/10 stops counting
    assert max(s.values("out", _long)) <= 4


TUMBLING = Case(
    name="tumbling-window-count",
    build=_tumbling,
    inputs=_inputs(TIMES),
    outputs=("out",),
    max_poll_records=5,
    check=_check_tumbling,
)


def _hopping() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 8).advance_by(5))
        .aggregate(lambda: "", lambda k, v, agg: agg + v[1:], Materialized.as_("hopping"))
        .to_stream()
        .map(_windowed)
        .to("out")
    )
    return b.build()


HOPPING = Case(
    name="hopping-window-aggregate",
    build=_hopping,
    inputs=_inputs(TIMES),
    outputs=("out",),
    max_poll_records=3,
    check=lambda s: "[a@-5/5]" in _keys(s, "out") and "[a@5/15]" in _keys(s, "out"),
)


def _sliding() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(5, 6))
        .reduce(lambda a, v: f"{a}|{v}", Materialized.as_("sliding"))
        .to_stream()
        .map(_windowed)
        .to("out")
    )
    return b.build()


SLIDING = Case(
    name="sliding-window-reduce",
    build=_sliding,
    inputs=_inputs(TIMES),
    outputs=("out",),
    max_poll_records=4,
    check=lambda s: any("|" in v for v in s.values("out")),
)


def _session() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(4, 6))
        .count(Materialized.as_("sessions"))
        .to_stream()
        .map(_windowed)
        .to("out", Produced.with_(STR, LONG))
    )
    return b.build()


def _check_session(s: Snapshot) -> None:
    assert None in s.values("out", _long)  # merged sessions are deleted (tombstones)
    assert max(v for v in s.values("out", _long) if v is not None) >= 2


SESSION = Case(
    name="session-window-count",
    build=_session,
    inputs=_inputs([0, 2, 5, 1, 9, 20, 12, 16, 13, 30, 18, 40, 2]),
    outputs=("out",),
    max_poll_records=4,
    check=_check_session,
)


def _suppressed() -> Topology:
    b = StreamsBuilder()
    counts = (
        b.stream("in")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 2))
        .count(Materialized.as_("counts"))
    )
    (
        counts.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .map(_windowed)
        .to("final", Produced.with_(STR, LONG))
    )
    counts.to_stream().map(_windowed).to("raw", Produced.with_(STR, LONG))
    return b.build()


def _check_suppressed(s: Snapshot) -> None:
    final = s.outputs["final"]
    assert final and all(len(records) == 1 for records in final.values())  # one per window
    assert s.count("raw") > s.count("final")


SUPPRESS = Case(
    name="suppress-until-window-closes",
    build=_suppressed,
    inputs=_inputs(TIMES),
    outputs=("final", "raw"),
    max_poll_records=3,
    check=_check_suppressed,
)

CASES = [TUMBLING, HOPPING, SLIDING, SESSION, SUPPRESS]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_parity(case: Case, spark: Any, tmp_path: Path) -> None:
    check_parity(case, spark, str(tmp_path))
