"""The log manager cleans a running application's topics without changing its results."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from runtime.app.app import StreamsApp
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from tests.runtime.spark.test_app import load_example, output_counts, reference_counts


def test_an_app_purges_merges_and_compacts_its_topics_while_it_runs(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    example = load_example("wordcount")
    lines = example.generate(240)
    admin.create(example.INPUT, 2)
    admin.create(example.OUTPUT, 2)
    producer = Producer(admin)
    now = int(time.time() * 1000)
    for i, (key, line) in enumerate(lines):  # many small files: one per 10 lines
        producer.send(example.INPUT, key.encode(), line.encode(), timestamp=now)
        if i % 10 == 9:
            producer.flush()
    config: dict[str, Any] = {
        **example.CONFIG,
        "application.id": "cleaned",
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,
        "num.stream.threads": 2,  # the repartition topic goes through storage
        "max.poll.records": 40,
        "statestore.snapshot.interval": 2,
        "log.retention.check.interval.ms": 300,
        "log.cleaner.backoff.ms": 300,
        "repartition.purge.interval.ms": 300,
        "log.segment.delete.delay.ms": 1000,
    }
    app = StreamsApp(example.build_topology(), config, spark=spark)
    app.run_until_idle()
    manager = app.log_manager
    assert manager is not None and manager.runs > 0 and manager.last_error is None
    latest, _ = output_counts(root, example.OUTPUT)
    assert latest == reference_counts(example, lines)
    reader = TopicReader(root)
    repartition = "cleaned-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition"
    if not admin.exists(repartition):  # the name the topology gives it
        (repartition,) = [t for t in admin.list() if t.endswith("-repartition")]
    assert any(start > 0 for start in reader.beginning_offsets(repartition).values()), (
        "the repartition topic was not purged"
    )
    assert manager.totals.get("records-deleted", 0) > 0
    assert manager.totals.get("files-merged", 0) > 0
    described = admin.describe(example.INPUT)
    assert sum(p.files for p in described.partitions) < 24  # 24 files were produced
    assert sum(p.records for p in described.partitions) == 240  # ...holding every line
