"""Parity of joins: stream-stream inner/left/outer, stream-table, stream-global-table,
foreign-key and table-table joins.

Inputs of two topics read by one task are in timestamp order (strictly increasing), the
order Kafka's partition group processes them in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.parity.harness import Case, In, Snapshot, check_parity, rec
from topology import JoinWindows, Materialized, StreamsBuilder, Topology


def joiner(left: Any, right: Any) -> str:
    return f"{left}+{right}"


# (topic, key, value): one record per ms; stream time passes each window's close
SS_ROWS = [
    ("left", "a", "A1"),
    ("right", "a", "a1"),
    ("left", "b", "B1"),  # b never gets a right record
    ("left", "a", "A2"),
    ("right", "c", "c1"),  # c never gets a left record
    ("right", "a", "a2"),
    ("left", "d", "D1"),
    ("right", "d", "d1"),
    ("left", "a", "A3"),  # a2 is more than 6 ms before: no join
    ("right", "e", "e1"),
    ("left", "b", "B2"),
    ("right", "a", "a3"),
    ("left", "f", "F1"),
    ("right", "b", "b1"),
    ("left", "g", "G1"),
    ("right", "h", "h1"),
]


def _ss_inputs() -> list[In]:
    return [rec(t, k, v, 10 + 3 * i) for i, (t, k, v) in enumerate(SS_ROWS)]


def _stream_stream(kind: str) -> Any:
    def build() -> Topology:
        b = StreamsBuilder()
        left, right = b.stream("left"), b.stream("right")
        windows = JoinWindows.of_time_difference_and_grace(6, 3)
        getattr(left, kind)(right, joiner, windows).to("out")
        return b.build()

    return build


def _has(fragment: str) -> Any:
    def check(s: Snapshot) -> None:
        values = s.values("out")
        assert any("+" in v and "None" not in v for v in values), values
        assert any(fragment in v for v in values), values

    return check


SS_INNER = Case(
    name="stream-stream-inner-join",
    build=_stream_stream("join"),
    inputs=_ss_inputs(),
    outputs=("out",),
    max_poll_records=2,
    check=_has("A2+a2"),
)
SS_LEFT = Case(
    name="stream-stream-left-join",
    build=_stream_stream("left_join"),
    inputs=_ss_inputs(),
    outputs=("out",),
    max_poll_records=3,
    check=_has("B1+None"),
)
SS_OUTER = Case(
    name="stream-stream-outer-join",
    build=_stream_stream("outer_join"),
    inputs=_ss_inputs(),
    outputs=("out",),
    max_poll_records=5,
    check=_has("None+c1"),
)


def _stream_table() -> Topology:
    b = StreamsBuilder()
    prices = b.table("prices", materialized=Materialized.as_("prices"))
    orders = b.stream("orders")
    orders.join(prices, joiner).to("joined")
    orders.left_join(prices, joiner).to("left-joined")
    return b.build()


STREAM_TABLE = Case(
    name="stream-table-join",
    build=_stream_table,
    inputs=[
        rec(t, k, v, i)
        for i, (t, k, v) in enumerate(
            [
                ("orders", "x", "o1"),  # no price yet
                ("prices", "x", "1"),
                ("orders", "x", "o2"),
                ("prices", "y", "5"),
                ("orders", "y", "o3"),
                ("prices", "x", "2"),
                ("orders", "x", "o4"),
                ("prices", "y", None),  # deleted
                ("orders", "y", "o5"),
                ("orders", "z", "o6"),
            ]
        )
    ],
    outputs=("joined", "left-joined"),
    max_poll_records=4,
    check=lambda s: "o4+2" in s.values("joined") and "o5+None" in s.values("left-joined"),
)


def _global_table() -> Topology:
    b = StreamsBuilder()
    regions = b.global_table("regions", materialized=Materialized.as_("regions"))
    orders = b.stream("orders")
    orders.left_join(regions, lambda k, v: v.split(":")[0], joiner).to("out")
    return b.build()


GLOBAL_TABLE = Case(
    name="stream-global-table-join",
    build=_global_table,
    # the global table is filled first: on Spark it is brought up to date before tasks run
    inputs=[
        rec("regions", "eu", "Europe", 1),
        rec("regions", "us", "USA", 2),
        *[rec("orders", f"o{i}", f"{['eu', 'us', 'ap'][i % 3]}:{i}", 10 + i) for i in range(7)],
    ],
    outputs=("out",),
    stores=(),  # the only store is global: its source topic is its changelog
    max_poll_records=3,
    check=lambda s: "eu:0+Europe" in s.values("out") and "ap:2+None" in s.values("out"),
)


def _fk_join() -> Topology:
    b = StreamsBuilder()
    orders = b.table("orders", materialized=Materialized.as_("orders"))
    customers = b.table("customers", materialized=Materialized.as_("customers"))
    orders.left_join(customers, lambda v: v.split(":")[0], joiner).to_stream().to("out")
    return b.build()


FK_JOIN = Case(
    name="foreign-key-join",
    build=_fk_join,
    inputs=[
        rec(t, k, v, i)
        for i, (t, k, v) in enumerate(
            [
                ("customers", "c1", "Ann"),
                ("orders", "o1", "c1:book"),
                ("orders", "o2", "c2:pen"),  # no such customer yet
                ("customers", "c2", "Bob"),  # o2 is updated
                ("orders", "o1", "c2:book"),  # fk changes
                ("customers", "c1", "Ann2"),  # nobody refers to c1 any more
                ("orders", "o3", "c1:cup"),
                ("customers", "c2", None),  # o1, o2 lose their customer
                ("orders", "o2", None),  # deleted
            ]
        )
    ],
    outputs=("out",),
    max_poll_records=2,
    check=lambda s: "c2:pen+Bob" in s.values("out") and "c2:book+None" in s.values("out"),
)


def _table_table() -> Topology:
    b = StreamsBuilder()
    left = b.table("lt", materialized=Materialized.as_("lt"))
    right = b.table("rt", materialized=Materialized.as_("rt"))
    left.join(right, joiner).to_stream().to("inner")
    left.left_join(right, joiner).to_stream().to("left")
    left.outer_join(right, joiner).to_stream().to("outer")
    return b.build()


def _check_table_table(s: Snapshot) -> None:
    assert "L1+R1" in s.values("inner")
    assert "L2+None" in s.values("left")
    assert "None+R3" in s.values("outer")
    assert None in s.values("inner")  # a deletion is forwarded


TABLE_TABLE = Case(
    name="table-table-joins",
    build=_table_table,
    inputs=[
        rec(t, k, v, i)
        for i, (t, k, v) in enumerate(
            [
                ("lt", "k1", "L1"),
                ("rt", "k1", "R1"),
                ("lt", "k2", "L2"),
                ("rt", "k3", "R3"),
                ("lt", "k1", "L1b"),
                ("rt", "k2", "R2"),
                ("rt", "k1", None),
                ("lt", "k3", "L3"),
                ("lt", "k2", None),
            ]
        )
    ],
    outputs=("inner", "left", "outer"),
    max_poll_records=3,
    check=_check_table_table,
)

CASES = [SS_INNER, SS_LEFT, SS_OUTER, STREAM_TABLE, GLOBAL_TABLE, FK_JOIN, TABLE_TABLE]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_parity(case: Case, spark: Any, tmp_path: Path) -> None:
    check_parity(case, spark, str(tmp_path))
