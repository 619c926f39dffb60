"""A Python process killed in the middle of a batch (a Spark worker, or a task host) costs
a retried job or a rebuilt task, never a lost or a doubled record."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.tasks.protocol import socket_dir
from streams.testing import TopologyTestDriver
from tests.runtime.spark.helpers import eos_config
from topology import Materialized, Produced, StreamsBuilder

S, L = Serdes.String(), Serdes.Long()


def slow_once(marker: str) -> Any:
    """A value mapper that, at the value "slow", writes ``marker`` and sleeps 4 s, once
    (the file says it already did): the moment to kill a process."""

    def mapper(value: str) -> str:
        if value == "slow" and not os.path.exists(marker):
            Path(marker).write_text(str(os.getpid()))
            time.sleep(4)
        return value

    return mapper


def topology(marker: str) -> Any:
    b = StreamsBuilder()
    (
        b.stream("in")
        .map_values(slow_once(marker))
        .group_by_key()
        .count(Materialized.as_("counts"))
        .to_stream()
        .to("out", Produced.with_(S, L))
    )
    return b.build()


def loss_config(application_id: str, root: str, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    state = str(tmp_path / "state")
    return eos_config(application_id, root, state, **{"max.poll.records": 5, **extra})


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _children(parent: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if _ppid(int(name)) == parent:
                    out.append(int(name))
            except OSError:
                continue
    return out


def spark_workers(spark: SparkSession) -> list[int]:
    """The Python workers of this session's JVM (children of its Python daemons)."""
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    return [w for daemon in _children(jvm) for w in _children(daemon)]


def run_with_kill(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path, victim: str
) -> tuple[dict[str, int], list[tuple[str, int]], dict[str, float]]:
    marker = str(tmp_path / "slow-started")
    admin.create("in", 1)
    admin.create("out", 1)
    values = [*(f"v{i}" for i in range(20)), "slow", *(f"v{i}" for i in range(20, 40))]
    producer = Producer(admin)
    for i, value in enumerate(values):
        producer.send("in", f"k{i % 4}".encode(), value.encode(), timestamp=1000 + i)
    producer.flush()
    config = loss_config("worker-loss", root, tmp_path)
    killed: list[int] = []

    def kill_when_slow() -> None:
        deadline = time.monotonic() + 120
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)
        # a worker: every Python worker of the session; a host: the one running "slow"
        pids = spark_workers(spark) if victim == "worker" else [int(Path(marker).read_text())]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # an idle worker that ended since it was listed
                continue
            killed.append(pid)

    killer = threading.Thread(target=kill_when_slow, daemon=True)
    killer.start()
    app = StreamsApp(topology(marker), config, spark=spark)
    app.run_until_idle()
    killer.join(5)
    assert killed, "nothing was killed"
    reader = TopicReader(root)
    table = reader.read("out", 0, 0)
    records = [
        (k.decode(), L.deserialize("out", v))
        for k, v in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        )
    ]
    latest: dict[str, int] = {}
    for key, count in records:
        latest[key] = count
    with TopologyTestDriver(topology(marker), config) as driver:
        topic = driver.create_input_topic("in", S, S)
        for i, value in enumerate(values):
            topic.pipe_input(f"k{i % 4}", value, timestamp=1000 + i)
        expected = driver.create_output_topic("out", S, L).read_key_values_to_map()
    assert latest == expected
    return latest, records, app.metrics().by_name("stream-thread-metrics")


@pytest.mark.parametrize("victim", ["worker", pytest.param("host", marks=pytest.mark.slow)])
def test_a_killed_process_loses_nothing_and_doubles_nothing(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path, victim: str
) -> None:
    _, records, metrics = run_with_kill(spark, admin, root, tmp_path, victim)
    doubled = [r for r, n in Counter(records).items() if n > 1]
    assert not doubled  # each (key, count) at most once: no batch counted twice
    if victim == "worker":
        assert metrics.get("job-retry-total", 0) >= 1
    else:  # the host died: its task (the only one) was rebuilt from committed state
        assert metrics["task-created-total"] == 2, metrics


def test_socket_dir_is_short_enough_for_unix_sockets(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 200)
    assert len(os.path.join(socket_dir(str(deep), "a" * 200), "123_456.sock")) < 107


def _fk_topology(tmp_path: Path) -> Any:
    """A foreign-key join whose left side notes its host's pid (in the foreign-key
    extractor) and whose right side sleeps 4 s once, at the value "slow"."""
    left_pid, marker = tmp_path / "left-pid", tmp_path / "right-slow"

    def foreign_key(value: str) -> str:
        left_pid.write_text(str(os.getpid()))
        return value.split(":", maxsplit=1)[0]

    def right_value(value: str) -> str:
        if value == "slow" and not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(4)
        return value

    b = StreamsBuilder()
    right = b.table("right").map_values(right_value)
    b.table("left").join(right, foreign_key, lambda a, c: f"{a}+{c}").to_stream().to("out")
    return b.build()


def test_a_task_host_lost_between_the_levels_of_a_foreign_key_join_costs_a_retried_job(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """The left side of a foreign-key join runs twice in a batch (its updates, then the
    responses). Its host killed in between: the new host cannot finish a batch whose first
    half it never saw, so the whole job runs again; nothing is lost or doubled."""
    for topic in ("left", "right", "out"):
        admin.create(topic, 1)
    inputs = [("right", "c1", "slow"), ("left", "o1", "c1:a"), ("left", "o2", "c1:b")]
    inputs += [("right", "c1", "Ann"), ("left", "o3", "c1:c"), ("left", "o4", "c1:d")]
    producer = Producer(admin)
    for i, (topic, key, value) in enumerate(inputs):
        producer.send(topic, key.encode(), value.encode(), timestamp=1000 + i)
    producer.flush()
    config = loss_config("fk-host-loss", root, tmp_path, **{"statestore.cache.max.bytes": 0})
    killed: list[int] = []

    def kill_left_host() -> None:
        deadline = time.monotonic() + 120
        marker = tmp_path / "right-slow"
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        pid = int((tmp_path / "left-pid").read_text())
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = threading.Thread(target=kill_left_host, daemon=True)
    killer.start()
    app = StreamsApp(_fk_topology(tmp_path), config, spark=spark)
    app.run_until_idle()
    killer.join(5)
    assert killed, "nothing was killed"
    table = TopicReader(root).read("out", 0, 0)
    records = list(
        zip(
            [k.decode() for k in table.column("key").to_pylist()],
            [v.decode() for v in table.column("value").to_pylist()],
            strict=True,
        )
    )
    with TopologyTestDriver(_fk_topology(tmp_path / "driver"), config) as driver:
        (tmp_path / "driver").mkdir()
        topics = {t: driver.create_input_topic(t, S, S) for t in ("left", "right")}
        for i, (topic, key, value) in enumerate(inputs):
            topics[topic].pipe_input(key, value, timestamp=1000 + i)
        expected = driver.create_output_topic("out", S, S).read_key_values_to_list()
    by_key: dict[str, list[tuple[str, str]]] = {}
    for key, value in records:
        by_key.setdefault(key, []).append((key, value))
    expected_by_key: dict[str, list[tuple[str, str]]] = {}
    for key, value in expected:
        expected_by_key.setdefault(str(key), []).append((str(key), str(value)))
    assert by_key == expected_by_key
    metrics = app.metrics().by_name("stream-thread-metrics")
    assert metrics.get("job-retry-total", 0) >= 1, metrics
