"""Metrics with Kafka Streams' names on a running word count: ``app.metrics()`` and the
Prometheus endpoint (``metrics.port``)."""

from __future__ import annotations

import math
import re
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from common.metrics import MetricsSnapshot
from runtime.app.app import StreamsApp
from runtime.metrics_http import prometheus_name
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from tests.runtime.spark.helpers import eos_config
from topology import Materialized, StreamsBuilder

WORDS = [f"w{i}" for i in range(13)]


def word_count() -> Any:
    b = StreamsBuilder()
    (
        b.stream("lines")
        .flat_map_values(str.split)
        .group_by(lambda _k, w: w)
        .count(Materialized.as_("word-counts"))
        .to_stream()
        .to("counts-out")
    )
    return b.build()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def produce(admin: TopicAdmin, lines: list[str], start: int = 0) -> int:
    producer = Producer(admin)
    for i, line in enumerate(lines):
        producer.send("lines", f"k{(start + i) % 5}".encode(), line.encode(), timestamp=1000 + i)
    producer.flush()
    return sum(len(line.split()) for line in lines)


def wait_caught_up(app: StreamsApp, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        thread = app.thread
        if thread is not None and thread.batches and thread.caught_up():
            lags = app.metrics().select("records-lag", "consumer-fetch-manager-metrics")
            if lags and all(m.value == 0 for m in lags):
                return
        time.sleep(0.1)
    raise AssertionError("the application did not catch up")


def check_every_metric(m: MetricsSnapshot, records: int, lines: int, distinct: int) -> None:
    thread = "stream-thread-metrics"
    # thread level: every record processed once (lines at the source, words after the
    # repartition: Kafka's process-total counts both sub-topologies' records)
    assert m.total("process-total", thread) == records
    assert m.total("process-rate", thread) > 0
    assert m.total("process-latency-avg", thread) > 0
    assert m.total("process-latency-max", thread) >= m.total("process-latency-avg", thread)
    assert m.total("poll-total", thread) >= 1
    assert m.total("poll-records-max", thread) >= 1
    assert m.total("commit-total", thread) >= 1
    assert m.total("commit-rate", thread) > 0
    assert 0 < m.total("commit-latency-avg", thread) <= m.total("commit-latency-max", thread)
    assert m.total("punctuate-total", thread) == 0  # the word count schedules none
    assert not math.isnan(m.total("batch-latency-avg", thread))
    # task level
    assert m.total("dropped-records-total", "stream-task-metrics") == 0
    assert m.total("process-total", "stream-task-metrics") == records
    assert {x.tags["task-id"] for x in m.select("process-total", "stream-task-metrics")} == {
        "0_0",
        "0_1",
        "1_0",
        "1_1",
    }
    assert m.total("restore-total", "stream-task-metrics") == 0
    # processor nodes: the sources' records and end-to-end latencies (the records carry
    # timestamps from 1970: the latency is the age of the records)
    node = "stream-processor-node-metrics"
    assert m.total("process-total", node, processor_node_id="KSTREAM-SOURCE-0000000000") == lines
    e2e = m.select("record-e2e-latency-avg", node)
    assert {x.tags["processor-node-id"] for x in e2e} >= {
        "KSTREAM-SOURCE-0000000000",
        "KSTREAM-SINK-0000000008",
        "word-counts-repartition-source",
        "word-counts-repartition-sink",
    }
    assert all(x.value > 1_000_000 for x in e2e)
    # stores: operations (DEBUG), size and keys
    state = "stream-state-metrics"
    puts = m.select("put-rate", state, rocksdb_state_id="word-counts")
    assert puts and sum(x.value for x in puts) > 0
    assert m.total("get-latency-avg", state, rocksdb_state_id="word-counts") > 0
    # RocksDB's estimate counts a key's writes still in its memtable: at least the keys
    keys = m.total("estimate-num-keys", state, rocksdb_state_id="word-counts")
    assert distinct <= keys <= records
    assert m.total("total-sst-files-size", state, rocksdb_state_id="word-counts") >= 0
    # consumer lag, rebalances, transactions
    assert m.select("records-lag", "consumer-fetch-manager-metrics")
    assert m.total("records-lag", "consumer-fetch-manager-metrics") == 0
    assert m.total("records-lag-max", "consumer-fetch-manager-metrics") > 0
    assert m.total("rebalance-total", "consumer-coordinator-metrics") >= 1
    assert m.total("rebalance-latency-avg", "consumer-coordinator-metrics") > 0
    assert m.total("last-rebalance-seconds-ago", "consumer-coordinator-metrics") >= 0
    assert m.total("txn-commit-total", "producer-metrics") >= 1
    assert m.total("txn-commit-time-ns-total", "producer-metrics") > 0
    assert m.total("txn-abort-total", "producer-metrics") >= 0
    assert m.value("alive-stream-threads", "stream-metrics") == 1
    assert m.value("failed-stream-threads", "stream-metrics") == 0


def scrape(port: int) -> dict[str, float]:
    """Every sample of the endpoint: ``name{labels}`` -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_the_word_count_has_kafkas_metrics_and_serves_them_to_prometheus(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """Every metric of the issue on a running word count (DEBUG level): plausible values
    (process-total equals the records processed, records-lag falls to 0, commit-latency >
    0), and the same figures over HTTP in Prometheus' text format."""
    admin.create("lines", 2)
    admin.create("counts-out", 2)
    lines = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + i % 4)) for i in range(80)]
    words = produce(admin, lines)
    port = free_port()
    config = eos_config(
        "metrics",
        root,
        str(tmp_path / "state"),
        **{"metrics.recording.level": "DEBUG", "metrics.port": port, "max.poll.records": 10},
    )
    app = StreamsApp(word_count(), config, spark=spark)
    progress: list[object] = []
    app.add_progress_listener(progress.append)
    app.start()
    try:
        wait_caught_up(app)
        m = app.metrics()
        check_every_metric(m, len(lines) + words, len(lines), len(WORDS))
        assert progress, "no batch progress was told"
        samples = scrape(port)
        thread_id = app.threads[0].reporter.sensors.thread_id  # type: ignore[union-attr]
        name = prometheus_name("stream-thread-metrics", "process-total")
        key = f'{name}{{thread_id="{thread_id}"}}'
        assert samples[key] == m.value("process-total", "stream-thread-metrics")
        lag = prometheus_name("consumer-fetch-manager-metrics", "records-lag")
        lags = {k: v for k, v in samples.items() if re.match(lag + r"\{", k)}
        assert len(lags) == 2 and set(lags.values()) == {0.0}, lags
        # more input: the totals move on
        more = produce(admin, lines[:10], start=80)
        wait_caught_up(app)
        total = app.metrics().total("process-total", "stream-thread-metrics")
        assert total == len(lines) + words + 10 + more
    finally:
        app.close()
    # the endpoint closes with the application, the metrics stay readable
    assert app.metrics().total("process-total", "stream-thread-metrics") > 0
