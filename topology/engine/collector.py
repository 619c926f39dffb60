"""Where a task's output goes: the :class:`RecordCollector` protocol, and the changelog
adapter that sends store changes through it.

The test driver plugs an in-memory collector; the Spark runtime plugs one that batches
records into Arrow (outputs and repartition shuffles) and a changelog collector that writes
in the micro-batch's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class RecordCollector(Protocol):
    """Receives the serialized records a task's sinks produce (Kafka's
    ``RecordCollector``)."""

    def send(  # noqa: PLR0917 - positional on the hot path
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]],
        partition: int | None,
    ) -> None:
        """Send one record to ``topic`` (``partition`` None: partition by the key's murmur2
        hash, as Kafka's default partitioner)."""
        ...

    def partitions_for(self, topic: str) -> int:
        """Return the partition count of ``topic`` (for custom stream partitioners)."""
        ...


class CollectorChangelog:
    """A :class:`~statestores.api.ChangelogCollector` writing each change to the store's
    changelog topic through a :class:`RecordCollector`, in the task's partition."""

    __slots__ = ("_collector", "_partition", "_topics")

    def __init__(
        self, collector: RecordCollector, topics: Mapping[str, str], partition: int
    ) -> None:
        self._collector = collector
        self._topics = dict(topics)
        self._partition = partition

    def send_change(self, store: str, key: bytes, value: bytes | None, timestamp: int) -> None:
        """Send ``key -> value`` (``None``: tombstone) to the changelog of ``store``."""
        topic = self._topics.get(store)
        if topic is not None:
            self._collector.send(topic, key, value, timestamp, (), self._partition)

    def send_changes(
        self,
        store: str,
        keys: list[bytes],
        values: list[bytes | None],
        timestamps: list[int],
    ) -> None:
        """Send many changes of ``store`` in order: at once to a collector that takes a
        batch for one partition (``send_partition_batch``), else one by one."""
        topic = self._topics.get(store)
        if topic is None:
            return
        collector, partition = self._collector, self._partition
        batch = getattr(collector, "send_partition_batch", None)
        if batch is not None:
            batch(topic, partition, keys, values, timestamps)
            return
        for key, value, timestamp in zip(keys, values, timestamps, strict=True):
            collector.send(topic, key, value, timestamp, (), partition)
