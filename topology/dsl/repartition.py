"""Repartition points: a sink writing ``<prefix>-repartition`` and the source reading it,
which is where the graph splits into sub-topologies (Kafka's
``createRepartitionedSource``); and co-partitioning, what a join requires of the topics
upstream of its sides."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.serdes import Serde
from topology.api.options import StreamPartitioner
from topology.graph.graph import ProcessorSpec, RepartitionTopicSpec, SinkSpec, SourceSpec
from topology.graph.naming import FILTER, REPARTITION_TOPIC_SUFFIX, SINK, SOURCE, is_generated
from topology.processors.proc_stream import PassThroughProcessor

if TYPE_CHECKING:
    from topology.dsl.builder import StreamsBuilder


def create_repartitioned_source(
    builder: StreamsBuilder,
    parent: str,
    prefix: str,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    *,
    user_named: bool,
    partitioner: StreamPartitioner | None = None,
    num_partitions: int | None = None,
) -> str:
    """Add ``parent -> filter -> sink -> topic -> source`` and return the source's name.

    The node names are generated (the counter always advances by three, as Kafka's) when
    ``prefix`` is itself generated, else ``<topic>-sink``, ``<topic>-filter`` and
    ``<topic>-source``.
    """
    topic = (
        prefix if prefix.endswith(REPARTITION_TOPIC_SUFFIX) else prefix + REPARTITION_TOPIC_SUFFIX
    )
    names = builder.names
    sink, filter_, source = (
        names.new_processor_name(SINK),
        names.new_processor_name(FILTER),
        names.new_processor_name(SOURCE),
    )
    if not is_generated(prefix):
        sink, filter_, source = f"{topic}-sink", f"{topic}-filter", f"{topic}-source"
    graph = builder.graph
    graph.add_repartition_topic(RepartitionTopicSpec(topic, num_partitions))
    graph.add_processor(
        ProcessorSpec(name=filter_, supplier=PassThroughProcessor, parents=(parent,))
    )
    graph.add_sink(
        SinkSpec(
            name=sink,
            parents=(filter_,),
            topic=topic,
            key_serde=key_serde,
            value_serde=value_serde,
            partitioner=partitioner,
            internal=True,
        )
    )
    graph.add_source(
        SourceSpec(
            name=source,
            topics=(topic,),
            key_serde=key_serde,
            value_serde=value_serde,
            internal=True,
        )
    )
    if not user_named:
        graph.note_generated(parent, topic)
    return source


def copartition(node: str, *handles: Any) -> None:
    """Require the source topics upstream of ``handles`` (streams or tables) to be
    co-partitioned; :meth:`Topology.check_copartitioning` names ``node`` when they are not."""
    graph = handles[0].builder.graph
    sources: set[str] = set()
    for handle in handles:
        sources |= graph.source_nodes_of(handle.node)
    graph.add_copartition_group(node, sources)
