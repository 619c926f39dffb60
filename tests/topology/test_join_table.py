"""Stream-table, stream-global-table and table-table joins through the TopologyTestDriver:
Kafka's documented semantics tables row by row, Kafka's integration-test input, getters
of derived tables, materialized results and co-partitioning."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from common.errors import TopologyError
from tests.topology.conftest import I, L, S
from topology import Consumed, Joined, JoinWindows, Materialized, Produced, StreamsBuilder

LEFT, RIGHT, OUT = "left", "right", "out"
K = "k"  # every record has the same key, as in the docs' tables
_ = ...


def joiner(left: Any, right: Any) -> str:
    return f"[{left}, {right}]"


def pipe_rows(d: Any, rows: list[Any], check: Any) -> None:
    pipes = {LEFT: d.create_input_topic(LEFT, S, S), RIGHT: d.create_input_topic(RIGHT, S, S)}
    out = d.create_output_topic(OUT, S, S)
    for row in rows:
        ts, lv, rv = row[:3]
        topic, value = (LEFT, lv) if lv is not ... else (RIGHT, rv)
        pipes[topic].pipe_input(K, value, ts)
        check(row, [(r.value, r.timestamp) for r in out.read_records_to_list()])


# Kafka Streams developer guide, "Semantics of stream-table joins" (left: KStream, right:
# KTable). Output timestamps are the stream record's.
STREAM_TABLE_DOC = [
    (1, None, _, [], []),
    (2, _, None, [], []),
    (3, "A", _, [], ["[A, None]"]),
    (4, _, "a", [], []),
    (5, "B", _, ["[B, a]"], ["[B, a]"]),
    (6, _, "b", [], []),
    (7, None, _, [], []),
    (8, _, None, [], []),
    (9, "C", _, [], ["[C, None]"]),
    (10, _, "c", [], []),
    (11, _, None, [], []),
    (12, None, _, [], []),
    (13, _, None, [], []),
    (14, _, "d", [], []),
    (15, "D", _, ["[D, d]"], ["[D, d]"]),
]


@pytest.mark.parametrize("kind", ["join", "left_join"])
def test_stream_table_docs_semantics_table(drive: Any, kind: str) -> None:
    b = StreamsBuilder()
    getattr(b.stream(LEFT), kind)(b.table(RIGHT), joiner).to(OUT)
    column = 3 if kind == "join" else 4

    def check(row: Any, got: list[Any]) -> None:
        assert got == [(v, row[0]) for v in row[column]], f"row at ts={row[0]}"

    pipe_rows(drive(b.build()), STREAM_TABLE_DOC, check)


# "Semantics of table-table equi-joins": (ts, left, right, inner, left join, outer join);
# a None output is a deletion (tombstone) of the joined row.
TABLE_TABLE_DOC = [
    (1, None, _, [], [], []),
    (2, _, None, [], [], []),
    (3, "A", _, [], ["[A, None]"], ["[A, None]"]),
    (4, _, "a", ["[A, a]"], ["[A, a]"], ["[A, a]"]),
    (5, "B", _, ["[B, a]"], ["[B, a]"], ["[B, a]"]),
    (6, _, "b", ["[B, b]"], ["[B, b]"], ["[B, b]"]),
    (7, None, _, [None], [None], ["[None, b]"]),
    (8, _, None, [], [], [None]),
    (9, "C", _, [], ["[C, None]"], ["[C, None]"]),
    (10, _, "c", ["[C, c]"], ["[C, c]"], ["[C, c]"]),
    (11, _, None, [None], ["[C, None]"], ["[C, None]"]),
    (12, None, _, [], [None], [None]),
    (13, _, None, [], [], []),
    (14, _, "d", [], [], ["[None, d]"]),
    (15, "D", _, ["[D, d]"], ["[D, d]"], ["[D, d]"]),
]


@pytest.mark.parametrize(("kind", "column"), [("join", 3), ("left_join", 4), ("outer_join", 5)])
@pytest.mark.parametrize("materialized", [False, True])
def test_table_table_docs_semantics_table(
    drive: Any, kind: str, column: int, materialized: bool
) -> None:
    b = StreamsBuilder()
    mat = Materialized.as_("joined").with_caching_disabled() if materialized else None
    getattr(b.table(LEFT), kind)(b.table(RIGHT), joiner, mat).to_stream().to(OUT)
    d = drive(b.build())

    def check(row: Any, got: list[Any]) -> None:
        assert got == [(v, row[0]) for v in row[column]], f"row at ts={row[0]}"

    pipe_rows(d, TABLE_TABLE_DOC, check)
    if materialized:
        assert dict(d.get_key_value_store("joined").all()) == {K: "[D, d]"}


# Kafka's TableTableJoinIntegrationTest input (with out-of-order rows) and its expected
# output without caching: (topic, value, ts) -> [(joined, ts)] per join kind.
IT_INPUT = [
    (LEFT, None, 1), (RIGHT, None, 2), (LEFT, "A", 3), (RIGHT, "a", 4), (LEFT, "B", 5),
    (RIGHT, "b", 6), (LEFT, None, 7), (RIGHT, None, 8), (LEFT, "C", 9), (RIGHT, "c", 10),
    (RIGHT, None, 11), (LEFT, None, 12), (RIGHT, None, 13), (RIGHT, "d", 7), (LEFT, "D", 6),
    (LEFT, None, 2), (RIGHT, None, 3), (RIGHT, "e", 14), (LEFT, "E", 15), (LEFT, None, 10),
    (RIGHT, None, 9), (LEFT, "F", 4), (RIGHT, "f", 3),
]  # fmt: skip
N = None
IT_EXPECTED = {
    "join": [
        [], [], [], [("A-a", 4)], [("B-a", 5)], [("B-b", 6)], [(N, 7)], [], [], [("C-c", 10)],
        [(N, 11)], [], [], [], [("D-d", 7)], [(N, 7)], [], [], [("E-e", 15)], [(N, 14)], [], [],
        [("F-f", 4)],
    ],
    "left_join": [
        [], [], [("A-None", 3)], [("A-a", 4)], [("B-a", 5)], [("B-b", 6)], [(N, 7)], [],
        [("C-None", 9)], [("C-c", 10)], [("C-None", 11)], [(N, 12)], [], [], [("D-d", 7)],
        [(N, 7)], [], [], [("E-e", 15)], [(N, 14)], [], [("F-None", 4)], [("F-f", 4)],
    ],
    "outer_join": [
        [], [], [("A-None", 3)], [("A-a", 4)], [("B-a", 5)], [("B-b", 6)], [("None-b", 7)],
        [(N, 8)], [("C-None", 9)], [("C-c", 10)], [("C-None", 11)], [(N, 12)], [],
        [("None-d", 7)], [("D-d", 7)], [("None-d", 7)], [(N, 3)], [("None-e", 14)],
        [("E-e", 15)], [("None-e", 14)], [(N, 9)], [("F-None", 4)], [("F-f", 4)],
    ],
}  # fmt: skip


@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_table_table_integration_input_with_out_of_order_data(drive: Any, kind: str) -> None:
    b = StreamsBuilder()
    no_cache = Materialized.as_("l").with_caching_disabled()
    left = b.table(LEFT, materialized=no_cache)
    right = b.table(RIGHT, materialized=Materialized.as_("r").with_caching_disabled())
    mat = Materialized.as_("store").with_caching_disabled()
    getattr(left, kind)(right, lambda a, c: f"{a}-{c}", mat).to_stream().to(OUT)
    d = drive(b.build())
    pipes = {LEFT: d.create_input_topic(LEFT, S, S), RIGHT: d.create_input_topic(RIGHT, S, S)}
    out = d.create_output_topic(OUT, S, S)
    for (topic, value, ts), expected in zip(IT_INPUT, IT_EXPECTED[kind], strict=True):
        pipes[topic].pipe_input(K, value, ts)
        got = [(r.value, r.timestamp) for r in out.read_records_to_list()]
        assert got == expected, f"{topic} {value} @ {ts}"
    assert d.get_timestamped_key_value_store("store").get(K) == ("F-f", 4)


def test_stream_table_left_join_keeps_null_key_records(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream(LEFT).left_join(b.table(RIGHT), joiner).to(OUT)
    b2 = StreamsBuilder()
    b2.stream(LEFT).join(b2.table(RIGHT), joiner).to(OUT)
    for builder, expected in ((b, [(None, "[A, None]")]), (b2, [])):
        d = drive(builder.build())
        d.create_input_topic(LEFT, S, S).pipe_input(None, "A", 1)
        assert d.create_output_topic(OUT, S, S).read_key_values_to_list() == expected


def test_stream_table_join_with_key_and_derived_table(drive: Any) -> None:
    b = StreamsBuilder()
    prices = (
        b.table(RIGHT, Consumed.with_(S, I)).filter(lambda k, v: v > 0).map_values(lambda v: v * 10)
    )
    b.stream(LEFT).join(prices, lambda k, v, p: f"{k}:{v}={p}", Joined.as_("j"), with_key=True).to(
        OUT
    )
    t = b.build()
    assert "j" in t.nodes and len(t.subtopologies) == 1
    d = drive(t)
    table, stream = d.create_input_topic(RIGHT, S, I), d.create_input_topic(LEFT, S, S)
    table.pipe_input("x", 2)
    table.pipe_input("y", -1)  # filtered out: the derived table has no y
    stream.pipe_input("x", "buy")
    stream.pipe_input("y", "buy")
    assert d.create_output_topic(OUT, S, S).read_key_values_to_list() == [("x", "x:buy=20")]


def test_a_stream_record_without_value_never_reads_the_table(drive: Any) -> None:
    """A null-value stream record is dropped before any lookup (under both engines): a
    derived table's function never runs for it."""
    b = StreamsBuilder()
    looked_up: list[str] = []
    table = b.table(RIGHT, Consumed.with_(S, I)).map_values(
        lambda k, v: looked_up.append(k) or v, with_key=True
    )
    b.stream(LEFT).left_join(table, joiner).to(OUT)
    d = drive(b.build())
    d.create_input_topic(RIGHT, S, I).pipe_input("x", 1)
    looked_up.clear()  # the table's own update ran it
    stream = d.create_input_topic(LEFT, S, S)
    stream.pipe_input("x", None)
    assert looked_up == []
    stream.pipe_input("x", "buy")
    assert looked_up == ["x"]
    assert d.create_output_topic(OUT, S, S).read_key_values_to_list() == [("x", "[buy, 1]")]


def test_stream_table_join_repartitions_a_rekeyed_stream(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream(LEFT).select_key(lambda k, v: v).join(b.table(RIGHT), joiner).to(OUT)
    t = b.build()
    assert list(t.repartition_topics) == ["KSTREAM-KEY-SELECT-0000000001-repartition"]
    d = drive(t)
    d.create_input_topic(RIGHT, S, S).pipe_input("a", "alpha")
    d.create_input_topic(LEFT, S, S).pipe_input("ignored", "a", 5)
    assert d.create_output_topic(OUT, S, S).read_key_values_to_list() == [("a", "[a, alpha]")]


@pytest.mark.parametrize("kind", ["join", "left_join"])
def test_stream_global_table_join_maps_to_the_table_key(drive: Any, kind: str) -> None:
    b = StreamsBuilder()
    regions = b.global_table("regions", materialized=Materialized.as_("regions"))
    orders = b.stream("orders", Consumed.with_(S, S))
    getattr(orders, kind)(regions, lambda k, v: v.split(":")[0], joiner).to(OUT)
    d = drive(b.build())
    d.create_input_topic("regions", S, S).pipe_input("eu", "Europe")
    o = d.create_input_topic("orders", S, S)
    o.pipe_input("o1", "eu:book", 1)
    o.pipe_input("o2", "us:pen", 2)
    d.create_input_topic("regions", S, S).pipe_input("us", "USA")  # table updates: no output
    o.pipe_input("o3", "us:ink", 3)
    o.pipe_input(None, "eu:cup", 4)  # a null stream key does not matter: the mapper decides
    o.pipe_input("o5", "", 5)  # mapped to "": no such region
    expected: list[tuple[str | None, str]] = [("o1", "[eu:book, Europe]")]
    if kind == "left_join":
        expected.append(("o2", "[us:pen, None]"))
    expected += [("o3", "[us:ink, USA]"), (None, "[eu:cup, Europe]")]
    if kind == "left_join":
        expected.append(("o5", "[, None]"))
    assert d.create_output_topic(OUT, S, S).read_key_values_to_list() == expected
    assert "KSTREAM-LEFTJOIN-0000000003" in b.build().nodes  # Kafka's name for both kinds


def test_table_table_names_and_materialized_result(drive: Any) -> None:
    b = StreamsBuilder()
    left, right = b.table(LEFT, Consumed.with_(S, I)), b.table(RIGHT, Consumed.with_(S, I))
    summed = left.join(right, lambda a, c: a + c, Materialized.as_("sum").with_value_serde(I))
    summed.to_stream().to(OUT, Produced.with_(S, I))
    t = b.build()
    assert {"KTABLE-MERGE-0000000006", "KTABLE-JOINTHIS-0000000007"} <= set(t.nodes)
    assert "KTABLE-JOINOTHER-0000000008" in t.nodes and "sum" in t.stores
    d = drive(t)
    d.create_input_topic(LEFT, S, I).pipe_input("a", 1, 10)
    d.create_input_topic(RIGHT, S, I).pipe_input("a", 2, 5)
    assert d.create_output_topic(OUT, S, I).read_records_to_list()[0].timestamp == 10
    assert d.get_key_value_store("sum").get("a") == 3


def test_chained_joins_and_group_by_on_join_result(drive: Any) -> None:
    b = StreamsBuilder()
    a, c, e = b.table("a"), b.table("c"), b.table("e")
    ac = a.left_join(c, joiner)  # not materialized: the next join reads it through a view
    ac.join(e, joiner).to_stream().to(OUT)
    counts = ac.group_by(lambda k, v: (v, v)).count(Materialized.as_("n"))
    counts.to_stream().to("counts", Produced.with_(S, L))
    d = drive(b.build())
    d.create_input_topic("a", S, S).pipe_input("k", "A")
    d.create_input_topic("e", S, S).pipe_input("k", "E")
    d.create_input_topic("c", S, S).pipe_input("k", "C")
    assert d.create_output_topic(OUT, S, S).read_key_values_to_list() == [
        ("k", "[[A, None], E]"),
        ("k", "[[A, C], E]"),
    ]
    assert d.create_output_topic("counts", S, L).read_key_values_to_list() == [
        ("[A, None]", 1),
        ("[A, None]", 0),
        ("[A, C]", 1),
    ]


def test_joins_require_copartitioned_inputs() -> None:
    b = StreamsBuilder()
    b.stream(LEFT).join(b.table(RIGHT), joiner).to(OUT)
    t = b.build()
    t.check_copartitioning({LEFT: 3, RIGHT: 3})
    with pytest.raises(TopologyError, match="Processor KSTREAM-JOIN-0000000004: .* not co-part"):
        t.check_copartitioning({LEFT: 3, RIGHT: 2})

    b = StreamsBuilder()
    b.table(LEFT).outer_join(b.table(RIGHT), joiner).to_stream().to(OUT)
    with pytest.raises(TopologyError, match="Processor KTABLE-JOINTHIS-0000000007"):
        b.build().check_copartitioning({LEFT: 1, RIGHT: 4})

    b = StreamsBuilder()
    w = JoinWindows.of_time_difference_without_grace(timedelta(seconds=1))
    b.stream(LEFT).left_join(b.stream(RIGHT), joiner, w).to(OUT)
    with pytest.raises(TopologyError, match="Processor KSTREAM-JOINTHIS-0000000004"):
        b.build().check_copartitioning({LEFT: 2, RIGHT: 4})

    b = StreamsBuilder()  # after a repartition the partition count is the join's own choice
    b.stream(LEFT).select_key(lambda k, v: v).join(b.table(RIGHT), joiner).to(OUT)
    b.build().check_copartitioning({LEFT: 5, RIGHT: 4})


def test_versioned_grace_is_refused() -> None:
    b = StreamsBuilder()
    with pytest.raises(TopologyError, match="versioned"):
        b.stream(LEFT).join(b.table(RIGHT), joiner, Joined().with_grace_period(10))
