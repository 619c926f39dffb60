"""Kafka's ``KTableTransformValuesTest``: ``KTable.transform_values`` with a transformer
that may read stores, materialized or not; deletions reach the transformer too."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import StreamsError
from statestores.stores import Stores
from tests.conformance.conftest import I, S
from tests.conformance.test_ktable_filter import capture, probes_of
from topology import Change, Consumed, Grouped, Materialized, StreamsBuilder, ValueAndTimestamp

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


class Length:
    """Kafka's ``StatelessTransformer``: the value's length."""

    def init(self, context: Any) -> None:
        pass

    def transform(self, key: str, value: str | None) -> int | None:
        return None if value is None else len(value)

    def close(self) -> None:
        pass


def test_should_calculate_correct_old_values_if_not_stateful_even_if_not_materialized(
    drive: Any,
) -> None:
    """KTableTransformValuesTest.shouldCalculateCorrectOldValuesIfNotStatefulEvenIfNotMaterialized:
    the old value is the transformer's result on the parent's old value."""
    b = StreamsBuilder()
    (
        b.table("input", Consumed.with_(S, S))
        .transform_values(Length)
        .group_by(lambda k, v: (k, v), Grouped.with_(S, I))
        .reduce(lambda a, v: a + v, lambda a, v: a - v)
        .map_values(str)
        .to_stream()
        .to("out")
    )
    d = drive(b.build())
    topic = d.create_input_topic("input", S, S)
    for value, ts in (("a", 5), ("aa", 15), ("aaa", 10)):
        topic.pipe_input("A", value, ts)
    assert outputs(d) == [("A", "1", 5), ("A", "2", 15), ("A", "3", 15)]


def _old_values(drive: Any, *, send_old: bool, materialized: bool) -> tuple[Any, Any, Any]:
    """A source table under ``Exclaim``; returns the parent and transformed tables and what
    the transform node forwards for the update of ``Key`` from ``oldValue`` to ``newValue``."""
    b = StreamsBuilder()
    parent = b.table("input", Consumed.with_(S, S))
    mat = Materialized.as_(QUERYABLE).with_key_serde(S).with_value_serde(S)
    table = parent.transform_values(Exclaim, mat if materialized else None)
    if send_old:
        table.enable_send_old_values()
    seen = capture(b, table, "proc")
    d = drive(b.build(), **{"statestore.cache.max.bytes": 0})
    topic = d.create_input_topic("input", S, S)
    topic.pipe_input("Key", "oldValue", 0)
    topic.pipe_input("Key", "newValue", 0)
    return parent, table, seen[-1]


def test_should_not_send_old_values_by_default(drive: Any) -> None:
    """KTableTransformValuesTest.shouldNotSendOldValuesByDefault"""
    _, _, last = _old_values(drive, send_old=False, materialized=False)
    assert last == ("Key", Change("Key->newValue!", None), 0)


def test_should_send_old_values_if_configured(drive: Any) -> None:
    """KTableTransformValuesTest.shouldSendOldValuesIfConfigured"""
    _, _, last = _old_values(drive, send_old=True, materialized=False)
    assert last == ("Key", Change("Key->newValue!", "Key->oldValue!"), 0)


@pytest.mark.parametrize("materialized", [True, False])
def test_should_set_send_old_values_on_parent_only_if_not_materialized(
    drive: Any, materialized: bool
) -> None:
    """KTableTransformValuesTest.shouldNotSetSendOldValuesOnParentIfMaterialized and
    shouldSetSendOldValuesOnParentIfNotMaterialized: a materialized transform reads its old
    values from its own store; otherwise it transforms the parent's old values."""
    parent, _, last = _old_values(drive, send_old=True, materialized=materialized)
    assert parent.params.send_old_values is not materialized
    assert last == ("Key", Change("Key->newValue!", "Key->oldValue!"), 0)


@pytest.mark.parametrize("materialized", [False, True])
def test_should_get_through_the_value_getter(drive: Any, materialized: bool) -> None:
    """KTableTransformValuesTest.shouldTransformOnGetIfNotMaterialized and
    shouldGetFromStateStoreIfMaterialized, shouldGetStoreNamesFromParentIfNotMaterialized
    and shouldGetQueryableStoreNameIfMaterialized: the getter of a transformed table reads
    its store, or transforms what the parent's getter reads (with its timestamp)."""
    b = StreamsBuilder()
    parent = b.table("input", Consumed.with_(S, S), Materialized.as_("parent-store"))
    mat = Materialized.as_(QUERYABLE) if materialized else None
    table = parent.transform_values(Exclaim, mat)
    expected_stores = (QUERYABLE,) if materialized else parent.value_getter().store_names
    assert tuple(table.value_getter().store_names) == tuple(expected_stores)
    probes = probes_of(b, {"t": table})
    d = drive(b.build())
    d.create_input_topic("input", S, S).pipe_input("Key", "Value", 73)
    assert probes["t"].getter.get("Key") == ValueAndTimestamp("Key->Value!", 73)


class Forwarding(Exclaim):
    def init(self, context: Any) -> None:
        self.context = context

    def transform(self, key: str, value: str | None) -> str:
        self.context.forward(key, value)
        return "never"


def test_should_initialize_transformer_with_forward_disabled_processor_context(
    drive: Any,
) -> None:
    """KTableTransformValuesTest.shouldInitializeTransformerWithForwardDisabledProcessorContext:
    a transformer may not forward; the transform is its only output."""
    b = StreamsBuilder()
    b.table("input", Consumed.with_(S, S)).transform_values(Forwarding).to_stream().to("out")
    d = drive(b.build())
    with pytest.raises(StreamsError, match="forward"):
        d.create_input_topic("input", S, S).pipe_input("A", "a", 5)
    assert outputs(d) == []


def test_should_throw_on_get_if_supplier_returns_null(drive: Any) -> None:
    """KTableTransformValuesTest.shouldThrowOnGetIfSupplierReturnsNull: a supplier that
    builds no transformer is refused when the processor is made."""
    b = StreamsBuilder()
    b.table("input", Consumed.with_(S, S)).transform_values(lambda: None).to_stream().to("out")
    with pytest.raises(StreamsError, match="transformer"):
        drive(b.build()).create_input_topic("input", S, S).pipe_input("A", "a", 5)


def test_should_close_transformer_on_processor_close(drive: Any) -> None:
    """KTableTransformValuesTest.shouldCloseTransformerOnProcessorClose"""
    closed: list[str] = []

    class Closing(Exclaim):
        def close(self) -> None:
            closed.append("closed")

    b = StreamsBuilder()
    b.table("input", Consumed.with_(S, S)).transform_values(Closing).to_stream().to("out")
    d = drive(b.build())
    assert closed == []
    d.close()
    assert closed == ["closed"]
