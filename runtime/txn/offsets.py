"""Committed consumer-group positions, kept as Kafka keeps them: in a topic.

``__consumer_offsets`` is an ordinary topic of this storage root (50 partitions, as Kafka's
``offsets.topic.num.partitions``): a record's key is ``(group, topic, partition)`` and its
value the next offset to read; the latest record of a key wins. A group's records all go
to partition ``abs(javaHashCode(group)) % 50``, as in Kafka, so a fetch reads one partition.

Because offsets are records, a transactional offset commit (TxnOffsetCommit) is just
records staged in the transaction: they become visible exactly when its other outputs do.
A plain commit (at-least-once) is a plain produce.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from common.errors import StreamsError
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn import faults
from runtime.txn.metadata import OffsetEntry

if TYPE_CHECKING:
    from runtime.txn.coordinator import TransactionCoordinator

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 50


class UnstableOffsetCommitError(StreamsError):
    """The group has offsets in a transaction that is not complete yet, and the fetch asked
    for stable offsets (``require_stable``). Retriable: retry after a short back-off."""


def java_string_hash(text: str) -> int:
    """Return Java's ``String.hashCode()`` of ``text`` (over UTF-16 code units)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _key(group: str, topic: str, partition: int) -> bytes:
    return json.dumps([group, topic, partition], separators=(",", ":")).encode()


@dataclass(slots=True)
class _PartitionCache:
    """What has been read of one offsets partition: position and latest value per key."""

    position: int = 0
    latest: dict[bytes, int | None] = field(default_factory=dict)


class OffsetsStore:
    """Reads and writes committed positions of consumer groups.

    Args:
        admin: the topic admin of the storage root.
        coordinator: needed for ``fetch(require_stable=True)`` (pending transactions).
    """

    def __init__(
        self,
        admin: TopicAdmin,
        *,
        coordinator: TransactionCoordinator | None = None,
        num_partitions: int = OFFSETS_PARTITIONS,
    ) -> None:
        self.admin = admin
        self.coordinator = coordinator
        self.num_partitions = num_partitions
        self._reader = TopicReader(admin)
        self._cache: dict[int, _PartitionCache] = {}
        self.ensure_topic()

    def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` if it does not exist yet."""
        if not self.admin.exists(OFFSETS_TOPIC):
            self.admin.create(
                OFFSETS_TOPIC,
                self.num_partitions,
                configs={"cleanup.policy": "compact"},
                if_not_exists=True,
            )
        self.num_partitions = self.admin.num_partitions(OFFSETS_TOPIC)

    def partition_for(self, group: str) -> int:
        """Return the offsets partition of ``group`` (Kafka's ``partitionFor``)."""
        h = java_string_hash(group)
        return (0 if h == -(1 << 31) else abs(h)) % self.num_partitions

    def records(self, group: str, entries: Iterable[OffsetEntry]) -> list[tuple[bytes, bytes]]:
        """Return the ``(key, value)`` records that commit ``entries`` for ``group``."""
        now = int(time.time() * 1000)
        out = []
        for e in entries:
            if e.group != group:
                raise ValueError(f"offset entry of group {e.group!r} given for group {group!r}")
            if e.offset < 0:
                raise ValueError(f"offset {e.offset} for {e.topic}-{e.partition} is negative")
            value = {"offset": e.offset, "metadata": e.metadata, "commit_timestamp": now}
            out.append(
                (
                    _key(group, e.topic, e.partition),
                    json.dumps(value, separators=(",", ":")).encode(),
                )
            )
        return out

    def commit(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit positions plainly (at-least-once); durable on return."""
        faults.reached("before_offsets_commit")
        entries = [OffsetEntry(group, t, p, o) for (t, p), o in offsets.items()]
        producer = Producer(self.admin)
        for key, value in self.records(group, entries):
            producer.send(OFFSETS_TOPIC, key, value, partition=self.partition_for(group))
        producer.flush()

    def fetch(
        self,
        group: str,
        *,
        require_stable: bool = False,
        partitions: Collection[tuple[str, int]] | None = None,
    ) -> dict[tuple[str, int], int]:
        """Return the committed positions of ``group``: ``{(topic, partition): offset}``.

        Args:
            require_stable: wait for no transaction to hold offsets of ``group`` (of
                ``partitions``, ``(topic, partition)``, when given: Kafka checks the
                partitions the consumer asks for; a member need not wait for another's
                transactions).

        Raises:
            UnstableOffsetCommitError: ``require_stable`` and a transaction holding offsets
                of ``group`` is not complete yet (retry).
        """
        if require_stable:
            if self.coordinator is None:
                raise StreamsError("fetch(require_stable=True) needs a transaction coordinator")
            if partitions is None:
                held = group in self.coordinator.groups_with_pending_offsets()
            else:
                held = not self.coordinator.pending_offsets(group).isdisjoint(partitions)
            if held:
                raise UnstableOffsetCommitError(
                    f"group {group!r} has offsets in a transaction that is not complete yet; "
                    "retry shortly"
                )
        cache = self._read(self.partition_for(group))
        out = {}
        for key, offset in cache.latest.items():
            g, topic, partition = json.loads(key)
            if g == group and offset is not None:
                out[(topic, int(partition))] = offset
        return out

    def consumed_by_all(self, topic: str) -> dict[int, int]:
        """Return, per partition of ``topic``, the lowest position any group committed for
        it: every group that ever committed a position there has read below it (a purge
        may remove those records). A partition no group committed is absent."""
        out: dict[int, int] = {}
        for p in range(self.num_partitions):
            for key, offset in self._read(p).latest.items():
                if offset is None:
                    continue
                _group, found, partition = json.loads(key)
                if found == topic:
                    part = int(partition)
                    out[part] = min(offset, out.get(part, offset))
        return out

    def _read(self, partition: int) -> _PartitionCache:
        cache = self._cache.setdefault(partition, _PartitionCache())
        start = self._reader.beginning_offsets(OFFSETS_TOPIC)[partition]
        if cache.position < start:
            cache.position, cache.latest = start, {}
        table = self._reader.read(OFFSETS_TOPIC, partition, cache.position)
        for key, _value, _coordinates, position in committed_records(table, partition):
            cache.latest[key] = position
        if table.num_rows:
            cache.position = table.column("offset")[-1].as_py() + 1
        return cache


def committed_records(
    table: pa.Table, partition: int
) -> Iterator[tuple[bytes, bytes | None, tuple[str, str, int], int | None]]:
    """Yield each committed position of ``table`` (records of ``__consumer_offsets``
    partition ``partition``, in offset order) as ``(key, value, (group, topic, partition),
    position)``; a record no group wrote is skipped (:func:`parse_offsets_record`)."""
    for key, value, offset in zip(
        table.column("key").to_pylist(),
        table.column("value").to_pylist(),
        table.column("offset").to_pylist(),
        strict=True,
    ):
        parsed = parse_offsets_record(partition, offset, key, value)
        if parsed is not None:
            yield key, value, parsed[0], parsed[1]


def parse_offsets_record(
    partition: int, offset: int, key: bytes | None, value: bytes | None
) -> tuple[tuple[str, str, int], int | None] | None:
    """Return a ``__consumer_offsets`` record's ``(group, topic, partition)`` and committed
    position (None: deleted); None for a record no group wrote (one produced there by hand),
    named in a warning and skipped by every reader of the topic."""
    try:
        group, topic, part = json.loads(key or b"")
        position = None if value is None else int(json.loads(value)["offset"])
        return (str(group), str(topic), int(part)), position
    except (TypeError, ValueError, KeyError) as exc:
        log.warning(
            "skipping %s-%d offset %d: not a committed position (%s: %s); no group wrote it",
            OFFSETS_TOPIC,
            partition,
            offset,
            type(exc).__name__,
            exc,
        )
        return None
