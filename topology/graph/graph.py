"""The node graph: source, processor and sink specs, and the mutable :class:`GraphBuilder`
the DSL records into (Kafka's ``InternalTopologyBuilder``).

Specs are frozen descriptions; the runtime objects are made from them per task by
:mod:`topology.engine.task`. The builder checks names as nodes arrive and produces a frozen
:class:`~topology.graph.topology.Topology` with :meth:`GraphBuilder.build`.

Extension point for new operator families (windows, joins, suppress): a DSL method calls
:meth:`GraphBuilder.add_processor` with a ``ProcessorSupplier`` (a zero-argument callable
building a :class:`~topology.api.processor.Processor`), then :meth:`GraphBuilder.add_store`
(a :class:`~topology.graph.stores.StoreFactory`) and :meth:`GraphBuilder.connect_store`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from common.errors import TopologyError
from common.serdes import Serde
from topology.api.options import StreamPartitioner
from topology.api.processor import ProcessorSupplier
from topology.api.timestamps import TimestampExtractor
from topology.graph.naming import check_name
from topology.graph.stores import StoreFactory

#: ``(key, value, context) -> topic`` (Kafka's ``TopicNameExtractor``).
TopicNameExtractor = Callable[[Any, Any, Any], str]


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSpec:
    """A source node: reads ``topics`` (or topics matching ``pattern``).

    ``internal`` marks a repartition topic: its runtime name is prefixed with the
    application id (``<application.id>-<topic>``).
    """

    name: str
    topics: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    timestamp_extractor: TimestampExtractor | None = None
    offset_reset: str | None = None
    internal: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessorSpec:
    """A processor node: ``supplier()`` builds its processor for each task.

    ``user_code`` marks a Processor-API processor whose exceptions the task wraps in a
    :class:`~common.errors.StreamsProcessingError` naming the node (DSL processors wrap
    their user functions themselves). ``combiner`` names how the records reaching this
    node through a repartition topic may be combined before it (``"count"``: a count's,
    into one record per key standing for many; see :mod:`topology.engine.columnar`).
    """

    name: str
    supplier: ProcessorSupplier
    parents: tuple[str, ...]
    stores: tuple[str, ...] = ()
    user_code: bool = False
    fixed_key: bool = False
    combiner: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkSpec:
    """A sink node: writes to ``topic`` or to the topic ``topic_extractor`` names."""

    name: str
    parents: tuple[str, ...]
    topic: str | None = None
    topic_extractor: TopicNameExtractor | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    partitioner: StreamPartitioner | None = None
    internal: bool = False


NodeSpec = SourceSpec | ProcessorSpec | SinkSpec


@dataclass(frozen=True, slots=True)
class GlobalStoreSpec:
    """A global store: filled from ``topic`` by ``processor_name`` on every instance."""

    source_name: str
    processor_name: str
    store_name: str
    topic: str


@dataclass(frozen=True, slots=True)
class RepartitionTopicSpec:
    """A repartition topic (raw name, without the application id) and its partition count
    (``None``: decided at run time from the upstream topics)."""

    name: str
    num_partitions: int | None = None


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    """Source topics a node (a join) needs co-partitioned: same partition count."""

    node: str
    source_nodes: frozenset[str]


@dataclass(slots=True)
class GraphBuilder:
    """Records nodes and stores as the DSL creates them."""

    nodes: dict[str, NodeSpec] = field(default_factory=dict)
    stores: dict[str, StoreFactory] = field(default_factory=dict)
    node_stores: dict[str, list[str]] = field(default_factory=dict)
    global_stores: dict[str, GlobalStoreSpec] = field(default_factory=dict)
    repartition_topics: dict[str, RepartitionTopicSpec] = field(default_factory=dict)
    copartition_groups: list[CopartitionGroup] = field(default_factory=list)
    generated_resources: list[tuple[str, str]] = field(default_factory=list)
    #: every name the builder's name provider handed out (resources named after one are
    #: not the user's: ``ensure.explicit.internal.resource.naming``)
    generated_names: set[str] = field(default_factory=set)
    require_explicit_names: bool = False
    #: errors found while recording that Kafka reports when the topology is built
    deferred_errors: list[str] = field(default_factory=list)

    def _add(self, spec: NodeSpec) -> None:
        check_name(spec.name, "Processor")
        if spec.name in self.nodes:
            raise TopologyError(f"Processor {spec.name} is already added; choose another name")
        parents = spec.parents if not isinstance(spec, SourceSpec) else ()
        for parent in parents:
            if parent not in self.nodes:
                raise TopologyError(f"Processor {spec.name}: parent {parent} is not added yet")
            if isinstance(self.nodes[parent], SinkSpec):
                raise TopologyError(f"Processor {spec.name}: parent {parent} is a sink")
        self.nodes[spec.name] = spec

    def add_source(self, spec: SourceSpec) -> None:
        """Add a source node; raise TopologyError if its topics are already read."""
        if not spec.topics and spec.pattern is None:
            raise TopologyError(f"Source {spec.name}: give at least one topic or a pattern")
        for node in self.nodes.values():
            if isinstance(node, SourceSpec) and set(node.topics) & set(spec.topics):
                topic = sorted(set(node.topics) & set(spec.topics))[0]
                raise TopologyError(
                    f"Source {spec.name}: topic {topic} is already read by source {node.name}; "
                    "read a topic once and reuse the stream"
                )
        self._add(spec)

    def add_processor(self, spec: ProcessorSpec) -> None:
        """Add a processor node under its parents, connected to ``spec.stores``."""
        if not spec.parents:
            raise TopologyError(f"Processor {spec.name}: it needs at least one parent")
        self._add(spec)
        for store in spec.stores:
            self.connect_store(spec.name, store)

    def add_sink(self, spec: SinkSpec) -> None:
        """Add a sink node under its parents."""
        if spec.topic is None and spec.topic_extractor is None:
            raise TopologyError(f"Sink {spec.name}: give a topic or a topic extractor")
        self._add(spec)

    def add_store(self, factory: StoreFactory, *processors: str) -> None:
        """Add a state store, optionally connecting it to ``processors``."""
        check_name(factory.name, "Store")
        if factory.name in self.stores or factory.name in self.global_stores:
            raise TopologyError(f"Store {factory.name} is already added; choose another name")
        self.stores[factory.name] = factory
        for processor in processors:
            self.connect_store(processor, factory.name)

    def connect_store(self, processor: str, store: str) -> None:
        """Give ``processor`` access to ``store`` (checked when the topology is built)."""
        names = self.node_stores.setdefault(processor, [])
        if store not in names:
            names.append(store)

    def add_global_store(self, spec: GlobalStoreSpec, factory: StoreFactory) -> None:
        """Register a global store filled by ``spec.processor_name`` from ``spec.topic``."""
        self.add_store(factory, spec.processor_name)
        self.global_stores[factory.name] = spec

    def add_repartition_topic(self, spec: RepartitionTopicSpec) -> None:
        """Declare a repartition topic (raw name)."""
        if spec.name in self.repartition_topics:
            raise TopologyError(
                f"Repartition topic {spec.name} is already used; give the operation "
                "(Grouped/Repartitioned/Materialized) a different name"
            )
        self.repartition_topics[spec.name] = spec

    def add_copartition_group(self, node: str, source_nodes: Iterable[str]) -> None:
        """Require the topics read by ``source_nodes`` to be co-partitioned (joins)."""
        self.copartition_groups.append(CopartitionGroup(node, frozenset(source_nodes)))

    def defer_error(self, message: str) -> None:
        """Make :meth:`~topology.dsl.builder.StreamsBuilder.build` raise TopologyError with
        ``message`` (a check Kafka makes at build time, not when the operator is added)."""
        self.deferred_errors.append(message)

    def note_generated(self, node: str, resource: str) -> None:
        """Record that ``node`` uses a generated internal resource name (store or topic).

        Names made from one the name provider handed out are found without this; note a
        name generated another way. ``ensure.explicit.internal.resource.naming`` turns
        these into errors (:mod:`topology.graph.internal_names`)."""
        self.generated_resources.append((node, resource))

    def source_nodes_of(self, node: str) -> frozenset[str]:
        """Return the source nodes upstream of ``node`` (for co-partitioning)."""
        seen, todo, found = set(), [node], set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            spec = self.nodes[name]
            if isinstance(spec, SourceSpec):
                found.add(name)
            else:
                todo.extend(spec.parents)
        return frozenset(found)
