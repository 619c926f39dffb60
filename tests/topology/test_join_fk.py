"""Foreign-key table-table joins (KIP-213) through the TopologyTestDriver: the developer
guide's semantics table row by row, stale responses, internal topics and names."""

from __future__ import annotations

from typing import Any

import pytest

from tests.topology.conftest import S
from topology import Materialized, StreamsBuilder
from topology.processors.join_fk_wire import FkSerdes, Response, ResponseSerde, murmur3_128

LEFT, RIGHT, OUT = "left", "right", "out"
_ = ...


def fk_of(value: str) -> str | None:
    """Left values are ``"<fk>"`` or ``"-"`` for a null foreign key."""
    return None if value == "-" else value


def show(left: str | None, right: str | None) -> str:
    return f"{None if left is None else fk_of(left)},{right}"


# Developer guide, "Semantics of table-table foreign-key joins": (left (K, extracted FK),
# right (FK, value), inner output, left-join output); outputs are (key, joined) and a None
# joined value is a deletion. In row 1 both tables get a record: the right one first.
FK_DOC: list[tuple[Any, Any, list[Any], list[Any]]] = [
    (("k", "1"), ("1", "foo"), [("k", "1,foo")], [("k", "1,foo")]),
    (("k", "2"), _, [("k", None)], [("k", "2,None")]),
    (("k", "3"), _, [("k", None)], [("k", "3,None")]),
    (_, ("3", "bar"), [("k", "3,bar")], [("k", "3,bar")]),
    (("k", "-"), _, [("k", None)], [("k", "None,None")]),
    (("k", "1"), _, [("k", "1,foo")], [("k", "1,foo")]),
    (("q", "10"), _, [], [("q", "10,None")]),
    (("r", "10"), _, [], [("r", "10,None")]),
    (_, ("10", "baz"), [("q", "10,baz"), ("r", "10,baz")], [("q", "10,baz"), ("r", "10,baz")]),
]


@pytest.mark.parametrize(("kind", "column"), [("join", 2), ("left_join", 3)])
def test_docs_semantics_table(drive: Any, kind: str, column: int) -> None:
    b = StreamsBuilder()
    result = getattr(b.table(LEFT), kind)(
        b.table(RIGHT), fk_of, show, Materialized.as_("fk").with_caching_disabled()
    )
    result.to_stream().to(OUT)
    d = drive(b.build())
    left, right = d.create_input_topic(LEFT, S, S), d.create_input_topic(RIGHT, S, S)
    out = d.create_output_topic(OUT, S, S)
    for offset, row in enumerate(FK_DOC, start=1):
        if row[1] is not ...:
            right.pipe_input(*row[1])
        if row[0] is not ...:
            left.pipe_input(*row[0])
        assert out.read_key_values_to_list() == row[column], f"offset {offset}"
    stored = dict(d.get_key_value_store("fk").all())
    assert stored == {"k": "1,foo", "q": "10,baz", "r": "10,baz"}


def test_deleting_rows_on_either_side(drive: Any) -> None:
    b = StreamsBuilder()
    b.table(LEFT).left_join(b.table(RIGHT), fk_of, show).to_stream().to(OUT)
    d = drive(b.build())
    left, right = d.create_input_topic(LEFT, S, S), d.create_input_topic(RIGHT, S, S)
    out = d.create_output_topic(OUT, S, S)
    right.pipe_input("1", "foo")
    left.pipe_input("k", "1")
    right.pipe_input("1", None)  # the foreign row goes: the left row stays, unmatched
    left.pipe_input("k", None)  # the left row goes: a deletion
    assert out.read_key_values_to_list() == [("k", "1,foo"), ("k", "1,None"), ("k", None)]


def test_stale_responses_are_dropped(drive: Any) -> None:
    # A response carries the hash of the left value it answers; the resolver drops it when
    # the left row has changed since (here: injected straight into the response topic).
    b = StreamsBuilder()
    b.table(LEFT).join(b.table(RIGHT), fk_of, show).to_stream().to(OUT)
    t = b.build()
    d = drive(t)
    d.create_input_topic(RIGHT, S, S).pipe_input("1", "foo")
    d.create_input_topic(LEFT, S, S).pipe_input("k", "1")
    topic = "app-" + next(x for x in t.repartition_topics if "RESPONSE" in x)
    wire = ResponseSerde(FkSerdes(S, S, S, S))
    for left_value in ("1", "2"):  # "1": k's current value; "2": a value k does not have
        raw = wire.serialize(topic, Response(murmur3_128(left_value.encode()), "bar"))
        d.pipe_raw(topic, b"k", raw, 5)
    assert d.create_output_topic(OUT, S, S).read_key_values_to_list() == [
        ("k", "1,foo"),
        ("k", "1,bar"),  # the fresh response only
    ]


def test_internal_topics_names_and_copartitioning(drive: Any) -> None:
    b = StreamsBuilder()
    b.table(LEFT).join(b.table(RIGHT), fk_of, show).to_stream().to(OUT)
    t = b.build()
    assert list(t.repartition_topics) == [
        "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic",
        "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic",
    ]
    assert "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010" in t.stores
    assert "KTABLE-FK-JOIN-OUTPUT-0000000018" in t.nodes
    assert len(t.subtopologies) == 2
    t.check_copartitioning({LEFT: 2, RIGHT: 3})  # the internal topics take each side's count
    d = drive(t)
    d.create_input_topic(RIGHT, S, S).pipe_input("1", "foo")
    d.create_input_topic(LEFT, S, S).pipe_input("k", "1")
    assert {
        "app-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic",
        "app-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic",
    } <= d.producer_topics()

    b = StreamsBuilder()
    b.table(LEFT).join(b.table(RIGHT), fk_of, show, named="fk").to_stream().to(OUT)
    assert list(b.build().repartition_topics) == [
        "fk-subscription-registration-topic",
        "fk-subscription-response-topic",
    ]


def test_murmur3_matches_the_reference_vectors() -> None:
    assert murmur3_128(b"hello", 0).hex() == "cbd8a7b341bd9b025b1e906a48ae1d19"
    fox = murmur3_128(b"The quick brown fox jumps over the lazy dog", 0)
    assert fox.hex() == "e34bbc7bbc071b6c7a433ca9c49a9347"
