"""The per-task processing engine: :class:`StreamTask` runs one sub-topology for one
partition. The TopologyTestDriver and the Spark runtime both drive it, so the processor
code a test runs is the code production runs.

Lifecycle::

    task = StreamTask(topology, 0, 3, config, collector)   # task id "0_3"
    task.initialize()            # build + init stores, init processors
    task.process_batch(records)  # or process(...) per record, process_columns(...)
    task.punctuate_wall_clock(now_ms)
    offsets = task.prepare_commit()   # flush caches/stores; consumed positions
    commit.end_batch(task, txn, worked=True)  # its stores commit or prepare (task_commit)
    task.close()

The task holds its state (stores, stream time, the record context its processors read,
consumed offsets, metrics), its lifecycle and its flush before a commit; the rest is in
its parts:

- :mod:`topology.engine.wiring`: the node graph, built when the task is initialised;
- :mod:`topology.engine.task_commit`: how its stores commit, chosen from the guarantee by
  the task creator;
- :mod:`topology.engine.task_input`: the entry points ``process``, ``process_batch`` and
  ``process_columns`` delegate to (keeping raw input bytes, counting combined records),
  chosen once when the task is built;
- :mod:`topology.engine.record_processing` and :mod:`topology.engine.columnar_processing`:
  how each source's records run (``processing.engine``), chosen once per source;
- :mod:`topology.engine.punctuation`: the punctuation queue.

The hot path avoids per-record dict lookups and logging: source lookup happens once per
batch, children are pre-bound callables, records are tuples.

Errors go to Kafka's exception handlers (:mod:`common.handlers`) on their error paths only:
a record that cannot be deserialized, a processor or punctuator that raises, a sink that
cannot serialize or send. With the default handlers and no dead-letter topic nothing is
added per record; otherwise every processor node is wrapped so that a handler's RESUME drops
the record at the failing node (its siblings still get it, as in Kafka's ``ProcessorNode``).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from common.config import StreamsConfig
from common.errors import StreamsError, TopologyError
from common.metrics import RecordingLevel
from statestores.api import ChangelogCollector, StateStore, StateStoreContext
from statestores.state_manager import ProcessorStateManager
from topology.api.record import Headers
from topology.engine.collector import CollectorChangelog, RecordCollector
from topology.engine.columnar import BatchInput
from topology.engine.context import ManagedTaskStoreContext, PunctuationSchedule, TaskStoreContext
from topology.engine.nodes import SourceRuntime, user_error
from topology.engine.punctuation import PunctuationQueue
from topology.engine.read_only_stores import read_only
from topology.engine.record_processing import RecordProcessing
from topology.engine.task_errors import TaskErrorPaths
from topology.engine.task_input import TaskInput, task_input
from topology.engine.task_metrics import (
    COMMIT,
    DROPPED,
    PUNCTUATE,
    STORE_KEYS,
    STORE_MEMTABLES,
    STORE_SIZE,
    TaskStats,
    store_disk_size,
    time_store_operations,
)
from topology.engine.wiring import TaskNodes, wire_nodes
from topology.graph.topology import Topology


class TaskState(enum.Enum):
    """Task lifecycle states (Kafka's ``Task.State``): the states a task enters."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    CLOSED = "CLOSED"


_ALLOWED: dict[TaskState, frozenset[TaskState]] = {
    TaskState.CREATED: frozenset({TaskState.RUNNING, TaskState.CLOSED}),
    TaskState.RUNNING: frozenset({TaskState.CLOSED}),
    TaskState.CLOSED: frozenset(),
}


def config_dict(config: StreamsConfig) -> dict[str, Any]:
    """Return the configuration as dotted keys -> values."""
    return config.model_dump(by_alias=True)


class StreamTask:
    """Run sub-topology ``subtopology_id`` of ``topology`` for input ``partition``.

    Args:
        topology: the built topology.
        subtopology_id: which sub-topology.
        partition: the input partition; the task id is ``<subtopology_id>_<partition>``.
        config: the application configuration.
        collector: receives the sinks' serialized records.
        state_dir: the task's state directory (``None``: stores use temporary ones).
        changelog: where stores log changes (default: the changelog topics, through
            ``collector``, in ``partition``).
        global_stores: global stores every processor may read (read-only views).
        wall_clock: the time source of wall-clock punctuation (ms).
        manages_transactions: the caller drives store transactions (exactly-once runtime).
        store_context: the stores' context, when the runtime brings its own (its
            ``ProcessorStateManager``, which restores and commits the stores).
        combine_repartitions: see :class:`~topology.engine.task_creator.TaskServices`.
    """

    def __init__(
        self,
        topology: Topology,
        subtopology_id: int,
        partition: int,
        config: StreamsConfig,
        collector: RecordCollector,
        *,
        state_dir: str | None = None,
        changelog: ChangelogCollector | None = None,
        global_stores: Mapping[str, StateStore] | None = None,
        wall_clock: Callable[[], int] | None = None,
        manages_transactions: bool = False,
        store_context: StateStoreContext | None = None,
        combine_repartitions: bool = False,
    ) -> None:
        self.topology = topology
        self.subtopology = topology.subtopology(subtopology_id)
        self.partition = partition
        self.task_id = f"{subtopology_id}_{partition}"
        self.config = config
        self.application_id = config.application_id
        self.app_config: Mapping[str, Any] = config_dict(config)
        self.collector = collector
        self.changelog: ChangelogCollector | None = changelog or CollectorChangelog(
            collector, topology.changelog_topics(self.application_id), partition
        )
        # read-only to processors: the global processor alone writes them
        self.global_stores: Mapping[str, StateStore] = read_only(global_stores or {})
        self.wall_clock_ms: Callable[[], int] = wall_clock or _now_ms
        context_cls = ManagedTaskStoreContext if manages_transactions else TaskStoreContext
        self.store_context: StateStoreContext = store_context or context_cls(self, state_dir)
        #: The stores' state manager when the task was built by the ``ActiveTaskCreator``.
        self.state_manager: ProcessorStateManager | None = None
        self.state = TaskState.CREATED
        self.stores: dict[str, StateStore] = {}
        self.stream_time = -1
        self.current_topic: str | None = None
        self.current_partition: int | None = None
        self.current_offset: int | None = None
        self.current_headers: Headers | None = None
        self.current_timestamp = -1
        self.commit_requested = False
        self.skipped_records = 0
        # Kafka's task-level dropped-records: null keys, late records, and the records an
        # exception handler skipped (RESUME)
        self.dropped_records = 0
        #: What the task measured since the runtime last took it (see take_stats).
        self.stats = TaskStats(RecordingLevel[config.metrics_recording_level])
        #: The wall clock (ms) of the call being processed: end-to-end latencies are
        #: measured against it (one clock read per call, not per record).
        self.now_ms, self._dropped_reported = 0, 0
        self.errors = TaskErrorPaths(self)
        # the input bytes, for dead letters: (topic, offset, key, value) of process(), and
        # (topic, offsets, keys, values) of the last process_columns() call
        self.raw_input: tuple[str, int, bytes | None, bytes | None] | None = None
        self.raw_columns: tuple[str, Sequence[int], Sequence[Any], Sequence[Any]] | None = None
        self.consumed_offsets: dict[tuple[str, int], int] = {}
        #: The punctuators the task's processors scheduled.
        self.punctuations: PunctuationQueue = PunctuationQueue(
            self.wall_clock_ms, self._run_punctuator
        )
        #: The node graph, wired by initialize().
        self.nodes = TaskNodes()
        #: Columnar processing (``processing.engine``), unless an exception handler must
        #: see each record where it fails.
        handlers = self.errors.handlers
        self.columnar = config.processing_engine == "columnar" and not (
            handlers.resumes_processing or handlers.needs_raw_input
        )
        #: The input rows of the batch being processed (columnar processing).
        self.batch_input: BatchInput | None = None
        #: Whether a columnar sink combines a cached count's repartition records (the
        #: runtime counts them before its next commit; see :mod:`topology.engine.combine`).
        self.combine_repartitions = combine_repartitions
        #: The processing entry points, chosen once (see :func:`task_input`), bound here
        #: (the hot path pays no delegation).
        self.input: TaskInput = task_input(self)
        #: ``process(topic, key, value, timestamp, headers=(), offset=-1,
        #: partition=None)``: one raw record to completion (all nodes downstream).
        self.process = self.input.process
        #: ``process_batch(records)``: raw records in order (any topics of this task);
        #: returns how many.
        self.process_batch = self.input.process_batch
        #: ``process_columns(topic, partition, keys, values, timestamps, offsets,
        #: headers=None)``: one topic-partition's records as columns (Arrow columns, or
        #: sequences: bytes for keys and values, ints for timestamps and offsets),
        #: deserialized in bulk, the cyclic garbage collector paused meanwhile; returns
        #: the count.
        self.process_columns = self.input.process_columns

    # -- lifecycle ----------------------------------------------------------------------

    def combine_windows_in(self, topics: Collection[str]) -> None:
        """Combine a windowed count's records per key and window set in the batches sent
        to ``topics`` (the repartition topics the coming batch shuffles inside itself;
        see :mod:`topology.engine.combine`), and in no others."""
        for sink in self.nodes.window_sinks:
            sink.combining_windows = sink.topic in topics

    def transition(self, new: TaskState) -> None:
        """Move to ``new``; raise StreamsError naming both states if it is not allowed."""
        if new not in _ALLOWED[self.state]:
            raise StreamsError(
                f"task {self.task_id}: illegal transition {self.state.name} -> {new.name}"
            )
        self.state = new

    def initialize(self) -> None:
        """Build and open the stores, then build and ``init`` every processor."""
        if self.state is not TaskState.CREATED:
            raise StreamsError(f"task {self.task_id}: initialize() in state {self.state.name}")
        for name in self.subtopology.stores:
            store = self.topology.stores[name].builder(self.config).build()
            store.init(self.store_context)
            if self.stats.debug:
                time_store_operations(store, self.stats)
            self.stores[name] = store
        wire_nodes(self, self.nodes)
        self.transition(TaskState.RUNNING)

    def close(self) -> None:
        """Close every processor, then every store (idempotent)."""
        if self.state is TaskState.CLOSED:
            return
        first: BaseException | None = None
        for name, processor in self.nodes.processors:
            try:
                processor.close()
            except Exception as exc:
                first = first or user_error(name, processor.close, exc, "close of processor")
        for store in self.stores.values():
            try:
                store.close()
            except Exception as exc:
                first = first or exc
        self.transition(TaskState.CLOSED)
        if first is not None:
            raise first

    # -- processing ---------------------------------------------------------------------

    def source_for(self, topic: str) -> SourceRuntime:
        """Return the source node reading ``topic``; raise TopologyError if none does."""
        return self.processing_for(topic).source

    def processing_for(self, topic: str) -> RecordProcessing:
        """Return the processing of the source reading ``topic`` (record by record or
        columnar); raise TopologyError if no source reads it."""
        nodes = self.nodes
        processing = nodes.sources.get(topic)
        if processing is None:
            for pattern, candidate in nodes.pattern_sources:
                if pattern.fullmatch(topic) and not self._is_internal(topic):
                    nodes.sources[topic] = processing = candidate
                    break
            else:
                raise TopologyError(
                    f"task {self.task_id}: no source of sub-topology {self.subtopology.id} "
                    f"reads topic {topic}"
                )
        return processing

    def _is_internal(self, topic: str) -> bool:
        """Whether ``topic`` is one of the application's internal topics, which a pattern
        source never reads (as Kafka's pattern subscription)."""
        app = self.application_id
        return topic in self.topology.repartition_topic_names(app) or (
            topic in self.topology.changelog_topics(app).values()
        )

    # -- punctuation --------------------------------------------------------------------

    def next_wall_clock_punctuation(self) -> int | None:
        """Return when the next wall-clock punctuator is due (ms), or None if none is
        scheduled."""
        return self.punctuations.next_wall_clock_punctuation()

    def punctuate_wall_clock(self, now_ms: int | None = None) -> int:
        """Run the wall-clock punctuators that are due at ``now_ms`` (default: the wall
        clock); return how many ran."""
        now = self.wall_clock_ms() if now_ms is None else now_ms
        return self.punctuations.punctuate_wall_clock(now)

    def _run_punctuator(self, sched: PunctuationSchedule, now: int) -> None:
        """Run one due punctuator at ``now`` with no input record as its context (Kafka's
        ``StreamTask.punctuate``); its error goes to the processing handler."""
        self.current_topic = self.current_partition = self.current_offset = None
        self.current_headers = None
        self.current_timestamp = now
        self.now_ms = self.wall_clock_ms()
        start = time.perf_counter_ns()
        try:
            sched.punctuator(now)
        except Exception as exc:
            self.errors.punctuator_failed(sched, exc)  # raises unless the handler resumes
        finally:
            self.stats.record(PUNCTUATE, "", 1, time.perf_counter_ns() - start)

    # -- commit -------------------------------------------------------------------------

    def prepare_commit(self) -> dict[tuple[str, int], int]:
        """Flush every store (caches forward their entries downstream, so call it before
        the collector is flushed); return the next offset to consume per topic-partition."""
        self.raw_input = self.raw_columns = None  # records a flush forwards have none
        self.now_ms = self.wall_clock_ms()
        start = time.perf_counter_ns()
        for store in self.stores.values():
            store.flush()
        if self.stats.debug:
            self.stats.record(COMMIT, "", 1, time.perf_counter_ns() - start)
        return dict(self.consumed_offsets)

    def take_stats(self) -> tuple[list[Any], dict[str, float]]:
        """What the task measured since the last call (see
        :meth:`~topology.engine.task_metrics.TaskStats.drain`), with its dropped records
        and its stores' sizes."""
        dropped = self.dropped_records + self.skipped_records - self._dropped_reported
        if dropped:
            self.stats.record(DROPPED, "", dropped, dropped)
            self._dropped_reported += dropped
        for name, store in self.stores.items():
            sizes = store_disk_size(store)
            if sizes is not None:
                self.stats.gauge(STORE_SIZE, name, sizes[0])
                self.stats.gauge(STORE_MEMTABLES, name, sizes[1])
            entries = getattr(store, "approximate_num_entries", None)
            if entries is not None and store.is_open():
                self.stats.gauge(STORE_KEYS, name, entries())
        return self.stats.drain()

    def post_commit(self) -> None:
        """Clear the commit request after a successful commit."""
        self.commit_requested = False


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
