"""``StreamsApp``: a topology running as a Spark Structured Streaming query (Kafka's
``KafkaStreams``).

::

    app = StreamsApp(topology, {"application.id": "wordcount", "topics.root": "/data",
                                "processing.guarantee": "exactly_once_v2"})
    app.start()
    app.await_termination()

``start()`` checks the topics, creates the internal ones, fences any older instance of
the same stream thread (its transactional id ``<application.id>-<processId>-<thread>``
survives restarts through the process id kept in ``state.dir``), and starts the query:
the ``streams-topic`` source from the committed positions, one ``foreachBatch`` call per
micro-batch, triggered every ``commit.interval.ms``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from runtime.app_state import AppState, AppStateMachine, StateListener
from runtime.internal_topics import TopicPlan, plan_topics
from runtime.process_id import load_or_create_process_id
from runtime.spark.session import get_or_create_session
from runtime.spark.source import SOURCE_NAME, TopicSource
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.stream_thread import StreamThread, plan_levels
from streams.config import StreamsConfig
from streams.errors import StreamsError
from topology.topology import Topology

log = logging.getLogger(__name__)


class StreamsApp:
    """Runs ``topology`` with ``config`` on Spark, exactly once under exactly_once_v2.

    Args:
        topology: the built topology.
        config: a :class:`StreamsConfig` or a mapping of dotted keys.
        spark: the session to use (default: the active one, else a local one).
    """

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig | Mapping[str, Any],
        *,
        spark: SparkSession | None = None,
    ) -> None:
        self.config = config if isinstance(config, StreamsConfig) else StreamsConfig(**config)
        self.topology = topology
        topology.validate(self.config)
        self.application_id = self.config.application_id
        self._spark = spark
        self._machine = AppStateMachine(self.application_id)
        self.admin = TopicAdmin(self.config.topics_root)
        self.process_id = ""
        self.threads: list[StreamThread] = []
        self.queries: list[StreamingQuery] = []
        self.plan: TopicPlan | None = None
        self.uncaught_exception_handler: Callable[[BaseException], None] | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    # -- state ----------------------------------------------------------------------------

    @property
    def state(self) -> AppState:
        """The application's state."""
        return self._machine.state

    def set_state_listener(self, listener: StateListener) -> None:
        """Call ``listener(new, old)`` on every state change."""
        self._machine.listener = listener

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start processing (returns once the query runs).

        Raises:
            UnknownTopicError: a source or sink topic does not exist.
            TaskMigratedError: ... later, from await_termination, when fenced.
        """
        self._machine.transit(AppState.REBALANCING)
        try:
            self.plan = plan_topics(
                self.topology, self.admin, self.application_id, config=self.config
            )
            self.process_id = load_or_create_process_id(self.config.state_dir, self.application_id)
            n = self.config.num_stream_threads
            in_batch = n == 1 and self.config.processing_guarantee != "exactly_once"
            levels = plan_levels(
                self.topology,
                self.plan.sources,
                self.plan.tasks,
                self.application_id,
                in_batch=in_batch,
            )
            width = max(self.plan.tasks.values(), default=1)
            for index in range(1, n + 1):
                share = None if n == 1 else [p for p in range(width) if p % n == index - 1]
                thread = StreamThread(
                    self.topology,
                    self.config,
                    self.admin,
                    outputs=self.plan.outputs,
                    sources=self.plan.sources,
                    transactional_id=f"{self.application_id}-{self.process_id}-{index}",
                    tasks=self.plan.tasks,
                    partitions=share,
                    levels=levels,
                )
                positions = thread.start()
                self.threads.append(thread)
                self.queries.append(self._start_query(thread, index, positions))
        except BaseException:
            self._machine.transit(AppState.PENDING_ERROR)
            self._machine.transit(AppState.ERROR)
            raise
        self._machine.transit(AppState.RUNNING)

    def run_until_idle(self) -> None:
        """Process everything available now (and what that produces), then close."""
        if self.state is AppState.CREATED:
            self.start()
        try:
            # Threads feed each other through repartition topics: drain until a whole
            # round moves no position.
            while True:
                before = [dict(t.positions) for t in self.threads]
                for query in self.queries:
                    query.processAllAvailable()
                if [t.positions for t in self.threads] == before or len(self.queries) == 1:
                    break
        except Exception as exc:
            self._fail(exc)
        self.close()

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the query to end; re-raise its error. Return whether it ended."""
        if not self.queries:
            return self.state.is_terminal()
        try:
            if timeout is None:
                for query in self.queries:
                    query.awaitTermination()
                return True
            deadline = time.monotonic() + timeout
            for query in self.queries:
                left = max(0.0, deadline - time.monotonic())
                # Seconds, as Spark's (it accepts floats; its annotation says int).
                if not query.awaitTermination(left):  # type: ignore[arg-type]
                    return False
            return True
        except Exception as exc:
            self._fail(exc)
            raise  # _fail raises; this keeps the type checker informed

    def close(self, timeout: float | None = None) -> bool:
        """Stop the query, abort any open transaction; return whether it stopped in time."""
        with self._lock:
            if self.state.is_terminal():
                return True
            if self.state is not AppState.PENDING_SHUTDOWN:
                self._machine.transit(AppState.PENDING_SHUTDOWN)
            self._stop_all()
            self._machine.transit(AppState.NOT_RUNNING)
            return True

    def cleanup(self) -> None:
        """Delete this application's local state directory (only when not running)."""
        if self.state.is_running_or_rebalancing():
            raise StreamsError(
                f"[app {self.application_id}] cleanup() is only allowed before start() or "
                "after close()"
            )
        shutil.rmtree(os.path.join(self.config.state_dir, self.application_id), True)

    # -- internals ------------------------------------------------------------------------

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            self._spark = get_or_create_session(f"streams-{self.application_id}")
        return self._spark

    def checkpoint_location(self) -> str:
        """Where Spark keeps this application's query checkpoint."""
        return self.admin.root.uri_of("_apps", self.application_id, "checkpoint")

    @property
    def thread(self) -> StreamThread | None:
        """The first stream thread (None before start)."""
        return self.threads[0] if self.threads else None

    @property
    def query(self) -> StreamingQuery | None:
        """The first thread's query (None before start)."""
        return self.queries[0] if self.queries else None

    def metrics(self) -> dict[str, float]:
        """Application metrics summed over the threads (Kafka's ``metrics()``)."""
        out: dict[str, float] = {}
        for thread in self.threads:
            for name, value in thread.metrics.items():
                out[name] = out.get(name, 0) + value
            out["commit-total"] = out.get("commit-total", 0) + thread.batches
        return out

    def _stop_all(self) -> None:
        for query in self.queries:
            query.stop()
        for thread in self.threads:
            thread.close()

    def _start_query(
        self, thread: StreamThread, index: int, positions: dict[tuple[str, int], int]
    ) -> StreamingQuery:
        assert self.plan is not None
        topics = thread.subscribed
        starting: dict[str, dict[str, int]] = {}
        reader = TopicReader(self.admin)
        for (topic, partition), offset in positions.items():
            starting.setdefault(topic, {})[str(partition)] = offset
        for topic in topics:  # internal topics always start at the beginning
            if topic not in self.plan.external_sources:
                begin = reader.beginning_offsets(topic)
                known = starting.setdefault(topic, {})
                for p, off in begin.items():
                    known.setdefault(str(p), off)
        self.spark.dataSource.register(TopicSource)
        stream = (
            self.spark.readStream.format(SOURCE_NAME)
            .option("root", self.admin.root.uri_of())
            .option("topics", json.dumps(topics))
            .option("starting_offsets", json.dumps(starting))
            .option("auto_offset_reset", self.config.auto_offset_reset)
            .option("max_poll_records", str(self.config.max_poll_records))
            .option("partitions", json.dumps(thread.partitions) if thread.partitions else "")
            .load()
        )
        return (
            stream.writeStream.foreachBatch(thread.run_batch)
            .queryName(f"streams-{self.application_id}-{index}")
            .option("checkpointLocation", self.checkpoint_location() + f"/thread-{index}")
            .trigger(processingTime=f"{self.config.commit_interval_ms} milliseconds")
            .start()
        )

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self._stop_all()
        if not self.state.is_terminal():
            if self.state is AppState.PENDING_SHUTDOWN:
                self._machine.transit(AppState.NOT_RUNNING)
            else:
                self._machine.transit(AppState.PENDING_ERROR)
                self._machine.transit(AppState.ERROR)
        if self.uncaught_exception_handler is not None:
            self.uncaught_exception_handler(exc)
        raise exc
