"""Wiring a task's node graph: the source, processor and sink nodes of its sub-topology
built, measured where the metrics ask for it, bound to their children, initialised, and
each source given its processing (record by record or columnar, chosen here once).

:func:`wire_nodes` fills a task's :class:`TaskNodes` (what processing, ``close`` and the
combining of windowed counts need of the graph) when the task is initialised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from common.errors import StreamsError
from topology.api.processor import FixedKeyProcessor
from topology.api.timestamps import FailOnInvalidTimestamp, extractor_from_name
from topology.engine.columnar import (
    BatchForward,
    arrow_entry,
    batch_children,
    columnar_source,
    record_entry,
)
from topology.engine.columnar_processing import ColumnarProcessing
from topology.engine.combine import combined_topics, windowed_combined_topics
from topology.engine.context import FixedKeyNodeContext, NodeContext
from topology.engine.nodes import SinkProcessor, SourceRuntime, guard, user_error
from topology.engine.record_processing import RecordProcessing
from topology.engine.task_metrics import E2E, NODE
from topology.graph.graph import ProcessorSpec, SinkSpec, SourceSpec
from topology.graph.naming import REPARTITION_TOPIC_SUFFIX
from topology.graph.stores import resolve_serde

if TYPE_CHECKING:
    from topology.engine.task import StreamTask

Forwards = dict[str, Callable[[Any], None]]


class TaskNodes:
    """A task's wired node graph, as its processing sees it."""

    __slots__ = ("pattern_sources", "processors", "sources", "window_sinks")

    def __init__(self) -> None:
        #: Each input topic's source processing (runtime topic names; topics a pattern
        #: source matched are added as they are first seen).
        self.sources: dict[str, RecordProcessing] = {}
        #: The pattern sources: ``(compiled pattern, processing)``.
        self.pattern_sources: list[tuple[Any, RecordProcessing]] = []
        #: Every processor (not sources and sinks), in build order: ``(name, processor)``.
        self.processors: list[tuple[str, Any]] = []
        #: The sinks that may combine a windowed count's batches.
        self.window_sinks: list[SinkProcessor] = []


def wire_nodes(task: StreamTask, nodes: TaskNodes) -> None:
    """Build, bind and ``init`` the nodes of ``task``'s sub-topology into ``nodes`` (its
    processors are there as soon as they are built, so ``close`` reaches them even when
    an ``init`` fails)."""
    _Wiring(task, nodes).wire()


class _Wiring:
    """The wiring of one task, step by step."""

    def __init__(self, task: StreamTask, nodes: TaskNodes) -> None:
        self.task = task
        self.nodes = nodes
        self.forwards: Forwards = {}
        self.contexts: dict[str, NodeContext] = {}
        self.inits: list[tuple[str, Any, NodeContext]] = []
        self.batch_nodes: dict[str, BatchForward] = {}
        self.sources: dict[str, SourceRuntime] = {}
        self.pattern_sources: list[tuple[Any, SourceRuntime]] = []
        self.default_extractor = extractor_from_name(task.config.default_timestamp_extractor)

    def wire(self) -> None:
        """Build every node, measure and bind them, ``init`` the processors, then give
        each source its processing."""
        task, topology = self.task, self.task.topology
        combined, windowed = _combined_sinks(task)
        for name in task.subtopology.nodes:
            spec = topology.nodes[name]
            if isinstance(spec, SourceSpec):
                self.contexts[name] = self._source(name, spec)
            elif isinstance(spec, SinkSpec):
                self.contexts[name] = self._sink(name, spec, combined, windowed)
            else:
                self.contexts[name] = self._processor(name, spec)
        forwards, batch_nodes = _metered(task, self.forwards, self.batch_nodes)
        for name, ctx in self.contexts.items():
            kids = [(kid, forwards[kid]) for kid in topology.children[name] if kid in forwards]
            ctx.bind_children(kids)
        for source in self._all_sources():
            source.children = source.context._children
        self._init_processors()
        if task.columnar:
            self._bind_batches(forwards, batch_nodes)
        self._choose_processing()

    def _all_sources(self) -> list[SourceRuntime]:
        """Every source once (a source of several topics is in ``sources`` once each)."""
        unique = {id(s): s for s in self.sources.values()}
        return [*unique.values(), *(s for _, s in self.pattern_sources)]

    def _source(self, name: str, spec: SourceSpec) -> NodeContext:
        task, topology, config = self.task, self.task.topology, self.task.config
        ctx = NodeContext(task, name, frozenset())
        extractor = spec.timestamp_extractor or self.default_extractor
        if spec.internal and all(t.endswith(REPARTITION_TOPIC_SUFFIX) for t in spec.topics):
            # a repartition topic's records keep the timestamps they were written with,
            # whatever default.timestamp.extractor says (Kafka's repartition nodes)
            extractor = spec.timestamp_extractor or FailOnInvalidTimestamp()
        source = SourceRuntime(
            name,
            resolve_serde(spec.key_serde, config.default_key_serde),
            resolve_serde(spec.value_serde, config.default_value_serde),
            None if type(extractor) is FailOnInvalidTimestamp else extractor,
            ctx,
        )
        for topic in spec.topics:
            runtime_topic = topology.topic_name(topic, task.application_id, internal=spec.internal)
            self.sources[runtime_topic] = source
        if spec.pattern is not None:
            self.pattern_sources.append((spec.pattern, source))
        return ctx

    def _sink(
        self, name: str, spec: SinkSpec, combined: frozenset[str], windowed: Mapping[str, Any]
    ) -> NodeContext:
        task, config = self.task, self.task.config
        ctx = NodeContext(task, name, frozenset())
        sink_topic = spec.topic
        if sink_topic is not None:
            sink_topic = task.topology.topic_name(
                sink_topic, task.application_id, internal=spec.internal
            )
        sink = SinkProcessor(
            name,
            topic=sink_topic,
            extractor=spec.topic_extractor,
            key_serde=resolve_serde(spec.key_serde, config.default_key_serde),
            value_serde=resolve_serde(spec.value_serde, config.default_value_serde),
            partitioner=spec.partitioner,
            collector=task.collector,
            context=ctx,
            on_error=task.errors.production_failed,
        )
        sink.combine = sink_topic in combined
        sink.combine_windows = windowed.get(sink_topic or "")
        if sink.combine_windows is not None:
            self.nodes.window_sinks.append(sink)
        self.forwards[name] = sink.process
        if sink.batchable:
            self.batch_nodes[name] = sink.process_batch
        return ctx

    def _processor(self, name: str, spec: ProcessorSpec) -> NodeContext:
        task = self.task
        processor = spec.supplier()
        fixed = spec.fixed_key or isinstance(processor, FixedKeyProcessor)
        ctx = (FixedKeyNodeContext if fixed else NodeContext)(task, name, frozenset(spec.stores))
        forward = _entry(name, processor, ctx, spec.user_code)
        if task.errors.handlers.resumes_processing:
            forward = task.errors.guarded(name, forward)
        self.forwards[name] = forward
        self.inits.append((name, processor, ctx))
        self.nodes.processors.append((name, processor))
        if not spec.user_code and hasattr(processor, "process_batch"):
            self.batch_nodes[name] = processor.process_batch
        return ctx

    def _init_processors(self) -> None:
        for name, processor, ctx in self.inits:
            try:
                processor.init(ctx)
            except StreamsError:
                raise
            except Exception as exc:
                raise user_error(name, processor.init, exc, "init of processor") from exc

    def _bind_batches(self, forwards: Forwards, batch_nodes: Mapping[str, BatchForward]) -> None:
        """Give every node its batch entry (its own, or record by record) and mark the
        sources whose records run columnar (see :mod:`topology.engine.columnar`)."""
        task, topology = self.task, self.task.topology
        entries = {
            name: batch_nodes.get(name) or record_entry(task, forward)
            for name, forward in forwards.items()
        }
        children = topology.children
        for name, ctx in self.contexts.items():
            ctx.bind_batch_children(batch_children(children[name], entries))
        for _, processor in self.nodes.processors:
            bind = getattr(processor, "bind_batch_routes", None)
            if bind is not None:
                bind(entries)
        nodes = task.subtopology.nodes
        processors = dict(self.nodes.processors)
        for source in [*self.sources.values(), *(s for _, s in self.pattern_sources)]:
            if columnar_source(topology, source.name, nodes):
                source.batch_children = source.context._batch_children
                source.arrow_child = arrow_entry(
                    [processors.get(k) for k in children.get(source.name, ()) if k in nodes]
                )

    def _choose_processing(self) -> None:
        """Give each source its processing object: columnar where its records run as
        batches, record by record otherwise."""
        chosen: dict[int, RecordProcessing] = {}

        def processing(source: SourceRuntime) -> RecordProcessing:
            found = chosen.get(id(source))
            if found is None:
                columnar = source.batch_children is not None
                cls = ColumnarProcessing if columnar else RecordProcessing
                chosen[id(source)] = found = cls(self.task, source)
            return found

        for topic, source in self.sources.items():
            self.nodes.sources[topic] = processing(source)
        for pattern, source in self.pattern_sources:
            self.nodes.pattern_sources.append((pattern, processing(source)))


def _combined_sinks(task: StreamTask) -> tuple[frozenset[str], Mapping[str, Any]]:
    """The repartition topics whose columnar sinks combine a count's batches, and those
    that may combine a windowed count's, with its windows."""
    if not (task.columnar and task.combine_repartitions):
        return frozenset(), {}
    return (
        combined_topics(task.topology, task.config),
        windowed_combined_topics(task.topology, task.config),
    )


def _metered(
    task: StreamTask, forwards: Forwards, batch_nodes: Mapping[str, BatchForward]
) -> tuple[Forwards, dict[str, BatchForward]]:
    """The nodes' entries, measuring: a terminal node's end-to-end latency (INFO), and on
    DEBUG every node's records (``process-total``). Other nodes' entries are as they were
    (nothing per record on INFO)."""
    stats = task.stats
    debug = stats.debug
    children = task.topology.children
    record, e2e = stats.record, stats.e2e_figures
    out, out_batches = dict(forwards), dict(batch_nodes)
    for name, forward in forwards.items():
        terminal = not children.get(name)
        if not (terminal or debug):
            continue

        def one(item: Any, _f: Any = forward, _n: str = name, _t: bool = terminal) -> None:
            if _t and item[2] >= 0:
                late = task.now_ms - item[2]
                record(E2E, _n, 1, late, late, late)
            if debug:
                record(NODE, _n, 1, 0.0)
            _f(item)

        out[name] = one
        batch = batch_nodes.get(name)
        if batch is not None:

            def many(b: Any, _f: Any = batch, _n: str = name, _t: bool = terminal) -> None:
                if _t:
                    e2e(_n, b.timestamp_figures(), task.now_ms)
                if debug:
                    record(NODE, _n, len(b.timestamps), 0.0)
                _f(b)

            out_batches[name] = many
    return out, out_batches


def _entry(name: str, processor: Any, ctx: NodeContext, user_code: bool) -> Callable[[Any], None]:
    process: Callable[[Any], None] = processor.process
    if isinstance(ctx, FixedKeyNodeContext):
        inner = process

        def process(record: Any) -> None:
            ctx.key = record[0]
            inner(record)

    return guard(name, process, processor) if user_code else process
