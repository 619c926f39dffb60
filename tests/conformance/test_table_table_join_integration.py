"""Kafka's ``TableTableJoinIntegrationTest``, its versioned cases (KIP-914): table-table
joins whose left, right or both tables are materialized in versioned stores (5 minutes of
history), the result materialized in ``table-table-join-integration-test-store``.

The input is Kafka's ``AbstractJoinIntegrationTest.input``: 23 updates of one key on two
topics, some out of order. An out-of-order update of a versioned table is kept in its
history but is not its key's latest version: the join drops it (it neither joins nor
triggers a join), where an unversioned table applies it. Without a cache each update's
output is checked; with one (versioned stores have none, the unversioned side has) the
last output and the result store, as Kafka's test does.
"""

from __future__ import annotations

from typing import Any

import pytest

from statestores.stores import Stores
from tests.conformance.conftest import L, S
from topology import Consumed, Materialized, StreamsBuilder

LEFT, RIGHT, OUTPUT = "left", "right", "output"
STORE = "table-table-join-integration-test-store"
KEY = 0  # Kafka's ANY_UNIQUE_KEY
HISTORY = 300_000

#: ``(topic, value, timestamp)``: Kafka's ``input``.
INPUT: list[tuple[str, str | None, int]] = [
    (LEFT, None, 1),
    (RIGHT, None, 2),
    (LEFT, "A", 3),
    (RIGHT, "a", 4),
    (LEFT, "B", 5),
    (RIGHT, "b", 6),
    (LEFT, None, 7),
    (RIGHT, None, 8),
    (LEFT, "C", 9),
    (RIGHT, "c", 10),
    (RIGHT, None, 11),
    (LEFT, None, 12),
    (RIGHT, None, 13),
    (RIGHT, "d", 7),  # out of order, a null the latest
    (LEFT, "D", 6),
    (LEFT, None, 2),
    (RIGHT, None, 3),
    (RIGHT, "e", 14),
    (LEFT, "E", 15),
    (LEFT, None, 10),  # out of order, a value the latest
    (RIGHT, None, 9),
    (LEFT, "F", 4),
    (RIGHT, "f", 3),
]

Out = tuple[str | None, int] | None

#: The output of each input update (``None``: nothing) without a cache.
BOTH_VERSIONED: dict[str, list[Out]] = {
    "join": [
        None,
        None,
        None,
        ("A-a", 4),
        ("B-a", 5),
        ("B-b", 6),
        (None, 7),
        None,
        None,
        ("C-c", 10),
        (None, 11),
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        ("E-e", 15),
        None,
        None,
        None,
        None,
    ],
    "left_join": [
        None,
        None,
        ("A-null", 3),
        ("A-a", 4),
        ("B-a", 5),
        ("B-b", 6),
        (None, 7),
        None,
        ("C-null", 9),
        ("C-c", 10),
        ("C-null", 11),
        (None, 12),
        None,
        None,
        None,
        None,
        None,
        None,
        ("E-e", 15),
        None,
        None,
        None,
        None,
    ],
    "outer_join": [
        None,
        None,
        ("A-null", 3),
        ("A-a", 4),
        ("B-a", 5),
        ("B-b", 6),
        ("null-b", 7),
        (None, 8),
        ("C-null", 9),
        ("C-c", 10),
        ("C-null", 11),
        (None, 12),
        None,
        None,
        None,
        None,
        None,
        ("null-e", 14),
        ("E-e", 15),
        None,
        None,
        None,
        None,
    ],
}
LEFT_VERSIONED: dict[str, list[Out]] = {
    "join": [*BOTH_VERSIONED["join"][:19], None, (None, 15), None, ("E-f", 15)],
    "left_join": [*BOTH_VERSIONED["left_join"][:19], None, ("E-null", 15), None, ("E-f", 15)],
    "outer_join": [
        *BOTH_VERSIONED["outer_join"][:13],
        ("null-d", 7),
        None,
        None,
        (None, 3),
        ("null-e", 14),
        ("E-e", 15),
        None,
        ("E-null", 15),
        None,
        ("E-f", 15),
    ],
}
RIGHT_VERSIONED: dict[str, list[Out]] = {
    "join": [*BOTH_VERSIONED["join"][:19], (None, 14), None, ("F-e", 14), None],
    "left_join": [
        *BOTH_VERSIONED["left_join"][:14],
        ("D-null", 6),
        (None, 2),
        None,
        None,
        ("E-e", 15),
        (None, 14),
        None,
        ("F-e", 14),
        None,
    ],
    "outer_join": [
        *BOTH_VERSIONED["outer_join"][:14],
        ("D-null", 6),
        (None, 2),
        None,
        ("null-e", 14),
        ("E-e", 15),
        ("null-e", 14),
        None,
        ("F-e", 14),
        None,
    ],
}
CASES = {"both": BOTH_VERSIONED, "left-only": LEFT_VERSIONED, "right-only": RIGHT_VERSIONED}


def _java(value: str | None) -> str:
    return "null" if value is None else value


def _table(b: StreamsBuilder, topic: str, versioned: bool) -> Any:
    mat = (
        Materialized.as_(Stores.persistent_versioned_key_value_store(topic, HISTORY))
        if versioned
        else Materialized.as_(topic)
    )
    return b.table(topic, Consumed.with_(L, S), mat.with_logging_disabled())


def _driver(drive: Any, case: str, kind: str, cached: bool) -> Any:
    b = StreamsBuilder()
    left = _table(b, LEFT, case != "right-only")
    right = _table(b, RIGHT, case != "left-only")
    result = Materialized.as_(STORE).with_key_serde(L).with_value_serde(S)
    joined = getattr(left, kind)(
        right,
        lambda lv, rv: f"{_java(lv)}-{_java(rv)}",
        result.with_caching_disabled().with_logging_disabled(),
    )
    joined.to_stream().to(OUTPUT)
    cache = {} if cached else {"statestore.cache.max.bytes": 0}
    return drive(
        b.build(), **{"default.key.serde": "long", "default.value.serde": "string"}, **cache
    )


def _run(drive: Any, case: str, kind: str, cached: bool) -> list[list[tuple[Any, ...]]]:
    """Pipe the input; return each update's output ``(key, value, timestamp)`` records and
    check the result store holds the last output."""
    d = _driver(drive, case, kind, cached)
    topics = {t: d.create_input_topic(t, L, S) for t in (LEFT, RIGHT)}
    out = d.create_output_topic(OUTPUT, L, S)
    outputs = []
    for topic, value, ts in INPUT:
        topics[topic].pipe_input(KEY, value, ts)
        outputs.append([(r.key, r.value, r.timestamp) for r in out.read_records_to_list()])
    last = [o for o in outputs if o][-1][-1]
    assert d.get_key_value_store(STORE).get(KEY) == last[1]
    return outputs


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_uncached(drive: Any, case: str, kind: str) -> None:
    """TableTableJoinIntegrationTest.test{Inner,Left,Outer}WithVersionedStores,
    test{Inner,Left,Outer}WithLeftVersionedOnly, test{Inner,Left,Outer}WithRightVersionedOnly
    (cacheEnabled=false): every update's output."""
    expected = [[] if e is None else [(KEY, *e)] for e in CASES[case][kind]]
    assert _run(drive, case, kind, cached=False) == expected


@pytest.mark.parametrize(
    ("case", "final"),
    [("both", ("E-e", 15)), ("left-only", ("E-f", 15)), ("right-only", ("F-e", 14))],
)
@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_cached(drive: Any, case: str, kind: str, final: tuple[str, int]) -> None:
    """TableTableJoinIntegrationTest.test{Inner,Left,Outer}WithVersionedStores,
    ...WithLeftVersionedOnly, ...WithRightVersionedOnly (cacheEnabled=true): the last
    output and the result store (versioned stores have no cache: the same results)."""
    outputs = _run(drive, case, kind, cached=True)
    assert [o for o in outputs if o][-1][-1] == (KEY, *final)
