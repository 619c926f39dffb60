"""The order a task takes the records of several topics in (Kafka's ``PartitionGroup``):
by timestamp, waiting for a drained partition that has more to read, and spilling the
records shuffled inside the batch that wait to their topic."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common.config import StreamsConfig
from runtime.storage.records import HEADERS_TYPE
from runtime.tasks.partition_group import Processed, hold_back, merged_order, process_records
from topology import StreamsBuilder
from topology.engine.task import StreamTask

CONFIG = StreamsConfig.from_dict(
    {
        "application.id": "pg",
        "topics.root": "/tmp/unused",
        "default.key.serde": "string",
        "default.value.serde": "string",
    }
)


class ListCollector:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, int]] = []

    def send(  # noqa: PLR0917 - the RecordCollector protocol
        self, topic: str, key: Any, value: Any, timestamp: int, headers: Any, partition: Any
    ) -> None:
        self.sent.append((topic, value, timestamp))

    def partitions_for(self, topic: str) -> int:
        return 1


def test_records_after_a_drained_partition_with_more_to_read_wait() -> None:
    """``a``'s partition has records beyond the batch: once its last record here is taken,
    the rest (``b``'s 30) waits for the next batch; nobody waiting takes everything."""

    def rows(stamps: list[int]) -> pa.Table:
        return pa.table({"timestamp": pa.array(stamps, pa.int64())})

    queues = [("a", rows([1, 5, 6, 20])), ("b", rows([2, 3, 30]))]
    order = merged_order(queues)
    assert order == [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (0, 3), (1, 2)]
    assert hold_back(order, [4, 3], [True, False]) == [4, 2]
    assert hold_back(order, [4, 3], [False, True]) == [4, 3]  # b drains last: all of it
    assert hold_back(order, [4, 3], [False, False]) is None


def _records(rows: list[tuple[str, int, str, int]]) -> pa.Table:
    """(topic, offset, value, timestamp) rows of partition 0; offset -1: shuffled."""
    return pa.table(
        {
            "topic": pa.array([r[0] for r in rows], pa.string()),
            "partition": pa.array([0] * len(rows), pa.int32()),
            "offset": pa.array([r[1] for r in rows], pa.int64()),
            "key": pa.array([b"k"] * len(rows), pa.binary()),
            "value": pa.array([r[2].encode() for r in rows], pa.binary()),
            "timestamp": pa.array([r[3] for r in rows], pa.int64()),
            "headers": pa.array([[] for _ in rows], HEADERS_TYPE),
        }
    )


def _merge(
    table: pa.Table, position: tuple[str, int], truncated: str, *, wait: bool = True
) -> tuple[list[bytes], Processed]:
    """Run ``table`` through a fresh task merging ``stored`` and ``shuffled``; return what
    it sent on, in order, and what :func:`process_records` did."""
    b = StreamsBuilder()
    b.stream("stored").merge(b.stream("shuffled")).to("out")
    collector = ListCollector()
    task = StreamTask(b.build(), 0, 0, CONFIG, collector)
    task.initialize()
    by_topic = {
        topic: table.filter(pc.equal(table.column("topic"), topic))
        for topic in set(table.column("topic").to_pylist())
    }
    done = process_records(
        task,
        0,
        by_topic,
        ["shuffled", "stored"],
        positions={(position[0], 0): position[1]},
        truncated=frozenset({(truncated, 0)}),
        wait=wait,
    )
    return [v for _, v, _ in collector.sent], done


def test_shuffled_records_that_wait_are_spilled_and_stored_ones_read_again() -> None:
    """``stored`` (read from storage, offsets 4..6, more beyond the batch) drains at 30:
    the shuffled records after it are spilled (they exist nowhere else), the stored ones
    before the position are skipped, and the position moves past what was taken."""
    table = _records(
        [
            ("stored", 3, "old", 5),  # below the committed position: processed before
            ("stored", 4, "s4", 10),
            ("stored", 5, "s5", 30),
            ("shuffled", -1, "x1", 20),
            ("shuffled", -1, "x2", 40),
            ("shuffled", -1, "x3", 50),
        ]
    )
    sent, done = _merge(table, ("stored", 4), "stored")
    assert sent == [b"s4", b"x1", b"s5"]
    assert done.consumed == {("stored", 0): 6}  # never a position for shuffled records
    assert done.held_back == 2
    ((topic, spilled),) = done.spilled
    assert topic == "shuffled"
    assert spilled.column("value").to_pylist() == [b"x2", b"x3"]
    assert spilled.column("timestamp").to_pylist() == [40, 50]

    # without waiting (max.task.idle.ms < 0) everything is taken, nothing spilled
    sent, done = _merge(table, ("stored", 4), "stored", wait=False)
    assert sent == [b"s4", b"x1", b"s5", b"x2", b"x3"]
    assert not done.spilled and done.held_back == 0


def test_a_spilled_topic_with_more_stored_records_spills_every_new_shuffled_one() -> None:
    """Records spilled by an earlier batch are read from storage before the shuffled ones
    of this batch; while the stored ones are capped (``truncated``), every shuffled record
    comes after records not read yet, so it is spilled behind them."""
    table = _records(
        [
            ("shuffled", 0, "spilled-before", 15),
            ("shuffled", -1, "new", 16),
            ("stored", 7, "s7", 20),
        ]
    )
    sent, done = _merge(table, ("stored", 7), "shuffled")
    assert sent == [b"spilled-before"]
    assert done.consumed == {("shuffled", 0): 1}
    assert [t for t, _ in done.spilled] == ["shuffled"]
    assert done.spilled[0][1].column("value").to_pylist() == [b"new"]
    assert done.held_back == 2  # the spilled one, and s7 read again next batch
