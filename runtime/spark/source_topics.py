"""Which topics a topology's sources read, and where each starts without a committed
position (Kafka's ``SourceNodeFactory`` / ``InternalTopologyBuilder`` subscription part).

A source names its topics, or a pattern (``builder.stream(re.compile("orders-.*"))``):
a pattern subscribes to every existing topic whose whole name matches it, except the
application's internal topics (repartition topics and changelogs), as Kafka's pattern
subscription leaves out internal topics. Topics created later are found by the stream
thread's batch trigger (:class:`PatternWatch`, at most every ``metadata.max.age.ms``),
which then watches them, runs a batch and names them for the thread
(:class:`PatternFollower`).

A source's own reset policy (``Consumed.with_offset_reset_policy``) wins over the
application's ``auto.offset.reset`` for its topics.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from runtime.storage.topics import TopicAdmin
from topology.graph.graph import SourceSpec
from topology.graph.topology import Topology

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PatternSource:
    """A pattern source of sub-topology ``subtopology``."""

    pattern: re.Pattern[str]
    subtopology: int
    offset_reset: str | None


def pattern_sources(topology: Topology) -> list[PatternSource]:
    """Return the topology's pattern sources (of its non-global sub-topologies)."""
    out = []
    for sub in topology.task_subtopologies():
        for name in sub.sources:
            spec = topology.nodes[name]
            if isinstance(spec, SourceSpec) and spec.pattern is not None:
                out.append(PatternSource(spec.pattern, sub.id, spec.offset_reset))
    return out


def internal_topic_names(topology: Topology, application_id: str) -> frozenset[str]:
    """The application's internal topics: repartition topics and changelogs."""
    names = set(topology.repartition_topic_names(application_id))
    names |= set(topology.changelog_topics(application_id).values())
    return frozenset(names)


def match_patterns(
    patterns: Iterable[PatternSource], topics: Iterable[str], excluded: frozenset[str]
) -> dict[str, int]:
    """Return each topic of ``topics`` matched by a pattern -> the sub-topology reading
    it (the first pattern matching wins; ``excluded`` topics never match)."""
    found: dict[str, int] = {}
    listed = [t for t in topics if t not in excluded]
    for source in patterns:
        for topic in listed:
            if topic not in found and source.pattern.fullmatch(topic):
                found[topic] = source.subtopology
    return found


def offset_resets(topology: Topology, topics: Iterable[str], application_id: str) -> dict[str, str]:
    """Return the source's own reset policy of each of ``topics`` that has one."""
    out: dict[str, str] = {}
    for sub in topology.task_subtopologies():
        for name in sub.sources:
            spec = topology.nodes[name]
            if not isinstance(spec, SourceSpec) or spec.offset_reset is None:
                continue
            for topic in spec.topics:
                out[topology.topic_name(topic, application_id, internal=spec.internal)] = (
                    spec.offset_reset
                )
    internal = internal_topic_names(topology, application_id)
    for source in pattern_sources(topology):
        if source.offset_reset is not None:
            for topic in topics:
                if topic not in out and topic not in internal and source.pattern.fullmatch(topic):
                    out[topic] = source.offset_reset
    return out


class PatternWatch:
    """Finds new topics that patterns match, listing the topics at most every
    ``max_age_ms`` (Kafka's metadata refresh of a pattern subscription).

    Args:
        patterns: the subscribed patterns (a topic matches when its whole name does).
        excluded: topics never subscribed (the application's internal topics).
        list_topics: returns the names of every existing topic.
        max_age_ms: ``metadata.max.age.ms``.
    """

    def __init__(
        self,
        patterns: list[re.Pattern[str]],
        excluded: Iterable[str],
        list_topics: Callable[[], list[str]],
        max_age_ms: int,
    ) -> None:
        self.patterns = patterns
        self.excluded = frozenset(excluded)
        self.list_topics = list_topics
        self.max_age_ms = max_age_ms
        self._listed_at: float | None = None

    def poll(self, known: Iterable[str]) -> list[str]:
        """When the last listing is older than ``max_age_ms``, list the topics again;
        return the matching ones not in ``known`` (sorted)."""
        now = time.monotonic()
        if not self.patterns or (
            self._listed_at is not None and (now - self._listed_at) * 1000 < self.max_age_ms
        ):
            return []
        self._listed_at = now
        seen = set(known) | self.excluded
        return sorted(
            t
            for t in self.list_topics()
            if t not in seen and any(p.fullmatch(t) for p in self.patterns)
        )


class PatternFollower:
    """The stream thread's side of a pattern subscription: adopts the topics its trigger
    found as sources of their sub-topology.

    A topic with more partitions than its sub-topology has tasks is not read until the
    application restarts (which creates the tasks); a warning says so.

    Args:
        topology: the topology.
        application_id: its application id.
        admin: the storage root's topic admin.
        subscribed: returns every topic the trigger watches.
        tasks: sub-topology -> its number of tasks.
    """

    def __init__(
        self,
        topology: Topology,
        application_id: str,
        admin: TopicAdmin,
        subscribed: Callable[[], list[str]],
        tasks: Mapping[int, int],
    ) -> None:
        self.topology = topology
        self.application_id = application_id
        self.patterns = pattern_sources(topology)
        self.admin = admin
        self.subscribed = subscribed
        self.tasks = dict(tasks)
        self._refused: set[str] = set()

    def follow(
        self, sources: dict[str, int], add: Callable[[dict[str, int], dict[str, str]], None]
    ) -> None:
        """Add the newly subscribed topics to ``sources`` and hand them, with their
        sources' own reset policies, to ``add``."""
        found, resets = self.new_sources(sources)
        if found:
            sources.update(found)
            add(found, resets)

    def new_sources(self, known: Mapping[str, int]) -> tuple[dict[str, int], dict[str, str]]:
        """Return the newly subscribed topics -> their sub-topology, and the reset policy
        of those whose source has its own."""
        if not self.patterns:
            return {}, {}
        listed = [
            t
            for t in self.subscribed()
            if t not in known and t not in self._refused and self.admin.exists(t)
        ]
        found = match_patterns(self.patterns, listed, frozenset())
        for topic, sub in sorted(found.items()):
            count, tasks = self.admin.num_partitions(topic), self.tasks.get(sub, 0)
            if count > tasks:
                self._refused.add(topic)
                del found[topic]
                log.warning(
                    "[app %s] topic %s matches a pattern source of sub-topology %d but has "
                    "%d partitions, more than its %d tasks; it is read once the application "
                    "restarts (which creates the tasks)",
                    self.application_id,
                    topic,
                    sub,
                    count,
                    tasks,
                )
        if found:
            log.info("[app %s] pattern sources now read %s", self.application_id, sorted(found))
        resets = offset_resets(self.topology, found, self.application_id)
        return found, {t: r for t, r in resets.items() if t in found}


def pattern_watch(
    topology: Topology, application_id: str, list_topics: Callable[[], list[str]], max_age_ms: int
) -> PatternWatch | None:
    """What finds the topics the topology's pattern sources subscribe to later: the
    existing topics they match (never the internal ones), listed every ``max_age_ms``
    (``metadata.max.age.ms``); None without pattern sources."""
    patterns = pattern_sources(topology)
    if not patterns:
        return None
    return PatternWatch(
        [p.pattern for p in patterns],
        internal_topic_names(topology, application_id),
        list_topics,
        max_age_ms,
    )
