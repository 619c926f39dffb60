"""Repartition topics that close a cycle between sub-topologies.

A batch shuffles repartitioned records to the next level inside the batch, which needs the
sub-topologies in an order where every writer of a topic runs before its reader. A
foreign-key join breaks that order: its left side writes the subscription topic read by
the right side, which writes the response topic read by the left side. The topics of such
a cycle go through storage instead, as in Kafka: a batch writes them, a later batch reads
them (the stream thread wakes its source until the cycle has drained).
"""

from __future__ import annotations

from collections.abc import Mapping

from topology.graph import SinkSpec
from topology.topology import Topology


def repartition_writers(topology: Topology, application_id: str) -> dict[str, set[int]]:
    """Return each runtime repartition topic -> the sub-topologies writing it."""
    writers: dict[str, set[int]] = {}
    for sub in topology.task_subtopologies():
        for name in sub.nodes:
            spec = topology.nodes[name]
            if isinstance(spec, SinkSpec) and spec.internal and spec.topic is not None:
                runtime = topology.topic_name(spec.topic, application_id, internal=True)
                writers.setdefault(runtime, set()).add(sub.id)
    return writers


def cyclic_topics(
    topology: Topology, sources: Mapping[str, int], application_id: str
) -> frozenset[str]:
    """Return the repartition topics whose writer and reader lie on one cycle of
    sub-topologies (a sub-topology reading a topic it writes included)."""
    writers = repartition_writers(topology, application_id)
    edges: dict[int, set[int]] = {}
    for topic, subs in writers.items():
        reader = sources.get(topic)
        if reader is not None:
            for writer in subs:
                edges.setdefault(writer, set()).add(reader)
    return frozenset(
        topic
        for topic, subs in writers.items()
        if topic in sources and any(_reaches(edges, sources[topic], w) for w in subs)
    )


def _reaches(edges: Mapping[int, set[int]], start: int, goal: int) -> bool:
    """Whether ``goal`` can be reached from ``start`` (``start`` itself included)."""
    seen: set[int] = set()
    todo = [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return False
