"""On a local master a batch runs its levels one after another in one Spark task (no
shuffle between them); one with ``batch.spark.partitions`` set (or on a cluster) shuffles
between its levels. Both give the same committed results."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark import SparkConf
from pyspark.sql import SparkSession

from common.config import StreamsConfig
from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.spark import executors
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.tasks.contract import BatchPlan, ThreadPlan
from runtime.tasks.protocol import socket_dir
from runtime.thread.batch_job import _planned_job
from runtime.thread.batch_size import FIRST_BATCH_RECORDS
from runtime.thread.placement import TaskPlacement
from tests.runtime.spark.helpers import eos_config
from topology import Grouped, StreamsBuilder

S = Serdes.String()
LINES = [f"w{i % 7} w{i % 5} w{i % 3}" for i in range(120)]


def three_levels() -> Any:
    """Words counted, then how many updates each count value had (two repartitions)."""
    b = StreamsBuilder()
    counts = b.stream("in").flat_map_values(str.split).group_by(lambda _k, w: w).count()
    counts.to_stream().map_values(str).to("out")
    (
        counts.to_stream()
        .group_by(lambda _k, n: str(n), Grouped.with_(S, Serdes.Long()))
        .count()
        .to_stream()
        .map_values(str)
        .to("by-count")
    )
    return b.build()


def latest(root: str, topic: str) -> dict[str, str]:
    """The latest value of each key in ``topic``."""
    reader = TopicReader(root)
    out: dict[str, str] = {}
    for p in range(4):
        table = reader.read(topic, p, 0)
        for k, v in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            out[k.decode()] = v.decode()
    return out


def run(
    spark: SparkSession, tmp_path: Path, name: str, **extra: Any
) -> tuple[dict[str, str], dict[str, str]]:
    root = str(tmp_path / name / "root")
    admin = TopicAdmin(root)
    for topic in ("in", "out", "by-count"):
        admin.create(topic, 4)
    producer = Producer(admin)
    for i, line in enumerate(LINES):
        producer.send("in", f"k{i}".encode(), line.encode(), timestamp=1000 + i)
    producer.flush()
    # without caches every count update reaches the second count, wherever batches end
    # (with them, the updates it sees are one per key and batch: a loaded machine's other
    # batch boundaries changed them)
    more = {"max.poll.records": 7, "statestore.cache.max.bytes": 0, **extra}
    config = eos_config(f"small-{name}", root, str(tmp_path / name / "state"), **more)
    app = StreamsApp(three_levels(), config, spark=spark)
    app.run_until_idle()
    assert app.threads[0].batches > 3  # several batches of a few records each
    return latest(root, "out"), latest(root, "by-count")


def test_fused_and_shuffled_batches_commit_the_same(spark: SparkSession, tmp_path: Path) -> None:
    fused = run(spark, tmp_path, "fused")
    shuffled = run(spark, tmp_path, "shuffled", **{"batch.spark.partitions": 2})
    expected = Counter(w for line in LINES for w in line.split())
    assert fused[0] == {w: str(n) for w, n in expected.items()}
    assert fused == shuffled


def test_a_thread_on_a_local_master_runs_the_same_job_at_every_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark plans a fused batch's job once per shape: later batches only run it (their
    plans read from a file that the thread deletes when it closes)."""
    before = _planned_job.cache_info()
    root = str(tmp_path / "same" / "root")
    got = run(spark, tmp_path, "same")
    after = _planned_job.cache_info()
    expected = Counter(w for line in LINES for w in line.split())
    assert got[0] == {w: str(n) for w, n in expected.items()}
    built = after.misses - before.misses
    assert 1 <= built <= 2  # the first batch's shape, and maybe one more
    assert after.hits - before.hits >= 3
    sockets = socket_dir(str(tmp_path / "same" / "state"), "small-same")
    assert not [n for n in os.listdir(sockets) if n.endswith(".pickle")], root


def test_a_batch_on_a_local_master_runs_in_one_spark_partition() -> None:
    auto = TaskPlacement(StreamsConfig.from_dict({"application.id": "a", "topics.root": "/tmp/x"}))
    auto.spark_partitions = 2  # Spark's parallelism, learnt at the first batch
    auto.local = True  # a local master
    assert auto.for_plan()["spark_partitions"] == 1
    auto.local = False  # a cluster: its tasks spread over the executors
    assert auto.for_plan()["spark_partitions"] == 2
    configured = TaskPlacement(
        StreamsConfig.from_dict(
            {"application.id": "a", "topics.root": "/tmp/x", "batch.spark.partitions": 3}
        )
    )
    configured.spark_partitions = 3
    configured.local = True
    assert configured.for_plan()["spark_partitions"] == 3


def test_a_batch_on_a_cluster_takes_a_spark_partition_per_executor_core(
    spark: SparkSession,
) -> None:
    """Spark's default parallelism is two at least: on a one-core cluster a batch of two
    Spark partitions ran them one after the other (its tasks opened in two halves)."""
    assert executors.slots(spark.sparkContext) == spark.sparkContext.defaultParallelism
    assert executors.wait_for_expected(spark.sparkContext, "test") == []  # local: no wait
    for master, slots in (("local-cluster[1,1,1024]", 1), ("local-cluster[2, 3, 512]", 6)):
        context = SimpleNamespace(master=master, defaultParallelism=2)
        assert executors.slots(context) == slots  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("master", "conf", "want", "wait_s"),
    [
        ("local-cluster[3,1,1024]", {}, 3, 30.0),
        ("spark://m:7077", {"spark.executor.instances": "4"}, 4, 30.0),
        (
            "yarn",
            {"spark.executor.instances": "4", "spark.dynamicAllocation.enabled": "true"},
            0,
            30.0,
        ),
        ("spark://m:7077", {"spark.scheduler.maxRegisteredResourcesWaitingTime": "5s"}, 0, 5.0),
        ("k8s://h", {"spark.scheduler.maxRegisteredResourcesWaitingTime": "1500"}, 0, 1.5),
        ("k8s://h", {"spark.scheduler.maxRegisteredResourcesWaitingTime": "2min"}, 0, 120.0),
    ],
)
def test_a_first_batch_waits_for_the_executors_the_application_asked_for(
    master: str, conf: dict[str, str], want: int, wait_s: float
) -> None:
    """How many executors a first batch waits for, and how long at most (Spark's
    ``spark.scheduler.maxRegisteredResourcesWaitingTime``, milliseconds without a unit)."""
    context = SimpleNamespace(master=master, getConf=lambda: SparkConf(False).setAll(conf.items()))
    assert executors.expected(context) == want  # type: ignore[arg-type]
    assert executors.wait_limit_s(context) == wait_s  # type: ignore[arg-type]


def test_tasks_beyond_task_hosts_max_share_hosts_and_commit_the_same(
    spark: SparkSession, tmp_path: Path
) -> None:
    """12 tasks (three sub-topologies, four partitions) in 5 hosts: three tasks share the
    first two hosts, two tasks each other one; every level's visits still run side by
    side, a shared host's one after another, and the results are those of one host per
    task."""
    shared = run(spark, tmp_path, "shared", **{"task.hosts.max": 5})
    own = run(spark, tmp_path, "own", **{"task.hosts.max": 0})
    assert shared == own
    sockets = socket_dir(str(tmp_path / "shared" / "state"), "small-shared")
    hosts = {f"{t}.sock" for t in ("0_0", "1_0", "2_0", "0_1", "1_1")}
    assert {name for name in os.listdir(sockets) if name.endswith(".sock")} == {
        *hosts,
        "server.sock",
    }


def test_a_task_lives_in_the_host_of_its_number_modulo_task_hosts_max() -> None:
    config = StreamsConfig.from_dict(
        {"application.id": "a", "topics.root": "/tmp/x", "task.hosts.max": 5}
    )
    plan = BatchPlan(
        thread=ThreadPlan(three_levels(), config, "/tmp/x", "owner"),
        outputs={},
        staging_dir="",
        sources={},
        positions={},
        transaction=None,
    )
    # numbered 0_0, 1_0, 2_0, 0_1, 1_1 | 2_1, 0_2, 1_2, 2_2, 0_3 | 1_3, 2_3
    assert [plan.host_of(t) for t in ("0_0", "1_1", "2_1", "0_2", "0_3", "1_3", "2_3")] == [
        "0_0",
        "1_1",
        "0_0",
        "1_0",
        "1_1",
        "0_0",
        "1_0",
    ]
    own = StreamsConfig.from_dict(
        {"application.id": "a", "topics.root": "/tmp/x", "task.hosts.max": 0}
    )
    unbounded = dataclasses.replace(plan, thread=ThreadPlan(three_levels(), own, "/tmp/x", "o"))
    assert unbounded.host_of("2_3") == "2_3"


def test_a_batch_of_a_level_whose_other_topic_is_empty_grows_its_cap(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A level's batches are capped by what the level's topics were sized to, and sized by
    the same kind, though an empty topic gives them nothing (a thread owning none of a
    source's partitions reads none of it): measured as the topics read, the cap stayed at
    its first 1,000 records per partition through any backlog."""
    root = str(tmp_path / "root")
    admin = TopicAdmin(root)
    for topic in ("a", "b", "out"):
        admin.create(topic, 1)
    producer = Producer(admin)
    for i in range(6_000):
        producer.send("a", f"k{i}".encode(), f"v{i}".encode(), timestamp=1000 + i)
    producer.flush()
    builder = StreamsBuilder()
    builder.stream(["a", "b"]).map_values(str.upper).to("out")
    config = eos_config("sized", root, str(tmp_path / "state"), **{"max.poll.records": 50_000})
    app = StreamsApp(builder.build(), config, spark=spark)
    app.run_until_idle()
    thread = app.threads[0]
    grown = thread.liveness.sizer.history.get(frozenset({"a", "b"}), [])
    assert grown and max(grown) > FIRST_BATCH_RECORDS, thread.liveness.sizer.history
    assert thread.batches < 6
    assert TopicReader(root).read("out", 0, 0).num_rows == 6_000
