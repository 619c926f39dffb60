"""Kafka's ``KTableKTableForeignKeyJoinIntegrationTest``, its versioned-only scenario: an
out-of-order update (older than its key's latest version) of a versioned table is not
joined (KIP-914), of a table that is not versioned it is.

The topology, the runs and the cases are those of :mod:`test_ktable_fk_join_integration`;
the cases here are Kafka's ``versionedData`` (left join or inner, materialized or not,
each table versioned or not, no re-join).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.test_ktable_fk_join_integration import (
    BASE,
    VERSIONED_DATA,
    Case,
    _Run,
    case_id,
)


def _subscriptions(r: _Run) -> Any:
    """The join's subscription store, keyed by ``(foreign key, primary key)``."""
    [name] = [n for n in r.d.get_all_state_stores() if "SUBSCRIPTION-STATE-STORE" in n]
    return r.d.get_key_value_store(name)


@pytest.mark.parametrize("case", VERSIONED_DATA, ids=case_id)
def test_should_ignore_out_of_order_records_iff_versioned(drive: Any, case: Case) -> None:
    """KTableKTableForeignKeyJoinIntegrationTest.shouldIgnoreOutOfOrderRecordsIffVersioned"""
    r = _Run(drive, case)
    r.right.pipe_input("rhs1", "rhsValue1", BASE + 4)
    r.check({})
    r.left.pipe_input("lhs1", "lhsValue1|rhs1", BASE + 3)  # before the right row: joined
    r.left.pipe_input("lhs2", "lhsValue2|rhs1", BASE + 5)
    r.check({"lhs1": "(lhsValue1|rhs1,rhsValue1)", "lhs2": "(lhsValue2|rhs1,rhsValue1)"})
    r.left.pipe_input("lhs2", None, BASE + 6)  # the latest left value becomes null
    lhs1 = {"lhs1": "(lhsValue1|rhs1,rhsValue1)"}
    r.check({"lhs2": None}, lhs1)

    # out-of-order left updates and a left tombstone: dropped iff the left is versioned
    r.left.pipe_input("lhs1", "lhsValue1_ooo|rhs1", BASE + 2)
    r.left.pipe_input("lhs2", "lhsValue2_ooo|rhs1", BASE + 2)
    ooo = {"lhs1": "(lhsValue1_ooo|rhs1,rhsValue1)", "lhs2": "(lhsValue2_ooo|rhs1,rhsValue1)"}
    # (not Kafka's assertion: a versioned left table does not even subscribe the dropped
    # update, which the final join would otherwise drop as stale)
    assert (_subscriptions(r).get(("rhs1", "lhs2")) is None) is r.left_versioned
    if r.left_versioned:
        r.check({}, lhs1)
    else:
        r.check(ooo)
    r.left.pipe_input("lhs1", None, BASE + 2)
    if r.left_versioned:
        r.check({}, lhs1)
    else:
        r.check({"lhs1": None}, {"lhs2": "(lhsValue2_ooo|rhs1,rhsValue1)"})

    # newer left updates are always joined
    r.left.pipe_input("lhs1", "lhsValue1_new|rhs1", BASE + 8)
    r.left.pipe_input("lhs2", "lhsValue2_new|rhs1", BASE + 8)
    new = {"lhs1": "(lhsValue1_new|rhs1,rhsValue1)", "lhs2": "(lhsValue2_new|rhs1,rhsValue1)"}
    r.check(new)

    # an out-of-order right update and tombstone: dropped iff the right is versioned
    r.right.pipe_input("rhs1", "rhsValue1_ooo", BASE + 1)
    if r.right_versioned:
        r.check({}, new)
    else:
        r.check(
            {
                "lhs1": "(lhsValue1_new|rhs1,rhsValue1_ooo)",
                "lhs2": "(lhsValue2_new|rhs1,rhsValue1_ooo)",
            }
        )
    r.right.pipe_input("rhs1", None, BASE + 1)
    if r.right_versioned:
        r.check({}, new)
    elif r.left_join:
        r.check({"lhs1": "(lhsValue1_new|rhs1,null)", "lhs2": "(lhsValue2_new|rhs1,null)"})
    else:
        r.check({"lhs1": None, "lhs2": None}, {})

    # a newer right update is always joined
    r.right.pipe_input("rhs1", "rhsValue1_new", BASE + 6)
    r.check(
        {
            "lhs1": "(lhsValue1_new|rhs1,rhsValue1_new)",
            "lhs2": "(lhsValue2_new|rhs1,rhsValue1_new)",
        }
    )
