"""Parity of cogroups (KIP-150): three grouped streams folded into one store, one of them
re-keyed through its repartition topic; a cogroup over time windows; one over sessions.

The aggregators append a tag per stream, so a record folded in another order than the
driver's shows. Timestamps grow across all the input topics, so the order Kafka's
partition group picks (smallest head timestamp first) is the input's order on both runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.parity.harness import STR, Case, Snapshot, check_parity, rec
from topology import (
    Grouped,
    Materialized,
    SessionWindows,
    StreamsBuilder,
    TimeWindows,
    Topology,
)


def _tagged(tag: str) -> Any:
    """An aggregator appending ``<tag><value>``."""

    def aggregate(key: str, value: str, agg: str) -> str:
        return f"{agg}{tag}{value}"

    return aggregate


def _windowed(k: Any, v: Any) -> tuple[str, Any]:
    return str(k), v


def _cogroup_three() -> Topology:
    b = StreamsBuilder()
    clicks = b.stream("clicks").group_by_key()
    views = b.stream("views").group_by_key()
    # buys carry the customer in the value: re-keyed, so cogrouped through a repartition
    buys = b.stream("buys").map(lambda k, v: (v.split(":")[0], v.split(":")[1]))
    (
        clicks.cogroup(_tagged("c"))
        .cogroup(views, _tagged("v"))
        .cogroup(buys.group_by_key(Grouped.with_(STR, STR)), _tagged("b"))
        .aggregate(lambda: "", Materialized.as_("activity"))
        .to_stream()
        .to("out")
    )
    return b.build()


def _three_inputs() -> list[Any]:
    inputs = []
    for i in range(12):
        customer = "xyz"[(i // 3) % 3]
        if i % 3 == 0:
            inputs.append(rec("clicks", customer, str(i), 10 + i))
        elif i % 3 == 1:
            inputs.append(rec("views", customer, str(i), 10 + i))
        else:
            inputs.append(rec("buys", f"order{i}", f"{customer}:{i}", 10 + i))
    return inputs


def _check_three(s: Snapshot) -> None:
    values = s.values("out")
    assert any("b" in v and "c" in v and "v" in v for v in values)  # all three streams met
    assert s.count("out") == 12


COGROUP_THREE = Case(
    name="cogroup-three-streams-one-repartitioned",
    build=_cogroup_three,
    inputs=_three_inputs(),
    outputs=("out",),
    max_poll_records=3,
    check=_check_three,
)


def _cogroup_windowed() -> Topology:
    b = StreamsBuilder()
    left = b.stream("left").group_by_key()
    right = b.stream("right").group_by_key()
    (
        left.cogroup(_tagged("+"))
        .cogroup(right, _tagged("-"))
        .windowed_by(TimeWindows.of_size_and_grace(10, 3))
        .aggregate(lambda: "0", Materialized.as_("windowed-activity"))
        .to_stream()
        .map(_windowed)
        .to("out")
    )
    return b.build()


# in the partition group's order (smallest head first); the record at 3 is late on "left"
# (its aggregate has seen 14: window 0/10 closed at 13)
WINDOW_TIMES = [(0, "left"), (2, "right"), (5, "left"), (9, "right"), (14, "left")]
WINDOW_TIMES += [(3, "left"), (15, "right"), (16, "left"), (22, "left"), (23, "right")]
WINDOW_TIMES += [(27, "left")]
WINDOW_TIMES += [(28, "right"), (35, "left"), (36, "right")]


def _check_windowed(s: Snapshot) -> None:
    keys = {k.decode() for k in s.outputs["out"] if k is not None}
    assert {"[a@0/10]", "[a@10/20]", "[b@20/30]"} <= keys
    assert any("+" in v and "-" in v for v in s.values("out"))
    assert not any("v5" in v for v in s.values("out"))  # the late record was dropped


COGROUP_WINDOWED = Case(
    name="cogroup-time-windowed",
    build=_cogroup_windowed,
    inputs=[rec(topic, "ab"[i % 2], f"v{i}", ts) for i, (ts, topic) in enumerate(WINDOW_TIMES)],
    outputs=("out",),
    max_poll_records=2,
    check=_check_windowed,
)


def _cogroup_session() -> Topology:
    b = StreamsBuilder()
    left = b.stream("left").group_by_key()
    right = b.stream("right").group_by_key()
    (
        left.cogroup(_tagged("+"))
        .cogroup(right, _tagged("-"))
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 20))
        .aggregate(lambda: "", lambda k, a, b: f"({a}|{b})", Materialized.as_("sessions"))
        .to_stream()
        .map(_windowed)
        .to("out")
    )
    return b.build()


# in the partition group's order; the record at 8 bridges the sessions 0-4 and 12
SESSION_TIMES = [(0, "left"), (3, "right"), (4, "left"), (12, "right"), (8, "right")]
SESSION_TIMES += [(16, "left"), (30, "left"), (33, "right"), (41, "left")]


def _check_session(s: Snapshot) -> None:
    values = s.values("out")
    assert None in values  # a merged session's tombstone
    assert any("+" in v and "-" in v and "|" in v for v in values if v is not None)
    assert any("|" in v for v in values if v is not None)  # the merger ran


COGROUP_SESSION = Case(
    name="cogroup-session-windowed",
    build=_cogroup_session,
    inputs=[rec(topic, "a", f"v{i}", ts) for i, (ts, topic) in enumerate(SESSION_TIMES)],
    outputs=("out",),
    max_poll_records=5,
    check=_check_session,
)


CASES = [COGROUP_THREE, COGROUP_WINDOWED, COGROUP_SESSION]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_parity(case: Case, spark: Any, tmp_path: Path) -> None:
    check_parity(case, spark, str(tmp_path))
