"""Every KStream operator through the TopologyTestDriver, with exact outputs."""

from __future__ import annotations

from typing import Any

import pytest

from streams.testing import TestRecord
from tests.topology.conftest import I, L, S
from topology import (
    Branched,
    Consumed,
    Grouped,
    Materialized,
    Named,
    Produced,
    Repartitioned,
    StreamsBuilder,
)


def run(drive: Any, build: Any, inputs: list[tuple[Any, Any]], out: str = "out") -> list[Any]:
    b = StreamsBuilder()
    build(b.stream("in"))
    d = drive(b.build())
    topic = d.create_input_topic("in", S, S, start_timestamp=1000)
    for key, value in inputs:
        topic.pipe_input(key, value)
    return list(d.create_output_topic(out, S, S).read_key_values_to_list())


def test_filter_and_filter_not(drive: Any) -> None:
    data = [("a", "1"), ("b", "22"), ("c", "333")]
    assert run(drive, lambda s: s.filter(lambda k, v: len(v) > 1).to("out"), data) == [
        ("b", "22"),
        ("c", "333"),
    ]
    assert run(drive, lambda s: s.filter_not(lambda k, v: len(v) > 1).to("out"), data) == [
        ("a", "1")
    ]


def test_map_map_values_and_select_key(drive: Any) -> None:
    data = [("a", "x"), ("b", "y")]
    assert run(drive, lambda s: s.map(lambda k, v: (v, k)).to("out"), data) == [
        ("x", "a"),
        ("y", "b"),
    ]
    assert run(drive, lambda s: s.map_values(str.upper).to("out"), data) == [
        ("a", "X"),
        ("b", "Y"),
    ]
    assert run(
        drive, lambda s: s.map_values(lambda k, v: k + v, with_key=True).to("out"), data
    ) == [
        ("a", "ax"),
        ("b", "by"),
    ]
    assert run(drive, lambda s: s.select_key(lambda k, v: v * 2).to("out"), data) == [
        ("xx", "x"),
        ("yy", "y"),
    ]


def test_flat_map_and_flat_map_values(drive: Any) -> None:
    data = [("k", "a b"), ("j", "")]
    assert run(drive, lambda s: s.flat_map_values(str.split).to("out"), data) == [
        ("k", "a"),
        ("k", "b"),
    ]
    assert run(
        drive, lambda s: s.flat_map_values(lambda k, v: [k] * len(v), with_key=True).to("out"), data
    ) == [("k", "k"), ("k", "k"), ("k", "k")]
    assert run(
        drive, lambda s: s.flat_map(lambda k, v: [(w, k) for w in v.split()]).to("out"), data
    ) == [
        ("a", "k"),
        ("b", "k"),
    ]


def test_peek_and_foreach_see_every_record(drive: Any) -> None:
    peeked: list[tuple[str, str]] = []
    seen: list[tuple[str, str]] = []

    def build(s: Any) -> None:
        p = s.peek(lambda k, v: peeked.append((k, v)))
        p.to("out")
        p.foreach(lambda k, v: seen.append((k, v)))

    assert run(drive, build, [("a", "1"), ("b", "2")]) == [("a", "1"), ("b", "2")]
    assert peeked == seen == [("a", "1"), ("b", "2")]


def test_split_with_named_branches_and_default(drive: Any) -> None:
    b = StreamsBuilder()
    branches = (
        b.stream("in")
        .split(named=Named.as_("route-"))
        .branch(lambda k, v: v.startswith("a"), Branched.as_("a"))
        .branch(lambda k, v: v.startswith("b"))
        .branch(lambda k, v: v.startswith("c"), Branched.with_consumer(lambda s: s.to("c-out")))
        .branch(
            lambda k, v: v.startswith("d"),
            Branched.with_function(lambda s: s.map_values(str.upper), "d"),
        )
        .default_branch(Branched.as_("rest"))
    )
    assert sorted(branches) == ["route-2", "route-a", "route-d", "route-rest"]
    for name, stream in branches.items():
        stream.to(name)
    d = drive(b.build())
    i = d.create_input_topic("in", S, S)
    for v in ["apple", "banana", "cherry", "date", "ab", "zebra"]:
        i.pipe_input("k", v)
    read = {t: d.create_output_topic(t, S, S).read_values_to_list() for t in [*branches, "c-out"]}
    assert read == {
        "route-a": ["apple", "ab"],
        "route-2": ["banana"],
        "c-out": ["cherry"],
        "route-d": ["DATE"],
        "route-rest": ["zebra"],
    }


def test_split_without_default_drops_unmatched(drive: Any) -> None:
    b = StreamsBuilder()
    out = b.stream("in").split().branch(lambda k, v: v == "x").no_default_branch()
    assert list(out) == ["KSTREAM-BRANCH-00000000011"]
    out["KSTREAM-BRANCH-00000000011"].to("out")
    d = drive(b.build())
    d.create_input_topic("in", S, S).pipe_key_value_list([("k", "x"), ("k", "y"), ("j", "x")])
    assert d.create_output_topic("out", S, S).read_key_values_to_list() == [("k", "x"), ("j", "x")]


def test_merge_interleaves_in_processing_order(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("a").merge(b.stream("b")).to("out")
    d = drive(b.build())
    a, bb = d.create_input_topic("a", S, S), d.create_input_topic("b", S, S)
    a.pipe_input("1", "a1")
    bb.pipe_input("2", "b1")
    a.pipe_input("3", "a2")
    assert d.create_output_topic("out", S, S).read_values_to_list() == ["a1", "b1", "a2"]


def test_repartition_goes_through_the_internal_topic(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").select_key(lambda k, v: v).repartition(Repartitioned.as_("by-value")).to("out")
    topology = b.build()
    assert [s.id for s in topology.subtopologies] == [0, 1]
    assert "Sink: by-value-repartition-sink (topic: by-value-repartition)" in str(
        topology.describe()
    )
    d = drive(topology)
    d.create_input_topic("in", S, S, start_timestamp=5).pipe_input("k", "v")
    assert d.create_output_topic("app-by-value-repartition", S, S).read_key_value() == ("v", "v")
    record = d.create_output_topic("out", S, S).read_record()
    assert (record.key, record.value, record.timestamp) == ("v", "v", 5)


def test_to_with_topic_extractor_partitioner_and_serdes(drive: Any) -> None:
    b = StreamsBuilder()
    s = b.stream("in", Consumed.with_(S, S))
    s.to(lambda k, v, ctx: f"out-{k}")
    s.map_values(len).to(
        "lengths", Produced.with_(S, I).with_stream_partitioner(lambda t, k, v, n: v % n)
    )
    d = drive(b.build(), partitions={"lengths": 3})
    d.create_input_topic("in", S, S).pipe_key_value_list([("x", "abcd"), ("y", "ab")])
    assert d.create_output_topic("out-x", S, S).read_value() == "abcd"
    assert d.create_output_topic("out-y", S, S).read_value() == "ab"
    records = d.create_output_topic("lengths", S, I).read_records_to_list()
    assert [(r.key, r.value, r.partition) for r in records] == [("x", 4, 1), ("y", 2, 2)]


def test_headers_and_timestamps_pass_through(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").map_values(str.upper).to("out")
    d = drive(b.build())
    d.create_input_topic("in", S, S).pipe_record_list(
        [TestRecord("k", "v", 42, (("h", b"1"),)), TestRecord("k", "w", 43)]
    )
    assert d.create_output_topic("out", S, S).read_records_to_list() == [
        TestRecord("k", "V", 42, (("h", b"1"),)),
        TestRecord("k", "W", 43),
    ]


def test_input_topic_auto_advances_time(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").to("out")
    d = drive(b.build())
    d.create_input_topic("in", S, S, start_timestamp=100, auto_advance_ms=10).pipe_value_list(
        ["a", "b", "c"]
    )
    records = d.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        (None, "a", 100),
        (None, "b", 110),
        (None, "c", 120),
    ]


def word_count_driver(drive: Any, **materialized: Any) -> Any:
    b = StreamsBuilder()
    mat = Materialized.as_("counts")
    if materialized.get("caching") is False:
        mat = mat.with_caching_disabled()
    (
        b.stream("in")
        .flat_map_values(str.split)
        .group_by(lambda k, w: w)
        .count(mat)
        .to_stream()
        .to("out", Produced.with_(S, L))
    )
    return drive(b.build())


@pytest.mark.parametrize("caching", [True, False])
def test_word_count(drive: Any, caching: bool) -> None:
    d = word_count_driver(drive, caching=caching)
    i = d.create_input_topic("in", S, S)
    i.pipe_input(None, "hello world hello")
    i.pipe_input(None, "world")
    assert d.create_output_topic("out", S, L).read_key_values_to_list() == [
        ("hello", 1),
        ("world", 1),
        ("hello", 2),
        ("world", 2),
    ]
    store = d.get_key_value_store("counts")
    assert list(store.all()) == [("hello", 2), ("world", 2)]
    assert store.get("hello") == 2 and store.get("nope") is None
    assert d.get_timestamped_key_value_store("counts").get("world")[0] == 2
    assert d.get_window_store("counts") is None


def test_count_changelog_is_written(drive: Any) -> None:
    d = word_count_driver(drive)
    d.create_input_topic("in", S, S, start_timestamp=7).pipe_input(None, "a a")
    changelog = d.create_output_topic("app-counts-changelog", S, L.__class__())
    # values in the changelog are ValueAndTimestamp bytes: 8-byte timestamp + value
    raw = d.output_queue("app-counts-changelog")
    assert [(r.key, r.value) for r in raw] == [
        (b"a", (7).to_bytes(8, "big") + (1).to_bytes(8, "big")),
        (b"a", (7).to_bytes(8, "big") + (2).to_bytes(8, "big")),
    ]
    assert changelog.get_queue_size() == 2


def test_group_by_key_reduce_and_aggregate(drive: Any) -> None:
    b = StreamsBuilder()
    grouped = b.stream("in", Consumed.with_(S, I)).group_by_key()
    grouped.reduce(lambda a, v: a + v, Materialized.as_("sum")).to_stream().to(
        "sum", Produced.with_(S, I)
    )
    grouped.aggregate(
        lambda: "",
        lambda k, v, agg: agg + str(v),
        Materialized.as_("concat").with_value_serde(S),
    ).to_stream().to("concat", Produced.with_(S, S))
    topology = b.build()
    assert len(topology.subtopologies) == 1  # grouping by the unchanged key: no repartition
    d = drive(topology)
    i = d.create_input_topic("in", S, I)
    i.pipe_input("a", 1, 10)
    i.pipe_input("b", 2, 5)
    i.pipe_input("a", 3, 7)
    i.pipe_input("a", None, 8)  # null values are skipped by aggregations
    i.pipe_input(None, 4, 9)  # and null keys
    sums = d.create_output_topic("sum", S, I).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in sums] == [
        ("a", 1, 10),
        ("b", 2, 5),
        ("a", 4, 10),
    ]
    assert d.create_output_topic("concat", S, S).read_key_values_to_list() == [
        ("a", "1"),
        ("b", "2"),
        ("a", "13"),
    ]


def test_group_by_with_grouped_name_and_serdes(drive: Any) -> None:
    b = StreamsBuilder()
    (
        b.stream("in")
        .group_by(lambda k, v: len(v), Grouped.as_("by-len").with_key_serde(I))
        .count(Materialized.as_("len-counts").with_key_serde(I))
        .to_stream()
        .to("out", Produced.with_(I, L))
    )
    topology = b.build()
    assert "Processor: by-len (stores: [])" in str(topology.describe())
    assert list(topology.repartition_topic_names("app")) == ["app-by-len-repartition"]
    d = drive(topology)
    d.create_input_topic("in", S, S).pipe_value_list(["ab", "cd", "e"])
    assert d.create_output_topic("out", I, L).read_key_values_to_map() == {2: 2, 1: 1}
