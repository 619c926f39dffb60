"""KTable operators through the TopologyTestDriver, with exact outputs."""

from __future__ import annotations

from typing import Any

from tests.topology.conftest import I, L, S
from topology import Consumed, Grouped, Materialized, Processor, Produced, StreamsBuilder


def test_source_table_materializes_and_tombstones_delete(drive: Any) -> None:
    b = StreamsBuilder()
    b.table("users", materialized=Materialized.as_("users-store")).to_stream().to("out")
    d = drive(b.build())
    i = d.create_input_topic("users", S, S)
    i.pipe_input("alice", "paris", 1)
    i.pipe_input("bob", "rome", 2)
    i.pipe_input("alice", None, 3)
    i.pipe_input(None, "dropped", 4)
    records = d.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        ("alice", "paris", 1),
        ("bob", "rome", 2),
        ("alice", None, 3),
    ]
    assert list(d.get_key_value_store("users-store").all()) == [("bob", "rome")]


def test_to_stream_with_a_mapper_rekeys_each_update_as_kafka(drive: Any) -> None:
    """Kafka's ``toStream(KeyValueMapper)``: a KTABLE-TOSTREAM node, then a key selection."""
    b = StreamsBuilder()
    b.table("users", Consumed.with_(S, S)).to_stream(lambda k, v: f"{k}:{v}").to(
        "out", Produced.with_(S, S)
    )
    topology = b.build()
    text = str(topology.describe())
    tostream = "KTABLE-TOSTREAM-0000000003 (stores: [])\n      --> KSTREAM-KEY-SELECT-0000000004"
    assert tostream in text
    d = drive(topology)
    i = d.create_input_topic("users", S, S)
    i.pipe_input("alice", "paris", 1)
    i.pipe_input("alice", None, 2)
    assert d.create_output_topic("out", S, S).read_key_values_to_list() == [
        ("alice:paris", "paris"),
        ("alice:None", None),
    ]


def test_filter_turns_filtered_updates_into_deletions(drive: Any) -> None:
    b = StreamsBuilder()
    t = b.table("in", Consumed.with_(S, I))
    t.filter(lambda k, v: v >= 18).to_stream().to("adults", Produced.with_(S, I))
    t.filter_not(lambda k, v: v >= 18, Materialized.as_("minors")).to_stream().to(
        "minors", Produced.with_(S, I)
    )
    d = drive(b.build())
    i = d.create_input_topic("in", S, I)
    i.pipe_input("a", 20)
    i.pipe_input("b", 10)
    i.pipe_input("a", 15)
    assert d.create_output_topic("adults", S, I).read_key_values_to_list() == [
        ("a", 20),
        ("b", None),
        ("a", None),
    ]
    # materialized with caching: deleting an absent key forwards nothing, as Kafka's cache
    assert d.create_output_topic("minors", S, I).read_key_values_to_list() == [
        ("b", 10),
        ("a", 15),
    ]
    assert dict(d.get_key_value_store("minors").all()) == {"a": 15, "b": 10}


def test_map_values_with_and_without_key(drive: Any) -> None:
    b = StreamsBuilder()
    t = b.table("in")
    t.map_values(str.upper).to_stream().to("upper")
    t.map_values(lambda k, v: f"{k}={v}", with_key=True).to_stream().to("pairs")
    d = drive(b.build())
    i = d.create_input_topic("in", S, S)
    i.pipe_input("a", "x")
    i.pipe_input("a", None)
    assert d.create_output_topic("upper", S, S).read_key_values_to_list() == [
        ("a", "X"),
        ("a", None),
    ]
    assert d.create_output_topic("pairs", S, S).read_key_values_to_list() == [
        ("a", "a=x"),
        ("a", None),
    ]


def test_group_by_count_moves_rows_between_groups(drive: Any) -> None:
    b = StreamsBuilder()
    (
        b.table("user-region")
        .group_by(lambda user, region: (region, user))
        .count(Materialized.as_("region-counts"))
        .to_stream()
        .to("out", Produced.with_(S, L))
    )
    topology = b.build()
    assert len(topology.subtopologies) == 2
    d = drive(topology)
    i = d.create_input_topic("user-region", S, S)
    i.pipe_input("alice", "eu")
    i.pipe_input("bob", "eu")
    i.pipe_input("alice", "us")  # leaves eu, joins us
    i.pipe_input("bob", None)  # deleted: leaves eu
    i.pipe_input("alice", "us")  # same group: one record (subtract then add)
    assert d.create_output_topic("out", S, L).read_key_values_to_list() == [
        ("eu", 1),
        ("eu", 2),
        ("eu", 1),
        ("us", 1),
        ("eu", 0),
        ("us", 1),
    ]
    assert dict(d.get_key_value_store("region-counts").all()) == {"eu": 0, "us": 1}


def test_group_by_reduce_and_aggregate_with_subtractor(drive: Any) -> None:
    b = StreamsBuilder()
    grouped = b.table("scores", Consumed.with_(S, I)).group_by(
        lambda player, score: (player[0], score), Grouped.with_(S, I)
    )
    grouped.reduce(lambda a, v: a + v, lambda a, v: a - v, Materialized.as_("sum")).to_stream().to(
        "sum", Produced.with_(S, I)
    )
    grouped.aggregate(
        lambda: 0,
        lambda k, v, agg: agg + 1,
        lambda k, v, agg: agg - 1,
        Materialized.as_("n").with_value_serde(I),
    ).to_stream().to("n", Produced.with_(S, I))
    d = drive(b.build())
    i = d.create_input_topic("scores", S, I)
    i.pipe_input("ann", 5)
    i.pipe_input("amy", 3)
    i.pipe_input("ann", 10)
    i.pipe_input("amy", None)
    assert d.create_output_topic("sum", S, I).read_values_to_list() == [5, 8, 13, 10]
    assert d.create_output_topic("n", S, I).read_values_to_list() == [1, 2, 2, 1]


def test_stream_aggregate_then_table_group_by(drive: Any) -> None:
    b = StreamsBuilder()
    (
        b.stream("clicks")
        .group_by_key()
        .count(Materialized.as_("per-user"))
        .group_by(lambda user, n: ("total", n), Grouped.with_(S, L))
        .reduce(
            lambda a, v: a + v, lambda a, v: a - v, Materialized.as_("total").with_value_serde(L)
        )
        .to_stream()
        .to("out", Produced.with_(S, L))
    )
    d = drive(b.build())
    d.create_input_topic("clicks", S, S).pipe_key_value_list(
        [("u1", "x"), ("u2", "x"), ("u1", "x")]
    )
    # u1's update 1 -> 2 stays in group "total": one record, subtract 1 then add 2
    assert d.create_output_topic("out", S, L).read_values_to_list() == [1, 2, 3]


def test_global_table_is_readable_by_processors(drive: Any) -> None:
    b = StreamsBuilder()
    b.global_table("rates", materialized=Materialized.as_("rates"))

    class Convert(Processor[str, str, str, str]):
        def init(self, context: Any) -> None:
            super().init(context)
            self.rates = context.get_state_store("rates")

        def process(self, record: Any) -> None:
            rate = self.rates.get(record.key)
            self.context.forward(record.with_value(f"{record.value}*{rate[0] if rate else '?'}"))

    b.stream("orders").process(Convert).to("out")
    d = drive(b.build())
    d.create_input_topic("rates", S, S).pipe_input("eur", "1.1")
    d.create_input_topic("orders", S, S).pipe_key_value_list([("eur", "10"), ("usd", "5")])
    assert d.create_output_topic("out", S, S).read_values_to_list() == ["10*1.1", "5*?"]
    assert d.get_key_value_store("rates").get("eur") == "1.1"
