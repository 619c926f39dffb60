"""Parity of aggregations: count/reduce/aggregate, repartitions (``group_by`` on a new key
and an explicit ``repartition()``), table aggregations with subtractors, in-memory stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.parity.harness import LONG, STR, Case, Snapshot, check_parity, rec
from topology import Grouped, Materialized, Produced, Repartitioned, StreamsBuilder, Topology


def _long(data: bytes) -> int:
    return int(LONG.deserialize("", data))


def _stream_aggregates() -> Topology:
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key()
    grouped.count(Materialized.as_("counts")).to_stream().to("counts", Produced.with_(STR, LONG))
    grouped.reduce(lambda a, v: f"{a}+{v}", Materialized.as_("concat")).to_stream().to("concat")
    grouped.aggregate(
        lambda: "0", lambda k, v, agg: str(int(agg) + len(v)), Materialized.as_("lengths")
    ).to_stream().to("lengths")
    return b.build()


def _check_stream_aggregates(s: Snapshot) -> None:
    assert max(s.values("counts", _long)) >= 3
    assert any(v.count("+") >= 2 for v in s.values("concat"))


STREAM_AGGREGATES = Case(
    name="count-reduce-aggregate",
    build=_stream_aggregates,
    inputs=[rec("in", "abc"[i % 3], "xy" * (i % 4 + 1), 100 + i) for i in range(10)],
    outputs=("counts", "concat", "lengths"),
    max_poll_records=4,
    check=_check_stream_aggregates,
)


def _group_by_new_key() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by(lambda k, v: v.split(":")[0], Grouped.with_(STR, STR))
        .count(Materialized.as_("by-prefix"))
        .to_stream()
        .to("out", Produced.with_(STR, LONG))
    )
    return b.build()


GROUP_BY_NEW_KEY = Case(
    name="group-by-repartition-count",
    build=_group_by_new_key,
    inputs=[rec("in", f"k{i}", f"{'pq'[i % 2]}{i % 3}:{i}", 10 + i) for i in range(10)],
    outputs=("out",),
    max_poll_records=3,
    check=lambda s: len(s.outputs["out"]) >= 4,  # 6 prefixes, rekeyed
)


def _explicit_repartition() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("in")
        .select_key(lambda k, v: v[:1])
        .repartition(Repartitioned.as_("by-first"))
        .group_by_key()
        .reduce(max, Materialized.as_("max-per-first"))
        .to_stream()
        .to("out")
    )
    return b.build()


EXPLICIT_REPARTITION = Case(
    name="explicit-repartition-reduce",
    build=_explicit_repartition,
    inputs=[rec("in", f"k{i}", f"{'abc'[i % 3]}{(i * 7) % 10}", i) for i in range(9)],
    outputs=("out",),
    max_poll_records=5,
    check=lambda s: set(s.outputs["out"]) == {b"a", b"b", b"c"},
)


def _table_aggregate() -> Topology:
    b = StreamsBuilder()
    regions = b.table("users", materialized=Materialized.as_("users"))
    by_region = regions.group_by(lambda user, region: (region, user), Grouped.with_(STR, STR))
    by_region.count(Materialized.as_("region-counts")).to_stream().to(
        "counts", Produced.with_(STR, LONG)
    )
    by_region.aggregate(
        lambda: "",
        lambda region, user, agg: ",".join(sorted([*filter(None, agg.split(",")), user])),
        lambda region, user, agg: ",".join(u for u in agg.split(",") if u != user),
        Materialized.as_("region-users"),
    ).to_stream().to("members")
    return b.build()


def _check_table_aggregate(s: Snapshot) -> None:
    counts = s.values("counts", _long)
    assert 0 in counts  # a region emptied: the subtractor ran
    assert any(v == "" for v in s.values("members"))


TABLE_AGGREGATE = Case(
    name="table-aggregate-with-subtractor",
    build=_table_aggregate,
    inputs=[
        rec("users", "ann", "eu", 1),
        rec("users", "bob", "us", 2),
        rec("users", "cid", "eu", 3),
        rec("users", "ann", "us", 4),  # moves: subtract from eu, add to us
        rec("users", "dan", "ap", 5),
        rec("users", "cid", None, 6),  # tombstone: eu is now empty
        rec("users", "dan", "us", 7),
        rec("users", "bob", "eu", 8),
    ],
    outputs=("counts", "members"),
    max_poll_records=2,
    check=_check_table_aggregate,
)


def _in_memory() -> Topology:
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key()
    grouped.count(Materialized.as_("mem-counts")).to_stream().to(
        "counts", Produced.with_(STR, LONG)
    )
    grouped.reduce(lambda a, v: v + a, Materialized.as_("mem-concat")).to_stream().to("concat")
    return b.build()


IN_MEMORY = Case(
    name="in-memory-dsl-stores",
    build=_in_memory,
    inputs=[rec("in", "ab"[i % 2], str(i), i) for i in range(8)],
    outputs=("counts", "concat"),
    config={"default.dsl.store": "in_memory"},
    max_poll_records=3,
    check=lambda s: max(s.values("counts", _long)) == 4,
)


def _to_table() -> Topology:
    b = StreamsBuilder()
    latest = (
        b.stream("in")
        .map(lambda k, v: (v.split(":")[0], v))
        .to_table(materialized=Materialized.as_("latest"))
    )
    latest.to_stream().to("out")
    latest.filter(lambda k, v: int(v.split(":")[1]) % 2 == 0).to_stream().to("even")
    return b.build()


TO_TABLE = Case(
    name="stream-to-table-rekeyed",
    build=_to_table,
    inputs=[rec("in", f"k{i}", f"{'pq'[i % 2]}{i % 3}:{i}", 10 + i) for i in range(10)],
    outputs=("out", "even"),
    max_poll_records=3,
    check=lambda s: s.count("out") == 10 and s.count("even") >= 5,
)


class _Stamp:
    """A transformer that appends the key and how many values it has transformed."""

    def init(self, context: Any) -> None:
        self.seen = 0

    def transform(self, key: str, value: str | None) -> str:
        self.seen += 1
        return f"{key}={value}#{self.seen}" if value is not None else f"{key}=deleted"

    def close(self) -> None:
        pass


def _transform_values() -> Topology:
    b = StreamsBuilder()
    (
        b.table("in", materialized=Materialized.as_("source"))
        .transform_values(_Stamp, Materialized.as_("stamped"))
        .to_stream()
        .to("out")
    )
    return b.build()


TRANSFORM_VALUES = Case(
    name="table-transform-values",
    build=_transform_values,
    inputs=[rec("in", f"k{i % 4}", None if i % 5 == 4 else f"v{i}", 10 + i) for i in range(12)],
    outputs=("out",),
    max_poll_records=3,
    check=lambda s: s.count("out") == 12,
)


CASES = [
    STREAM_AGGREGATES,
    GROUP_BY_NEW_KEY,
    EXPLICIT_REPARTITION,
    TABLE_AGGREGATE,
    IN_MEMORY,
    TO_TABLE,
    TRANSFORM_VALUES,
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_parity(case: Case, spark: Any, tmp_path: Path) -> None:
    check_parity(case, spark, str(tmp_path))
