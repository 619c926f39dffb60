"""Parity of a stream-table join with a versioned table and a grace period (KIP-914,
KIP-923): orders wait in the join's buffer and are priced as of their timestamp, while
later prices keep arriving.

Inputs of the two topics are in timestamp order (strictly increasing), the order Kafka's
partition group processes them in. The versioned store's RocksDB layout is not its
changelog's, so the stores compared are the grace buffers (plain key-value stores); the
versioned table shows in the joined outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statestores.stores import Stores
from tests.parity.harness import Case, Snapshot, check_parity, rec
from topology import Joined, Materialized, StreamsBuilder, Topology


def _joiner(order: Any, price: Any) -> str:
    return f"{order}@{price}"


def _build() -> Topology:
    b = StreamsBuilder()
    store = Stores.persistent_versioned_key_value_store("prices", 1_000)
    prices = b.table("prices", materialized=Materialized.as_(store))
    orders = b.stream("orders")
    orders.join(prices, _joiner, Joined.as_("priced").with_grace_period(4)).to("joined")
    orders.left_join(prices, _joiner, Joined.as_("priced-left").with_grace_period(2)).to(
        "left-joined"
    )
    return b.build()


# (topic, key, value): one record per ms; prices change while orders wait in the buffers
ROWS = [
    ("prices", "x", "1"),
    ("orders", "x", "o1"),
    ("prices", "x", "2"),  # after o1: o1 keeps price 1 although it is joined later
    ("orders", "y", "o2"),  # no price for y yet
    ("prices", "y", "5"),
    ("orders", "x", "o3"),
    ("prices", "x", "3"),
    ("orders", "y", "o4"),
    ("prices", "y", None),  # deleted
    ("orders", "y", "o5"),
    ("orders", "z", "o6"),
    ("prices", "y", "6"),
    ("orders", "x", "o7"),
    ("prices", "x", "4"),
    ("orders", "y", "o8"),
    ("prices", "z", "9"),
    ("orders", "x", "o9"),
    ("orders", "z", "o10"),
    ("prices", "x", "5"),
    ("orders", "x", "o11"),
    ("orders", "y", "o12"),
    ("orders", "w", "o13"),
]


def _check(s: Snapshot) -> None:
    joined = s.values("joined")
    assert "o1@1" in joined and "o3@2" in joined, joined  # as of each order's time
    assert "o5@None" in s.values("left-joined")  # the price was deleted then


CASES = [
    Case(
        name=f"versioned-stream-table-join-with-grace-{n}",
        build=_build,
        inputs=[rec(t, k, v, i) for i, (t, k, v) in enumerate(ROWS)],
        outputs=("joined", "left-joined"),
        max_poll_records=n,
        stores=("priced-Buffer", "priced-left-Buffer"),
        check=_check,
    )
    for n in range(1, 6)
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_versioned_join_parity(case: Case, spark: Any, tmp_path: Path) -> None:
    check_parity(case, spark, str(tmp_path))
