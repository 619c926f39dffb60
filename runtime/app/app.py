"""``StreamsApp``, Kafka's ``KafkaStreams``: a topology as a Spark Structured Streaming query.

::

    app = StreamsApp(topology, {"application.id": "wordcount", "topics.root": "/data",
                                "processing.guarantee": "exactly_once_v2"})
    app.start()
    app.await_termination()

``start()`` checks the topics, creates the internal ones, fences any older instance of
the same stream thread (its transactional id ``<application.id>-<processId>-<thread>``
survives restarts through the process id kept in ``state.dir``), and starts each thread's
query: one ``foreachBatch`` call per micro-batch, which plans its reads from the thread's
positions, triggered when the thread's topics have new records or the thread asks
(:mod:`runtime.spark.trigger`): back to back under at_least_once, at most every
``commit.interval.ms`` under exactly-once (:mod:`runtime.thread.liveness`). A DataFrame
source's query ingests as often, and at most every ``poll.ms``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from common.config import StreamsConfig
from common.errors import StreamsError
from common.metrics import MetricsSnapshot
from runtime.app.app_state import (
    AppState,
    AppStateMachine,
    IllegalStateTransitionError,
    StateListener,
    StreamThreadExceptionResponse,
)
from runtime.app.dataframe_sources import (
    DataFrameIngest,
    DataFrameSourceError,
    check_sources,
    drain_all,
    first_failure,
    ingests,
    wake_all,
)
from runtime.app.fork import prepare_start
from runtime.app.initial_state import InitialState
from runtime.app.insight import AppInsight
from runtime.app.internal_topics import TopicPlan, plan_topics
from runtime.app.local_state import shutdown_marker
from runtime.app.log_manager import LogManager, plan_topics_cleaned
from runtime.app.process_id import claim_state_dir, release_state_dir
from runtime.app.store_queries import QueryableStore
from runtime.app.thread_errors import respond_to
from runtime.app.upgrades import StateUpgrade
from runtime.spark.checkpoint import cancel_jobs, checkpoint_location, start_batches
from runtime.spark.session import check_local_workers
from runtime.spark.source_topics import pattern_watch
from runtime.spark.startup import SessionStart
from runtime.spark.trigger import BatchTrigger
from runtime.spark.warmup import warm_executors
from runtime.storage.fs import register_storage_options
from runtime.storage.topics import TopicAdmin
from runtime.tasks.client import shutdown_hosts
from runtime.thread.batch_levels import BatchLevels, plan_thread_levels
from runtime.thread.guarantees import query_trigger_ms
from runtime.thread.membership import ThreadMembership, task_partitions
from runtime.thread.placement import shutdown_executor_hosts
from runtime.thread.progress import BatchProgress
from runtime.thread.stream_thread import StreamThread
from topology.graph.topology import Topology

log = logging.getLogger(__name__)


class StreamsApp:
    """Runs ``topology`` with ``config`` on Spark, exactly once under exactly_once_v2.

    Args:
        topology: the built topology.
        config: a :class:`StreamsConfig` or a mapping of dotted keys.
        spark: the session to use (default: the active one, else a local one).
        sources: streaming DataFrames to read instead of topics, by the topic the
            topology's source names (``{"clicks": df}``): each is ingested, exactly once,
            into that topic (created when missing) by a query of its own
            (:mod:`runtime.app.dataframe_sources`).
        from_savepoint: start from savepoint ``N`` of this application (rewound to it) or
            ``A/N`` of application ``A`` (a fork: :mod:`runtime.app.fork`).
        upgrades: what becomes of the stores of the last start that a changed topology
            no longer has (:class:`~runtime.app.upgrades.StateUpgrade`).
        initial_state: stores' first content, loaded once before the first batch
            (:class:`~runtime.app.initial_state.InitialState`).
    """

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig | Mapping[str, Any],
        *,
        spark: SparkSession | None = None,
        sources: Mapping[str, DataFrame] | None = None,
        from_savepoint: str | None = None,
        upgrades: Sequence[StateUpgrade] = (),
        initial_state: Mapping[str, InitialState] | None = None,
    ) -> None:
        self.config = config if isinstance(config, StreamsConfig) else StreamsConfig(**config)
        self.topology = topology
        topology.validate(self.config)
        self.dataframe_sources, self.from_savepoint = dict(sources or {}), from_savepoint
        self.upgrades, self.initial_state = tuple(upgrades), dict(initial_state or {})
        check_sources(topology, self.dataframe_sources)
        #: The queries ingesting the DataFrame sources (after start).
        self.ingests: list[DataFrameIngest] = []
        self.application_id = self.config.application_id
        self._spark = spark
        self._session_start: SessionStart | None = None
        self._machine = AppStateMachine(self.application_id)
        register_storage_options(self.config.topics_root, self.config.storage_options)
        self.admin = TopicAdmin(self.config.topics_root)
        self.process_id, self.plan = "", cast("TopicPlan | None", None)
        self.threads: list[StreamThread] = []
        self.queries: list[StreamingQuery] = []
        self.uncaught_exception_handler: (
            Callable[[BaseException], StreamThreadExceptionResponse] | None
        ) = None
        self.replaced_threads, self._started_ms = 0, 0
        #: Retention, compaction, merging, purges of the app's topics (log.cleaner.enable).
        self.log_manager: LogManager | None = None
        self._levels = self._shuffle_levels = cast("BatchLevels | None", None)
        self._error: BaseException | None = None
        #: The threads rejoining their group now (the app is REBALANCING while any is).
        self._rebalancing: set[int] = set()
        self._rebalance_lock = threading.Lock()
        #: While start() runs, the threads' first joins are part of its REBALANCING.
        self._starting = False
        self._lock = threading.Lock()
        #: Its metrics, progress listeners, instance record and store queries.
        self.insight = AppInsight(self)

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
        self._starting = True
        warm = functools.partial(warm_executors, config=self.config)
        if self._spark is None and self._session_start is None:
            # The JVM starts while the topics are planned, the threads join the group and
            # older instances are fenced; the executors warm up as soon as it is there.
            self._session_start = SessionStart(f"streams-{self.application_id}", on_ready=warm)
        elif self._spark is not None:
            warm(self._spark)
        try:
            self.ingests = ingests(
                self.application_id,
                self.dataframe_sources,
                self.admin,
                checkpoint=f"{self.checkpoint_location()}/sources",
                trigger_ms=max(query_trigger_ms(self.config), self.config.poll_ms),
                partitions=self.config.num_partitions,
            )
            self.plan = plan_topics(
                self.topology, self.admin, self.application_id, config=self.config
            )
            self.process_id = claim_state_dir(self.config.state_dir, self.application_id, self)
            prepare_start(self)
            self.insight.started()
            self._machine.observer = self.insight.state_changed
            self._levels, self._shuffle_levels = plan_thread_levels(
                self.topology, self.plan.sources, self.plan.tasks, self.config
            )
            self._started_ms = time.time_ns() // 1_000_000
            for index in range(1, self.config.num_stream_threads + 1):
                self._start_thread(index)
            if self.config.log_cleaner_enable:  # its share of the topics, when not alone
                self.log_manager = LogManager(self.admin, self.config, self._cleaned_topics)
                self.log_manager.start(self.process_id)
            for ingest in self.ingests:  # the threads watch the topics: start feeding them
                ingest.on_commit = functools.partial(wake_all, self.threads)
                ingest.start(self.spark)
        except BaseException:
            release_state_dir(self.config.state_dir, self.application_id, self)
            self._machine.transit(AppState.PENDING_ERROR)
            self._machine.transit(AppState.ERROR)
            raise
        with self._rebalance_lock:  # RUNNING now, or when the last rejoining thread is done
            self._starting = False
            if not self._rebalancing:
                self._machine.transit(AppState.RUNNING)

    def run_until_idle(self) -> None:
        """Process everything available now (and what that produces), then close.

        Raises:
            StreamsError: a stream thread's error the uncaught exception handler let stand.
        """
        if self.state is AppState.CREATED:
            self.start()
        while True:
            # Threads feed each other through repartition topics: drain until a whole
            # round moves no position (and the DataFrame sources add nothing more).
            before = [dict(t.positions) for t in self.threads]
            try:
                ingested = drain_all(self.ingests)
            except DataFrameSourceError as exc:
                self._fail(exc)
            failed = False
            for index, query in enumerate(list(self.queries)):
                try:
                    query.processAllAvailable()
                except Exception as exc:
                    self._on_thread_error(index, exc)  # raises unless the thread is replaced
                    failed = True
            if failed:
                continue
            moved = [t.positions for t in self.threads] != before or ingested
            if not moved and self._idle():
                break
            if not moved:  # a rebalance is under way: let the threads rejoin and read
                for thread in self.threads:
                    thread.wake_now()
                time.sleep(0.1)
        self.close()

    def stop_sources(self) -> None:
        """Stop reading the DataFrame sources (what they ingested is still processed)."""
        for ingest in self.ingests:
            ingest.stop()

    def _idle(self) -> bool:
        """Whether every thread has read all of its tasks' input, and the group is stable
        with every task owned (by this instance or another)."""
        if not all(t.caught_up() for t in self.threads):
            return False
        membership = self.threads[0].membership if self.threads else None
        return membership is None or membership.settled()

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until the application stops; return whether it stopped within ``timeout``
        seconds (None: wait for ever).

        Raises:
            StreamsError: a stream thread's error the uncaught exception handler let stand.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.queries and not self.state.is_terminal():
            if (failure := first_failure(self.ingests)) is not None:
                self._fail(failure)
            for index, query in enumerate(list(self.queries)):
                if not query.isActive:
                    error = query.exception()
                    if error is None:
                        self.close()
                        return True
                    self._on_thread_error(index, error)
            if deadline is not None and time.monotonic() >= deadline:
                return False
            with contextlib.suppress(Exception):  # a failed query: handled just above
                self.queries[0].awaitTermination(0.2)  # type: ignore[arg-type]
        return self.state.is_terminal()

    def set_uncaught_exception_handler(
        self, handler: Callable[[BaseException], StreamThreadExceptionResponse]
    ) -> None:
        """Decide what a stream thread's uncaught error does (Kafka's
        ``setUncaughtExceptionHandler``): REPLACE_THREAD starts the thread again (its
        transaction aborted, its tasks resumed from the committed state), SHUTDOWN_CLIENT
        stops this instance in ERROR (the default), SHUTDOWN_APPLICATION every instance of
        the application.id. ``TaskMigratedError`` never reaches it: the thread rejoins the
        group (Kafka's TaskMigrated), or, when another process took its member's place,
        this instance stops."""
        self.uncaught_exception_handler = handler

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
            if self._session_start is None:
                self._session_start = SessionStart(f"streams-{self.application_id}")
            self._spark = self._session_start.session()
        return self._spark

    def checkpoint_location(self) -> str:
        """Where Spark keeps the query checkpoints (:func:`checkpoint_location`)."""
        return checkpoint_location(self.config, self.admin.root)

    @property
    def thread(self) -> StreamThread | None:
        """The first stream thread (None before start)."""
        return self.threads[0] if self.threads else None

    @property
    def query(self) -> StreamingQuery | None:
        """The first thread's query (None before start)."""
        return self.queries[0] if self.queries else None

    def metrics(self) -> MetricsSnapshot:
        """Every metric now (Kafka's ``metrics()``): ``MetricName -> Metric``, with
        ``.value(name, group, **tags)`` and ``.total(...)`` (names: :mod:`runtime.metrics`)."""
        return self.insight.metrics.snapshot()

    def store(self, name: str, *, timestamped: bool = False) -> QueryableStore:
        """A read-only view of store ``name``'s committed state (Kafka's ``store``; see
        :class:`~runtime.app.store_queries.QueryableStore`), answered on the driver from the
        last committed transaction, while the application runs and after it stopped.

        Raises:
            InvalidStateStoreError: no such store, or it keeps no changelog.
        """
        return self.insight.store(name, timestamped)

    def add_progress_listener(self, listener: Callable[[BatchProgress], None]) -> None:
        """Call ``listener`` with each batch's :class:`BatchProgress` (from the thread
        that ran it; Spark's ``StreamingQueryListener.onQueryProgress`` in this runtime's
        terms). Listeners added before ``start()`` see every batch."""
        self.insight.add_listener(listener)

    @property
    def error(self) -> BaseException | None:
        """The error that stopped the application (None: none)."""
        return self._error

    def _start_thread(self, index: int) -> None:
        """Start stream thread ``index`` (1-based): a member of the application's group,
        running the tasks the group assigns it."""
        assert self.plan is not None and self._levels is not None
        plan = self.plan
        membership = ThreadMembership(
            self.admin,
            self.config,
            instance_id=f"{self.process_id}-{index}",
            client_id=f"{self.application_id}-{self.process_id}-StreamThread-{index}",
            tasks=task_partitions(plan.tasks, plan.sources, self.admin.num_partitions),
            process_id=self.process_id,
            description=str(self.topology.describe()),
        )
        thread = StreamThread(
            self.topology,
            self.config,
            self.admin,
            outputs=self.plan.outputs,
            sources=self.plan.sources,
            transactional_id=f"{self.application_id}-{self.process_id}-{index}",
            tasks=self.plan.tasks,
            levels=self._levels,
            shuffle_levels=self._shuffle_levels,
            membership=membership,
            shutdown_marker=(shutdown_marker(self.admin, self.application_id), self._started_ms),
            internal_sources=frozenset(self.plan.sources) - frozenset(self.plan.external_sources),
            global_topics=plan.global_topics,
            offset_resets=plan.offset_resets,
            metrics=self.insight.thread_metrics(index),
        )
        self.insight.attach(thread)
        # before the thread starts: a record appended after this is seen by its watch
        thread.trigger = BatchTrigger(
            self.admin,
            thread.source_topics,
            poll_ms=self.config.poll_ms,
            name=thread.transactional_id,
            patterns=pattern_watch(
                self.topology, self.application_id, self.admin.list, self.config.metadata_max_age_ms
            ),
        )
        thread.on_rebalancing = functools.partial(self._thread_rebalancing, index)
        thread.trigger.prepare(lambda: self.spark)  # its query's DataFrame, meanwhile:
        thread.start()  # joins and fences (no Spark needed: the JVM may still be starting)
        assert thread.trigger is not None  # its query: a foreachBatch call per batch
        try:
            if not self.threads:
                check_local_workers(self.spark)
            query = start_batches(
                self.spark,
                thread.trigger.dataframe(self.spark).writeStream.foreachBatch(thread.run_batch),
                name=f"streams-{self.application_id}-{self.process_id}-{index}",
                interval_ms=thread.trigger_interval_ms,
                location=f"{self.checkpoint_location()}/{self.process_id}-thread-{index}",
            )
        except BaseException:
            thread.close()  # leaves the group: its tasks move at once
            raise
        if thread.membership is not None:  # a batch its member cannot commit ends at once
            thread.membership.on_lost = functools.partial(cancel_jobs, self.spark, query)
        if len(self.threads) >= index:
            self.threads[index - 1], self.queries[index - 1] = thread, query
        else:
            self.threads.append(thread)
            self.queries.append(query)

    def _thread_rebalancing(self, index: int, rebalancing: bool) -> None:
        """Follow thread ``index``'s rebalances: RUNNING -> REBALANCING when one starts,
        back to RUNNING once no thread is rebalancing (Kafka's ``KafkaStreams`` state)."""
        with self._rebalance_lock:
            if rebalancing:
                self._rebalancing.add(index)
            else:
                self._rebalancing.discard(index)
            state = self.state
            try:
                if rebalancing and state is AppState.RUNNING:
                    self._machine.transit(AppState.REBALANCING)
                elif not (self._rebalancing or self._starting) and state is AppState.REBALANCING:
                    self._machine.transit(AppState.RUNNING)
            except IllegalStateTransitionError:  # a shutdown or an error got there first
                log.debug("[app %s] state %s moved on", self.application_id, state.value)

    def _on_thread_error(self, index: int, error: BaseException) -> None:
        """Apply the uncaught exception handler to thread ``index + 1``'s error: replace
        the thread, or raise after shutting down this instance (or the application)."""
        thread = self.threads[index]
        exc, response = respond_to(thread, error, self.uncaught_exception_handler)
        if response is StreamThreadExceptionResponse.REPLACE_THREAD:
            log.warning(
                "[app %s] replacing stream thread %d after: %s", self.application_id, index + 1, exc
            )
            thread.close(leave=False)  # its successor takes its static member's place
            self.replaced_threads += 1
            self._start_thread(index + 1)
            return
        if response is StreamThreadExceptionResponse.SHUTDOWN_APPLICATION:
            stamp = time.time_ns() // 1_000_000
            self.admin.root.write_bytes(
                shutdown_marker(self.admin, self.application_id), f"{stamp}\n{exc}".encode()
            )
        self._fail(exc)

    def _cleaned_topics(self) -> set[str]:
        """The topics the log manager cleans: every topic the app reads or writes."""
        assert self.plan is not None
        return plan_topics_cleaned(self.plan, [t for th in self.threads for t in th.sources])

    def _stop_all(self) -> None:
        self.insight.stopped()
        for ingest in self.ingests:
            ingest.stop()
        if self.log_manager is not None:
            self.log_manager.close()
        for query in self.queries:
            query.stop()
        for thread in self.threads:
            thread.close()
        # the task hosts close their tasks: this machine's, and on a cluster the
        # executors' (a host not told closes when idle or when its executor ends)
        shutdown_hosts(self.config.state_dir, self.application_id)
        shutdown_executor_hosts(t.placement for t in self.threads)
        release_state_dir(self.config.state_dir, self.application_id, self)

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self._stop_all()
        if not self.state.is_terminal():
            if self.state is AppState.PENDING_SHUTDOWN:
                self._machine.transit(AppState.NOT_RUNNING)
            else:
                self._machine.transit(AppState.PENDING_ERROR)
                self._machine.transit(AppState.ERROR)
        raise exc
