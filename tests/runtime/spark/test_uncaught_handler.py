"""The uncaught exception handler (Kafka's StreamsUncaughtExceptionHandler) on local Spark:
REPLACE_THREAD carries on exactly once, SHUTDOWN_CLIENT stops this instance with the
thread's own error, SHUTDOWN_APPLICATION stops the other instances too."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.errors import StreamsError, StreamsProcessingError
from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.app.app_state import AppState, StreamThreadExceptionResponse
from runtime.group.coordinator import GroupCoordinator, GroupState
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.thread.shutdown import ApplicationShutdownError
from topology import Consumed, Produced, StreamsBuilder, Topology

S = Serdes.String()


def failing_topology(flag: str | None) -> Topology:
    """Upper-case values; the value "boom" raises, once if ``flag`` is a path (the first
    attempt creates it), always if ``flag`` is None."""

    def upper(value: str) -> str:
        if value == "boom" and (flag is None or not os.path.exists(flag)):
            if flag is not None:
                Path(flag).touch()
            raise RuntimeError("boom")
        return value.upper()

    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, S)).map_values(upper).to("out", Produced.with_(S, S))
    return b.build()


def setup(root: str) -> None:
    admin = TopicAdmin(root)
    admin.create("in", 2)
    admin.create("out", 2)
    producer = Producer(admin)
    for i, value in enumerate(["a", "b", "boom", "c", "d"]):
        producer.send("in", f"k{i}".encode(), value.encode(), timestamp=1, partition=i % 2)
    producer.flush()


def config(root: str, state: Path, **extra: Any) -> dict[str, Any]:
    return {
        "application.id": "handler",
        "topics.root": root,
        "state.dir": str(state),
        "processing.guarantee": "exactly_once_v2",
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,  # one instance: no one to wait for
        "max.poll.records": 2,
        **extra,
    }


def output(root: str) -> list[str]:
    reader = TopicReader(root)
    return sorted(
        v.decode()
        for p in reader.end_offsets("out")
        for v in reader.read("out", p, 0).column("value").to_pylist()
    )


def test_replace_thread_carries_on_exactly_once(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    setup(root)
    app = StreamsApp(
        failing_topology(str(tmp_path / "failed-once")), config(root, tmp_path / "s"), spark=spark
    )
    seen: list[BaseException] = []

    def handler(exc: BaseException) -> StreamThreadExceptionResponse:
        seen.append(exc)
        return StreamThreadExceptionResponse.REPLACE_THREAD

    app.set_uncaught_exception_handler(handler)
    app.run_until_idle()
    assert app.replaced_threads == 1
    assert len(seen) == 1 and isinstance(seen[0], StreamsProcessingError)
    assert "boom" in str(seen[0])
    assert app.state is AppState.NOT_RUNNING
    assert output(root) == ["A", "B", "BOOM", "C", "D"]  # the failed batch once, not twice


def test_shutdown_client_stops_with_the_threads_own_error(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    setup(root)
    app = StreamsApp(failing_topology(None), config(root, tmp_path / "s"), spark=spark)
    app.set_uncaught_exception_handler(lambda exc: StreamThreadExceptionResponse.SHUTDOWN_CLIENT)
    with pytest.raises(StreamsProcessingError, match="boom"):
        app.run_until_idle()
    assert app.state is AppState.ERROR
    assert "BOOM" not in output(root)


def test_shutdown_application_stops_the_other_instances(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    """Two instances of one application split its tasks; the one that meets the bad record
    asks for SHUTDOWN_APPLICATION, and the other stops before its next batch."""
    admin = TopicAdmin(root)
    admin.create("in", 2)
    admin.create("out", 2)
    producer = Producer(admin)
    apps = [
        StreamsApp(failing_topology(None), config(root, tmp_path / name), spark=spark)
        for name in ("a", "b")
    ]
    for app in apps:
        app.set_uncaught_exception_handler(
            lambda exc: StreamThreadExceptionResponse.SHUTDOWN_APPLICATION
        )
        app.start()
    coordinator = GroupCoordinator(admin)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # both members hold one task each
        group = coordinator.describe("handler")
        tasks = [len(m.assignment.user_data.get("tasks", [])) for m in group.members]
        if group.state is GroupState.STABLE and tasks == [1, 1]:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the two instances did not split the tasks: {group}")
    producer.send("in", b"k", b"boom", timestamp=1, partition=0)
    producer.flush()
    time.sleep(2)
    for p in (0, 1):  # batches on both instances, to notice the request
        producer.send("in", b"k", b"nudge", timestamp=1, partition=p)
    producer.flush()
    failures: list[BaseException] = []
    for app in apps:
        with pytest.raises(StreamsError) as info:
            app.await_termination(120)
        failures.append(info.value)
        assert app.state is AppState.ERROR
    kinds = sorted(type(f).__name__ for f in failures)
    assert kinds == ["ApplicationShutdownError", "StreamsProcessingError"], failures
    stopped = next(f for f in failures if isinstance(f, ApplicationShutdownError))
    assert "SHUTDOWN_APPLICATION" in str(stopped) and "boom" in str(stopped)
    assert "BOOM" not in output(root)
