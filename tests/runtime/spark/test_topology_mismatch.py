"""One application.id, one topology: an instance running another topology is refused by
``start()`` with an error naming both, and the running instance carries on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.app.app_state import AppState
from runtime.group.coordinator import GroupCoordinator, GroupState
from runtime.group.errors import TopologyMismatchError
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from topology import Consumed, Produced, StreamsBuilder, Topology

S = Serdes.String()


def upper(skip_empty: bool) -> Topology:
    """Upper-case values; the changed version also drops empty ones."""
    b = StreamsBuilder()
    stream = b.stream("in", Consumed.with_(S, S))
    if skip_empty:
        stream = stream.filter(lambda key, value: bool(value))
    stream.map_values(str.upper).to("out", Produced.with_(S, S))
    return b.build()


def app(spark: SparkSession, root: str, state: Path, skip_empty: bool) -> StreamsApp:
    config = {
        "application.id": "upper",
        "topics.root": root,
        "state.dir": str(state),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,
    }
    return StreamsApp(upper(skip_empty), config, spark=spark)


def test_an_instance_with_a_changed_topology_is_refused(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    admin = TopicAdmin(root)
    admin.create("in", 2)
    admin.create("out", 2)
    running = app(spark, root, tmp_path / "a", skip_empty=False)
    running.start()
    try:
        coordinator = GroupCoordinator(admin)
        deadline = time.monotonic() + 120
        while coordinator.describe("upper").state is not GroupState.STABLE:
            assert time.monotonic() < deadline, "the first instance did not join its group"
            time.sleep(0.2)
        changed = app(spark, root, tmp_path / "b", skip_empty=True)
        with pytest.raises(TopologyMismatchError, match="must run the same topology") as info:
            changed.start()
        assert changed.state is AppState.ERROR  # refused at start, nothing left running
        assert changed.query is None and changed.thread is None
        assert "application-reset" in str(info.value)
        (member,) = coordinator.describe("upper").members  # only the first instance
        assert member.client_id.startswith(f"upper-{running.process_id}-")
        producer = Producer(admin)  # and it carries on
        producer.send("in", b"k", b"still here", timestamp=1, partition=0)
        producer.flush()
        deadline = time.monotonic() + 120
        while "STILL HERE" not in output(root):
            assert running.state is AppState.RUNNING, running.state
            assert time.monotonic() < deadline, "the running instance stopped processing"
            time.sleep(0.2)
    finally:
        running.close(60)


def output(root: str) -> list[str]:
    reader = TopicReader(root)
    return [
        v.decode()
        for p in reader.end_offsets("out")
        for v in reader.read("out", p, 0).column("value").to_pylist()
    ]
