"""Stream-stream joins through the TopologyTestDriver: Kafka's documented semantics table
row by row, Kafka's integration-test input, grace-period drops, names and stores."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from common.errors import TopologyError
from tests.topology.conftest import L, S
from topology import JoinWindows, StreamJoined, StreamsBuilder

LEFT, RIGHT, OUT = "left", "right", "out"
K = 0  # every record has the same key, as in the docs' tables


def joiner(left: Any, right: Any) -> str:
    return f"[{left}, {right}]"


def run(drive: Any, kind: str, windows: JoinWindows, rows: list[Any], **config: Any) -> None:
    """Pipe ``(timestamp, left, right, expected)`` rows (one side given per row, ``...``
    for "no record") and check each row's output exactly: ``(value, timestamp)`` pairs."""
    b = StreamsBuilder()
    left, right = b.stream(LEFT), b.stream(RIGHT)
    getattr(left, kind)(right, joiner, windows).to(OUT)
    d = drive(b.build(), **config)
    pipes = {LEFT: d.create_input_topic(LEFT, L, S), RIGHT: d.create_input_topic(RIGHT, L, S)}
    out = d.create_output_topic(OUT, L, S)
    for ts, lv, rv, expected in rows:
        topic, value = (LEFT, lv) if lv is not ... else (RIGHT, rv)
        key = K if not isinstance(value, tuple) else value[0]
        value = value if not isinstance(value, tuple) else value[1]
        pipes[topic].pipe_input(key, value, ts)
        got = [(r.value, r.timestamp) for r in out.read_records_to_list()]
        assert got == expected, f"row at ts={ts}: {got} != {expected}"


# Kafka Streams developer guide, "Semantics of stream-stream joins": window 15 (s in the
# docs, ms here) with grace 5. Kafka closes a window only once stream time is *past*
# ``ts + window + grace`` (KStreamKStreamJoin.isOuterJoinWindowOpen uses >=), so each of
# the docs' "..." rows (40, 60, 80, 100) is placed 1 ms after the boundary it closes.
W = JoinWindows.of_time_difference_and_grace(15, 5)
_ = ...
DOC_ROWS: list[tuple[int, Any, Any, dict[str, list[str]]]] = [
    (1, None, _, {}),
    (2, _, None, {}),
    (3, "A", _, {}),
    (4, _, "a", {"all": ["[A, a]"]}),
    (5, "B", _, {"all": ["[B, a]"]}),
    (6, _, "b", {"all": ["[A, b]", "[B, b]"]}),
    (7, None, _, {}),
    (8, _, None, {}),
    (9, "C", _, {"all": ["[C, a]", "[C, b]"]}),
    (10, _, "c", {"all": ["[A, c]", "[B, c]", "[C, c]"]}),
    (11, _, None, {}),
    (12, None, _, {}),
    (13, _, None, {}),
    (14, _, "d", {"all": ["[A, d]", "[B, d]", "[C, d]"]}),
    (15, "D", _, {"all": ["[D, a]", "[D, b]", "[D, c]", "[D, d]"]}),
    (40, "E", _, {}),
    (61, "F", _, {"left_join": ["[E, None]"], "outer_join": ["[E, None]"]}),
    (82, _, "f", {"left_join": ["[F, None]"], "outer_join": ["[F, None]"]}),
    (103, "G", _, {"outer_join": ["[None, f]"]}),
]
# the timestamp of each output: max of both sides for joined pairs, the record's own one
# for a non-joined record emitted late
DOC_TS = {"[E, None]": 40, "[F, None]": 61, "[None, f]": 82}


def _expected(kind: str, ts: int, cell: dict[str, list[str]]) -> list[tuple[str, int]]:
    values = cell.get("all", cell.get(kind, []))
    return [(v, DOC_TS.get(v, ts)) for v in values]


@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_docs_semantics_table(drive: Any, kind: str) -> None:
    rows = [(ts, lv, rv, _expected(kind, ts, cell)) for ts, lv, rv, cell in DOC_ROWS]
    run(drive, kind, W, rows)


def test_window_closes_only_past_end_plus_grace(drive: Any) -> None:
    run(
        drive,
        "left_join",
        W,
        [
            (40, "E", _, []),
            (60, "F", _, []),  # 40 + 15 + 5 = 60: still open
            (61, "G", _, [("[E, None]", 40)]),
        ],
    )


def test_joined_record_is_never_emitted_alone(drive: Any) -> None:
    # the parked A is removed by its match; a late non-joined result never follows
    run(
        drive,
        "outer_join",
        W,
        [
            (3, "A", _, []),
            (10, _, "a", [("[A, a]", 10)]),
            (100, "Z", _, []),
            (200, "Y", _, [("[Z, None]", 100)]),
        ],
    )


# Kafka's StreamStreamJoinIntegrationTest (inputWithoutOutOfOrderData, window 10 s, grace
# 24 h): same key except the last two rows, whose null keys pass left/outer joins (KIP-962)
NULL_KEY = (None, "E"), (None, "e")
IT_ROWS = [
    (1, None, _), (2, _, None), (3, "A", _), (4, _, "a"), (5, "B", _), (6, _, "b"),
    (7, None, _), (8, _, None), (9, "C", _), (10, _, "c"), (11, _, None), (12, None, _),
    (13, _, None), (14, _, "d"), (15, "D", _), (16, NULL_KEY[0], _), (17, _, NULL_KEY[1]),
]  # fmt: skip
IT_JOINED = {
    4: ["A-a"], 5: ["B-a"], 6: ["A-b", "B-b"], 9: ["C-a", "C-b"], 10: ["A-c", "B-c", "C-c"],
    14: ["A-d", "B-d", "C-d"], 15: ["D-a", "D-b", "D-c", "D-d"],
}  # fmt: skip


@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_integration_input_with_null_keys(drive: Any, kind: str) -> None:
    b = StreamsBuilder()
    left, right = b.stream(LEFT), b.stream(RIGHT)
    w = JoinWindows.of_time_difference_and_grace(timedelta(seconds=10), timedelta(hours=24))
    getattr(left, kind)(right, lambda a, c: f"{a}-{c}", w).to(OUT)
    d = drive(b.build())
    pipes = {LEFT: d.create_input_topic(LEFT, L, S), RIGHT: d.create_input_topic(RIGHT, L, S)}
    out = d.create_output_topic(OUT, L, S)
    extra = {16: [(None, "E-None")] if kind != "join" else []}
    extra[17] = [(None, "None-e")] if kind == "outer_join" else []
    for ts, lv, rv in IT_ROWS:
        topic, value = (LEFT, lv) if lv is not ... else (RIGHT, rv)
        key, value = value if isinstance(value, tuple) else (K, value)
        pipes[topic].pipe_input(key, value, ts)
        expected: list[tuple[int | None, str, int]] = [(K, v, ts) for v in IT_JOINED.get(ts, [])]
        expected += [(k, v, ts) for k, v in extra.get(ts, [])]
        got = [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]
        assert got == expected, f"ts={ts}"


def test_grace_period_keeps_or_drops_out_of_order_partners(drive: Any) -> None:
    def late_right(grace: int) -> list[Any]:
        b = StreamsBuilder()
        w = JoinWindows.of_time_difference_and_grace(10, grace)
        b.stream(LEFT).join(b.stream(RIGHT), joiner, w).to(OUT)
        d = drive(b.build())
        left, right = d.create_input_topic(LEFT, L, S), d.create_input_topic(RIGHT, L, S)
        left.pipe_input(K, "A", 0)
        left.pipe_input(K, "B", 30)  # left store time 30: A expires once 30 > 0 + 20 + grace
        right.pipe_input(K, "a", 5)  # out of order: within 10 of A only
        result: list[Any] = d.create_output_topic(OUT, L, S).read_key_values_to_list()
        return result

    assert late_right(grace=5) == []  # retention 25: A dropped from the store
    assert late_right(grace=20) == [(K, "[A, a]")]  # retention 40: A still joinable


def test_late_left_record_is_emitted_at_once_when_its_window_already_closed(drive: Any) -> None:
    run(
        drive,
        "left_join",
        JoinWindows.of_time_difference_without_grace(10),
        [
            (100, "A", _, []),
            (50, "X", _, [("[X, None]", 50)]),  # 50 + 10 < stream time 100: no waiting
        ],
    )


def test_asymmetric_windows_and_key_joiner(drive: Any) -> None:
    b = StreamsBuilder()
    w = JoinWindows.of_time_difference_without_grace(0).after(timedelta(milliseconds=10))
    b.stream(LEFT).join(b.stream(RIGHT), lambda k, lv, rv: f"{k}:{lv}{rv}", w, with_key=True).to(
        OUT
    )
    d = drive(b.build())
    left, right = d.create_input_topic(LEFT, S, S), d.create_input_topic(RIGHT, S, S)
    left.pipe_input("k", "A", 100)
    right.pipe_input("k", "x", 95)  # before A: outside [100, 110]
    right.pipe_input("k", "y", 110)
    assert d.create_output_topic(OUT, S, S).read_key_values_to_list() == [("k", "k:Ay")]


def test_names_stores_and_stream_joined(drive: Any) -> None:
    b = StreamsBuilder()
    w = JoinWindows.of_time_difference_without_grace(10)
    b.stream(LEFT).outer_join(b.stream(RIGHT), joiner, w).to(OUT)
    t = b.build()
    assert [n for n in t.nodes if "JOIN" in n or "OUTER" in n or "WINDOWED" in n] == [
        "KSTREAM-WINDOWED-0000000002",
        "KSTREAM-WINDOWED-0000000003",
        "KSTREAM-OUTERTHIS-0000000004",
        "KSTREAM-OUTEROTHER-0000000005",
    ]
    assert set(t.stores) == {
        "KSTREAM-OUTERTHIS-0000000004-store",
        "KSTREAM-OUTEROTHER-0000000005-store",
        "KSTREAM-OUTERSHARED-0000000004-store",
    }
    assert "KSTREAM-MERGE-0000000006" in t.nodes
    assert len(t.subtopologies) == 1

    b = StreamsBuilder()
    sj = StreamJoined.with_(L, S, S).with_name("j").with_store_name("s")
    b.stream(LEFT).left_join(b.stream(RIGHT), joiner, w, sj).to(OUT)
    t = b.build()
    assert {"j-this-windowed", "j-other-windowed", "j-this-join", "j-outer-other-join"} <= set(
        t.nodes
    )
    assert set(t.stores) == {
        "s-this-join-store",
        "s-outer-other-join-store",
        "s-left-shared-join-store",
    }
    store = t.stores["s-this-join-store"].builder(drive(t).config)
    assert store.changelog_config()["cleanup.policy"] == "delete"  # type: ignore[attr-defined]


def test_key_change_before_join_repartitions(drive: Any) -> None:
    b = StreamsBuilder()
    w = JoinWindows.of_time_difference_without_grace(10)
    rekeyed = b.stream(LEFT).select_key(lambda k, v: v[0])
    rekeyed.join(b.stream(RIGHT), joiner, w).to(OUT, None)
    t = b.build()
    assert list(t.repartition_topics) == ["KSTREAM-KEY-SELECT-0000000001-repartition"]
    assert len(t.subtopologies) == 2
    d = drive(t)
    d.create_input_topic(LEFT, S, S).pipe_input("ignored", "kA", 1)
    d.create_input_topic(RIGHT, S, S).pipe_input("k", "r", 2)
    assert d.create_output_topic(OUT, S, S).read_key_values_to_list() == [("k", "[kA, r]")]


def test_join_needs_join_windows() -> None:
    b = StreamsBuilder()
    with pytest.raises(TopologyError, match="JoinWindows"):
        b.stream(LEFT).join(b.stream(RIGHT), joiner, 10)  # type: ignore[call-overload]


def test_join_windows_validation() -> None:
    with pytest.raises(ValueError, match="negative"):
        JoinWindows.of_time_difference_without_grace(-1)
    with pytest.raises(ValueError, match="before \\+ after"):
        JoinWindows.of_time_difference_without_grace(5).before(-6)
    assert JoinWindows.of_time_difference_with_no_grace(7).retention_ms == 14
