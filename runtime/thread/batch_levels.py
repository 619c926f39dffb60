"""How a batch runs its sub-topologies: in levels, a Spark shuffle between two levels for
the repartitioned records (moved here from ``runtime.thread.stream_thread``), and the repartition
topics that close a cycle between sub-topologies.

A batch shuffles repartitioned records to the next level inside the batch, which needs the
sub-topologies in an order where every writer of a topic runs before its reader. A
foreign-key join breaks that order: its left side writes the subscription topic read by
the right side, which writes the response topic read by the left side. The topics of such
a cycle go through storage instead, as in Kafka: a batch writes them, a later batch reads
them (the stream thread wakes its source until the cycle has drained).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.tasks.task_runner import shuffle_keys
from topology.graph.graph import SinkSpec
from topology.graph.topology import Topology


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


@dataclass(frozen=True)
class BatchLevels:
    """How a batch runs its sub-topologies: ``inline`` repartition topic -> the level
    reading it, ``levels`` sub-topology -> level, ``partitions`` level -> its task count,
    ``shuffle`` task count -> the shuffle value of each partition."""

    inline: dict[str, int]
    levels: dict[int, int]
    partitions: dict[int, int]
    shuffle: dict[int, list[int]]

    @property
    def depth(self) -> int:
        """The number of levels."""
        return max(self.levels.values(), default=0) + 1


def plan_levels(
    topology: Topology,
    sources: Mapping[str, int],
    tasks: Mapping[int, int],
    application_id: str,
    *,
    in_batch: bool,
) -> BatchLevels:
    """Level each sub-topology: 0 when it reads no repartition topic, else one more than
    the deepest sub-topology writing one it reads. Without ``in_batch`` every
    sub-topology is level 0 and repartitions go through their topics; so do the
    repartition topics of a cycle between sub-topologies (a foreign-key join's), with
    ``in_batch`` too."""
    inline_topics: set[str] = set()
    if in_batch:
        inline_topics = set(topology.repartition_topic_names(application_id))
        inline_topics -= cyclic_topics(topology, sources, application_id)
    writers = {
        topic: subs
        for topic, subs in repartition_writers(topology, application_id).items()
        if topic in inline_topics
    }
    levels = {sub.id: 0 for sub in topology.task_subtopologies()}
    for _ in range(len(levels) + 1):
        changed = False
        for topic, reader in sources.items():
            if topic in inline_topics:
                want = 1 + max(levels[w] for w in writers.get(topic, {0}) if w in levels)
                if levels.get(reader, 0) < want:
                    levels[reader] = want
                    changed = True
        if not changed:
            break
    inline = {t: levels[r] for t, r in sources.items() if t in inline_topics}
    partitions: dict[int, int] = {}
    for sub_id, level in levels.items():
        partitions[level] = max(partitions.get(level, 0), tasks.get(sub_id, 0))
    shuffle = {n: shuffle_keys(n) for n in set(partitions.values()) if n > 0}
    return BatchLevels(inline, levels, partitions, shuffle)
