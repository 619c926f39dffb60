"""``TopologyTestDriver``: run a topology record by record, without Spark or storage.

As Kafka's driver: a piped record is queued and processed, then its task commits (caches
flush, so aggregates are forwarded); everything it produced is recorded in its output
topics, and what went to repartition, subscription or source topics is queued behind it;
queued records are then processed one at a time, each followed by a commit, the next taken
from the topic whose head record has the earliest timestamp (breadth first: a record's
outputs all precede those of the records it sent back in). With ``max.task.idle.ms`` > 0 a
drained input holds processing back until the mocked wall clock passes the idle time.
Wall-clock punctuators run on :meth:`TopologyTestDriver.advance_wall_clock_time`.

The driver runs one :class:`topology.engine.task.StreamTask` per sub-topology (task ids ``0_0``,
``1_0``, ...; every topic has one partition unless ``partitions`` says otherwise), built by
the :class:`topology.engine.task_creator.ActiveTaskCreator` with its ``ProcessorStateManager``:
the same engine the Spark runtime runs. DSL stores are in-memory unless the configuration sets
``default.dsl.store`` explicitly; stores the user supplies run as configured, persistent
ones in a temporary state directory removed by :meth:`close`.

Example:
    >>> from common.serdes import Serdes
    >>> from topology import StreamsBuilder
    >>> b = StreamsBuilder()
    >>> b.stream("in").map_values(str.upper).to("out")
    >>> s = Serdes.String()
    >>> with TopologyTestDriver(b.build(), {"application.id": "demo",
    ...         "default.key.serde": "string", "default.value.serde": "string"}) as driver:
    ...     driver.create_input_topic("in", s, s).pipe_input("k", "hello")
    ...     driver.create_output_topic("out", s, s).read_key_value()
    ('k', 'HELLO')
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Mapping
from types import TracebackType
from typing import Any, TypeVar

import pyarrow.compute as pc

from common.config import StreamsConfig
from common.delta_rows import DELETED, parse_sink, rows_table
from common.errors import StreamsError, TopologyError
from common.metrics import MetricsSnapshot
from common.serdes import Serde
from runtime.metrics import StreamsMetrics, store_scopes
from statestores.api import StateStore
from streams.testkit.stores import KeyValueStoreFacade, WindowStoreFacade
from streams.testkit.topics import (
    CapturedRecord,
    EmptyTopicError,
    HeaderList,
    RecordQueues,
    TestInputTopic,
    TestOutputTopic,
    TestRecord,
)
from topology.api.emit import EMIT_INTERVAL_KEY
from topology.engine.task import StreamTask
from topology.engine.task_creator import ActiveTaskCreator
from topology.graph.graph import SinkSpec, SourceSpec
from topology.graph.stores import KeyValueStoreFactory, WindowStoreFactory
from topology.graph.topology import Topology

#: The testing API (``streams.testing``): the driver, its topics, records and stores.
__all__ = [
    "DRIVER_THREAD",
    "EmptyTopicError",
    "KeyValueStoreFacade",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "TopologyTestDriver",
]

K = TypeVar("K")
V = TypeVar("V")
_DUMMY_ROOT = "memory://topology-test-driver"


#: The thread id of the test driver's metrics.
DRIVER_THREAD = "topology-test-driver"


def _config(config: Mapping[str, object] | StreamsConfig | None) -> StreamsConfig:
    if isinstance(config, StreamsConfig):
        if "default_dsl_store" in config.model_fields_set:
            return config
        props: dict[str, object] = dict(config.to_properties())
    else:
        props = dict(config or {})
    props.setdefault("topics.root", _DUMMY_ROOT)
    props.setdefault("default.dsl.store", "in_memory")
    props.setdefault("application.id", "topology-test-driver")
    # as Kafka's driver: an emit-on-close aggregation looks for closed windows every record
    props.setdefault(EMIT_INTERVAL_KEY, 0)
    return StreamsConfig.from_dict(props)


class TopologyTestDriver:
    """Drive ``topology`` with test input topics and read test output topics.

    Args:
        topology: the built topology.
        config: dotted keys or a :class:`~common.config.StreamsConfig`; ``application.id``
            defaults to ``topology-test-driver`` and ``topics.root`` to a dummy.
        initial_wall_clock_time_ms: the mocked wall clock's start (default: now).
        partitions: partition counts of output topics (default 1), for stream partitioners.
    """

    def __init__(
        self,
        topology: Topology,
        config: Mapping[str, object] | StreamsConfig | None = None,
        *,
        initial_wall_clock_time_ms: int | None = None,
        partitions: Mapping[str, int] | None = None,
    ) -> None:
        self.topology = topology
        self.config = _config(config)
        topology.validate(self.config)
        self.application_id = self.config.application_id
        self.wall_clock_ms = (
            time.time_ns() // 1_000_000
            if initial_wall_clock_time_ms is None
            else initial_wall_clock_time_ms
        )
        self._partitions = dict(partitions or {})
        self._state_dir = tempfile.mkdtemp(prefix="topology-test-driver-")
        self._outputs: dict[str, deque[CapturedRecord]] = {}
        self._captured: list[tuple[str, CapturedRecord]] = []
        #: The records waiting to be processed (Kafka's task queues).
        self._pending = RecordQueues(self.config.max_task_idle_ms)
        self._offsets: dict[str, int] = {}
        self._routes: dict[str, StreamTask | None] = {}
        # the engine production runs: tasks and their ProcessorStateManager built by the
        # ActiveTaskCreator; no changelog to restore from, no snapshots
        self._creator = ActiveTaskCreator(
            topology, self.config, wall_clock=lambda: self.wall_clock_ms
        )
        #: The driver's transactions (exactly-once): one per commit, as a stream thread's.
        self._transactional_id = f"{self.application_id}-{DRIVER_THREAD}"
        self._transactions = 0
        self._global_tasks = [
            self._task(sub.id, {}) for sub in topology.subtopologies if sub.is_global
        ]
        global_stores = {n: s for t in self._global_tasks for n, s in t.stores.items()}
        self._tasks = [self._task(sub.id, global_stores) for sub in topology.task_subtopologies()]
        # the inputs of Kafka's one task: every topic the non-global sub-topologies read,
        # each pattern of a pattern source standing for the topics it matches
        self._inputs = {
            t
            for s in topology.task_subtopologies()
            for t in topology.source_topics(s.id, self.application_id)
        }
        self._patterns = [
            spec.pattern.pattern
            for sub in topology.task_subtopologies()
            for spec in (topology.nodes[n] for n in sub.sources)
            if isinstance(spec, SourceSpec) and spec.pattern is not None
        ]
        self._queue_keys: dict[str, str] = {}
        self._metrics = StreamsMetrics(
            self.config, self.application_id, store_scopes(topology, self.config)
        )
        self._thread_metrics = self._metrics.thread(DRIVER_THREAD, DRIVER_THREAD)
        for task in (*self._global_tasks, *self._tasks):  # every task has its metrics
            self._thread_metrics.task_stats(task.task_id, *task.take_stats())
        self._closed = False
        dead_letters = self.config.errors_dead_letter_queue_topic_name
        if dead_letters and self._route(dead_letters) is not None:
            self.close()
            raise TopologyError(
                f"errors.dead.letter.queue.topic.name {dead_letters!r} is a source topic of "
                "the topology: its dead letters would be read again; choose another topic"
            )

    def _task(self, subtopology_id: int, global_stores: Mapping[str, StateStore]) -> StreamTask:
        task_dir = os.path.join(self._state_dir, self.application_id, f"{subtopology_id}_0")
        os.makedirs(task_dir, exist_ok=True)
        task = self._creator.create(
            subtopology_id, 0, self, state_dir=task_dir, global_stores=global_stores
        )
        task.initialize()
        return task

    def _commit(self, task: StreamTask) -> None:
        """Commit ``task`` as a task host does, through the creator's task commit: under
        an exactly-once guarantee its stores prepare their writes under the driver's
        transaction, which then commits (nothing outside the driver can abort it)."""
        task.prepare_commit()
        commit = self._creator.task_commit
        if not commit.transactional:
            commit.end_batch(task, None, worked=True)
            return
        self._transactions += 1
        prepared = commit.end_batch(task, (self._transactional_id, self._transactions), worked=True)
        if prepared is not None:
            commit.settle(task, prepared, committed=True)

    # -- RecordCollector ----------------------------------------------------------------

    def send(  # noqa: PLR0917 - the RecordCollector protocol
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: HeaderList,
        partition: int | None,
    ) -> None:
        """Capture a record a task produced (the driver is the tasks' collector)."""
        self._captured.append(
            (topic, CapturedRecord(key, value, timestamp, tuple(headers), partition))
        )

    def partitions_for(self, topic: str) -> int:
        """Return the partition count of ``topic`` (1 unless given)."""
        return self._partitions.get(topic, 1)

    # -- piping ---------------------------------------------------------------------------

    def _route(self, topic: str) -> StreamTask | None:
        if topic not in self._routes:
            found = None
            for task in (*self._global_tasks, *self._tasks):
                try:
                    task.source_for(topic)
                except StreamsError:
                    continue
                found = task
                break
            self._routes[topic] = found
        return self._routes[topic]

    def pipe_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: HeaderList = (),
    ) -> None:
        """Pipe one serialized record of ``topic`` and process it, and all it leads to,
        to completion (Kafka's ``pipeRecord``): a global topic's record updates its
        global store at once; any other is queued, then every queued record is processed."""
        self._check_open()
        task = self._route(topic)
        if task is None:
            raise StreamsError(f"Unknown topic: {topic}; no source of the topology reads it")
        record = CapturedRecord(key, value, timestamp, tuple(headers), None)
        if task in self._global_tasks:
            self._process(task, topic, record)
            return
        self._enqueue(topic, record)
        self._complete_all_processable_work()

    def _enqueue(self, topic: str, record: CapturedRecord) -> None:
        """Queue ``record`` of ``topic`` behind the input's earlier records: the topic's
        queue, or the pattern's for a topic a pattern source reads (as Kafka's driver, one
        queue, and one offset sequence, per pattern)."""
        key = self._queue_keys.get(topic)
        if key is None:
            key = topic
            if topic not in self._inputs:
                key = next((p for p in self._patterns if re.fullmatch(p, topic)), topic)
            self._queue_keys[topic] = key
        if record.partition is not None:  # queued as input, not where a sink put it
            record = CapturedRecord(
                record.key, record.value, record.timestamp, record.headers, None
            )
        self._pending.add(key, topic, record)

    def _complete_all_processable_work(self) -> None:
        """Capture what was produced, then process the queued records one at a time, each
        followed by a commit and the capture of what it produced (Kafka's
        ``completeAllProcessableWork``): a record's outputs are all recorded before the
        records it sent to internal or source topics are processed, in order (breadth
        first), the next record taken from the queue with the earliest head timestamp."""
        self._capture()
        inputs = (*self._inputs, *self._patterns)
        while self._pending.ready(self.wall_clock_ms, inputs):
            taken = self._pending.poll()
            assert taken is not None
            topic, record = taken
            task = self._route(topic)
            assert task is not None
            self._process(task, topic, record)
            self._capture()

    def _process(self, task: StreamTask, topic: str, record: CapturedRecord) -> None:
        """Process one record in ``task``, then commit the task."""
        offset_key = self._queue_keys.get(topic, topic)
        offset = self._offsets.get(offset_key, 0)
        self._offsets[offset_key] = offset + 1
        key, value, timestamp, headers = record.key, record.value, record.timestamp, record.headers
        try:
            if task.columnar:  # a batch of one: the columnar engine's path
                hs = [headers] if headers else None
                task.process_columns(topic, 0, [key], [value], [timestamp], [offset], hs)
            else:
                task.process(topic, key, value, timestamp, headers, offset, 0)
            self._commit(task)
        except BaseException:
            # as an aborted transaction: what the failed record produced (dead letters
            # included) is never read
            self._captured.clear()
            raise

    def _capture(self) -> None:
        """Record every produced record in its output topic, in the order produced; queue
        those of topics the topology reads (repartition, subscription, source topics) to
        be processed, and apply those of global topics at once (Kafka's
        ``captureOutputsAndReEnqueueInternalResults``)."""
        while self._captured:
            captured, self._captured = self._captured, []
            for topic, raw in captured:
                self._outputs.setdefault(topic, deque()).append(raw)
                task = self._route(topic)
                if task is None:
                    continue
                if task in self._global_tasks:
                    self._process(task, topic, raw)
                else:
                    self._enqueue(topic, raw)

    def advance_wall_clock_time(self, advance_ms: int) -> None:
        """Move the mocked wall clock forward, run the punctuators that fall due and commit,
        then process what they produced (Kafka's ``advanceWallClockTime``)."""
        self._check_open()
        self.wall_clock_ms += advance_ms
        for task in (*self._global_tasks, *self._tasks):
            task.punctuate_wall_clock(self.wall_clock_ms)
            self._commit(task)
        self._complete_all_processable_work()

    def create_input_topic(
        self,
        topic: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        *,
        start_timestamp: int | None = None,
        auto_advance_ms: int = 0,
    ) -> TestInputTopic[K, V]:
        """Return an input topic writing ``topic`` with these serdes; records piped without
        a timestamp get ``start_timestamp`` (default: the wall clock), advanced by
        ``auto_advance_ms`` after each."""
        start = self.wall_clock_ms if start_timestamp is None else start_timestamp
        return TestInputTopic(
            self,
            topic,
            key_serde,
            value_serde,
            start_timestamp=start,
            auto_advance_ms=auto_advance_ms,
        )

    def create_output_topic(
        self, topic: str, key_serde: Serde[K], value_serde: Serde[V]
    ) -> TestOutputTopic[K, V]:
        """Return an output topic reading ``topic`` with these serdes."""
        return TestOutputTopic(self, topic, key_serde, value_serde)

    def read_delta_table(self, table: str) -> list[dict[str, Any]]:
        """Return the rows the Delta table sink ``table`` (``to_delta``) holds after the
        records produced so far: every row (append), or one row per key (upsert, deleted
        keys left out), as the Spark runtime's table would hold them.

        Raises:
            KeyError: no ``to_delta`` sink of the topology writes ``table``.
        """
        topics = [
            spec.topic
            for spec in self.topology.nodes.values()
            if isinstance(spec, SinkSpec)
            and spec.topic is not None
            and (parse_sink(spec.topic) or ("", ""))[1] == table
        ]
        if not topics:
            raise KeyError(f"no to_delta sink writes table {table!r}")
        mode, _ = parse_sink(topics[0]) or ("append", table)
        raws = list(self._outputs.get(topics[0], ()))
        if not raws:
            return []
        rows, _keys = rows_table(
            table,
            mode,
            [r.key for r in raws],
            [r.value for r in raws],
            [r.timestamp for r in raws],
        )
        if DELETED in rows.column_names:
            rows = rows.filter(pc.invert(rows.column(DELETED))).drop_columns([DELETED])
        out: list[dict[str, Any]] = rows.to_pylist()
        return out

    def output_queue(self, topic: str) -> deque[CapturedRecord]:
        """The queue of records produced to ``topic`` not yet read (internal)."""
        return self._outputs.setdefault(topic, deque())

    def producer_topics(self) -> set[str]:
        """The topics records were produced to."""
        return set(self._outputs)

    def metrics(self) -> MetricsSnapshot:
        """Every metric now (Kafka's ``metrics()``), as a running application has them
        (:meth:`runtime.app.app.StreamsApp.metrics`), of one stream thread
        ``topology-test-driver``: e.g. ``.total("dropped-records-total")`` counts the
        records dropped (null keys, late records for closed windows, invalid timestamps,
        the records an exception handler skipped), ``.value("dropped-records-total",
        task_id="0_0")`` one task's."""
        for task in (*self._global_tasks, *self._tasks):
            self._thread_metrics.task_stats(task.task_id, *task.take_stats())
        return self._metrics.snapshot()

    # -- stores ---------------------------------------------------------------------------

    def get_all_state_stores(self) -> dict[str, StateStore]:
        """Every store of the topology by name (global ones included)."""
        stores: dict[str, StateStore] = {}
        for task in (*self._global_tasks, *self._tasks):
            stores.update(task.stores)
        return stores

    def get_state_store(self, name: str) -> StateStore | None:
        """Return the store ``name`` (as processors see it), or None."""
        return self.get_all_state_stores().get(name)

    def _store_of_kind(self, name: str, kind: str) -> Any:
        factory = self.topology.stores.get(name)
        if factory is None or factory.kind != kind:
            return None
        return self.get_state_store(name)

    def get_key_value_store(self, name: str) -> Any:
        """Return the key-value store ``name`` with plain values (a DSL store's
        ``ValueAndTimestamp`` unwrapped), or None if it is not a key-value store."""
        store = self._store_of_kind(name, "key_value")
        factory = self.topology.stores.get(name)
        if store is not None and isinstance(factory, KeyValueStoreFactory) and factory.timestamped:
            return KeyValueStoreFacade(store)
        return store

    def get_timestamped_key_value_store(self, name: str) -> Any:
        """Return the key-value store ``name`` with ``ValueAndTimestamp`` values."""
        return self._store_of_kind(name, "key_value")

    def get_window_store(self, name: str) -> Any:
        """Return the window store ``name`` with plain values (a DSL store's
        ``ValueAndTimestamp`` unwrapped), or None if it is not a window store."""
        store = self._store_of_kind(name, "window")
        dsl = isinstance(self.topology.stores.get(name), WindowStoreFactory)
        return WindowStoreFacade(store) if store is not None and dsl else store

    def get_timestamped_window_store(self, name: str) -> Any:
        """Return the window store ``name`` with ``ValueAndTimestamp`` values."""
        return self._store_of_kind(name, "window")

    def get_versioned_key_value_store(self, name: str) -> Any:
        """Return the versioned key-value store ``name`` (Kafka's
        ``getVersionedKeyValueStore``), or None if it is not a versioned store."""
        return self._store_of_kind(name, "versioned")

    def get_session_store(self, name: str) -> Any:
        """Return the session store ``name``, or None."""
        return self._store_of_kind(name, "session")

    # -- lifecycle ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StreamsError("the TopologyTestDriver is closed")

    def close(self) -> None:
        """Close every task and remove the temporary state directory."""
        if self._closed:
            return
        self._closed = True
        try:
            for task in (*self._tasks, *self._global_tasks):
                task.close()
        finally:
            shutil.rmtree(self._state_dir, ignore_errors=True)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
