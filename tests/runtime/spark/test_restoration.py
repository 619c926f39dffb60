"""Tasks restore in the background of their hosts (Kafka's state updater): a batch runs
the tasks that are ready and goes on without those that restore; they run from a later
batch, once restored, and nothing is lost or counted twice."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from statestores.state_directory import StateDirectory
from tests.runtime.spark.helpers import eos_config
from topology import Materialized, Produced, StreamsBuilder

S, L = Serdes.String(), Serdes.Long()
PARTITIONS = 2


def word_count() -> Any:
    b = StreamsBuilder()
    words = b.stream("lines").flat_map_values(str.split)
    counts = words.group_by(lambda _k, w: w).count(Materialized.as_("counts"))
    counts.to_stream().to("counts-out", Produced.with_(S, L))
    return b.build()


def produce(admin: TopicAdmin, lines: list[str]) -> None:
    producer = Producer(admin)
    for i, line in enumerate(lines):
        producer.send("lines", f"k{i}".encode(), line.encode(), timestamp=1000 + i)
    producer.flush()


def outputs(root: str, topic: str) -> list[tuple[str, int]]:
    reader = TopicReader(root)
    out = []
    for p in sorted(reader.end_offsets(topic)):
        t = reader.read(topic, p, 0)
        keys, values = t.column("key").to_pylist(), t.column("value").to_pylist()
        out.extend((k.decode(), L.deserialize(topic, v)) for k, v in zip(keys, values, strict=True))
    return out


@dataclass
class Setting:
    spark: SparkSession
    admin: TopicAdmin
    root: str
    state: str

    def count(self, config: dict[str, Any], first: list[str]) -> None:
        """Create the topics; count ``first``'s words until idle."""
        self.admin.create("lines", PARTITIONS)
        self.admin.create("counts-out", PARTITIONS)
        produce(self.admin, first)
        app = StreamsApp(word_count(), config, spark=self.spark)
        app.run_until_idle()
        app.close()


@pytest.fixture
def setting(spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path) -> Setting:
    return Setting(spark, admin, root, str(tmp_path / "state"))


def test_a_batch_runs_the_ready_tasks_while_the_others_restore_in_the_background(
    setting: Setting, caplog: pytest.LogCaptureFixture
) -> None:
    """The word count runs, stops, and loses its state directory; it starts again with
    ``restore.wait.ms`` 0 (a batch never waits for a restoration) and new lines. Its first
    batch runs the split of lines while the counts restore: the words it hands on to the
    restoring counts are written to their repartition topic (a batch that runs every task
    hands them on in memory), from where the counts read
    them once restored. Every count is the count of both runs' words, each written once."""
    spark, admin, root = setting.spark, setting.admin, setting.root
    first = [f"w{i % 7} w{i % 11} w{i % 3}" for i in range(120)]
    second = [f"w{i % 5} w{i % 13}" for i in range(80)]
    config = eos_config("restoring", root, setting.state)
    setting.count(config, first)
    repartition = next(t for t in admin.list() if t.endswith("-repartition"))
    spilled_before = sum(TopicReader(root).end_offsets(repartition).values())

    shutil.rmtree(setting.state)  # every store restores from storage
    produce(admin, second)
    with caplog.at_level(logging.INFO, logger="runtime.thread.placement"):
        app = StreamsApp(word_count(), {**config, "restore.wait.ms": 0}, spark=spark)
        app.run_until_idle()
        metrics = app.metrics().by_name("stream-thread-metrics")
        app.close()

    assert "tasks restoring in the background: 1_0, 1_1" in caplog.text, caplog.text
    assert "tasks restoring in the background: none (restored: 1_0, 1_1)" in caplog.text
    # the second run's words reached the counts through the topic: the batch that split
    # them ran while the counts restored
    spilled = sum(TopicReader(root).end_offsets(repartition).values()) - spilled_before
    assert 0 < spilled <= sum(len(line.split()) for line in second)
    assert metrics["restore-records-total"] > 0 or metrics["store-restore-total"] == 0

    words = Counter(w for line in [*first, *second] for w in line.split())
    written = outputs(root, "counts-out")
    last = dict(written)
    assert last == dict(words)
    assert max(Counter(written).values()) == 1  # no count written twice


def test_a_thread_whose_every_task_opens_waits_for_their_restoration_inside_its_batch(
    setting: Setting, caplog: pytest.LogCaptureFixture
) -> None:
    """The word count starts again while another process holds its counts' state
    directories for 4 s (a killed executor's host lets go of them late): restorations
    longer than ``restore.wait.ms`` (2 s). No task of the thread runs yet, so no other
    task could use the batch: the first batch waits for them up to its target time (12 s
    here) and runs them, instead of answering "restoring" after 2 s and finding them
    restored a batch later."""
    spark, admin, root, state = setting.spark, setting.admin, setting.root, setting.state
    first = [f"w{i % 7} w{i % 11}" for i in range(60)]
    second = [f"w{i % 5}" for i in range(40)]
    config = eos_config("opening", root, state)
    setting.count(config, first)

    produce(admin, second)
    held = StateDirectory(state, "opening")
    for task in ("1_0", "1_1"):
        held.lock(task)
    release = threading.Timer(4.0, lambda: [held.unlock(t) for t in ("1_0", "1_1")])
    release.start()
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="runtime.thread.placement"):
        app = StreamsApp(word_count(), config, spark=spark)
        app.run_until_idle()
        app.close()
    release.join()
    assert time.monotonic() - started >= 4.0  # the restorations waited for the locks
    assert "tasks restoring in the background" not in caplog.text, caplog.text
    words = Counter(w for line in [*first, *second] for w in line.split())
    written = outputs(root, "counts-out")
    assert dict(written) == dict(words)
    assert max(Counter(written).values()) == 1
