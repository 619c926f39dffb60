"""How a topology's records run: which parts take batches, and which take one record at a
time (``processing.engine``, see :mod:`topology.engine.columnar`).

Decided from the topology and the configuration alone, as a task decides when it is built:
under the columnar engine a source runs columnar where taking its records node by node
cannot change a result (:func:`~topology.engine.columnar.columnar_source`); below such a
source, each node takes the batch whole when it has a batch path (the stateless DSL
operators, the stream, windowed, sliding and session aggregations, emitting on update or on
window close, ``suppress``, table sources, a sink of one topic with the default
partitioner, stream-table and stream-stream joins), and is fed the batch record by record
otherwise (a Processor-API node, a ``transform_values`` transformer, which reads its
record's context). A
source whose only child is a count or a windowed count hands it the raw Arrow columns. A
sink writing a count's repartition topic combines each batch per key, a windowed count's
per key and window set (inside a batch that shuffles it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.config import StreamsConfig
from common.handlers import ExceptionHandlers
from topology.engine.columnar import columnar_source
from topology.engine.combine import combined_topics, windowed_combined_topics
from topology.engine.task import config_dict
from topology.graph.graph import ProcessorSpec, SinkSpec, SourceSpec
from topology.graph.topology import Topology

#: How a node below a columnar source takes a batch.
BATCH, ARROW, ONE_BY_ONE = "batch", "raw Arrow columns", "record by record"


@dataclass(frozen=True, slots=True)
class SourceProcessing:
    """One source of a sub-topology: whether its records run columnar, and how each node
    below it (in the sub-topology) takes them."""

    subtopology: int
    source: str
    columnar: bool
    nodes: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        if not self.columnar:
            return (
                f"    Source: {self.source}: record by record (below it a node is reached by "
                "two paths, two nodes share a store, or two sinks write one topic)\n"
            )
        lines = [f"    Source: {self.source}: columnar\n"]
        lines.extend(f"      {name}: {how}\n" for name, how in self.nodes)
        return "".join(lines)


@dataclass(frozen=True, slots=True)
class ProcessingDescription:
    """How every source's records run; ``str()`` lists them per sub-topology."""

    engine: str
    sources: tuple[SourceProcessing, ...]

    def columnar_nodes(self) -> frozenset[str]:
        """The nodes that take batches whole (raw columns included)."""
        return frozenset(
            name for s in self.sources if s.columnar for name, how in s.nodes if how != ONE_BY_ONE
        )

    def __str__(self) -> str:
        head = f"Processing (processing.engine={self.engine}):\n"
        if not self.sources:
            return head + "  every record one at a time\n"
        text, sub = head, None
        for source in self.sources:
            if source.subtopology != sub:
                sub = source.subtopology
                text += f"  Sub-topology: {sub}\n"
            text += str(source)
        return text


def describe_processing(
    topology: Topology, config: StreamsConfig | Mapping[str, Any]
) -> ProcessingDescription:
    """Describe how ``topology``'s records run under ``config`` (a StreamsConfig, or its
    keys: ``application.id`` and the rest as the application gives them)."""
    settings = config if isinstance(config, StreamsConfig) else _settings(config)
    handlers = ExceptionHandlers(config_dict(settings))
    if settings.processing_engine != "columnar" or (
        handlers.resumes_processing or handlers.needs_raw_input
    ):
        return ProcessingDescription(settings.processing_engine, ())
    combined = combined_topics(topology, settings)
    windowed = windowed_combined_topics(topology, settings)
    found = []
    for sub in topology.task_subtopologies():
        for source in sub.sources:
            if not columnar_source(topology, source, sub.nodes):
                found.append(SourceProcessing(sub.id, source, False, ()))
                continue
            below = _below(topology, source, set(sub.nodes))
            nodes = [(name, _how(topology, name, settings, combined, windowed)) for name in below]
            kids = [k for k in topology.children.get(source, ()) if k in sub.nodes]
            if len(kids) == 1 and _takes_arrow(topology.nodes[kids[0]]):
                nodes = [(n, ARROW if n == kids[0] else how) for n, how in nodes]
            found.append(SourceProcessing(sub.id, source, True, tuple(nodes)))
    return ProcessingDescription("columnar", tuple(found))


def _settings(config: Mapping[str, Any]) -> StreamsConfig:
    return StreamsConfig.from_dict(
        {"application.id": "describe", "topics.root": "memory://describe", **config}
    )


def _below(topology: Topology, source: str, inside: set[str]) -> list[str]:
    """The nodes below ``source`` in its sub-topology, depth first in child order."""
    out: list[str] = []
    todo = [k for k in reversed(topology.children.get(source, ())) if k in inside]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.append(name)
        todo.extend(k for k in reversed(topology.children.get(name, ())) if k in inside)
    return out


def _how(
    topology: Topology,
    name: str,
    config: StreamsConfig,
    combined: frozenset[str],
    windowed: Mapping[str, Any],
) -> str:
    spec = topology.nodes[name]
    if isinstance(spec, SinkSpec):
        if spec.topic is None or spec.partitioner is not None:
            return ONE_BY_ONE
        topic = topology.topic_name(spec.topic, config.application_id, internal=spec.internal)
        if topic in combined:
            return f"{BATCH}, combined per key on Spark"
        if topic in windowed:
            return f"{BATCH}, combined per key and window set inside a Spark batch"
        return BATCH
    if (
        isinstance(spec, ProcessorSpec)
        and not spec.user_code
        and hasattr(spec.supplier(), "process_batch")
    ):
        return BATCH
    return ONE_BY_ONE


def _takes_arrow(spec: Any) -> bool:
    """Whether a source's only child ``spec`` takes its raw Arrow columns (a count)."""
    if isinstance(spec, SourceSpec) or not isinstance(spec, ProcessorSpec) or spec.user_code:
        return False
    processor = spec.supplier()
    return hasattr(processor, "process_arrow") and getattr(processor, "counting", True)
