"""A streams application with its storage root on S3 (an S3-compatible server started by
the test): topics, transaction and group logs, snapshots and staged files live there;
Spark's checkpoint goes under ``state.dir``; the executors reach the store with the
storage options the batch plan carries (not the environment)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pyspark.sql import SparkSession

from runtime.app.app import StreamsApp
from runtime.storage.fs import StorageRoot
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from tests.examples.harness import load_example
from tests.s3server import S3Server


def test_word_count_runs_exactly_once_with_its_root_on_s3(
    spark: SparkSession, s3_server: S3Server, s3_root: str, tmp_path: Path
) -> None:
    example = load_example("wordcount")
    admin = TopicAdmin(s3_root)
    for topic, partitions in example.TOPICS.items():
        admin.create(topic, partitions)
    lines = [line for _, line in example.generate(300)]
    producer = Producer(admin)
    for n, line in enumerate(lines):
        producer.send(example.INPUT, f"line-{n}".encode(), line.encode())
    producer.flush()
    config = {
        **example.CONFIG,
        **s3_server.config(),
        "topics.root": s3_root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 100,
        "max.poll.records": 50,
        "statestore.snapshot.interval": 1,
    }
    app = StreamsApp(example.build_topology(), config, spark=spark)
    app.run_until_idle()
    assert app.thread is not None and app.thread.batches >= 2  # 300 lines, 4 partitions
    # Spark's checkpoint is local; everything else is in the bucket
    assert app.checkpoint_location().startswith(str(tmp_path / "state"))
    root = StorageRoot(s3_root)
    assert root.list_dir(root.path("snapshots")), "no store snapshot on S3"

    reader = TopicReader(admin)
    last: dict[str, int] = {}
    for partition in range(example.TOPICS[example.OUTPUT]):
        table = reader.read(example.OUTPUT, partition, 0)
        for key, value in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            last[key.decode()] = int.from_bytes(value, "big", signed=True)
    expected = Counter(w for line in lines for w in example.WORD.findall(line.lower()))
    assert last == dict(expected)
