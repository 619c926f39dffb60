"""The topics a batch's tasks may write (driver side).

Most outputs are known when the application starts: the sinks' topics, the repartition
topics and the changelogs (:func:`runtime.app.internal_topics.plan_topics`). A sink with a
topic-name extractor (``KStream.to(lambda k, v, ctx: ...)``) writes to topics named only
while records are processed; as in Kafka they must exist. For such a topology each batch
offers its tasks every topic that exists when the batch is planned (their partition counts
read once: a topic's count never changes), and the stream thread adds a topic to its
transaction once a task staged files for it (see ``StreamThread._register_extracted``).
A task that sends to a topic that does not exist fails with ``UnknownTopicError`` naming
it (:class:`runtime.tasks.collector.StagingCollector`).
"""

from __future__ import annotations

from collections.abc import Mapping

from runtime.storage.topics import TopicAdmin
from runtime.tasks.collector import OutputTopic
from topology.graph.graph import SinkSpec
from topology.graph.topology import Topology


def has_topic_extractors(topology: Topology) -> bool:
    """Whether a sink of the topology names its topic per record."""
    return any(
        isinstance(spec, SinkSpec) and spec.topic_extractor is not None
        for spec in topology.nodes.values()
    )


class OutputCatalog:
    """The topics each batch may write.

    Args:
        admin: the storage root's topic admin.
        fixed: the topics known at start (sinks, repartition topics, changelogs).
        dynamic: whether sinks name topics per record (then every existing topic).
    """

    def __init__(
        self, admin: TopicAdmin, fixed: Mapping[str, OutputTopic], *, dynamic: bool
    ) -> None:
        self.admin = admin
        self.fixed = dict(fixed)
        self.dynamic = dynamic
        self._known: dict[str, OutputTopic] = {}

    def for_batch(self) -> dict[str, OutputTopic]:
        """Return the topics a batch planned now may write."""
        if not self.dynamic:
            return self.fixed
        out: dict[str, OutputTopic] = {}
        for topic in self.admin.list():
            found = self.fixed.get(topic) or self._known.get(topic)
            if found is None:
                found = OutputTopic(self.admin.table_path(topic), self.admin.num_partitions(topic))
                self._known[topic] = found
            out[topic] = found
        return {**out, **self.fixed}
