"""The metrics registry (Kafka's sensors and stats), the task figures' path to it, the
Prometheus exposition, and the progress output of the command line."""

from __future__ import annotations

import io
import json
import math
import urllib.request
from pathlib import Path

import pytest

from common.config import StreamsConfig
from common.metrics import MetricName, Metrics, RecordingLevel
from common.serdes import Serdes
from runtime.metrics import StreamsMetrics
from runtime.metrics_http import MetricsServer, prometheus_name
from runtime.thread.progress import BatchProgress
from streams.cli.progress import BatchLines, ProgressBar, RestoreWatch
from streams.testing import TopologyTestDriver
from topology import Materialized, StreamsBuilder
from topology.engine.task_metrics import RESTORE_PROGRESS, TaskStats


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_windowed_stats_follow_kafkas_samples() -> None:
    clock = Clock()
    reg = Metrics(sample_window_ms=1000, num_samples=2, clock=clock)
    sensor = reg.sensor("s")
    tags = {"t": "1"}
    for stat in ("avg", "max", "min", "rate", "count-rate", "total", "count"):
        sensor.add(MetricName.of(f"x-{stat}", "g", tags), stat)
    sensor.record(10)
    sensor.record_many(3, 30, high=20, low=1)
    m = reg.snapshot()
    assert m.value("x-total", "g") == 40 and m.value("x-count", "g") == 4
    assert m.value("x-avg", "g") == 10 and m.value("x-max", "g") == 20
    assert m.value("x-min", "g") == 1
    # a young sensor's rate is over at least (samples - 1) windows, as Kafka's
    assert m.value("x-rate", "g") == 40 and m.value("x-count-rate", "g") == 4
    clock.now += 2500  # both samples are out of the window
    m = reg.snapshot()
    assert math.isnan(m.value("x-avg", "g")) and m.value("x-rate", "g") == 0
    assert m.value("x-total", "g") == 40  # cumulative


def test_sensors_above_the_recording_level_record_nothing_and_have_no_metrics() -> None:
    reg = Metrics("INFO")
    reg.sensor("debug", RecordingLevel.DEBUG).add(MetricName.of("d", "g"), "total")
    reg.sensor("debug", RecordingLevel.DEBUG).record(5)
    assert not reg.snapshot().select("d")
    with pytest.raises(ValueError, match="not INFO, DEBUG or TRACE"):
        Metrics("LOUD")


def test_snapshot_lookups_name_what_is_missing() -> None:
    reg = Metrics()
    reg.sensor("a").add(MetricName.of("n-total", "g", {"task-id": "0_0"}), "count")
    reg.sensor("b").add(MetricName.of("n-total", "g", {"task-id": "0_1"}), "count")
    reg.sensor("a").record()
    m = reg.snapshot()
    assert m.total("n-total", "g") == 1 and m.value("n-total", task_id="0_0") == 1
    assert m.by_name("g") == {"n-total": 1}
    with pytest.raises(KeyError, match="2 metrics named 'n-total'"):
        m.value("n-total")
    with pytest.raises(KeyError, match="no metric named 'nope'"):
        m.total("nope")


def test_task_figures_reach_the_application_metrics(tmp_path: Path) -> None:
    """A task's drained figures (as a batch's rows carry them) feed thread, task, node and
    store metrics; the test driver shows them too."""
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("counts")).to_stream().to("out")
    config = {
        "application.id": "m",
        "metrics.recording.level": "DEBUG",
        "default.key.serde": "string",
        "default.value.serde": "string",
    }
    with TopologyTestDriver(b.build(), config) as driver:
        source = driver.create_input_topic("in", Serdes.String(), Serdes.String())
        for i in range(7):
            source.pipe_input(f"k{i % 3}", "v", timestamp=1000 + i)
        m = driver.metrics()
    assert m.total("process-total", "stream-thread-metrics") == 7
    assert m.total("process-total", "stream-task-metrics", task_id="0_0") == 7
    assert m.total("put-rate", "stream-state-metrics") > 0
    assert m.total("dropped-records-total") == 0
    nodes = {x.tags["processor-node-id"] for x in m.select("record-e2e-latency-max")}
    assert nodes == {"KSTREAM-SOURCE-0000000000", "KSTREAM-SINK-0000000003"}


def test_the_prometheus_endpoint_serves_the_snapshot() -> None:
    config = StreamsConfig(**{"application.id": "p", "topics.root": "memory://p"})
    metrics = StreamsMetrics(config, "p-1")
    thread = metrics.thread("p-1-StreamThread-1", "p-1-StreamThread-1")
    stats = TaskStats()
    stats.record("process", "", 5, 5_000_000)
    thread.task_stats("0_0", *stats.drain())
    thread.lagged({("in", 0): 3})
    server = MetricsServer(metrics.snapshot, 0, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics") as r:
            text = r.read().decode()
    finally:
        server.close()
    name = prometheus_name("stream-thread-metrics", "process-total")
    assert f'{name}{{thread_id="p-1-StreamThread-1"}} 5.0' in text
    assert "# TYPE kafka_stream_thread_metrics_process_total counter" in text
    lag = prometheus_name("consumer-fetch-manager-metrics", "records-lag")
    assert f'{lag}{{client_id="p-1-StreamThread-1-consumer",partition="0",topic="in"}} 3.0' in text


def test_batch_lines_print_each_batch_or_each_interval() -> None:
    out = io.StringIO()
    lines = BatchLines(0, out)
    lines(BatchProgress("t", 4, 5, 200, 40, 0, 31.0, 410.0))
    assert out.getvalue() == (
        "batch 4: in 200 out 40 lag 0 commit 31 ms batch 410 ms (488 records/s)\n"
    )
    out = io.StringIO()
    lines = BatchLines(3600, out)
    lines(BatchProgress("t", 1, 1, 100, 10, 50, 20.0, 100.0))
    lines(BatchProgress("t", 2, 2, 50, 5, 0, 40.0, 100.0))
    assert out.getvalue() == ""
    lines.flush()
    assert out.getvalue().startswith("batches 1-2 (2): in 150 out 15 lag 0 commit 30 ms")


def test_progress_bar_and_restore_watch(tmp_path: Path) -> None:
    out = io.StringIO()  # not a terminal: a line per tenth
    with ProgressBar("producing", 100, out) as bar:
        for _ in range(100):
            bar.update()
    printed = out.getvalue().splitlines()
    assert len(printed) == 12 and printed[-1].startswith("producing [####")
    assert "100/100 in " in printed[-1]
    task = tmp_path / "state" / "app" / "1_0"
    task.mkdir(parents=True)
    (task / RESTORE_PROGRESS).write_text(json.dumps({"counts": [250, 1000]}))
    out = io.StringIO()
    watch = RestoreWatch(str(tmp_path / "state"), "app", out)
    watch.poll()
    assert "restoring counts [" in out.getvalue() and "250/1,000" in out.getvalue()
    (task / RESTORE_PROGRESS).unlink()
    watch.poll()
    assert out.getvalue().splitlines()[-1].startswith("restoring counts [######")
