"""Kafka's ``TopologyDescription`` text, exactly.

Within a sub-topology nodes are ordered as Kafka orders them: by the size of the sub-graph
they root (descending; a node reachable along two paths counts twice), then by name. The
``-->``/``<--`` lists are in the order Kafka's own walk leaves them in
(:mod:`topology.graph.java_order`), ``none`` when empty. The first
``Sub-topology`` line is indented three spaces and the others two, as Kafka prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from topology.graph.graph import ProcessorSpec, SinkSpec, SourceSpec
from topology.graph.java_order import neighbour_orders

if TYPE_CHECKING:  # annotations only: the topology imports this module
    from topology.graph.topology import SubTopology, Topology


@dataclass(frozen=True, slots=True)
class NodeDescription:
    """One node: kind (``Source``/``Processor``/``Sink``), name, detail, neighbours."""

    kind: str
    name: str
    detail: str
    successors: tuple[str, ...]
    predecessors: tuple[str, ...]

    def __str__(self) -> str:
        text = f"{self.kind}: {self.name} ({self.detail})"
        if self.kind != "Sink":
            text += f"\n      --> {_names(self.successors)}"
        if self.kind != "Source":
            text += f"\n      <-- {_names(self.predecessors)}"
        return text


@dataclass(frozen=True, slots=True)
class SubtopologyDescription:
    """One sub-topology (or global store) with its nodes in Kafka's order."""

    id: int
    nodes: tuple[NodeDescription, ...]
    is_global: bool = False

    def __str__(self) -> str:
        if self.is_global:
            head = f"Sub-topology: {self.id} for global store (will not generate tasks)\n"
            return head + "".join(f"    {node}\n" for node in self.nodes)
        return f"Sub-topology: {self.id}\n" + "".join(f"    {n}\n" for n in self.nodes) + "\n"


@dataclass(frozen=True, slots=True)
class TopologyDescription:
    """The description of a topology; ``str()`` gives Kafka's text."""

    subtopologies: tuple[SubtopologyDescription, ...]

    def __str__(self) -> str:
        return "Topologies:\n " + "".join(f"  {sub}" for sub in self.subtopologies)


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(names) if names else "none"


def _java_set(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(items) + "]"


def _detail(topology: Topology, name: str) -> tuple[str, str]:
    spec = topology.nodes[name]
    if isinstance(spec, SourceSpec):
        topics = spec.pattern.pattern if spec.pattern is not None else _java_set(spec.topics)
        return "Source", f"topics: {topics}"
    if isinstance(spec, SinkSpec):
        if spec.topic is not None:
            return "Sink", f"topic: {spec.topic}"
        extractor = spec.topic_extractor
        label = getattr(extractor, "__qualname__", None) or type(extractor).__qualname__
        return "Sink", f"extractor class: {label}"
    assert isinstance(spec, ProcessorSpec)
    return "Processor", f"stores: {_java_set(spec.stores)}"


def _describe_group(topology: Topology, sub: SubTopology) -> SubtopologyDescription:
    members = set(sub.nodes)
    children = {n: tuple(c for c in topology.children[n] if c in members) for n in sub.nodes}

    @cache
    def size(name: str) -> int:
        return 1 + sum(size(kid) for kid in children[name])

    parents = {n: _parents(topology, n) for n in sub.nodes}
    successors, predecessors = neighbour_orders(sub.nodes, parents)
    nodes = []
    for name in sorted(sub.nodes, key=lambda n: (-size(n), n)):
        kind, detail = _detail(topology, name)
        nodes.append(
            NodeDescription(kind, name, detail, tuple(successors[name]), tuple(predecessors[name]))
        )
    return SubtopologyDescription(sub.id, tuple(nodes), sub.is_global)


def _parents(topology: Topology, name: str) -> tuple[str, ...]:
    """The parents ``name`` was added with, in their order (none for a source)."""
    spec = topology.nodes[name]
    return () if isinstance(spec, SourceSpec) else tuple(spec.parents)


def describe(topology: Topology) -> TopologyDescription:
    """Return the :class:`TopologyDescription` of ``topology``."""
    return TopologyDescription(tuple(_describe_group(topology, s) for s in topology.subtopologies))
