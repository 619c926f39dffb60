"""Kafka's ``KTableKTableForeignKeyJoinIntegrationTest``: foreign-key table joins through the
driver, inner and left, with the result materialized (queryable store ``store``) or not,
and re-joined with the left table or not.

Left values are ``"<value>|<foreign key>"``; the joiner writes ``(left,right)`` and the
re-joiner ``rejoin(joined,left)``, ``null`` for a missing side. Either table may be
versioned (``Materialized.as_`` a persistent versioned store, five minutes of history).
The cases are Kafka's ``testCases``: its unversioned ones (left join, materialized,
re-joined) and its ``versionedData`` (no re-join, each table versioned or not), each run
with the foreign key extracted from the value or from the key and the value (KIP-1104).
``topology.optimization``, Kafka's other parameter, is not rewritten (this project has no
optimizer). The versioned-only scenario is in ``test_ktable_fk_join_integration_versioned``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from statestores.stores import Stores
from tests.conformance.conftest import S
from topology import Consumed, ForeignKeyExtractor, Materialized, StreamsBuilder

LEFT_TABLE, RIGHT_TABLE = "left_table", "right_table"
OUTPUT, REJOIN_OUTPUT = "output-topic", "rejoin-output-topic"
BASE = 1_700_000_000_000  # Kafka's MockTime start: any base timestamp

HISTORY = 300_000  # Kafka's Duration.ofMinutes(5)
BOTH = (True, False)
#: (left join, materialized, re-join, left versioned, right versioned): Kafka's ``data()``
#: (unversioned) then its ``versionedData()`` (no re-join), without the duplicates.
Case = tuple[bool, bool, bool, bool, bool]
_DATA: list[Case] = [(lj, m, rj, False, False) for lj in BOTH for m in BOTH for rj in BOTH]
VERSIONED_DATA: list[Case] = [
    (lj, m, False, lv, rv) for lj in BOTH for m in BOTH for lv in BOTH for rv in BOTH
]
TEST_CASES: list[Case] = list(dict.fromkeys(_DATA + VERSIONED_DATA))
#: Kafka's ``testCasesWithoutLeftJoinArg``: the cases without their first argument.
LeftCase = tuple[bool, bool, bool, bool]
LEFT_CASES: list[LeftCase] = list(dict.fromkeys(case[1:] for case in TEST_CASES))


def case_id(case: tuple[bool, ...]) -> str:
    """``left-materialized-rejoin-versioned-unversioned`` (the left join flag optional)."""
    *head, lv, rv = case
    words = (("left", "inner"), ("materialized", "unmaterialized"), ("rejoin", "no-rejoin"))
    flags = [w[0] if flag else w[1] for w, flag in zip(words[3 - len(head) :], head, strict=True)]
    return "-".join([*flags, *("versioned" if v else "unversioned" for v in (lv, rv))])


def _java(value: Any) -> str:
    return "null" if value is None else str(value)


def _fk(value: str) -> str | None:
    return value.split("|")[1]


def _table(b: StreamsBuilder, topic: str, versioned: str | None) -> Any:
    """The table of ``topic``, in a versioned store of that name unless it is None."""
    if versioned is None:
        return b.table(topic, Consumed.with_(S, S))
    supplier = Stores.persistent_versioned_key_value_store(versioned, HISTORY)
    return b.table(topic, Consumed.with_(S, S), Materialized.as_(supplier))


def _topology(
    case: Case, extractor: Callable[[str], str | None] | ForeignKeyExtractor = _fk
) -> Any:
    left_join, materialized, rejoin, left_versioned, right_versioned = case
    b = StreamsBuilder()
    left = _table(b, LEFT_TABLE, "left" if left_versioned else None)
    right = _table(b, RIGHT_TABLE, "right" if right_versioned else None)
    # the cache would hide some of the needless tombstones the scenarios look at
    main = (
        Materialized.as_("store").with_value_serde(S)
        if materialized
        else Materialized.with_(None, S)
    ).with_caching_disabled()
    kind = "left_join" if left_join else "join"
    joined = getattr(left, kind)(
        right, extractor, lambda lv, rv: f"({_java(lv)},{_java(rv)})", main
    )
    joined.to_stream().to(OUTPUT)
    if rejoin:
        again = (
            Materialized.as_("store-rejoin").with_value_serde(S).with_caching_disabled()
            if materialized
            else Materialized.with_(None, S)
        )
        rejoined = getattr(joined, kind)(
            left, lambda jv, lv: f"rejoin({_java(jv)},{_java(lv)})", again
        )
        rejoined.to_stream().to(REJOIN_OUTPUT)
    return b.build()


class _Run:
    """A driver over the scenario's topology (see :func:`_topology`), with its topics."""

    def __init__(
        self,
        drive: Any,
        case: Case,
        extractor: Callable[[str], str | None] | ForeignKeyExtractor = _fk,
    ) -> None:
        self.left_join, self.materialized, self.rejoin = case[:3]
        self.left_versioned, self.right_versioned = case[3:]
        self.d = drive(_topology(case, extractor))
        self.left = self.d.create_input_topic(LEFT_TABLE, S, S)
        self.right = self.d.create_input_topic(RIGHT_TABLE, S, S)
        self.out = self.d.create_output_topic(OUTPUT, S, S)
        self.rejoined = self.d.create_output_topic(REJOIN_OUTPUT, S, S)

    def output(self) -> dict[str, str | None]:
        out: dict[str, str | None] = self.out.read_key_values_to_map()
        return out

    def check(self, output: dict[str, Any], stored: dict[str, Any] | None = None) -> None:
        """Assert the output (as a map, the last value per key) and, when materialized,
        the store (``stored``, default: the output)."""
        assert self.output() == output
        if self.materialized:
            store = self.d.get_key_value_store("store")
            assert dict(store.all()) == (output if stored is None else stored)


#: The foreign key read from the value alone, or through a ``ForeignKeyExtractor`` given
#: the key too (KIP-1104): the same results either way.
EXTRACTORS: dict[str, Callable[[str], str | None] | ForeignKeyExtractor] = {
    "function": _fk,
    "bi-function": ForeignKeyExtractor.from_bi_function(lambda key, value: _fk(value)),
}


@pytest.fixture(
    params=[
        pytest.param((case, kind), id=f"{case_id(case)}-{kind}")
        for case in TEST_CASES
        for kind in EXTRACTORS
    ]
)
def r(request: pytest.FixtureRequest, drive: Any) -> _Run:
    """A run of one of Kafka's ``testCases``, with the foreign key extracted from the
    value, or from the key and the value."""
    case, kind = request.param
    return _Run(drive, case, extractor=EXTRACTORS[kind])


def test_do_join_from_left_then_delete_left_entity(r: _Run) -> None:
    """KTableKTableForeignKeyJoinIntegrationTest.doJoinFromLeftThenDeleteLeftEntity"""
    r.right.pipe_input("rhs1", "rhsValue1", BASE)
    r.right.pipe_input("rhs2", "rhsValue2", BASE + 1)
    r.right.pipe_input("rhs3", "rhsValue3", BASE + 2)  # never referenced
    r.check({})
    assert r.rejoined.read_key_values_to_map() == {}
    r.left.pipe_input("lhs1", "lhsValue1|rhs1", BASE + 3)
    r.left.pipe_input("lhs2", "lhsValue2|rhs2", BASE + 4)
    joined = {"lhs1": "(lhsValue1|rhs1,rhsValue1)", "lhs2": "(lhsValue2|rhs2,rhsValue2)"}
    r.check(joined)
    if r.rejoin:
        assert r.rejoined.read_key_values_to_map() == {
            "lhs1": "rejoin((lhsValue1|rhs1,rhsValue1),lhsValue1|rhs1)",
            "lhs2": "rejoin((lhsValue2|rhs2,rhsValue2),lhsValue2|rhs2)",
        }
    r.left.pipe_input("lhs3", "lhsValue3|rhs1", BASE + 5)  # another reference to rhs1
    r.check(
        {"lhs3": "(lhsValue3|rhs1,rhsValue1)"}, {**joined, "lhs3": "(lhsValue3|rhs1,rhsValue1)"}
    )
    if r.rejoin:
        assert r.rejoined.read_key_values_to_map() == {
            "lhs3": "rejoin((lhsValue3|rhs1,rhsValue1),lhsValue3|rhs1)"
        }
    # deleting a left row propagates one deletion; the re-join ends with it too (its
    # re-join of the old result comes first, the deletion after)
    r.left.pipe_input("lhs1", None, BASE + 6)
    rest = {"lhs2": "(lhsValue2|rhs2,rhsValue2)", "lhs3": "(lhsValue3|rhs1,rhsValue1)"}
    r.check({"lhs1": None}, rest)
    if r.rejoin:
        assert r.rejoined.read_key_values_to_map() == {"lhs1": None}


def test_do_join_from_right_then_delete_right_entity(r: _Run) -> None:
    """KTableKTableForeignKeyJoinIntegrationTest.doJoinFromRightThenDeleteRightEntity"""
    r.left.pipe_input("lhs1", "lhsValue1|rhs1", BASE)
    r.left.pipe_input("lhs2", "lhsValue2|rhs2", BASE + 1)
    r.left.pipe_input("lhs3", "lhsValue3|rhs1", BASE + 2)
    unmatched = {
        "lhs1": "(lhsValue1|rhs1,null)",
        "lhs2": "(lhsValue2|rhs2,null)",
        "lhs3": "(lhsValue3|rhs1,null)",
    }
    r.check(unmatched if r.left_join else {})
    r.right.pipe_input("rhs1", "rhsValue1", BASE + 3)
    rhs1 = {"lhs1": "(lhsValue1|rhs1,rhsValue1)", "lhs3": "(lhsValue3|rhs1,rhsValue1)"}
    r.check(rhs1, {**unmatched, **rhs1} if r.left_join else rhs1)
    r.right.pipe_input("rhs2", "rhsValue2", BASE + 4)
    full = {**rhs1, "lhs2": "(lhsValue2|rhs2,rhsValue2)"}
    r.check({"lhs2": "(lhsValue2|rhs2,rhsValue2)"}, full)
    r.right.pipe_input("rhs3", "rhsValue3", BASE + 5)  # never referenced
    r.check({}, full)
    # deleting the right row updates every left row that references it
    r.right.pipe_input("rhs1", None, BASE + 6)
    if r.left_join:
        gone = {"lhs1": "(lhsValue1|rhs1,null)", "lhs3": "(lhsValue3|rhs1,null)"}
        r.check(gone, {**gone, "lhs2": "(lhsValue2|rhs2,rhsValue2)"})
    else:
        r.check({"lhs1": None, "lhs3": None}, {"lhs2": "(lhsValue2|rhs2,rhsValue2)"})


def test_should_emit_tombstone_when_deleting_non_joining_records(r: _Run) -> None:
    """KTableKTableForeignKeyJoinIntegrationTest.shouldEmitTombstoneWhenDeletingNonJoiningRecords"""
    r.left.pipe_input("lhs1", "lhsValue1|rhs1", BASE)
    r.check({"lhs1": "(lhsValue1|rhs1,null)"} if r.left_join else {})
    # an inner join cannot know whether it emitted a result: the tombstone is needless
    # there, necessary for the left join
    r.left.pipe_input("lhs1", None, BASE + 1)
    r.check({"lhs1": None}, {})
    r.left.pipe_input("lhs1", None, BASE + 2)  # deleting a missing row: nothing
    r.check({})


def test_should_not_emit_tombstones_when_deleting_non_existing_records(r: _Run) -> None:
    """KTableKTableForeignKeyJoinIntegrationTest.shouldNotEmitTombstonesWhenDeletingNonExistingRecords"""
    r.left.pipe_input("lhs1", None, BASE)
    r.check({})


def test_join_should_produce_nulls_when_value_has_non_matching_foreign_key(r: _Run) -> None:
    """KTableKTableForeignKeyJoinIntegrationTest.joinShouldProduceNullsWhenValueHasNonMatchingForeignKey"""

    def unmatched(value: str) -> None:
        half = f"({value},null)"
        r.check({"lhs1": half if r.left_join else None}, {"lhs1": half} if r.left_join else {})

    r.left.pipe_input("lhs1", "lhsValue1|rhs1", BASE)
    half = {"lhs1": "(lhsValue1|rhs1,null)"}
    r.check(half if r.left_join else {})
    # moving to another missing foreign key: a needless tombstone (inner), an update (left)
    r.left.pipe_input("lhs1", "lhsValue1|rhs2", BASE + 1)
    unmatched("lhsValue1|rhs2")
    r.left.pipe_input("lhs1", "lhsValue1|rhs3", BASE + 2)
    unmatched("lhsValue1|rhs3")
    # rhs1 is no longer referenced: no change
    r.right.pipe_input("rhs1", "rhsValue1", BASE + 3)
    r.check({}, {"lhs1": "(lhsValue1|rhs3,null)"} if r.left_join else {})
    r.left.pipe_input("lhs1", "lhsValue1|rhs1", BASE + 4)  # to an existing foreign key
    r.check({"lhs1": "(lhsValue1|rhs1,rhsValue1)"})
    r.left.pipe_input("lhs1", "lhsValue1|rhs2", BASE + 5)  # and away again
    unmatched("lhsValue1|rhs2")


def test_should_unsubscribe_old_foreign_key_if_left_side_is_updated(r: _Run) -> None:
    """KTableKTableForeignKeyJoinIntegrationTest.shouldUnsubscribeOldForeignKeyIfLeftSideIsUpdated"""
    r.right.pipe_input("rhs1", "rhsValue1", BASE)
    r.right.pipe_input("rhs2", "rhsValue2", BASE + 1)
    r.check({})
    r.left.pipe_input("lhs1", "lhsValue1|rhs1", BASE + 2)
    r.check({"lhs1": "(lhsValue1|rhs1,rhsValue1)"})
    r.left.pipe_input("lhs1", "lhsValue1|rhs2", BASE + 3)  # the foreign key changes
    r.check({"lhs1": "(lhsValue1|rhs2,rhsValue2)"})
    r.right.pipe_input("rhs1", "rhsValue1Delta", BASE + 4)  # the old foreign key: nothing
    r.check({}, {"lhs1": "(lhsValue1|rhs2,rhsValue2)"})


@pytest.mark.parametrize("case", LEFT_CASES, ids=case_id)
def test_should_emit_record_on_null_foreign_key_for_left_joins(drive: Any, case: LeftCase) -> None:
    """KTableKTableForeignKeyJoinIntegrationTest.shouldEmitRecordOnNullForeignKeyForLeftJoins"""
    r = _Run(drive, (True, *case), lambda v: None)
    r.left.pipe_input("lhs1", "lhsValue1|rhs1", BASE)
    r.check({"lhs1": "(lhsValue1|rhs1,null)"})


@pytest.mark.parametrize("case", LEFT_CASES, ids=case_id)
def test_should_emit_record_when_old_and_new_fk_differ(drive: Any, case: LeftCase) -> None:
    """KTableKTableForeignKeyJoinIntegrationTest.shouldEmitRecordWhenOldAndNewFkDiffer"""

    def extractor(value: str) -> str | None:
        fk = value.split("|")[1]
        return None if fk == "returnNull" else fk

    r = _Run(drive, (True, *case), extractor)
    [subscriptions] = [n for n in r.d.get_all_state_stores() if "SUBSCRIPTION-STATE-STORE" in n]
    store = r.d.get_key_value_store(subscriptions)
    r.left.pipe_input("lhs1", "lhsValue1|rhs1", BASE)
    r.check({"lhs1": "(lhsValue1|rhs1,null)"})
    assert store.get(("rhs1", "lhs1")) is not None
    r.left.pipe_input("lhs1", "lhsValue1|returnNull", BASE)  # the new foreign key is null
    r.check({"lhs1": "(lhsValue1|returnNull,null)"})
    assert store.get(("rhs1", "lhs1")) is None  # the old subscription is gone


def test_a_foreign_key_extractor_may_read_the_key(drive: Any) -> None:
    """KIP-1104 (``ForeignKeyExtractor.fromBiFunction``): the foreign key computed from the
    left row's key; a row whose extractor returns None joins nothing (inner join)."""
    extractor = ForeignKeyExtractor.from_bi_function(
        lambda key, value: None if value == "skip" else "rhs" + key[-1]
    )
    r = _Run(drive, (False, True, False, False, False), extractor=extractor)
    r.right.pipe_input("rhs1", "rhsValue1", BASE)
    r.left.pipe_input("lhs1", "any", BASE + 1)
    r.left.pipe_input("lhs2", "skip", BASE + 2)
    r.check({"lhs1": "(any,rhsValue1)"})
