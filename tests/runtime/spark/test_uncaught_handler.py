"""The uncaught exception handler (Kafka's StreamsUncaughtExceptionHandler) on local Spark:
REPLACE_THREAD carries on exactly once, SHUTDOWN_CLIENT stops this instance with the
thread's own error, SHUTDOWN_APPLICATION stops the other instances too."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from runtime.app import StreamsApp, StreamThreadExceptionResponse
from runtime.app_state import AppState
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.stream_thread import ApplicationShutdownError
from streams.errors import StreamsProcessingError
from streams.serdes import Serdes
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
    setup(root)
    # The healthy instance reads a topic of its own, so only the other one fails.
    TopicAdmin(root).create("quiet", 1)
    b = StreamsBuilder()
    b.stream("quiet", Consumed.with_(S, S)).to("out", Produced.with_(S, S))
    healthy = StreamsApp(b.build(), config(root, tmp_path / "healthy"), spark=spark)
    healthy.start()
    failures: list[BaseException] = []

    def wait() -> None:
        try:
            healthy.await_termination(120)
        except BaseException as exc:
            failures.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    failing = StreamsApp(failing_topology(None), config(root, tmp_path / "failing"), spark=spark)
    failing.set_uncaught_exception_handler(
        lambda exc: StreamThreadExceptionResponse.SHUTDOWN_APPLICATION
    )
    with pytest.raises(StreamsProcessingError):
        failing.run_until_idle()
    nudge = Producer(TopicAdmin(root))
    nudge.send("quiet", b"k", b"v", timestamp=1)  # a batch, to notice the request
    nudge.flush()
    waiter.join(120)
    assert len(failures) == 1, failures
    assert isinstance(failures[0], ApplicationShutdownError), str(failures[0])[:3000]
    assert "SHUTDOWN_APPLICATION" in str(failures[0]) and "boom" in str(failures[0])
    assert healthy.state is AppState.ERROR
