"""The per-task processing engine: :class:`StreamTask` runs one sub-topology for one
partition. The TopologyTestDriver and the Spark runtime both drive it, so the processor
code a test runs is the code production runs.

Lifecycle::

    task = StreamTask(topology, 0, 3, config, collector)   # task id "0_3"
    task.initialize()            # build + init stores, init processors
    task.process_batch(records)  # or process(...) per record, process_columns(...)
    task.punctuate_wall_clock(now_ms)
    offsets = task.prepare_commit()   # flush caches/stores; consumed positions
    task.post_commit()
    task.close()

The hot path avoids per-record dict lookups and logging: source lookup happens once per
batch, children are pre-bound callables, records are tuples.

Errors go to Kafka's exception handlers (:mod:`common.handlers`) on their error paths only:
a record that cannot be deserialized, a processor or punctuator that raises, a sink that
cannot serialize or send. With the default handlers and no dead-letter topic nothing is
added per record; otherwise every processor node is wrapped so that a handler's RESUME drops
the record at the failing node (its siblings still get it, as in Kafka's ``ProcessorNode``).
"""

from __future__ import annotations

import bisect
import enum
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from common.columns import deserialize_column, int_list
from common.config import StreamsConfig
from common.errors import (
    CombinedRecordsLateError,
    SerializationError,
    StreamsError,
    TopologyError,
)
from common.handlers import RawRecord
from common.metrics import RecordingLevel
from statestores.api import ChangelogCollector, StateStore, StateStoreContext
from statestores.state_manager import ProcessorStateManager
from topology.api.processor import FixedKeyProcessor, PunctuationType, Punctuator
from topology.api.record import ConsumedRecord, Headers, InputRecord, make_record
from topology.api.timestamps import FailOnInvalidTimestamp, extractor_from_name, invalid_timestamp
from topology.engine.collector import CollectorChangelog, RecordCollector
from topology.engine.columnar import (
    Batch,
    BatchForward,
    BatchInput,
    arrow_entry,
    batch_children,
    columnar_source,
    paused_collection,
    record_entry,
)
from topology.engine.combine import (
    combinable_topics,
    combined_topics,
    expansion,
    take_rows,
    weights_of,
    windowed_combined_topics,
    windowed_topics,
)
from topology.engine.context import (
    FixedKeyNodeContext,
    ManagedTaskStoreContext,
    NodeContext,
    PunctuationSchedule,
    TaskStoreContext,
)
from topology.engine.nodes import SinkProcessor, SourceRuntime, guard, user_error
from topology.engine.read_only_stores import read_only
from topology.engine.task_errors import TaskErrorPaths
from topology.engine.task_metrics import (
    COMMIT,
    DROPPED,
    NODE,
    PROCESS,
    PUNCTUATE,
    STORE_KEYS,
    STORE_MEMTABLES,
    STORE_SIZE,
    TaskStats,
    store_disk_size,
    time_store_operations,
)
from topology.engine.task_metrics import (
    E2E as E2E_KIND,
)
from topology.graph.graph import ProcessorSpec, SinkSpec, SourceSpec
from topology.graph.stores import resolve_serde
from topology.graph.topology import Topology

_NEVER = 1 << 62


class TaskState(enum.Enum):
    """Task lifecycle states (Kafka's ``Task.State``)."""

    CREATED = "CREATED"
    RESTORING = "RESTORING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    CLOSED = "CLOSED"


_ALLOWED: dict[TaskState, frozenset[TaskState]] = {
    TaskState.CREATED: frozenset({TaskState.RESTORING, TaskState.RUNNING, TaskState.CLOSED}),
    TaskState.RESTORING: frozenset({TaskState.RUNNING, TaskState.SUSPENDED, TaskState.CLOSED}),
    TaskState.RUNNING: frozenset({TaskState.SUSPENDED, TaskState.CLOSED}),
    TaskState.SUSPENDED: frozenset({TaskState.RESTORING, TaskState.RUNNING, TaskState.CLOSED}),
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

    #: The engine of every task whatever the configuration says (None: as configured);
    #: how the test suite runs its topology tests under both engines.
    forced_engine: ClassVar[str | None] = None

    def __init__(  # noqa: PLR0915 - the task's attributes, one statement each
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
        self.now_ms, self._measuring, self._dropped_reported = 0, False, 0
        self._represented: int | None = None
        self.errors = TaskErrorPaths(self)
        # the input bytes, for dead letters: (topic, offset, key, value) of process(), and
        # (topic, offsets, keys, values) of the last process_columns() call
        self.raw_input: tuple[str, int, bytes | None, bytes | None] | None = None
        self.raw_columns: tuple[str, Sequence[int], Sequence[Any], Sequence[Any]] | None = None
        if self.errors.handlers.needs_raw_input:  # only then does process() keep them
            self.process = self._process_keeping_raw  # type: ignore[method-assign]
        #: The topics whose records may come combined (a count's repartition topic, see
        #: :mod:`topology.engine.combine`): a combined record counts as the records it
        #: stands for.
        own_topics = set(topology.source_topics(subtopology_id, self.application_id))
        #: ... and those of a windowed count, combined inside a batch only (counted inside
        #: Arrow when no record of the batch is late, else the batch runs again uncombined).
        self._windowed = windowed_topics(topology, self.application_id) & own_topics
        self._weighted = (combinable_topics(topology, self.application_id) & own_topics) | (
            self._windowed
        )
        #: The sinks that may combine a windowed count's batches (see combine_windows_in).
        self._window_sinks: list[SinkProcessor] = []
        if self._weighted:
            self._process_one = self.process
            self.process = self._process_weighted  # type: ignore[method-assign]
        self.consumed_offsets: dict[tuple[str, int], int] = {}
        self._partition_time: dict[tuple[str, int], int] = {}
        self._processors: list[tuple[str, Any]] = []
        self._sources: dict[str, SourceRuntime] = {}
        self._pattern_sources: list[tuple[Any, SourceRuntime]] = []
        self._stream_punctuations: list[PunctuationSchedule] = []
        self._wall_punctuations: list[PunctuationSchedule] = []
        self._next_stream_punctuation = _NEVER
        #: Columnar processing (``processing.engine``), unless an exception handler must
        #: see each record where it fails.
        handlers = self.errors.handlers
        engine = StreamTask.forced_engine or config.processing_engine
        self.columnar = engine == "columnar" and not (
            handlers.resumes_processing or handlers.needs_raw_input
        )
        #: The input rows of the batch being processed (columnar processing).
        self.batch_input: BatchInput | None = None
        #: Whether a columnar sink combines a cached count's repartition records (the
        #: runtime counts them before its next commit; see :mod:`topology.engine.combine`).
        self.combine_repartitions = combine_repartitions

    # -- lifecycle ----------------------------------------------------------------------

    def combine_windows_in(self, topics: Collection[str]) -> None:
        """Combine a windowed count's records per key and window set in the batches sent
        to ``topics`` (the repartition topics the coming batch shuffles inside itself;
        see :mod:`topology.engine.combine`), and in no others."""
        for sink in self._window_sinks:
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
        self._build_nodes()
        self.transition(TaskState.RUNNING)

    def _build_nodes(self) -> None:
        topology, config = self.topology, self.config
        default_extractor = extractor_from_name(config.default_timestamp_extractor)
        forwards: dict[str, Callable[[Any], None]] = {}
        contexts: dict[str, NodeContext] = {}
        inits: list[tuple[str, Any, NodeContext]] = []
        batch_nodes: dict[str, BatchForward] = {}
        combined, windowed = self._combined_sinks()
        for name in self.subtopology.nodes:
            spec = topology.nodes[name]
            stores = frozenset(spec.stores) if isinstance(spec, ProcessorSpec) else frozenset()
            if isinstance(spec, SourceSpec):
                ctx = NodeContext(self, name, stores)
                extractor = spec.timestamp_extractor or default_extractor
                source = SourceRuntime(
                    name,
                    resolve_serde(spec.key_serde, config.default_key_serde),
                    resolve_serde(spec.value_serde, config.default_value_serde),
                    None if type(extractor) is FailOnInvalidTimestamp else extractor,
                    ctx,
                )
                for topic in spec.topics:
                    runtime_topic = topology.topic_name(
                        topic, self.application_id, internal=spec.internal
                    )
                    self._sources[runtime_topic] = source
                if spec.pattern is not None:
                    self._pattern_sources.append((spec.pattern, source))
            elif isinstance(spec, SinkSpec):
                ctx = NodeContext(self, name, stores)
                sink = self._sink(name, spec, ctx, combined, windowed)
                forwards[name] = sink.process
                if sink.batchable:
                    batch_nodes[name] = sink.process_batch
            else:
                processor = spec.supplier()
                fixed = spec.fixed_key or isinstance(processor, FixedKeyProcessor)
                ctx = (FixedKeyNodeContext if fixed else NodeContext)(self, name, stores)
                forwards[name] = _entry(name, processor, ctx, spec.user_code)
                if self.errors.handlers.resumes_processing:
                    forwards[name] = self.errors.guarded(name, forwards[name])
                inits.append((name, processor, ctx))
                self._processors.append((name, processor))
                if not spec.user_code and hasattr(processor, "process_batch"):
                    batch_nodes[name] = processor.process_batch
            contexts[name] = ctx
        forwards, batch_nodes = self._metered(forwards, batch_nodes)
        for name, ctx in contexts.items():
            kids = [(kid, forwards[kid]) for kid in topology.children[name] if kid in forwards]
            ctx.bind_children(kids)
        for source in {id(s): s for s in self._sources.values()}.values():
            source.children = source.context._children
        for _, source in self._pattern_sources:
            source.children = source.context._children
        for name, processor, ctx in inits:
            try:
                processor.init(ctx)
            except StreamsError:
                raise
            except Exception as exc:
                raise user_error(name, processor.init, exc, "init of processor") from exc
        if self.columnar:
            self._bind_batches(forwards, contexts, batch_nodes)

    def _metered(
        self,
        forwards: dict[str, Callable[[Any], None]],
        batch_nodes: dict[str, BatchForward],
    ) -> tuple[dict[str, Callable[[Any], None]], dict[str, BatchForward]]:
        """The nodes' entries, measuring: a terminal node's end-to-end latency (INFO), and
        on DEBUG every node's records (``process-total``). Other nodes' entries are as
        they were (nothing per record on INFO)."""
        debug = self.stats.debug
        children = self.topology.children
        record, e2e = self.stats.record, self.stats.e2e
        out, out_batches = dict(forwards), dict(batch_nodes)
        for name, forward in forwards.items():
            terminal = not children.get(name)
            if not (terminal or debug):
                continue

            def one(item: Any, _f: Any = forward, _n: str = name, _t: bool = terminal) -> None:
                if _t and item[2] >= 0:
                    late = self.now_ms - item[2]
                    record(E2E_KIND, _n, 1, late, late, late)
                if debug:
                    record(NODE, _n, 1, 0.0)
                _f(item)

            out[name] = one
            batch = batch_nodes.get(name)
            if batch is not None:

                def many(b: Any, _f: Any = batch, _n: str = name, _t: bool = terminal) -> None:
                    if _t:
                        e2e(_n, b.timestamps, self.now_ms)
                    if debug:
                        record(NODE, _n, len(b.timestamps), 0.0)
                    _f(b)

                out_batches[name] = many
        return out, out_batches

    def _combined_sinks(self) -> tuple[frozenset[str], Mapping[str, Any]]:
        """The repartition topics whose columnar sinks combine a count's batches, and
        those that may combine a windowed count's, with its windows."""
        if not (self.columnar and self.combine_repartitions):
            return frozenset(), {}
        return (
            combined_topics(self.topology, self.config),
            windowed_combined_topics(self.topology, self.config),
        )

    def _sink(
        self,
        name: str,
        spec: SinkSpec,
        ctx: NodeContext,
        combined: frozenset[str],
        windowed: Mapping[str, Any],
    ) -> SinkProcessor:
        topology, config = self.topology, self.config
        sink_topic = spec.topic
        if sink_topic is not None:
            sink_topic = topology.topic_name(
                sink_topic, self.application_id, internal=spec.internal
            )
        sink = SinkProcessor(
            name,
            topic=sink_topic,
            extractor=spec.topic_extractor,
            key_serde=resolve_serde(spec.key_serde, config.default_key_serde),
            value_serde=resolve_serde(spec.value_serde, config.default_value_serde),
            partitioner=spec.partitioner,
            collector=self.collector,
            context=ctx,
            on_error=self.errors.production_failed,
        )
        sink.combine = sink_topic in combined
        sink.combine_windows = windowed.get(sink_topic or "")
        if sink.combine_windows is not None:
            self._window_sinks.append(sink)
        return sink

    def _bind_batches(
        self,
        forwards: Mapping[str, Callable[[Any], None]],
        contexts: Mapping[str, NodeContext],
        batch_nodes: Mapping[str, BatchForward],
    ) -> None:
        """Give every node its batch entry (its own, or record by record) and mark the
        sources whose records run columnar (see :mod:`topology.engine.columnar`)."""
        entries = {
            name: batch_nodes.get(name) or record_entry(self, forward)
            for name, forward in forwards.items()
        }
        children = self.topology.children
        for name, ctx in contexts.items():
            ctx.bind_batch_children(batch_children(children[name], entries))
        for _, processor in self._processors:
            bind = getattr(processor, "bind_batch_routes", None)
            if bind is not None:
                bind(entries)
        nodes = self.subtopology.nodes
        processors = dict(self._processors)
        for source in [*self._sources.values(), *(s for _, s in self._pattern_sources)]:
            if columnar_source(self.topology, source.name, nodes):
                source.batch_children = source.context._batch_children
                source.arrow_child = arrow_entry(
                    [processors.get(k) for k in children.get(source.name, ()) if k in nodes]
                )

    def close(self) -> None:
        """Close every processor, then every store (idempotent)."""
        if self.state is TaskState.CLOSED:
            return
        first: BaseException | None = None
        for name, processor in self._processors:
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
        source = self._sources.get(topic)
        if source is None:
            for pattern, candidate in self._pattern_sources:
                if pattern.fullmatch(topic) and not self._is_internal(topic):
                    self._sources[topic] = source = candidate
                    break
            else:
                raise TopologyError(
                    f"task {self.task_id}: no source of sub-topology {self.subtopology.id} "
                    f"reads topic {topic}"
                )
        return source

    def _is_internal(self, topic: str) -> bool:
        """Whether ``topic`` is one of the application's internal topics, which a pattern
        source never reads (as Kafka's pattern subscription)."""
        app = self.application_id
        return topic in self.topology.repartition_topic_names(app) or (
            topic in self.topology.changelog_topics(app).values()
        )

    def process(  # noqa: PLR0917 - the per-record entry point
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers = (),
        offset: int = -1,
        partition: int | None = None,
    ) -> None:
        """Process one raw input record to completion (all nodes downstream)."""
        if self._measuring:  # inside a call that measures itself
            self._process_record(topic, key, value, timestamp, headers, offset, partition)
            return
        self._measuring = True
        self.now_ms = self.wall_clock_ms()
        start = time.perf_counter_ns()
        try:
            self._process_record(topic, key, value, timestamp, headers, offset, partition)
        finally:
            self._measuring = False
            self.stats.record(PROCESS, "", 1, time.perf_counter_ns() - start)

    def _process_record(  # noqa: PLR0917 - the per-record entry point
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers = (),
        offset: int = -1,
        partition: int | None = None,
    ) -> None:
        part = self.partition if partition is None else partition
        source = self.source_for(topic)
        try:
            k = source.key_deserialize(topic, key)
            v = source.value_deserialize(topic, value)
        except Exception as exc:
            raw = RawRecord(topic, part, offset, timestamp, key, value, headers)
            self.errors.deserialization_failed(source.name, raw, exc)  # raises unless skipped
        else:
            self._run(source, topic, part, k, v, timestamp, headers, offset)
        self.consumed_offsets[(topic, part)] = offset + 1

    def _process_keeping_raw(  # noqa: PLR0917 - process() when a handler needs raw input
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers = (),
        offset: int = -1,
        partition: int | None = None,
    ) -> None:
        self.raw_input = (topic, offset, key, value)
        StreamTask.process(self, topic, key, value, timestamp, headers, offset, partition)

    def _process_weighted(  # noqa: PLR0917 - process() of a task reading combined records
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers = (),
        offset: int = -1,
        partition: int | None = None,
    ) -> None:
        many = 1
        if headers and topic in self._weighted:
            split = weights_of((headers,))
            if split is not None:
                if topic in self._windowed:
                    raise _late(self.task_id, topic, "one record at a time")
                many, headers = split[0][0], split[1][0]
        for _ in range(many):
            self._process_one(topic, key, value, timestamp, headers, offset, partition)

    def process_batch(self, records: Iterable[InputRecord]) -> int:
        """Process raw records in order (any topics of this task); return how many."""
        count = 0
        self._measuring = True
        self.now_ms = self.wall_clock_ms()
        start = time.perf_counter_ns()
        try:
            for rec in records:
                self.process(rec[0], rec[4], rec[5], rec[3], rec[6], rec[2], rec[1])
                count += 1
        finally:
            self._measuring = False
            self.stats.record(PROCESS, "", count, time.perf_counter_ns() - start)
        return count

    @paused_collection
    def process_columns(  # noqa: PLR0917 - columns in record order
        self,
        topic: str,
        partition: int,
        keys: Any,
        values: Any,
        timestamps: Any,
        offsets: Any,
        headers: Sequence[Headers] | None = None,
    ) -> int:
        """Process one topic-partition's records given as columns (Arrow columns, or
        sequences: bytes for keys and values, ints for timestamps and offsets); keys and
        values are deserialized in bulk. Return the count. The cyclic garbage collector
        waits meanwhile (:func:`~topology.engine.columnar.collection_paused`).

        The call is measured as a whole: the task's ``process`` figures (records, time),
        the source node's end-to-end latency, and on DEBUG its records."""
        source = self.source_for(topic)
        self.now_ms = now = self.wall_clock_ms()
        self._measuring, self._represented = True, None
        start = time.perf_counter_ns()
        count = 0
        try:
            count = self._process_columns(
                topic, partition, keys, values, timestamps, offsets, headers
            )
        finally:
            self._measuring = False
            # combined records count as the records they stand for
            records = count if self._represented is None else self._represented
            stats = self.stats
            stats.record(PROCESS, "", records, time.perf_counter_ns() - start)
        if records:
            stats.e2e(source.name, timestamps, now)
            if stats.debug:
                stats.record(NODE, source.name, records, 0.0)
        return count

    def _process_columns(  # noqa: PLR0917 - columns in record order
        self,
        topic: str,
        partition: int,
        keys: Any,
        values: Any,
        timestamps: Any,
        offsets: Any,
        headers: Sequence[Headers] | None = None,
    ) -> int:
        source = self.source_for(topic)
        if headers is not None and topic in self._weighted:
            split = weights_of(headers)
            if split is not None:  # combined records: counted as the records they stand for
                weights, stripped = split
                plain = not any(stripped)
                if (
                    plain
                    and source.arrow_child is not None
                    and self._process_arrow(
                        source, topic, partition, keys, values, timestamps, offsets, None, weights
                    )
                ):
                    self._represented = int(sum(weights))
                    return len(weights)
                if topic in self._windowed:
                    raise _late(self.task_id, topic, "by the usual path")
                index = expansion(weights)
                self._process_columns(
                    topic,
                    partition,
                    take_rows(keys, index),
                    take_rows(values, index),
                    take_rows(timestamps, index),
                    take_rows(offsets, index),
                    None if plain else [stripped[i] for i in index.tolist()],
                )
                self._represented = int(sum(weights))
                return len(weights)
        if source.arrow_child is not None and self._process_arrow(
            source, topic, partition, keys, values, timestamps, offsets, headers
        ):
            return len(timestamps)
        timestamps, offsets = int_list(timestamps), int_list(offsets)
        self.raw_columns = (topic, offsets, keys, values)
        try:
            ks = deserialize_column(source.key_serde, topic, keys)
            vs = deserialize_column(source.value_serde, topic, values)
        except SerializationError:
            # one record at a time: the deserialization handler decides about the bad ones
            keys, values = _pylist(keys), _pylist(values)
            self.raw_columns = (topic, offsets, keys, values)
            for i in range(len(keys)):
                hs = () if headers is None else tuple(headers[i])
                self.process(topic, keys[i], values[i], timestamps[i], hs, offsets[i], partition)
            return len(keys)
        if (
            source.batch_children is not None
            and source.extractor is None
            and ks
            and min(timestamps) >= 0
        ):
            self._process_batch(source, topic, partition, ks, vs, timestamps, offsets, headers)
        else:
            run = self._run
            no_headers: Headers = ()
            for i in range(len(ks)):
                run(
                    source,
                    topic,
                    partition,
                    ks[i],
                    vs[i],
                    timestamps[i],
                    no_headers if headers is None else tuple(headers[i]),
                    offsets[i],
                )
        if offsets:
            self.consumed_offsets[(topic, partition)] = offsets[-1] + 1
        return len(ks)

    def _process_arrow(  # noqa: PLR0917 - columns in record order
        self,
        source: SourceRuntime,
        topic: str,
        partition: int,
        keys: Any,
        values: Any,
        timestamps: Any,
        offsets: Any,
        headers: Sequence[Headers] | None,
        weights: Sequence[int] | None = None,
    ) -> bool:
        """Hand the raw Arrow columns to the source's only child (a node that takes them
        whole, :func:`~topology.engine.columnar.arrow_entry`) when nothing cuts the batch:
        no timestamp extractor, no headers, no stream-time punctuation due. ``weights``:
        how many records each row stands for (combined records). Return whether the node
        took them (else the records go the usual way)."""
        if (
            not hasattr(keys, "cast")
            or not hasattr(values, "cast")
            or source.extractor is not None
            or headers is not None
            or not len(timestamps)
        ):
            return False
        ts = timestamps if hasattr(timestamps, "cast") else pa.array(timestamps, pa.int64())
        low, high = (v.as_py() for v in pc.min_max(ts).values())
        if low is None or low < 0:
            return False
        before = self.stream_time
        final = max(high, before)
        if final >= self._next_stream_punctuation:
            return False
        last_offset = _last(offsets)
        self.current_topic, self.current_partition = topic, partition
        self.current_offset, self.current_timestamp = last_offset, _last(ts)
        self.current_headers = ()
        self.stream_time = final
        assert source.arrow_child is not None
        if not source.arrow_child(
            topic, keys, values, ts, source.key_serde, source.value_serde, weights
        ):
            self.stream_time = before
            return False
        if self.stats.debug:  # the child took the columns whole
            for kid in self.topology.children.get(source.name, ()):
                self.stats.record(NODE, kid, len(ts), 0.0)
        self.consumed_offsets[(topic, partition)] = last_offset + 1
        return True

    def _process_batch(  # noqa: PLR0917 - columns in record order
        self,
        source: SourceRuntime,
        topic: str,
        partition: int,
        keys: list[Any],
        values: list[Any],
        timestamps: Sequence[int],
        offsets: Sequence[int],
        headers: Sequence[Headers] | None,
    ) -> None:
        """Run the records through the source's nodes as batches, cut where a stream-time
        punctuator falls due (it fires after the record that brings stream time to it)."""
        hs = None if headers is None else [tuple(h) for h in headers]
        given = BatchInput(offsets, hs, timestamps, self.stream_time)
        n, start = len(keys), 0
        final_time = max(timestamps)
        final_time = max(final_time, self.stream_time)
        self.current_topic, self.current_partition = topic, partition
        ts = timestamps if type(timestamps) is list else list(timestamps)
        while start < n:
            end = n
            due = self._next_stream_punctuation
            if final_time >= due:  # cut after the record that brings stream time to it
                end = bisect.bisect_left(given.stream_times, due, start) + 1
            whole = start == 0 and end == n
            batch = Batch(
                keys if whole else keys[start:end],
                values if whole else values[start:end],
                ts if whole else ts[start:end],
                None if hs is None else hs[start:end],
                range(start, end),
            )
            last = end - 1
            self.current_offset, self.current_timestamp = offsets[last], ts[last]
            self.current_headers = () if hs is None else hs[last]
            self.stream_time = final_time if end == n else given.stream_times[last]
            self.batch_input = given
            try:
                for child in source.batch_children or ():
                    child(batch)
            finally:
                self.batch_input = None
            if self.stream_time >= self._next_stream_punctuation:
                self._punctuate(self._stream_punctuations, self.stream_time)
                self._next_stream_punctuation = _next_time(self._stream_punctuations)
                self.current_topic, self.current_partition = topic, partition
            start = end

    def _run(  # noqa: PLR0917 - hot path
        self,
        source: SourceRuntime,
        topic: str,
        partition: int,
        key: Any,
        value: Any,
        timestamp: int,
        headers: Headers,
        offset: int,
    ) -> None:
        extractor = source.extractor
        if extractor is None:
            if timestamp < 0:
                raise invalid_timestamp(topic, partition, offset, timestamp)
        else:
            timestamp = self._extract(
                extractor, topic, partition, offset, timestamp, key, value, headers
            )
            if timestamp < 0:
                self.skipped_records += 1
                return
        self.current_topic = topic
        self.current_partition = partition
        self.current_offset = offset
        self.current_headers = headers
        self.current_timestamp = timestamp
        if timestamp > self.stream_time:  # noqa: PLR1730 - cheaper than max() per record
            self.stream_time = timestamp
        record = make_record(key, value, timestamp, headers)
        for child in source.children:
            child(record)
        if self.stream_time >= self._next_stream_punctuation:
            self._punctuate(self._stream_punctuations, self.stream_time)
            self._next_stream_punctuation = _next_time(self._stream_punctuations)

    def _extract(  # noqa: PLR0917 - hot path
        self,
        extractor: Any,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        key: Any,
        value: Any,
        headers: Headers,
    ) -> int:
        tp = (topic, partition)
        partition_time = self._partition_time.get(tp, -1)
        consumed = ConsumedRecord(topic, partition, offset, timestamp, key, value, headers)
        try:
            ts: int = extractor.extract(consumed, partition_time)
        except StreamsError:
            raise
        except Exception as exc:
            raise user_error(f"source of {topic}", extractor, exc, "timestamp extractor") from exc
        if ts > partition_time:
            self._partition_time[tp] = ts
        return ts

    # -- punctuation --------------------------------------------------------------------

    def schedule(
        self, node: str, interval_ms: int, punctuation_type: PunctuationType, punctuator: Punctuator
    ) -> PunctuationSchedule:
        """Schedule ``punctuator`` for processor ``node`` (see ``ProcessorContext.schedule``).

        Stream-time punctuation is aligned to 0 and fires as soon as stream time reaches
        the next multiple of the interval; wall-clock punctuation fires ``interval_ms``
        after scheduling, then every interval.
        """
        if interval_ms < 1:
            raise StreamsError(f"processor {node}: punctuation interval must be >= 1 ms")
        if punctuation_type is PunctuationType.STREAM_TIME:
            sched = PunctuationSchedule(node, interval_ms, punctuation_type, punctuator, 0)
            self._stream_punctuations.append(sched)
            self._next_stream_punctuation = min(self._next_stream_punctuation, 0)
        else:
            start = self.wall_clock_ms() + interval_ms
            sched = PunctuationSchedule(node, interval_ms, punctuation_type, punctuator, start)
            self._wall_punctuations.append(sched)
        return sched

    def next_wall_clock_punctuation(self) -> int | None:
        """Return when the next wall-clock punctuator is due (ms), or None if none is
        scheduled."""
        due = _next_time(self._wall_punctuations)
        return None if due == _NEVER else due

    def punctuate_wall_clock(self, now_ms: int | None = None) -> int:
        """Run the wall-clock punctuators that are due at ``now_ms`` (default: the wall
        clock); return how many ran."""
        now = self.wall_clock_ms() if now_ms is None else now_ms
        return self._punctuate(self._wall_punctuations, now)

    def _punctuate(self, schedules: list[PunctuationSchedule], now: int) -> int:
        ran = 0
        schedules[:] = [s for s in schedules if not s.cancelled]
        for sched in sorted(schedules, key=lambda s: s.next_time):
            if sched.cancelled or sched.next_time > now:
                continue
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
            sched.advance(now)
            ran += 1
        return ran

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

    def commit(self) -> dict[tuple[str, int], int]:
        """Commit without a transaction (at_least_once, and the test driver): run
        :meth:`prepare_commit`, apply the stores' writes through the state manager, then
        :meth:`post_commit`; return the offsets."""
        offsets = self.prepare_commit()
        if self.state_manager is not None:
            self.state_manager.prepare_commit(None)
            self.state_manager.commit()
        self.post_commit()
        return offsets


def _entry(name: str, processor: Any, ctx: NodeContext, user_code: bool) -> Callable[[Any], None]:
    process: Callable[[Any], None] = processor.process
    if isinstance(ctx, FixedKeyNodeContext):
        inner = process

        def process(record: Any) -> None:
            ctx.key = record[0]
            inner(record)

    return guard(name, process, processor) if user_code else process


def _next_time(schedules: list[PunctuationSchedule]) -> int:
    live = [s.next_time for s in schedules if not s.cancelled]
    return min(live) if live else _NEVER


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _pylist(column: Any) -> Sequence[Any]:
    """A column as a Python sequence (Arrow columns converted)."""
    to_pylist = getattr(column, "to_pylist", None)
    items: Sequence[Any] = column if to_pylist is None else to_pylist()
    return items


def _last(column: Any) -> int:
    """The last element of an int column (Arrow or a sequence)."""
    item = column[len(column) - 1]
    return int(item.as_py() if hasattr(item, "as_py") else item)


def _late(task_id: str, topic: str, how: str) -> CombinedRecordsLateError:
    return CombinedRecordsLateError(
        f"[task {task_id}] records of {topic} came combined per key and window and must be "
        f"counted {how}: the batch runs again without combining"
    )
