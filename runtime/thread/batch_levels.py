"""How a batch runs its sub-topologies: in levels, a Spark shuffle between two levels for
the repartitioned records, and the repartition topics that go through storage instead.

A batch shuffles repartitioned records to the next level inside the batch, which needs an
order where every record is written at a lower level than the one reading it. Levels are
given to *topics*, not sub-topologies: a topic's records are processed at its level, and a
repartition topic's level is one more than the level of every topic whose records reach
its sink. A sub-topology whose topics have different levels is *visited* at each of them
within the batch (its task keeps the batch open between visits and commits at the last).

A foreign-key join is the case: its left side writes the subscription topic read by the
right side, which writes the response topic read by the left side again. The left table's
records (level 0) reach the subscription sink, the subscriptions (level 1) reach the
response sink, and the responses (level 2) reach the join's result: the cycle between
sub-topologies unrolls into three levels of one batch, and every update is answered in the
batch that made it, as the test driver answers it at once. Only topics on a cycle of
*records* (a topic whose records reach, through sub-topologies, a sink of that topic)
still go through storage, as in Kafka: a batch writes them, a later batch reads them. So
do the repartition topics a Processor-API sub-topology reads after its first level: its
punctuators may forward anything at the end of a batch, which a lower level could not take.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.config import StreamsConfig
from topology.engine.combine import windowed_combined_topics
from topology.graph.graph import ProcessorSpec, SinkSpec, SourceSpec
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


def topic_feeds(
    topology: Topology, sources: Mapping[str, int], application_id: str
) -> dict[str, set[str]]:
    """Return each source topic -> the repartition topics its records can reach (through
    the nodes of the sub-topology reading it). A topic no source node names (a pattern
    source's match) reaches what any source of its sub-topology reaches."""
    nodes_of: dict[str, list[str]] = {}
    for sub in topology.task_subtopologies():
        for name in sub.sources:
            spec = topology.nodes[name]
            assert isinstance(spec, SourceSpec)
            for raw in spec.topics:
                runtime = topology.topic_name(raw, application_id, internal=spec.internal)
                nodes_of.setdefault(runtime, []).append(name)
    subs = {sub.id: sub for sub in topology.task_subtopologies()}
    feeds: dict[str, set[str]] = {}
    for topic, sub_id in sources.items():
        starts = nodes_of.get(topic) or (list(subs[sub_id].sources) if sub_id in subs else [])
        feeds[topic] = _sinks_below(topology, starts, application_id)
    return feeds


def _sinks_below(topology: Topology, starts: list[str], application_id: str) -> set[str]:
    found: set[str] = set()
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        spec = topology.nodes[name]
        if isinstance(spec, SinkSpec) and spec.internal and spec.topic is not None:
            found.add(topology.topic_name(spec.topic, application_id, internal=True))
        todo.extend(topology.children.get(name, ()))
    return found


def cyclic_topics(
    topology: Topology, sources: Mapping[str, int], application_id: str
) -> frozenset[str]:
    """Return the repartition topics on a cycle of records: a topic whose records reach,
    through sub-topologies, a sink of that topic."""
    feeds = topic_feeds(topology, sources, application_id)
    edges = {t: {u for u in targets if u in sources} for t, targets in feeds.items()}
    return frozenset(t for t in edges if any(_reaches(edges, u, t) for u in edges[t]))


def _reaches(edges: Mapping[Any, set[Any]], start: Any, goal: Any) -> bool:
    """Whether ``goal`` can be reached from ``start`` (``start`` itself included)."""
    seen: set[Any] = set()
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
    reading it, ``levels`` sub-topology -> its last level, ``partitions`` level -> its
    task count, ``topics`` source topic -> the level its records are processed at (when
    not its sub-topology's last), ``visits`` sub-topology -> every level it runs at (when
    more than one), ``spill`` the inline topics a task reads together with a topic read
    from storage: their records may wait for that topic's next records, and are then
    spilled to their topic (:mod:`runtime.tasks.partition_group`), which the batches
    therefore also read."""

    inline: dict[str, int]
    levels: dict[int, int]
    partitions: dict[int, int]
    topics: dict[str, int] = field(default_factory=dict)
    visits: dict[int, tuple[int, ...]] = field(default_factory=dict)
    spill: frozenset[str] = frozenset()

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
    """Level each source topic (see the module's doc): 0 for a topic read from storage,
    unless its sub-topology reads later-level topics its records do not reach (then it
    joins them, so a task takes all its records together in timestamp order); a
    repartition topic one more than every topic whose records reach its sink. Without
    ``in_batch`` every topic is level 0 and repartitions go through their topics."""
    inline_topics: set[str] = set()
    if in_batch:
        inline_topics = set(topology.repartition_topic_names(application_id)) & set(sources)
        inline_topics -= cyclic_topics(topology, sources, application_id)
    feeds = topic_feeds(topology, sources, application_id)
    user = _processor_api_subtopologies(topology)
    while True:
        level = _topic_levels(sources, feeds, inline_topics)
        visits: dict[int, set[int]] = {sub.id: set() for sub in topology.task_subtopologies()}
        for topic, sub_id in sources.items():
            visits.setdefault(sub_id, set()).add(level[topic])
        # a Processor-API sub-topology runs once per batch: its punctuators may forward
        # anything at the end of a batch, which a lower level could not take any more
        later = {
            t
            for t in inline_topics
            if sources[t] in user and len(visits[sources[t]]) > 1 and level[t] > 0
        }
        if not later:
            break
        inline_topics -= later
    last = {sub_id: max(lv, default=0) for sub_id, lv in visits.items()}
    inline = {t: level[t] for t in sources if t in inline_topics}
    spill = {
        t
        for t in inline
        for u, sub_id in sources.items()
        if sub_id == sources[t] and u not in inline and level[u] == level[t]
    }
    partitions: dict[int, int] = {}
    for sub_id, lv in visits.items():
        for each in lv or {0}:
            partitions[each] = max(partitions.get(each, 0), tasks.get(sub_id, 0))
    return BatchLevels(
        inline,
        last,
        partitions,
        topics={t: lv for t, lv in level.items() if lv != last[sources[t]]},
        visits={s: tuple(sorted(lv)) for s, lv in visits.items() if len(lv) > 1},
        spill=frozenset(spill),
    )


def _processor_api_subtopologies(topology: Topology) -> set[int]:
    return {
        sub.id
        for sub in topology.task_subtopologies()
        if any(
            isinstance(spec := topology.nodes[n], ProcessorSpec) and spec.user_code
            for n in sub.nodes
        )
    }


def _topic_levels(
    sources: Mapping[str, int], feeds: Mapping[str, set[str]], inline_topics: set[str]
) -> dict[str, int]:
    edges = {t: {u for u in targets if u in sources} for t, targets in feeds.items()}
    topics_of: dict[int, list[str]] = {}
    for topic, sub_id in sources.items():
        topics_of.setdefault(sub_id, []).append(topic)
    level = dict.fromkeys(sources, 0)
    for _ in range(2 * len(sources) + 2):
        changed = False
        for topic in sources:
            if topic in inline_topics:
                want = 1 + max(
                    (level[w] for w, targets in feeds.items() if topic in targets), default=0
                )
            else:
                want = max(
                    (
                        level[u]
                        for u in topics_of[sources[topic]]
                        if u != topic and not _reaches(edges, topic, u)
                    ),
                    default=0,
                )
            if want > level[topic]:
                level[topic] = want
                changed = True
        if not changed:
            break
    return level


def choose_levels(
    topic_levels: BatchLevels,
    shuffle_levels: BatchLevels | None,
    *,
    owns_every_task: bool,
    unread: Callable[[list[str]], list[str]],
) -> tuple[BatchLevels, list[str]]:
    """Pick a batch's levels; return them, and the repartition topics the batch drains
    first (empty: none).

    Repartitioned records are shuffled inside the batch only while its thread owns every
    task (one instance, one thread) and the repartition topics hold nothing unread
    (``unread`` names those of the topics it is given that do); otherwise they go through
    the topics, as in Kafka. Coming back to one owner, a batch first reads only the
    repartition topics' remaining records (the upstream tasks write nothing then), and the
    next batch shuffles. Spilled records are read at their level: they need no draining.
    """
    if shuffle_levels is None or not owns_every_task:
        return topic_levels, []
    draining = unread(sorted(shuffle_levels.inline.keys() - shuffle_levels.spill))
    if draining:
        return topic_levels, draining
    return shuffle_levels, []


class WindowCombining:
    """Which repartition topics of windowed counts a batch may combine (Spark's partial
    aggregation, see :mod:`topology.engine.combine`): those it shuffles inside itself,
    never spilled to their topic, unless a recent batch found records late and ran again
    uncombined (then none for ``UNCOMBINED_BATCHES`` batches); under exactly_once_v2 only
    (:func:`~topology.engine.combine.windowed_combined_topics`)."""

    #: How many batches after one that ran uncombined combine no windowed count's records.
    UNCOMBINED_BATCHES = 32

    def __init__(self, topology: Topology, config: StreamsConfig) -> None:
        self._windowed = frozenset(windowed_combined_topics(topology, config))
        self._from = 0

    def topics(self, levels: BatchLevels, batch: int) -> frozenset[str]:
        """The topics batch number ``batch``, run in ``levels``, may combine."""
        if batch < self._from:
            return frozenset()
        return self._windowed & (levels.inline.keys() - levels.spill)

    def after(self, batch: int, metrics: Mapping[str, int]) -> None:
        """Take note of batch number ``batch``'s job: its ``metrics`` count whether it had
        to run again uncombined."""
        if metrics.get("uncombined-batch-total"):
            self._from = batch + 1 + self.UNCOMBINED_BATCHES


def plan_thread_levels(
    topology: Topology,
    sources: Mapping[str, int],
    tasks: Mapping[int, int],
    config: StreamsConfig,
) -> tuple[BatchLevels, BatchLevels | None]:
    """The levels of a stream thread's batches: through the repartition topics, and (while
    one thread owns every task: ``num.stream.threads`` = 1, and never under exactly_once,
    whose tasks commit separately) the levels of a batch that shuffles repartitioned
    records itself (see ``StreamThread._choose_levels``), else None."""
    app = config.application_id
    levels = plan_levels(topology, sources, tasks, app, in_batch=False)
    if config.num_stream_threads != 1 or config.processing_guarantee == "exactly_once":
        return levels, None
    return levels, plan_levels(topology, sources, tasks, app, in_batch=True)
