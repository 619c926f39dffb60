"""Kafka's ``VersionedKeyValueStoreIntegrationTest`` (and
``IQv2VersionedStoreIntegrationTest.verifyStore``): a versioned key-value store (KIP-889)
read while a topology puts to it, its changelog topic's properties, and the versioned key
queries (KIP-960, KIP-968) on the test driver's store.
"""

from __future__ import annotations

from typing import Any

from statestores.api import VersionedRecord
from statestores.stores import Stores
from tests.conformance.conftest import I, S
from tests.conformance.versioned_store_kit import MOVES, NAME, Store, check_moves_history
from topology import Consumed, Materialized, Processor, Produced, Record, StreamsBuilder


def test_should_survive_a_commit_and_see_the_same_history(drive: Any) -> None:
    """VersionedKeyValueStoreIntegrationTest.shouldPutGetAndDelete (the store read after
    every record's commit keeps its whole history)"""
    s = Store(drive)
    s.put_all("k", MOVES)
    s.driver.advance_wall_clock_time(1)
    check_moves_history(s)


class ContentChecker(Processor[int, str, int, int]):
    """Kafka's ``VersionedStoreContentCheckerProcessor``: put (or, for ``"delete"``,
    delete) each record, then check the store's latest and as-of answers against what was
    written so far; forward the number of failed checks."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(NAME)
        self.written: dict[int, dict[int, str | None]] = {}

    def process(self, record: Record[int, str]) -> None:
        key, ts = record.key, record.timestamp
        value: str | None = record.value
        if value == "delete":
            self.store.delete(key, ts)
            value = None
        else:
            self.store.put(key, value, ts)
        versions = self.written.setdefault(key, {})
        versions[ts] = value
        failed = 0
        latest = versions[max(versions)]
        found = self.store.get(key)
        failed += (None if found is None else found.value) != latest
        for at in sorted(versions):
            expected = versions[at]
            found = self.store.get(key, at)
            failed += (None if found is None else found.value) != expected
            failed += found is not None and found.timestamp != at
        self.context.forward(record.with_value(failed))


def test_should_put_get_and_delete(drive: Any) -> None:
    """VersionedKeyValueStoreIntegrationTest.shouldPutGetAndDelete"""
    builder = StreamsBuilder()
    supplier = Stores.persistent_versioned_key_value_store(NAME, 60_000)
    builder.add_state_store(Stores.versioned_key_value_store_builder(supplier, I, S))
    stream = builder.stream("in", Consumed.with_(I, S))
    stream.process(ContentChecker, NAME).to("out", Produced.with_(I, I))
    driver = drive(builder.build())
    source = driver.create_input_topic("in", I, S)
    out = driver.create_output_topic("out", I, I)
    base = 1_000
    rounds: list[tuple[int, dict[int, str | None]]] = [
        (0, {1: "a0", 2: "b0", 3: None}),
        (5, {1: "a5", 2: None, 3: "c5"}),
        (2, {1: "a2", 2: "b2", 3: None}),  # out of order
        (5, {1: "a5_new", 2: "b5", 3: None}),  # replaces existing versions
        (7, {1: "delete", 2: "delete", 3: "delete"}),
    ]
    for offset, values in rounds:
        for key, value in values.items():
            source.pipe_input(key, value, base + offset)
    assert out.read_values_to_list() == [0] * 15


def test_should_set_changelog_topic_properties() -> None:
    """VersionedKeyValueStoreIntegrationTest.shouldSetChangelogTopicProperties"""
    supplier = Stores.persistent_versioned_key_value_store(NAME, 60_000)
    builder = Stores.versioned_key_value_store_builder(supplier, I, S)
    assert builder.changelog_config() == {
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": str(60_000 + 24 * 60 * 60 * 1000),
    }


def test_should_answer_versioned_key_queries(drive: Any) -> None:
    """IQv2VersionedStoreIntegrationTest.verifyStore (VersionedKeyQuery and
    MultiVersionedKeyQuery, KIP-960 and KIP-968, on the test driver's store)"""
    builder = StreamsBuilder()
    supplier = Stores.persistent_versioned_key_value_store(NAME, 86_400_000, 3_600_000)
    builder.table("input-topic", Consumed.with_(I, I), Materialized.as_(supplier))
    driver = drive(builder.build())
    source = driver.create_input_topic("input-topic", I, I)
    base = 1_672_567_200
    values, stamps = [2, 20, 200, 2000], [base, base + 10, base + 20, base + 30]
    for value, ts in zip(values, stamps, strict=True):
        source.pipe_input(2, value, ts)
    store = driver.get_versioned_key_value_store(NAME)
    now = 1_900_000_000_000
    for at in (None, now, stamps[3]):  # the latest value
        assert store.get(2, at) == VersionedRecord(2000, stamps[3], None)
    assert store.get(2, stamps[0]) == VersionedRecord(2, stamps[0], stamps[1])  # an old one
    assert store.get(2, stamps[0] - 50) is None  # none at that time
    assert store.get(3, now) is None  # no such key
    every = [
        VersionedRecord(v, t, stamps[i + 1] if i < 3 else None)
        for i, (v, t) in enumerate(zip(values, stamps, strict=True))
    ]
    assert store.get_versions(2) == every[::-1]  # ResultOrder.ANY: newest first
    assert store.get_versions(2, ascending=True) == every
    assert store.get_versions(2, stamps[1] + 5, now) == every[1:][::-1]
    for ascending in (False, True):
        assert store.get_versions(2, stamps[0] - 100, stamps[0] - 50, ascending=ascending) == []
        assert store.get_versions(3, ascending=ascending) == []
