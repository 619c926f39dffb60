"""The topic source under real Spark: offsets, per-partition caps, task grouping."""

from __future__ import annotations

import json
import pickle
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from common.errors import OffsetOutOfRangeError
from runtime.spark.source import SOURCE_NAME, TopicSource, read_task_input, resolve_positions
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin


def fill(admin: TopicAdmin, topic: str, partitions: int, per_partition: int) -> None:
    admin.create(topic, partitions)
    producer = Producer(admin)
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(topic, b"k%d" % i, f"{topic}-{p}-{i}".encode(), partition=p, timestamp=i)
        producer.flush()  # one file per partition and flush: reads cross file boundaries


def run_stream(
    spark: SparkSession, root: str, tmp: Path, topics: list[str], **options: str
) -> list[dict[str, Any]]:
    """Run the source until idle; return per-batch summaries from inside Spark tasks."""
    spark.dataSource.register(TopicSource)
    reader = spark.readStream.format(SOURCE_NAME).option("root", root)
    reader = reader.option("topics", json.dumps(topics))
    for key, value in options.items():
        reader = reader.option(key, value)
    batches: list[dict[str, Any]] = []
    lock = threading.Lock()

    def per_task(it: Any) -> Any:
        batches = list(it)
        if not batches:
            return
        rows = pa.Table.from_batches(batches)
        topics = rows.column("topic").to_pylist()
        partitions = rows.column("partition").to_pylist()
        groups = sorted(set(zip(topics, partitions, strict=True)))
        yield pa.RecordBatch.from_pydict(
            {
                "groups": pa.array([json.dumps(groups)], pa.string()),
                "n": pa.array([rows.num_rows], pa.int64()),
            }
        )

    def on_batch(df: DataFrame, batch_id: int) -> None:
        rows = df.select("topic", "partition", "offset", "value").collect()
        tasks = df.mapInArrow(per_task, "groups string, n long").collect()
        with lock:
            batches.append({"id": batch_id, "rows": rows, "tasks": tasks})

    query = (
        reader.load()
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", str(tmp / "checkpoint"))
        .trigger(processingTime="10 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return batches


def test_reads_every_record_once_capped_per_partition_and_grouped_by_partition(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    fill(admin, "a", 3, 5)
    fill(admin, "b", 3, 4)
    batches = run_stream(spark, root, tmp_path, ["a", "b"], max_poll_records="2")

    seen = [(r.topic, r.partition, r.offset, r.value) for b in batches for r in b["rows"]]
    expected = [
        (t, p, i, f"{t}-{p}-{i}".encode())
        for t, n in (("a", 5), ("b", 4))
        for p in range(3)
        for i in range(n)
    ]
    assert sorted(seen) == sorted(expected)  # every record exactly once
    assert len(batches) == 3  # ceil(5 / 2) polls of 2 records per partition
    for batch in batches:
        per_partition: dict[tuple[str, int], int] = {}
        for r in batch["rows"]:
            per_partition[(r.topic, r.partition)] = per_partition.get((r.topic, r.partition), 0) + 1
        assert max(per_partition.values()) <= 2
        # One Spark partition holds partition p of every topic, nothing else.
        for task in batch["tasks"]:
            groups = json.loads(task.groups)
            assert len({p for _, p in groups}) <= 1


def test_starting_offsets_and_reset(admin: TopicAdmin, root: str) -> None:
    fill(admin, "c", 2, 3)
    reader = TopicReader(root)
    assert resolve_positions(reader, ["c"], {"c": {"0": 2}}, "earliest") == {"c": {"0": 2, "1": 0}}
    assert resolve_positions(reader, ["c"], {}, "latest") == {"c": {"0": 3, "1": 3}}
    # A committed offset past the log end is clamped to it.
    assert resolve_positions(reader, ["c"], {"c": {"1": 99}}, "earliest") == {"c": {"0": 0, "1": 3}}
    with pytest.raises(OffsetOutOfRangeError, match="c-0.*auto.offset.reset=none"):
        resolve_positions(reader, ["c"], {}, "none")


def test_stream_starts_from_given_offsets(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    fill(admin, "d", 2, 4)
    batches = run_stream(
        spark, root, tmp_path, ["d"], starting_offsets=json.dumps({"d": {"0": 3, "1": 1}})
    )
    seen = sorted((r.partition, r.offset) for b in batches for r in b["rows"])
    assert seen == [(0, 3), (1, 1), (1, 2), (1, 3)]


def test_plan_only_rows_name_what_the_consumer_reads(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """With ``plan_only`` each batch has one row per partition number; reading its task
    input gives exactly the records the record-per-row mode gives."""
    admin.create("a", 2)
    producer = Producer(admin)
    for i in range(10):
        producer.send("a", b"k%d" % i, b"v%d" % i, timestamp=i, partition=i % 2)
    producer.flush()
    spark.dataSource.register(TopicSource)
    got: list[Any] = []

    def collect(df: Any, batch_id: int) -> None:
        got.extend(df.collect())

    query = (
        spark.readStream.format(SOURCE_NAME)
        .option("root", root)
        .option("topics", json.dumps(["a"]))
        .option("plan_only", "true")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sorted(r["partition"] for r in got) == [0, 1]
    records = [
        (row["partition"], row["offset"], row["key"])
        for r in got
        for batch in read_task_input(pickle.loads(r["task_input"]))
        for row in batch.to_pylist()
    ]
    assert sorted(records) == [
        (i % 2, i // 2, b"k%d" % i) for i in sorted(range(10), key=lambda i: (i % 2, i))
    ]
