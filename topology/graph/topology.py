"""The frozen :class:`Topology`: nodes, stores, sub-topologies and internal topics.

Sub-topologies are the connected parts of the node graph once repartition topics cut it
(a sink writing a topic and the source reading it are not connected) and processors that
share a store are joined (Kafka's node groups). They are numbered in the order their first
node was added. Internal topic names are raw here (``counts-repartition``); the runtime
prefixes the application id: ``<application.id>-counts-repartition`` and
``<application.id>-<store>-changelog``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from common.config import StreamsConfig
from common.errors import ConfigError, TopologyError
from common.serdes import serde_from_name
from topology.graph.describe import TopologyDescription, describe
from topology.graph.graph import (
    CopartitionGroup,
    GlobalStoreSpec,
    GraphBuilder,
    NodeSpec,
    ProcessorSpec,
    RepartitionTopicSpec,
    SinkSpec,
    SourceSpec,
)
from topology.graph.internal_names import ImplicitNames, implicit_names
from topology.graph.naming import CHANGELOG_TOPIC_SUFFIX
from topology.graph.stores import StoreFactory


@dataclass(frozen=True, slots=True)
class SubTopology:
    """One sub-topology: its id, node names (in insertion order) and what it touches."""

    id: int
    nodes: tuple[str, ...]
    sources: tuple[str, ...]
    stores: tuple[str, ...]
    is_global: bool = False


class Topology:
    """A built, immutable topology. Make one with ``StreamsBuilder.build()``.

    Example:
        >>> from topology.dsl.builder import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("in").map_values(str.upper).to("out")
        >>> print(b.build().describe())  # doctest: +ELLIPSIS
        Topologies:
           Sub-topology: 0
        ...
    """

    def __init__(self, graph: GraphBuilder) -> None:
        """Freeze ``graph``; raise TopologyError if it is invalid (see :func:`_validate`)."""
        nodes: dict[str, NodeSpec] = {}
        for name, spec in graph.nodes.items():
            if isinstance(spec, ProcessorSpec):
                nodes[name] = replace(spec, stores=tuple(graph.node_stores.get(name, ())))
            else:
                nodes[name] = spec
        self.nodes: Mapping[str, NodeSpec] = MappingProxyType(nodes)
        self.stores: Mapping[str, StoreFactory] = MappingProxyType(dict(graph.stores))
        self.global_stores: Mapping[str, GlobalStoreSpec] = MappingProxyType(
            dict(graph.global_stores)
        )
        self.repartition_topics: Mapping[str, RepartitionTopicSpec] = MappingProxyType(
            dict(graph.repartition_topics)
        )
        self.copartition_groups: tuple[CopartitionGroup, ...] = tuple(graph.copartition_groups)
        children: dict[str, list[str]] = {name: [] for name in nodes}
        for name, spec in nodes.items():
            if not isinstance(spec, SourceSpec):
                for parent in spec.parents:
                    children[parent].append(name)
        self.children: Mapping[str, tuple[str, ...]] = MappingProxyType(
            {name: tuple(kids) for name, kids in children.items()}
        )
        #: Internal resources with generated names (KIP-1111).
        self.implicit_names: ImplicitNames = implicit_names(
            self.stores,
            self.repartition_topics,
            graph.generated_names,
            (resource for _, resource in graph.generated_resources),
        )
        _validate(self, graph)
        self.subtopologies: tuple[SubTopology, ...] = _node_groups(self)

    # -- queries -------------------------------------------------------------------------

    def subtopology(self, subtopology_id: int) -> SubTopology:
        """Return sub-topology ``subtopology_id``; raise TopologyError if there is none."""
        for sub in self.subtopologies:
            if sub.id == subtopology_id:
                return sub
        raise TopologyError(f"there is no sub-topology {subtopology_id}")

    def task_subtopologies(self) -> tuple[SubTopology, ...]:
        """The sub-topologies that run as tasks (all but the global ones)."""
        return tuple(sub for sub in self.subtopologies if not sub.is_global)

    def topic_name(self, topic: str, application_id: str, *, internal: bool) -> str:
        """Return the runtime name of a topic: internal ones get the application id prefix."""
        return f"{application_id}-{topic}" if internal else topic

    def source_topics(self, subtopology_id: int, application_id: str) -> tuple[str, ...]:
        """The runtime names of the topics sub-topology ``subtopology_id`` reads."""
        out: list[str] = []
        for name in self.subtopology(subtopology_id).sources:
            spec = self.nodes[name]
            assert isinstance(spec, SourceSpec)
            out.extend(
                self.topic_name(t, application_id, internal=spec.internal) for t in spec.topics
            )
        return tuple(out)

    def repartition_topic_names(self, application_id: str) -> dict[str, RepartitionTopicSpec]:
        """Runtime name -> spec of every repartition topic."""
        return {f"{application_id}-{n}": spec for n, spec in self.repartition_topics.items()}

    def changelog_topics(self, application_id: str) -> dict[str, str]:
        """Store name -> changelog topic (``<application.id>-<store>-changelog``) of every
        logged store."""
        return {
            name: f"{application_id}-{name}{CHANGELOG_TOPIC_SUFFIX}"
            for name, factory in self.stores.items()
            if factory.logging_enabled
        }

    def describe(self) -> TopologyDescription:
        """Return the description; ``str()`` of it is Kafka's ``TopologyDescription`` text."""
        return describe(self)

    def validate(self, config: StreamsConfig) -> None:
        """Check what needs the configuration: every node without a serde must get one from
        ``default.key.serde`` / ``default.value.serde``; with
        ``ensure.explicit.internal.resource.naming`` no internal resource may have a
        generated name (the application refuses to start, as Kafka's). Raise TopologyError
        naming the node, or listing every unnamed resource."""
        if config.ensure_explicit_internal_resource_naming and self.implicit_names:
            raise TopologyError(self.implicit_names.error())
        for name, spec in self.nodes.items():
            if isinstance(spec, ProcessorSpec):
                continue
            for serde, key in (
                (spec.key_serde, config.default_key_serde),
                (spec.value_serde, config.default_value_serde),
            ):
                if serde is None:
                    try:
                        serde_from_name(key)
                    except ConfigError as exc:
                        raise TopologyError(
                            f"{type(spec).__name__[:-4]} {name}: no serde given and the "
                            f"default serde cannot be loaded: {exc}"
                        ) from exc

    def check_copartitioning(self, partitions: Mapping[str, int]) -> None:
        """Check that each co-partition group's input topics have one partition count.

        Args:
            partitions: raw topic name -> partition count of the topics known so far
                (repartition topics without a fixed count may be missing).

        Raises:
            TopologyError: A group mixes counts; the message names the joining node.
        """
        for group in self.copartition_groups:
            counts = {
                topic: partitions[topic]
                for source in sorted(group.source_nodes)
                for topic in _topics_of(self.nodes[source])
                if topic in partitions
            }
            if len(set(counts.values())) > 1:
                listed = ", ".join(f"{t}={n}" for t, n in counts.items())
                raise TopologyError(
                    f"Processor {group.node}: its input topics are not co-partitioned "
                    f"({listed}); give them the same number of partitions or repartition"
                )

    def __repr__(self) -> str:
        return f"Topology({len(self.nodes)} nodes, {len(self.subtopologies)} sub-topologies)"


def _topics_of(spec: NodeSpec) -> Iterable[str]:
    return spec.topics if isinstance(spec, SourceSpec) else ()


def _validate(topology: Topology, graph: GraphBuilder) -> None:
    """Raise TopologyError for unknown stores, duplicate store use across global and local,
    and generated internal names when explicit naming is required (else warn of them);
    raise the first error the DSL deferred to build time."""
    if graph.deferred_errors:
        raise TopologyError(graph.deferred_errors[0])
    for name, spec in topology.nodes.items():
        if isinstance(spec, ProcessorSpec):
            for store in spec.stores:
                if store not in topology.stores:
                    raise TopologyError(
                        f"Processor {name}: state store {store!r} is not added; add it with "
                        "StreamsBuilder.add_state_store() before connecting it"
                    )
    for store in graph.node_stores:
        if store not in topology.nodes:
            raise TopologyError(f"Processor {store} has stores connected but is not added")
    if graph.require_explicit_names and topology.implicit_names:
        raise TopologyError(topology.implicit_names.error())
    topology.implicit_names.warn()
    for group in topology.copartition_groups:
        if group.node not in topology.nodes:
            raise TopologyError(f"co-partition group of unknown processor {group.node}")


def _node_groups(topology: Topology) -> tuple[SubTopology, ...]:
    """Split the nodes into sub-topologies (union-find over edges and shared stores)."""
    root: dict[str, str] = {name: name for name in topology.nodes}

    def find(name: str) -> str:
        while root[name] != name:
            root[name] = root[root[name]]
            name = root[name]
        return name

    def unite(a: str, b: str) -> None:
        root[find(a)] = find(b)

    by_store: dict[str, str] = {}
    for name, spec in topology.nodes.items():
        if not isinstance(spec, SourceSpec):
            for parent in spec.parents:
                unite(name, parent)
        if isinstance(spec, ProcessorSpec):
            for store in spec.stores:
                if store in by_store:
                    unite(name, by_store[store])
                else:
                    by_store[store] = name
    groups: dict[str, list[str]] = {}
    for name in topology.nodes:
        groups.setdefault(find(name), []).append(name)
    global_processors = {g.processor_name for g in topology.global_stores.values()}
    out = []
    for index, members in enumerate(groups.values()):
        stores: list[str] = []
        for name in members:
            spec = topology.nodes[name]
            if isinstance(spec, ProcessorSpec):
                stores.extend(s for s in spec.stores if s not in stores)
        sources = tuple(n for n in members if isinstance(topology.nodes[n], SourceSpec))
        is_global = any(n in global_processors for n in members)
        if is_global and len(members) != 2:
            raise TopologyError(
                f"Processor {members[0]}: a global store's source and processor must not be "
                "connected to other nodes"
            )
        out.append(SubTopology(index, tuple(members), sources, tuple(stores), is_global))
    return tuple(out)


def sink_topics(topology: Topology, sub: SubTopology) -> tuple[str, ...]:
    """Return the raw fixed topics the sinks of ``sub`` write."""
    return tuple(
        spec.topic
        for name in sub.nodes
        if isinstance(spec := topology.nodes[name], SinkSpec) and spec.topic is not None
    )
