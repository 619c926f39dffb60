"""Kafka's ``KTableTransformValuesTest``: ``KTable.transform_values`` with a transformer
that may read stores, materialized or not; deletions reach the transformer too."""

from __future__ import annotations

from typing import Any

from statestores.stores import Stores
from tests.conformance.conftest import I, S
from topology import Consumed, Grouped, Materialized, StreamsBuilder

STORE, OTHER, QUERYABLE = "store", "other", "queryable-store"


class Exclaim:
    """Kafka's ``ExclamationValueTransformer``: ``key->value!``, checking at init that its
    stores are reachable."""

    def __init__(self, *stores: str) -> None:
        self.stores = stores

    def init(self, context: Any) -> None:
        for name in self.stores:
            assert context.get_state_store(name) is not None

    def transform(self, key: str, value: str | None) -> str:
        return f"{key}->{'null' if value is None else value}!"

    def close(self) -> None:
        pass


def _store(name: str) -> Any:
    return Stores.key_value_store_builder(Stores.persistent_key_value_store(name), S, S)


def outputs(d: Any) -> list[tuple[Any, Any, int]]:
    return [
        (r.key, r.value, r.timestamp)
        for r in d.create_output_topic("out", S, S).read_records_to_list()
    ]


def test_should_transform_values_with_key(drive: Any) -> None:
    """KTableTransformValuesTest.shouldTransformValuesWithKey"""
    b = StreamsBuilder()
    b.add_state_store(_store(STORE)).add_state_store(_store(OTHER))
    (
        b.table("input", Consumed.with_(S, S))
        .transform_values(lambda: Exclaim(STORE, OTHER), None, STORE, OTHER)
        .to_stream()
        .to("out")
    )
    d = drive(b.build())
    topic = d.create_input_topic("input", S, S)
    for key, value, ts in (("A", "a", 5), ("B", "b", 10), ("D", None, 15)):
        topic.pipe_input(key, value, ts)
    assert outputs(d) == [("A", "A->a!", 5), ("B", "B->b!", 10), ("D", "D->null!", 15)]
    assert d.get_key_value_store(QUERYABLE) is None


def test_should_transform_values_with_key_and_materialize(drive: Any) -> None:
    """KTableTransformValuesTest.shouldTransformValuesWithKeyAndMaterialize"""
    b = StreamsBuilder()
    b.add_state_store(_store(STORE))
    mat = Materialized.as_(QUERYABLE).with_key_serde(S).with_value_serde(S)
    (
        b.table("input", Consumed.with_(S, S))
        .transform_values(lambda: Exclaim(STORE, QUERYABLE), mat, STORE)
        .to_stream()
        .to("out")
    )
    d = drive(b.build())
    topic = d.create_input_topic("input", S, S)
    for key, value, ts in (("A", "a", 5), ("B", "b", 10), ("C", None, 15)):
        topic.pipe_input(key, value, ts)
    assert outputs(d) == [("A", "A->a!", 5), ("B", "B->b!", 10), ("C", "C->null!", 15)]
    plain = d.get_key_value_store(QUERYABLE)
    assert [plain.get(k) for k in "ABC"] == ["A->a!", "B->b!", "C->null!"]
    stamped = d.get_timestamped_key_value_store(QUERYABLE)
    assert [tuple(stamped.get(k)) for k in "ABC"] == [("A->a!", 5), ("B->b!", 10), ("C->null!", 15)]


class Counting:
    """Kafka's ``StatefulTransformer``: counts its calls, ignoring the value."""

    def __init__(self) -> None:
        self.counter = 0

    def init(self, context: Any) -> None:
        pass

    def transform(self, key: str, value: str | None) -> int:
        self.counter += 1
        return self.counter

    def close(self) -> None:
        pass


def test_should_calculate_correct_old_values_if_materialized_even_if_stateful(drive: Any) -> None:
    """KTableTransformValuesTest.shouldCalculateCorrectOldValuesIfMaterializedEvenIfStateful:
    the old value comes from the store, not from calling the transformer again."""
    b = StreamsBuilder()
    mat = Materialized.as_(QUERYABLE).with_key_serde(S).with_value_serde(I)
    (
        b.table("input", Consumed.with_(S, S))
        .transform_values(Counting, mat)
        .group_by(lambda k, v: (k, v), Grouped.with_(S, I))
        .reduce(lambda a, v: a + v, lambda a, v: a - v)
        .map_values(str)
        .to_stream()
        .to("out")
    )
    d = drive(b.build())
    topic = d.create_input_topic("input", S, S)
    for value, ts in (("ignored", 5), ("ignored1", 15), ("ignored2", 10)):
        topic.pipe_input("A", value, ts)
    assert outputs(d) == [("A", "1", 5), ("A", "2", 15), ("A", "3", 15)]
    assert d.get_key_value_store(QUERYABLE).get("A") == 3
