"""The global state manager of an executor process (no Spark): positions carry over from
one update to the next, records are read once, stores are read-only to tasks, a failed
update rebuilds, each process (manager) has its own state directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from common.config import StreamsConfig
from common.errors import SerializationError, StreamsError, UnknownTopicError
from common.serdes import Serdes
from runtime.app.internal_topics import plan_topics
from runtime.storage.offset_index import Segment
from runtime.storage.producer import Producer
from runtime.storage.reader import FileSlice, TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.tasks.contract import BatchPlan, ThreadPlan
from runtime.tasks.global_state import (
    GlobalStateManager,
    GlobalStores,
    _slices_from,
    global_topics,
    plan_globals,
)
from statestores.stores import Stores
from topology import Consumed, Materialized, Processor, Record, StreamsBuilder, Topology
from topology.engine.read_only_stores import GlobalStoreReadOnlyError

S, L = Serdes.String(), Serdes.Long()


class SumUpdater(Processor[str, str, None, None]):
    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store("totals")

    def process(self, record: Record[str, str]) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + int(record.value))


def rates_topology() -> Topology:
    b = StreamsBuilder()
    b.global_table("rates", Consumed.with_(S, S), Materialized.as_("rates"))
    b.stream("orders").to("out")
    return b.build()


def totals_topology() -> Topology:
    b = StreamsBuilder()
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("totals"), S, L)
    b.add_global_store(store, "deltas", SumUpdater, Consumed.with_(S, S))
    b.stream("orders").to("out")
    return b.build()


def config(root: str, tmp_path: Path, **extra: Any) -> StreamsConfig:
    return StreamsConfig.from_dict(
        {
            "application.id": "globals",
            "topics.root": root,
            "state.dir": str(tmp_path / "state"),
            "default.key.serde": "string",
            "default.value.serde": "string",
            **extra,
        }
    )


def send(admin: TopicAdmin, topic: str, *records: tuple[str, bytes]) -> None:
    producer = Producer(admin)
    for key, value in records:
        producer.send(topic, key.encode(), value, timestamp=1)
    producer.flush()


def plan(topology: Topology, cfg: StreamsConfig, root: str) -> BatchPlan:
    """A batch's plan as far as the global stores read it: the thread's, and the ends of
    the global topics."""
    topics = global_topics(topology, cfg.application_id)
    return BatchPlan(
        thread=ThreadPlan(topology, cfg, root, owner="global-test"),
        outputs={},
        staging_dir="",
        sources={},
        positions={},
        transaction=None,
        globals=plan_globals(TopicReader(root), topics),
    )


@pytest.fixture(autouse=True)
def _fresh_registry() -> Any:
    GlobalStores.close_all()
    yield
    GlobalStores.close_all()


def test_positions_carry_over_and_records_are_read_once(
    admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    admin.create("rates", 2)
    topology, cfg = rates_topology(), config(root, tmp_path)
    assert global_topics(topology, "globals") == ("rates",)
    send(admin, "rates", ("eur", b"1.1"), ("usd", b"1.0"), ("gbp", b"0.8"))
    first = plan(topology, cfg, root)
    stores = GlobalStores.for_plan(first)
    assert stores["rates"].get("eur").value == "1.1"
    manager = GlobalStores.manager(first)
    assert manager is not None and manager.records_read == 3

    send(admin, "rates", ("eur", b"1.2"), ("chf", b"0.9"))
    second = plan(topology, cfg, root)
    assert sum(i.end - i.start for i in second.globals) == 5  # planned whole
    stores = GlobalStores.for_plan(second)
    assert stores["rates"].get("eur").value == "1.2"
    assert stores["rates"].get("chf").value == "0.9"
    assert GlobalStores.manager(second) is manager  # the same process: reused
    assert manager.records_read == 5 and manager.builds == 1  # the 2 new ones only
    ends = TopicReader(root).end_offsets("rates")
    assert manager.positions == {("rates", p): e for p, e in ends.items()}

    GlobalStores.for_plan(second)  # again (another task of the batch): nothing to read
    GlobalStores.for_plan(first)  # an older plan: the stores never go back
    assert manager.records_read == 5
    assert stores["rates"].get("eur").value == "1.2"
    with pytest.raises(GlobalStoreReadOnlyError):
        stores["rates"].put("eur", None)


def test_custom_global_processor_in_its_own_process_directory(
    admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    admin.create("deltas", 1)
    topology, cfg = totals_topology(), config(root, tmp_path)
    send(admin, "deltas", ("a", b"2"), ("a", b"3"), ("b", b"1"))
    stores = GlobalStores.for_plan(plan(topology, cfg, root))
    assert stores["totals"].get("a") == 5  # the processor ran over the records
    send(admin, "deltas", ("a", b"10"))
    stores = GlobalStores.for_plan(plan(topology, cfg, root))
    assert stores["totals"].get("a") == 15  # not 20: no record applied twice
    slot = tmp_path / "state" / "globals" / "global" / "0"
    assert (slot / ".lock").exists() and len(os.listdir(slot)) > 1  # RocksDB lives there
    # Another holder (as another process would) never opens the same directory.
    other = GlobalStateManager(topology, cfg, root)
    try:
        other.update(plan(topology, cfg, root).globals)
        assert other.stores["totals"].get("a") == 15
        assert other._slot == os.path.join("global", "1")
    finally:
        other.release()


class FlakyUpdater(SumUpdater):
    """Fails once on the value "boom" (counted as 0 otherwise)."""

    fail = True

    def process(self, record: Record[str, str]) -> None:
        if record.value == "boom":
            if FlakyUpdater.fail:
                FlakyUpdater.fail = False
                raise RuntimeError("boom")
            record = record.with_value("0")
        super().process(record)


def test_a_failed_update_rebuilds_from_the_log_start(
    admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    admin.create("deltas", 1)
    b = StreamsBuilder()
    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("totals"), S, L)
    FlakyUpdater.fail = True
    b.add_global_store(store, "deltas", FlakyUpdater, Consumed.with_(S, S))
    b.stream("orders").to("out")
    topology, cfg = b.build(), config(root, tmp_path)
    send(admin, "deltas", ("a", b"2"))
    stores = GlobalStores.for_plan(plan(topology, cfg, root))  # kept, as a task keeps it
    send(admin, "deltas", ("a", b"3"), ("a", b"boom"), ("a", b"4"))
    with pytest.raises(StreamsError, match="boom"):
        GlobalStores.for_plan(plan(topology, cfg, root))
    again = GlobalStores.for_plan(plan(topology, cfg, root))
    manager = GlobalStores.manager(plan(topology, cfg, root))
    assert manager is not None and manager.builds == 2 and manager.records_read == 4
    assert stores is again and stores["totals"].get("a") == 9  # 2 + 3 + 4, 3 once


def test_a_bad_global_record_goes_to_the_deserialization_handler(
    admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    admin.create("rates", 1)
    b = StreamsBuilder()
    b.global_table("rates", Consumed.with_(S, L), Materialized.as_("rates"))
    b.stream("orders").to("out")
    topology = b.build()
    send(admin, "rates", ("eur", b"bad"), ("usd", L.serialize("rates", 3)))
    failing = config(root, tmp_path)
    with pytest.raises(SerializationError):
        GlobalStores.for_plan(plan(topology, failing, root))
    skipping = config(root, tmp_path, **{"deserialization.exception.handler": "log-and-continue"})
    stores = GlobalStores.for_plan(plan(topology, skipping, root))
    assert stores["rates"].get("usd").value == 3
    assert stores["rates"].get("eur") is None


def test_dead_letters_of_global_records_are_not_produced(
    admin: TopicAdmin, root: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    admin.create("rates", 1)
    b = StreamsBuilder()
    b.global_table("rates", Consumed.with_(S, L), Materialized.as_("rates"))
    b.stream("orders").to("out")
    topology = b.build()
    send(admin, "rates", ("eur", b"bad"), ("usd", L.serialize("rates", 3)))
    cfg = config(
        root,
        tmp_path,
        **{
            "deserialization.exception.handler": "log-and-continue",
            "errors.dead.letter.queue.topic.name": "dead",
        },
    )
    with caplog.at_level("WARNING", logger="runtime.tasks.global_state"):
        stores = GlobalStores.for_plan(plan(topology, cfg, root))
    assert stores["rates"].get("usd").value == 3
    assert "dead" in caplog.text and not admin.exists("dead")


def test_global_topics_must_exist_at_start(admin: TopicAdmin) -> None:
    admin.create("orders", 2)
    admin.create("out", 2)
    topology = rates_topology()
    with pytest.raises(UnknownTopicError, match="global topic 'rates'"):
        plan_topics(topology, admin, "globals")
    admin.create("rates", 3)
    planned = plan_topics(topology, admin, "globals")
    assert planned.global_topics == ("rates",)
    assert "rates" not in planned.sources  # no task reads it


def test_slices_are_trimmed_to_the_position() -> None:
    dense = [
        FileSlice(Segment(0, 5, "a.parquet", None), 0, 5, "/t/a.parquet"),
        FileSlice(Segment(5, 5, "b.parquet", None), 0, 5, "/t/b.parquet"),
    ]
    sparse = FileSlice(Segment(10, 2, "c.parquet", None, span=6), 0, 2, "/t/c.parquet", 11)
    assert _slices_from(dense, 0) == dense
    trimmed = _slices_from([*dense, sparse], 7)
    assert [(s.file, s.start, s.length, s.first_offset) for s in trimmed] == [
        ("/t/b.parquet", 2, 3, 7),
        ("/t/c.parquet", 0, 2, 11),  # compacted: filtered by offset once read
    ]
    assert _slices_from([*dense, sparse], 16) == []
