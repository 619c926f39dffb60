"""Global stores through the TopologyTestDriver: ``add_global_store`` with a custom
processor, read-only views for the other processors, bad global records."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import StreamsError
from statestores.stores import Stores
from tests.topology.conftest import L, S
from topology import Consumed, Materialized, Processor, Record, StreamsBuilder
from topology.engine.read_only_stores import GlobalStoreReadOnlyError


class SumUpdater(Processor[str, str, None, None]):
    """A global processor that adds each record's value to its key's total: it is run
    over the records, not a plain put."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store("totals")

    def process(self, record: Record[str, str]) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + int(record.value))


class Lookup(Processor[str, str, str, str]):
    def init(self, context: Any) -> None:
        super().init(context)
        self.totals = context.get_state_store("totals")

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record.with_value(f"{record.value}={self.totals.get(record.key)}"))


class Writer(Processor[str, str, str, str]):
    def init(self, context: Any) -> None:
        super().init(context)
        self.totals = context.get_state_store("totals")

    def process(self, record: Record[str, str]) -> None:
        self.totals.put(record.key, 1)


def totals_topology(processor: type[Processor[Any, Any, Any, Any]] = Lookup) -> Any:
    b = StreamsBuilder()
    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("totals"), S, L)
    b.add_global_store(store, "deltas", SumUpdater, Consumed.with_(S, S))
    b.stream("events", Consumed.with_(S, S)).process(processor).to("out")
    return b.build()


def test_add_global_store_runs_the_processor_over_the_topic(drive: Any) -> None:
    topology = totals_topology()
    assert topology.subtopologies[0].is_global
    assert not topology.changelog_topics("app")  # the topic is the changelog
    d = drive(topology)
    deltas = d.create_input_topic("deltas", S, S)
    deltas.pipe_input("a", "2")
    deltas.pipe_input("a", "3")
    events = d.create_input_topic("events", S, S)
    events.pipe_input("a", "x")
    events.pipe_input("b", "y")
    deltas.pipe_input("b", "7")
    events.pipe_input("b", "z")
    assert d.create_output_topic("out", S, S).read_values_to_list() == ["x=5", "y=None", "z=7"]
    assert d.get_key_value_store("totals").get("a") == 5


def test_add_global_store_disables_logging() -> None:
    b = StreamsBuilder()
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("totals"), S, L)
    assert store.logging_enabled
    b.add_global_store(store, "deltas", SumUpdater)
    assert not b.build().stores["totals"].logging_enabled


def test_add_global_store_needs_a_store_builder() -> None:
    with pytest.raises(StreamsError, match="StoreBuilder"):
        StreamsBuilder().add_global_store("totals", "deltas", SumUpdater)  # type: ignore[arg-type]


def test_global_stores_are_read_only_to_other_processors(drive: Any) -> None:
    d = drive(totals_topology(Writer))
    with pytest.raises(StreamsError) as caught:
        d.create_input_topic("events", S, S).pipe_input("a", "x")
    error: BaseException | None = caught.value
    while error is not None and not isinstance(error, GlobalStoreReadOnlyError):
        error = error.__cause__
    assert isinstance(error, GlobalStoreReadOnlyError), caught.value
    assert "read-only" in str(error)


def test_a_bad_global_record_goes_to_the_deserialization_handler(drive: Any) -> None:
    b = StreamsBuilder()
    b.global_table("rates", Consumed.with_(S, L), Materialized.as_("rates"))
    d = drive(b.build(), **{"deserialization.exception.handler": "log-and-continue"})
    d.pipe_raw("rates", b"eur", b"bad", 1)  # not 8 bytes: no long
    d.create_input_topic("rates", S, L).pipe_input("usd", 3)
    assert d.get_key_value_store("rates").get("usd") == 3
    assert d.get_key_value_store("rates").get("eur") is None
    assert d.metrics().total("dropped-records-total") == 1


def test_add_global_store_names_its_nodes() -> None:
    b = StreamsBuilder()
    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("totals"), S, L)
    consumed = Consumed.with_(S, S).with_name("deltas-source")
    b.add_global_store(store, "deltas", SumUpdater, consumed, processor_name="deltas-updater")
    text = str(b.build().describe())
    assert "Sub-topology: 0 for global store (will not generate tasks)" in text
    assert "Source: deltas-source (topics: [deltas])" in text
    assert "Processor: deltas-updater (stores: [totals])" in text
