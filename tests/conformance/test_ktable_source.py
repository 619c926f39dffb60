"""Kafka's ``KTableSourceTest``: a table read from its topic, materialized or not, with and
without old values; null keys dropped (logged and counted), out-of-order updates logged.

Not rewritten: ``testKTableSourceEmitOnChange`` (disabled in Kafka, KIP-557 undone) and the
versioned-store scenarios. The ``capture`` processor under the table node plays Kafka's
``MockApiProcessor`` (it records the :class:`~topology.Change` values the node forwards);
the scenarios with old values run without caches, as Kafka's test does not flush.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.conformance.conftest import I, S
from tests.conformance.test_ktable_filter import Probe, capture, probes_of, taken
from topology import Change, Consumed, Materialized, StreamsBuilder, ValueAndTimestamp

UNCACHED = {"statestore.cache.max.bytes": 0}
SOURCE_LOGGER = "topology.processors.proc_table"


def test_ktable(drive: Any) -> None:
    """KTableSourceTest.testKTable: every update, deletions too, reaches the stream with
    its timestamp."""
    b = StreamsBuilder()
    b.table("topic1", Consumed.with_(S, I)).to_stream().to("output")
    d = drive(b.build())
    topic = d.create_input_topic("topic1", S, I)
    updates = [("A", 1, 10), ("B", 2, 11), ("C", 3, 12), ("D", 4, 13), ("A", None, 14)]
    updates += [("B", None, 15)]
    for key, value, ts in updates:
        topic.pipe_input(key, value, ts)
    records = d.create_output_topic("output", S, I).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in records] == updates


@pytest.mark.parametrize("materialized", [False, True])
def test_ktable_should_log_and_meter_on_skipped_records(
    drive: Any, caplog: pytest.LogCaptureFixture, materialized: bool
) -> None:
    """KTableSourceTest.kTableShouldLogAndMeterOnSkippedRecords: a record with a null key is
    dropped, logged with its topic, partition and offset, and counted in
    ``dropped-records-total``; materialized or not."""
    b = StreamsBuilder()
    mat = Materialized.as_("store") if materialized else None
    b.table("topic", Consumed.with_(S, S), mat).to_stream().to("output")
    d = drive(b.build())
    with caplog.at_level(logging.WARNING, logger=SOURCE_LOGGER):
        d.create_input_topic("topic", S, S, start_timestamp=0).pipe_input(None, "value")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "Skipping record due to null key. topic=[topic] partition=[0] offset=[0]" in warned
    assert d.metrics().total("dropped-records-total") == 1
    assert d.create_output_topic("output", S, S).read_key_values_to_list() == []


def test_ktable_should_log_on_out_of_order(drive: Any, caplog: pytest.LogCaptureFixture) -> None:
    """KTableSourceTest.kTableShouldLogOnOutOfOrder: an update older than the stored one is
    applied, and logged as a warning naming the store, both timestamps and the record."""
    b = StreamsBuilder()
    b.table("topic", Consumed.with_(S, S), Materialized.as_("store"))
    d = drive(b.build())
    topic = d.create_input_topic("topic", S, S, start_timestamp=0)
    with caplog.at_level(logging.WARNING, logger=SOURCE_LOGGER):
        topic.pipe_input("key", "value", 10)
        topic.pipe_input("key", "value", 5)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        "Detected out-of-order KTable update for store, old timestamp=[10] new timestamp=[5]. "
        "topic=[topic] partition=[0] offset=[1]." in warned
    )
    stamped = d.get_timestamped_key_value_store("store")
    assert tuple(stamped.get("key")) == ("value", 5)


def test_value_getter(drive: Any) -> None:
    """KTableSourceTest.testValueGetter: the getter reads the latest value and its
    timestamp, whatever the order of the timestamps; a tombstone removes the key."""
    b = StreamsBuilder()
    table = b.table("topic1", Consumed.with_(S, S), Materialized.as_("store"))
    probes: dict[str, Probe] = probes_of(b, {"t1": table})
    d = drive(b.build())
    topic = d.create_input_topic("topic1", S, S, start_timestamp=0)
    getter = probes["t1"].getter

    def read() -> list[Any]:
        return [getter.get(k) for k in "ABC"]

    for key, value, ts in (("A", "01", 10), ("B", "01", 20), ("C", "01", 15)):
        topic.pipe_input(key, value, ts)
    vt = ValueAndTimestamp
    assert read() == [vt("01", 10), vt("01", 20), vt("01", 15)]
    topic.pipe_input("A", "02", 30)
    topic.pipe_input("B", "02", 5)
    assert read() == [vt("02", 30), vt("02", 5), vt("01", 15)]
    topic.pipe_input("A", "03", 29)
    assert read() == [vt("03", 29), vt("02", 5), vt("01", 15)]
    topic.pipe_input("A", None, 50)
    topic.pipe_input("B", None, 3)
    assert read() == [None, None, vt("01", 15)]


def _pipe_old_value_scenario(drive: Any, b: StreamsBuilder, seen: Any, old: bool) -> None:
    """Kafka's three rounds of updates to keys A, B and C; ``old``: old values are sent."""
    d = drive(b.build(), **UNCACHED)
    topic = d.create_input_topic("topic1", S, S, start_timestamp=0)

    def was(value: str) -> str | None:
        return value if old else None

    first = [("A", "01", 10), ("B", "01", 20), ("C", "01", 15)]
    for key, value, ts in first:
        topic.pipe_input(key, value, ts)
    assert taken(seen) == [(key, Change(value, None), ts) for key, value, ts in first]
    topic.pipe_input("A", "02", 8)
    topic.pipe_input("B", "02", 22)
    assert taken(seen) == [("A", Change("02", was("01")), 8), ("B", Change("02", was("01")), 22)]
    topic.pipe_input("A", "03", 12)
    assert taken(seen) == [("A", Change("03", was("02")), 12)]
    topic.pipe_input("A", None, 15)
    topic.pipe_input("B", None, 20)
    assert taken(seen) == [("A", Change(None, was("03")), 15), ("B", Change(None, was("02")), 20)]


def test_not_sending_old_value(drive: Any) -> None:
    """KTableSourceTest.testNotSendingOldValue: an unmaterialized source forwards each
    update as a change without its old value."""
    b = StreamsBuilder()
    table = b.table("topic1", Consumed.with_(S, S))
    seen = capture(b, table, "proc1")
    _pipe_old_value_scenario(drive, b, seen, old=False)
    assert table.params.store_name is None


def test_sending_old_value(drive: Any) -> None:
    """KTableSourceTest.testSendingOldValue: enabling old values materializes the source,
    which then forwards each update with the value it replaces."""
    b = StreamsBuilder()
    table = b.table("topic1", Consumed.with_(S, S))
    table.enable_send_old_values()
    assert table.params.send_old_values
    seen = capture(b, table, "proc1")
    _pipe_old_value_scenario(drive, b, seen, old=True)


def test_tombstone_for_an_absent_key_is_forwarded(drive: Any) -> None:
    """KTableSource.process (non-versioned store): a deletion of a key the table never held
    is stored as nothing and still forwarded downstream, without an old value."""
    b = StreamsBuilder()
    table = b.table("topic1", Consumed.with_(S, S), Materialized.as_("store"))
    table.enable_send_old_values()
    seen = capture(b, table, "proc1")
    d = drive(b.build(), **UNCACHED)
    d.create_input_topic("topic1", S, S).pipe_input("X", None, 7)
    assert taken(seen) == [("X", Change(None, None), 7)]
    assert d.get_key_value_store("store").get("X") is None


def test_materialized_source_keeps_timestamps(drive: Any) -> None:
    """KTableSourceTest (materialization): a named store holds each key's latest value with
    its record's timestamp and is queryable; what is read from the table keeps them."""
    b = StreamsBuilder()
    table = b.table("topic1", Consumed.with_(S, S), Materialized.as_("store"))
    assert table.queryable_store_name == "store"
    table.to_stream().to("output")
    d = drive(b.build())
    topic = d.create_input_topic("topic1", S, S)
    for key, value, ts in (("A", "1", 10), ("B", "2", 11), ("A", "3", 9)):
        topic.pipe_input(key, value, ts)
    stamped = d.get_timestamped_key_value_store("store")
    assert [tuple(stamped.get(k)) for k in "AB"] == [("3", 9), ("2", 11)]
    records = d.create_output_topic("output", S, S).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        ("A", "1", 10),
        ("B", "2", 11),
        ("A", "3", 9),
    ]
