"""Plan and create a topology's topics at start (Kafka's ``InternalTopicManager``).

Source topics must exist. Repartition topics get their configured partition count, else
the largest partition count of the sub-topology writing them; changelog topics get the
partition count of their sub-topology's tasks. Internal topics are created when missing;
an existing one with another partition count is an error that says what to do.

The dead-letter topic (``errors.dead.letter.queue.topic.name``) is an output like the sinks,
so dead letters are staged in the batch's transaction. Kafka needs it to exist (or the
broker to auto-create it); here it is created when missing, with the largest partition
count of the source topics (dead letters are partitioned by their key, as Kafka's).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from common.config import StreamsConfig
from common.errors import TopologyError, UnknownTopicError
from common.pools import shared_pool
from runtime.spark.source_topics import (
    internal_topic_names,
    match_patterns,
    offset_resets,
    pattern_sources,
)
from runtime.storage.delta_sink import sink_table
from runtime.storage.topics import TopicAdmin
from runtime.tasks.collector import OutputTopic
from runtime.tasks.global_state import global_topics
from runtime.txn.offsets import OFFSETS_TOPIC
from topology.graph.graph import SinkSpec, SourceSpec
from topology.graph.topology import Topology

#: Topics whose indexes a start refreshes at once.
PREFETCH_WORKERS = 8

log = logging.getLogger(__name__)

#: Kafka Streams' settings of the topics it creates: a repartition topic keeps its records
#: until every group consumed them (then purged), a changelog the latest value per key.
REPARTITION_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "-1"}
CHANGELOG_CONFIGS = {"cleanup.policy": "compact"}
#: Kafka Streams' windowstore.changelog.additional.retention.ms: a windowed store's
#: changelog keeps records this much longer than the store keeps its windows.
CHANGELOG_ADDITIONAL_RETENTION_MS = 86_400_000


def changelog_configs(topology: Topology, store: str) -> dict[str, str]:
    """Return the configs a store's changelog is created with: compacted, and for window
    and session stores also deleted past the store's retention plus a day; a versioned
    store's not compacted before its history retention plus a day (Kafka's
    ``min.compaction.lag.ms``)."""
    factory = topology.stores.get(store)
    supplier = getattr(getattr(factory, "store_builder", factory), "supplier", None)
    history = getattr(supplier, "history_retention_ms", None)
    if history is not None:
        lag = int(history) + CHANGELOG_ADDITIONAL_RETENTION_MS
        return {**CHANGELOG_CONFIGS, "min.compaction.lag.ms": str(lag)}
    retention = getattr(factory, "retention_ms", None)
    if retention is None:
        return dict(CHANGELOG_CONFIGS)
    return {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(int(retention) + CHANGELOG_ADDITIONAL_RETENTION_MS),
    }


@dataclass(frozen=True)
class TopicPlan:
    """The runtime topics of a topology.

    ``sources``: runtime topic -> sub-topology reading it; ``outputs``: every topic a task
    may write (sinks, repartition topics, changelogs); ``tasks``: sub-topology -> number of
    tasks (partitions); ``global_topics``: the topics of the global stores (read whole by
    every instance, no task reads them).
    """

    sources: dict[str, int]
    outputs: dict[str, OutputTopic]
    tasks: dict[int, int]
    external_sources: tuple[str, ...]
    global_topics: tuple[str, ...] = ()
    #: source topic -> its source's own reset policy (``Consumed.with_offset_reset_policy``)
    offset_resets: dict[str, str] = field(default_factory=dict)


def plan_topics(
    topology: Topology,
    admin: TopicAdmin,
    application_id: str,
    *,
    config: StreamsConfig | None = None,
) -> TopicPlan:
    """Check the source topics, create missing internal topics, return the plan.

    ``config`` gives the dead-letter topic (``errors.dead.letter.queue.topic.name``).

    Raises:
        UnknownTopicError: a source or sink topic does not exist (create it first).
        TopologyError: an internal topic exists with another partition count, or the
            dead-letter topic is one the topology reads.
    """
    prefetch_indexes(admin, named_topics(topology, application_id))
    subs = topology.task_subtopologies()
    internal_counts: dict[str, int] = {
        f"{application_id}-{name}": spec.num_partitions
        for name, spec in topology.repartition_topics.items()
        if spec.num_partitions is not None
    }
    sources: dict[str, int] = {}
    tasks: dict[int, int] = {}
    external: list[str] = []
    matched = _pattern_topics(topology, admin, application_id)
    for _ in range(len(subs) + 1):  # repartition counts flow downstream
        for sub in subs:
            counts = []
            for name in sub.sources:
                spec = topology.nodes[name]
                assert isinstance(spec, SourceSpec)
                for topic in spec.topics:
                    runtime = topology.topic_name(topic, application_id, internal=spec.internal)
                    sources[runtime] = sub.id
                    if spec.internal:
                        if runtime in internal_counts:
                            counts.append(internal_counts[runtime])
                    else:
                        if runtime not in external:
                            external.append(runtime)
                        counts.append(_partitions(admin, runtime, "source"))
            counts += _add_matched(admin, sub.id, matched, sources, external)
            if counts:
                tasks[sub.id] = max(counts)
            for name in sub.nodes:
                spec = topology.nodes[name]
                if isinstance(spec, SinkSpec) and spec.internal and spec.topic is not None:
                    runtime = topology.topic_name(spec.topic, application_id, internal=True)
                    if runtime not in internal_counts and sub.id in tasks:
                        internal_counts[runtime] = tasks[sub.id]
        _copartition(topology, admin, application_id, internal_counts)
    outputs = _sink_outputs(topology, admin, application_id, internal_counts)
    changelogs = topology.changelog_topics(application_id)
    for sub in subs:
        for store in sub.stores:
            if store in changelogs and sub.id in tasks:
                topic = changelogs[store]
                _ensure(admin, topic, tasks[sub.id], changelog_configs(topology, store))
                outputs[topic] = OutputTopic(admin.table_path(topic), tasks[sub.id])
    dead_letters = config.errors_dead_letter_queue_topic_name if config is not None else ""
    if dead_letters and dead_letters not in outputs:
        if dead_letters in sources:
            raise TopologyError(
                f"errors.dead.letter.queue.topic.name {dead_letters!r} is a source topic of "
                "the topology: its dead letters would be read again; choose another topic"
            )
        counts = [admin.num_partitions(t) for t in external]
        outputs[dead_letters] = _dead_letter_topic(admin, dead_letters, max(counts, default=1))
    globals_ = global_topics(topology, application_id)
    for topic in globals_:
        _partitions(admin, topic, "global")
    resets = offset_resets(topology, sources, application_id)
    return TopicPlan(sources, outputs, tasks, tuple(external), globals_, offset_resets=resets)


def named_topics(topology: Topology, application_id: str) -> list[str]:
    """The topics ``topology`` names (its sources, sinks and changelogs, internal ones
    under their runtime names) and the group's positions topic, each once."""
    names = [OFFSETS_TOPIC, *topology.changelog_topics(application_id).values()]
    for spec in topology.nodes.values():
        if isinstance(spec, SourceSpec):
            names += [
                topology.topic_name(t, application_id, internal=spec.internal) for t in spec.topics
            ]
        elif isinstance(spec, SinkSpec) and spec.topic is not None:
            names.append(topology.topic_name(spec.topic, application_id, internal=spec.internal))
    return list(dict.fromkeys(names))


def prefetch_indexes(admin: TopicAdmin, topics: list[str]) -> None:
    """Bring the offset indexes of ``topics`` up to date at once, several topics at a time
    (a start asks for each topic's partition count one after another, and on an object
    store each refresh reads the log entries since its index snapshot: a restart spent 11 s
    there). Best effort: a topic missing or unreadable is found and reported by the one
    that needs it."""
    pool = shared_pool("index-prefetch", PREFETCH_WORKERS)

    def refresh(topic: str) -> None:
        try:
            admin.index(topic)
        except Exception as exc:  # reported by the caller that needs it
            log.debug("index of %s not prefetched: %s", topic, exc)

    for done in [pool.submit(refresh, t) for t in topics]:
        done.result()


def _sink_outputs(
    topology: Topology, admin: TopicAdmin, application_id: str, internal_counts: dict[str, int]
) -> dict[str, OutputTopic]:
    """Return the topics (and Delta tables) the sinks write, creating repartition topics."""
    outputs: dict[str, OutputTopic] = {}
    for sub in topology.task_subtopologies():
        for name in sub.nodes:
            spec = topology.nodes[name]
            if not isinstance(spec, SinkSpec) or spec.topic is None:
                continue
            runtime = topology.topic_name(spec.topic, application_id, internal=spec.internal)
            if spec.internal:
                _ensure(admin, runtime, internal_counts[runtime], REPARTITION_CONFIGS)
            sink = sink_table(admin.root, runtime)
            if sink is not None:  # a Delta table sink: created by its first commit
                outputs[runtime] = OutputTopic(sink.path, 1)
                continue
            outputs[runtime] = OutputTopic(
                admin.table_path(runtime), _partitions(admin, runtime, "sink")
            )
    return outputs


def _add_matched(
    admin: TopicAdmin,
    sub_id: int,
    matched: dict[str, int],
    sources: dict[str, int],
    external: list[str],
) -> list[int]:
    """Add the pattern-matched topics of ``sub_id`` to ``sources`` and ``external``;
    return their partition counts."""
    counts = []
    for topic in (t for t, reader in matched.items() if reader == sub_id):
        sources[topic] = sub_id
        if topic not in external:
            external.append(topic)
        counts.append(_partitions(admin, topic, "source"))
    return counts


def _pattern_topics(topology: Topology, admin: TopicAdmin, application_id: str) -> dict[str, int]:
    """Return the existing topics the topology's patterns match -> their sub-topology."""
    patterns = pattern_sources(topology)
    if not patterns:
        return {}
    excluded = internal_topic_names(topology, application_id)
    return match_patterns(patterns, admin.list(), excluded)


def _dead_letter_topic(admin: TopicAdmin, topic: str, partitions: int) -> OutputTopic:
    if not admin.exists(topic):
        admin.create(topic, partitions, if_not_exists=True)
        log.info("created dead-letter topic=%s partitions=%d", topic, partitions)
    return OutputTopic(admin.table_path(topic), admin.num_partitions(topic))


def _copartition(
    topology: Topology,
    admin: TopicAdmin,
    application_id: str,
    counts: dict[str, int],
) -> None:
    """Give the repartition topics of a co-partition group the partition count of the
    group's source topics (Kafka's ``CopartitionedTopicsEnforcer``): a foreign-key join's
    subscription topic takes the foreign table's count, its response topic the primary
    table's, whatever the sub-topology writing them reads."""
    explicit = {
        f"{application_id}-{name}"
        for name, spec in topology.repartition_topics.items()
        if spec.num_partitions is not None
    }
    for group in topology.copartition_groups:
        external: list[int] = []
        internal: list[str] = []
        for name in group.source_nodes:
            spec = topology.nodes.get(name)
            if not isinstance(spec, SourceSpec):
                continue
            for topic in spec.topics:
                runtime = topology.topic_name(topic, application_id, internal=spec.internal)
                if spec.internal:
                    internal.append(runtime)
                elif admin.exists(runtime):
                    external.append(admin.num_partitions(runtime))
        if not external:
            continue
        for runtime in internal:
            if runtime not in explicit:
                counts[runtime] = max(external)


def _partitions(admin: TopicAdmin, topic: str, role: str) -> int:
    if not admin.exists(topic):
        raise UnknownTopicError(
            f"{role} topic {topic!r} does not exist; create it first "
            f"(streams-eos topics --create --topic {topic} --partitions N)"
        )
    return admin.num_partitions(topic)


def _ensure(
    admin: TopicAdmin, topic: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    if not admin.exists(topic):
        admin.create(topic, partitions, configs=configs, if_not_exists=True)
        return
    found = admin.num_partitions(topic)
    if found != partitions:
        raise TopologyError(
            f"internal topic {topic!r} has {found} partitions but the topology needs "
            f"{partitions}; reset the application (streams-eos application-reset) or "
            "delete the topic"
        )
