"""A topology as a picture: its sub-topologies, sources, processors, stores, sinks and the
topics between them, drawn as Mermaid or Graphviz DOT text (``streams-eos describe FILE
--format mermaid|dot|svg``; :mod:`topology.graph.picture_svg` lays out the SVG).

What is drawn is what Kafka's ``TopologyDescription`` says (the nodes of each
sub-topology and their edges), with what a Kafka Streams user reads off a picture of it
(as kafka-streams-viz draws one): each topic a node of its own, so that a repartition
topic links the sink that writes it to the sources that read it in another sub-topology;
each store a node linked to the processors that use it; and, here, the nodes that take
their records a batch at a time (``processing.engine=columnar``) marked as such.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from topology.graph.graph import ProcessorSpec, SinkSpec, SourceSpec
from topology.graph.topology import Topology

#: The kinds of a picture's nodes.
SOURCE, PROCESSOR, SINK, TOPIC, INTERNAL_TOPIC, STORE = (
    "source",
    "processor",
    "sink",
    "topic",
    "internal topic",
    "store",
)


@dataclass(frozen=True, slots=True)
class Node:
    """One box of the picture: ``id`` (safe in every format), what it shows, its kind,
    the sub-topology it belongs to (None: a topic or a store of several), and whether it
    takes batches (columnar)."""

    id: str
    label: str
    kind: str
    subtopology: int | None = None
    columnar: bool = False


@dataclass(slots=True)
class Picture:
    """The nodes, the edges (from id, to id, whether dashed: a store's) and the
    sub-topologies (id -> title) of a topology."""

    nodes: list[Node] = field(default_factory=list)
    edges: list[tuple[str, str, bool]] = field(default_factory=list)
    subtopologies: dict[int, str] = field(default_factory=dict)

    def node(self, node_id: str) -> Node:
        return next(n for n in self.nodes if n.id == node_id)

    def members(self, subtopology: int) -> list[Node]:
        return [n for n in self.nodes if n.subtopology == subtopology]

    def loose(self) -> list[Node]:
        """The nodes of no sub-topology (topics, and stores shared by several)."""
        return [n for n in self.nodes if n.subtopology is None]


def picture(topology: Topology, columnar: Iterable[str] = ()) -> Picture:
    """The picture of ``topology``; ``columnar``: the names of the nodes that take batches
    (:meth:`~topology.engine.processing.ProcessingDescription.columnar_nodes`)."""
    batched = frozenset(columnar)
    out = Picture()
    ids: dict[tuple[str, str], str] = {}

    def ident(kind: str, name: str) -> str:
        key = (kind, name)
        if key not in ids:
            ids[key] = f"{kind[0]}{len(ids)}"
        return ids[key]

    store_subs: dict[str, set[int]] = {}
    for sub in topology.subtopologies:
        for name in sub.nodes:
            spec = topology.nodes[name]
            if isinstance(spec, ProcessorSpec):
                for store in spec.stores:
                    store_subs.setdefault(store, set()).add(sub.id)
    for store in _global_stores(topology):
        store_subs.setdefault(store, set())
    topics: dict[str, str] = {}  # topic -> its kind
    for sub in topology.subtopologies:
        title = f"Sub-topology {sub.id}" + (" (global store)" if sub.is_global else "")
        out.subtopologies[sub.id] = title
        for name in sub.nodes:
            spec = topology.nodes[name]
            node_id = ident("node", name)
            if isinstance(spec, SourceSpec):
                kind = SOURCE
                read = [spec.pattern.pattern] if spec.pattern is not None else list(spec.topics)
                for topic in read:
                    topics.setdefault(topic, INTERNAL_TOPIC if spec.internal else TOPIC)
                    out.edges.append((ident("topic", topic), node_id, False))
            elif isinstance(spec, SinkSpec):
                kind = SINK
                if spec.topic is not None:
                    topics.setdefault(spec.topic, INTERNAL_TOPIC if spec.internal else TOPIC)
                    out.edges.append((node_id, ident("topic", spec.topic), False))
            else:
                kind = PROCESSOR
                for store in spec.stores:
                    out.edges.append((node_id, ident("store", store), True))
            out.nodes.append(Node(node_id, name, kind, sub.id, name in batched))
            if not isinstance(spec, SourceSpec):
                out.edges.extend((ident("node", p), node_id, False) for p in spec.parents)
    for topic, kind in topics.items():
        out.nodes.append(Node(ident("topic", topic), topic, kind))
    for store, subs in store_subs.items():
        home = next(iter(subs)) if len(subs) == 1 else None
        out.nodes.append(Node(ident("store", store), store, STORE, home))
    return out


def _global_stores(topology: Topology) -> list[str]:
    stores: list[str] = []
    for sub in topology.subtopologies:
        if sub.is_global:
            stores.extend(sub.stores)
    return stores


# -- Mermaid ---------------------------------------------------------------------------------

_MERMAID_SHAPES = {
    SOURCE: ('(["', '"])'),
    SINK: ('(["', '"])'),
    PROCESSOR: ('["', '"]'),
    TOPIC: ('[/"', '"/]'),
    INTERNAL_TOPIC: ('[/"', '"/]'),
    STORE: ('[("', '")]'),
}


def to_mermaid(pic: Picture) -> str:
    """Mermaid ``flowchart`` text (GitHub, GitLab and MkDocs Material draw it)."""
    lines = ["flowchart TB"]

    def box(node: Node, indent: str) -> str:
        left, right = _MERMAID_SHAPES[node.kind]
        return f"{indent}{node.id}{left}{_mermaid_text(node.label)}{right}"

    for sub, title in pic.subtopologies.items():
        lines.append(f'  subgraph sub{sub}["{_mermaid_text(title)}"]')
        lines.extend(box(n, "    ") for n in pic.members(sub))
        lines.append("  end")
    lines.extend(box(n, "  ") for n in pic.loose())
    for src, dst, dashed in pic.edges:
        lines.append(f"  {src} {'-.-' if dashed else '-->'} {dst}")
    lines.extend(
        [
            "  classDef topic fill:#fff3d6,stroke:#b7791f",
            "  classDef store fill:#e6f0ff,stroke:#2b6cb0",
            "  classDef columnar fill:#d9f7e8,stroke:#2f855a,stroke-width:2px",
        ]
    )
    for cls, wanted in (
        ("topic", {TOPIC, INTERNAL_TOPIC}),
        ("store", {STORE}),
    ):
        chosen = [n.id for n in pic.nodes if n.kind in wanted]
        if chosen:
            lines.append(f"  class {','.join(chosen)} {cls}")
    batched = [n.id for n in pic.nodes if n.columnar]
    if batched:
        lines.append(f"  class {','.join(batched)} columnar")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")


# -- Graphviz DOT ----------------------------------------------------------------------------

_DOT_SHAPES = {
    SOURCE: "shape=box, style=rounded",
    SINK: "shape=box, style=rounded",
    PROCESSOR: "shape=box",
    TOPIC: 'shape=parallelogram, style=filled, fillcolor="#fff3d6"',
    INTERNAL_TOPIC: 'shape=parallelogram, style="filled,dashed", fillcolor="#fff3d6"',
    STORE: 'shape=cylinder, style=filled, fillcolor="#e6f0ff"',
}


def to_dot(pic: Picture) -> str:
    """Graphviz DOT text (``dot -Tsvg`` draws it)."""
    lines = ["digraph topology {", '  rankdir=TB; node [fontname="Helvetica", fontsize=11];']

    def box(node: Node, indent: str) -> str:
        style = _DOT_SHAPES[node.kind]
        if node.columnar:
            style += ', style="rounded,filled,bold", fillcolor="#d9f7e8"'
        return f'{indent}{node.id} [label="{_dot_text(node.label)}", {style}];'

    for sub, title in pic.subtopologies.items():
        lines.append(f"  subgraph cluster_{sub} {{")
        lines.append(f'    label="{_dot_text(title)}"; style=dashed;')
        lines.extend(box(n, "    ") for n in pic.members(sub))
        lines.append("  }")
    lines.extend(box(n, "  ") for n in pic.loose())
    for src, dst, dashed in pic.edges:
        attrs = " [style=dashed, arrowhead=none]" if dashed else ""
        lines.append(f"  {src} -> {dst}{attrs};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
