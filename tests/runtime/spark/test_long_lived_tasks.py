"""Tasks live as long as their assignment: built once on their host, stores opened once,
in-memory stores restored once, wall-clock punctuators on schedule without input."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from statestores.stores import Stores
from streams.testing import TopologyTestDriver
from tests.runtime.spark.helpers import eos_config
from topology import Materialized, Processor, Produced, PunctuationType, Record, StreamsBuilder

S, L = Serdes.String(), Serdes.Long()


def two_store_topology() -> Any:
    """A word count in RocksDB and a per-key count in an in-memory store."""
    b = StreamsBuilder()
    lines = b.stream("lines")
    words = lines.flat_map_values(str.split)
    words.group_by(lambda _k, w: w).count(Materialized.as_("word-counts")).to_stream().to(
        "word-counts-out", Produced.with_(S, L)
    )
    b.add_state_store(
        Stores.key_value_store_builder(Stores.in_memory_key_value_store("per-key"), S, L)
    )
    lines.process(KeyCounter, "per-key").to("per-key-out", Produced.with_(S, L))
    return b.build()


class KeyCounter(Processor[str, str, str, int]):
    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store("per-key")

    def process(self, record: Record[str, str]) -> None:
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        self.context.forward(Record(record.key, count, record.timestamp))


def config(root: str, tmp_path: Path, **more: Any) -> dict[str, Any]:
    return eos_config("long-lived", root, str(tmp_path / "state"), **more)


def read_all(root: str, topic: str) -> list[tuple[str, int, int]]:
    reader = TopicReader(root)
    out = []
    for p in sorted(reader.end_offsets(topic)):
        t = reader.read(topic, p, 0)
        for k, v, ts in zip(
            t.column("key").to_pylist(),
            t.column("value").to_pylist(),
            t.column("timestamp").to_pylist(),
            strict=True,
        ):
            out.append((k.decode(), L.deserialize(topic, v), ts))
    return out


def test_stores_are_opened_once_over_many_batches(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """Over 30 batches in one run each task is built once, each store opened once, and the
    in-memory store restored once; the outputs equal the test driver's."""
    admin.create("lines", 1)
    admin.create("word-counts-out", 1)
    admin.create("per-key-out", 1)
    lines = [(f"k{i % 3}", f"w{i % 5} w{i % 7}") for i in range(60)]
    producer = Producer(admin)
    for i, (key, line) in enumerate(lines):
        producer.send("lines", key.encode(), line.encode(), timestamp=1000 + i)
    producer.flush()
    app = StreamsApp(
        two_store_topology(), config(root, tmp_path, **{"max.poll.records": 2}), spark=spark
    )
    app.run_until_idle()
    metrics = app.metrics().by_name("stream-thread-metrics")
    assert metrics["commit-total"] >= 30
    # sub-topologies: 0 (flat_map to the repartition, and the in-memory per-key count),
    # 1 (the word count, RocksDB): one task each
    assert metrics["task-created-total"] == 2
    assert metrics["store-open-total"] == 2
    assert metrics["store-restore-total"] == 1  # the in-memory store, once
    assert metrics.get("task-closed-dirty-total", 0) == 0

    with TopologyTestDriver(two_store_topology(), config(root, tmp_path)) as driver:
        topic = driver.create_input_topic("lines", S, S)
        for i, (key, line) in enumerate(lines):
            topic.pipe_input(key, line, timestamp=1000 + i)
        expected_words = driver.create_output_topic(
            "word-counts-out", S, L
        ).read_key_values_to_map()
        per_key = driver.create_output_topic("per-key-out", S, L).read_records_to_list()
    got_words: dict[str, int] = {}
    for word, count, _ in read_all(root, "word-counts-out"):
        got_words[word] = count
    assert got_words == expected_words
    assert [(k, v, ts) for k, v, ts in read_all(root, "per-key-out")] == [
        (r.key, r.value, r.timestamp) for r in per_key
    ]


class Ticker(Processor[str, str, str, int]):
    """Forwards a tick every 500 ms of wall-clock time."""

    def init(self, context: Any) -> None:
        super().init(context)
        context.schedule(500, PunctuationType.WALL_CLOCK_TIME, self.tick)

    def process(self, record: Record[str, str]) -> None:
        pass

    def tick(self, now: int) -> None:
        self.context.forward(Record("tick", now, now))


def test_wall_clock_punctuator_fires_on_schedule_without_input(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """No record ever arrives; a 500 ms wall-clock punctuator fires on schedule: never twice
    in one interval, and never later than the batch running when it fell due allows (on
    an idle machine 8-11 times in 5 s; on a loaded one, where a batch outlasts the interval,
    a punctuation missed meanwhile fires once, not once per missed interval, as Kafka's
    ``PunctuationSchedule.next``)."""
    admin.create("silence", 1)
    admin.create("ticks", 1)
    b = StreamsBuilder()
    b.stream("silence").process(Ticker).to("ticks", Produced.with_(S, L))
    app = StreamsApp(b.build(), config(root, tmp_path, **{"commit.interval.ms": 100}), spark=spark)
    batches: list[tuple[float, float]] = []  # (when it ended, its ms)
    app.add_progress_listener(lambda p: batches.append((time.monotonic(), p.batch_ms)))
    app.start()
    try:
        deadline = time.monotonic() + 120
        while not read_all(root, "ticks"):  # the first tick: the task is built and running
            assert time.monotonic() < deadline, "no tick within 120 s"
            time.sleep(0.05)
        started = time.monotonic()
        first = read_all(root, "ticks")[0][2]
        done = threading.Event()
        done.wait(5.5)
        ticks = [ts for _, _, ts in read_all(root, "ticks") if first < ts <= first + 5000]
    finally:
        app.close()
    slowest = max(ms for at, ms in batches if at > started)
    late = 500 + slowest + 100 + 300  # interval, a batch, the trigger, scheduling
    gaps = [b - a for a, b in zip([first, *ticks], ticks, strict=False)]
    assert len(ticks) <= 11, ticks
    assert max(gaps) <= late, (gaps, slowest)
    assert first + 5000 - ticks[-1] <= late, (ticks, slowest)
    if slowest < 350:  # a batch well inside the interval: every interval has its tick
        assert len(ticks) >= 8, (ticks, slowest)
