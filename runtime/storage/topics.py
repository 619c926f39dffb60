"""Topics as Delta tables: create, list, describe, alter, delete.

A topic ``T`` is the Delta table ``<topics.root>/topics/T``, partitioned by the int column
``partition``. Its partition count is the table property ``streams.partitions``; topic-level
configuration (Kafka's ``--config`` keys) is kept as ``streams.topic.<key>`` properties.
Every Delta log operation runs in the calling process (the driver), never in a forked Spark
worker: delta-rs cannot be used in a process forked after its runtime started.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from common.errors import (
    InvalidPartitionsError,
    StorageError,
    TopicError,
    TopicExistsError,
    UnknownTopicError,
)
from runtime.storage.delta_log import PARTITIONS_PROPERTY, PartitionCountError
from runtime.storage.fs import StorageRoot, storage_message, storage_options
from runtime.storage.leases import FileLeases
from runtime.storage.names import collides, validate_topic_name
from runtime.storage.offset_index import OffsetIndex
from runtime.storage.records import TABLE_SCHEMA
from runtime.storage.retries import retried
from runtime.storage.topic_log import TopicLog

log = logging.getLogger(__name__)

_T = TypeVar("_T")

TOPICS_DIR = "topics"
TOPIC_CONFIG_PREFIX = "streams.topic."
MAX_PARTITIONS = 10_000

_POLICIES = {"delete", "compact", "compact,delete", "delete,compact"}
_LONG_AT_LEAST = {
    "retention.ms": -1,
    "retention.bytes": -1,
    "segment.bytes": 1024,
    "segment.ms": 1,
    "file.delete.delay.ms": 0,
    "delete.retention.ms": 0,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": 1,
}
#: Delta's own table properties, kept as they are (Delta readers and writers honour them).
LOG_RETENTION_PROPERTY = "delta.logRetentionDuration"
CHECKPOINT_INTERVAL_PROPERTY = "delta.checkpointInterval"
TOMBSTONE_RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
_DELTA_KEYS = (LOG_RETENTION_PROPERTY, CHECKPOINT_INTERVAL_PROPERTY, TOMBSTONE_RETENTION_PROPERTY)
TOPIC_CONFIG_KEYS = ("cleanup.policy", *_LONG_AT_LEAST, *_DELTA_KEYS)
#: Set on every topic created here: Delta log commits are deleted only by the log cleaner,
#: behind an offset index snapshot (see runtime.storage.vacuum), never by a commit's hook;
#: a removed file's tombstone stays in Delta checkpoints for ten minutes, not Delta's week.
#: Merges remove files at every batch, and every checkpoint carries the tombstones of its
#: retention window: a week's would be millions of rows, an hour's made each checkpoint
#: ~2 MB at a batch a second (and the log keeps a checkpoint per 100 commits for
#: ``log.delta.retention.ms``). Nothing here reads tombstones: the vacuum goes by the
#: offset index, readers by live files; ten minutes is ten times ``file.delete.delay.ms``,
#: the longest a reader holds a removed file, and what a Delta VACUUM run on a topic by
#: hand takes as its default retention.
_CREATE_PROPERTIES = {
    "delta.enableExpiredLogCleanup": "false",
    TOMBSTONE_RETENTION_PROPERTY: "interval 10 minutes",
}

_INTERVAL = re.compile(
    r"^\s*interval\s+(\d+)\s+(millisecond|second|minute|hour|day|week)s?\s*$", re.IGNORECASE
)
_UNIT_MS = {
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}


def parse_interval_ms(value: str) -> int | None:
    """Return Delta's ``interval <n> <unit>`` (``delta.logRetentionDuration``) in ms, or
    None when ``value`` is not one."""
    found = _INTERVAL.match(value or "")
    if found is None:
        return None
    return int(found.group(1)) * _UNIT_MS[found.group(2).lower()]


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """Offsets of one partition: ``records`` live between log-start and log-end."""

    partition: int
    log_start_offset: int
    log_end_offset: int
    records: int
    files: int = 0  # live data files
    bytes: int = 0  # their size


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic's partition count, configuration overrides and per-partition offsets."""

    name: str
    num_partitions: int
    configs: dict[str, str]
    partitions: list[PartitionDescription] = field(default_factory=list)
    version: int = -1
    #: Files removed from the log (retention, merges) that the vacuum has not deleted yet.
    removed_files: int = 0


def validate_topic_config(configs: Mapping[str, str]) -> dict[str, str]:
    """Return the validated topic configuration overrides.

    Raises:
        TopicError: unknown key or bad value; the message names the key and what is allowed.
    """
    out: dict[str, str] = {}
    for key, raw in configs.items():
        value = str(raw).strip()
        if key == "cleanup.policy":
            norm = value.replace(" ", "")
            if norm not in _POLICIES:
                raise TopicError(
                    f"topic config cleanup.policy={value!r} is invalid; allowed: delete, "
                    "compact, compact,delete"
                )
            out[key] = norm
        elif key in (LOG_RETENTION_PROPERTY, TOMBSTONE_RETENTION_PROPERTY):
            if parse_interval_ms(value) is None:
                raise TopicError(
                    f"topic config {key}={value!r} is invalid; allowed: 'interval <n> <unit>' "
                    "with unit millisecond, second, minute, hour, day or week"
                )
            out[key] = value
        elif key == CHECKPOINT_INTERVAL_PROPERTY:
            if not re.fullmatch(r"\d+", value) or int(value) < 1:
                raise TopicError(f"topic config {key}={value!r} is invalid; allowed: >= 1")
            out[key] = value
        elif key in _LONG_AT_LEAST:
            low = _LONG_AT_LEAST[key]
            if not re.fullmatch(r"-?\d+", value) or int(value) < low:
                raise TopicError(
                    f"topic config {key}={value!r} is invalid; allowed: a whole number >= {low}"
                )
            out[key] = value
        else:
            raise TopicError(
                f"unknown topic config {key!r}; allowed keys: {', '.join(TOPIC_CONFIG_KEYS)}"
            )
    return out


class TopicAdmin:
    """Create, list, describe, alter and delete the topics under one storage root.

    Args:
        root: the storage root (``topics.root``): a path or URI, or a ``StorageRoot``.
    """

    def __init__(self, root: str | StorageRoot) -> None:
        self.root = root if isinstance(root, StorageRoot) else StorageRoot(root)
        self._logs: dict[str, TopicLog] = {}
        #: Files this process's readers planned and have not read yet (never vacuumed).
        self.leases = FileLeases()
        self._local = threading.local()
        #: Bumped when a topic is deleted here: a handle kept of the old table is dropped.
        self._generations: dict[str, int] = {}

    def kept(self, topic: str, kind: str, make: Callable[[], _T]) -> _T:
        """This thread's object of ``kind`` for ``topic``, made by ``make`` once and kept
        (until the topic is deleted here): Delta table handles, which a new open builds from
        the last Delta checkpoint and every log entry since (up to 99 reads), and a kept one
        brings up to date by reading only the new entries. Per thread: a handle is not
        shared between threads."""
        kept: dict[tuple[str, str, int], object] | None = getattr(self._local, "kept", None)
        if kept is None:
            kept = self._local.kept = {}
        key = (topic, kind, self._generations.get(topic, 0))
        found = kept.get(key)
        if found is None:
            found = kept[key] = make()
        return found  # type: ignore[return-value]

    def table_path(self, topic: str) -> str:
        """Return the filesystem path of a topic's table."""
        return self.root.path(TOPICS_DIR, topic)

    def table_uri(self, topic: str) -> str:
        """Return the URI delta-rs opens for a topic's table."""
        return self.root.uri_of(TOPICS_DIR, topic)

    def topic_log(self, topic: str) -> TopicLog:
        """Return the (cached) offset log of ``topic``."""
        found = self._logs.get(topic)
        if found is None:  # one log per topic, whichever thread asks first
            validate_topic_name(topic)
            made = TopicLog(self.root, topic, self.table_path(topic))
            found = self._logs.setdefault(topic, made)
        return found

    def index(self, topic: str) -> OffsetIndex:
        """Return the offset index of ``topic`` refreshed to its latest version."""
        return self.topic_log(topic).refresh()

    def exists(self, topic: str) -> bool:
        """Return True if the topic exists."""
        return self.root.exists(f"{self.table_path(validate_topic_name(topic))}/_delta_log")

    def create(
        self,
        topic: str,
        partitions: int,
        *,
        configs: Mapping[str, str] | None = None,
        if_not_exists: bool = False,
    ) -> None:
        """Create a topic with ``partitions`` partitions.

        Raises:
            InvalidTopicError: the name breaks Kafka's rules.
            InvalidPartitionsError: ``partitions`` is not within 1..10000.
            TopicExistsError: it exists (unless ``if_not_exists``).
        """
        validate_topic_name(topic)
        _check_partition_count(partitions)
        overrides = validate_topic_config(configs or {})
        if self.exists(topic):
            if if_not_exists:
                return
            raise TopicExistsError(f"topic {topic!r} already exists")
        for other in self.list():
            if collides(topic, other):
                log.warning(
                    "topic %s collides with %s in metric names ('.' and '_' are alike)",
                    topic,
                    other,
                )
        properties = {PARTITIONS_PROPERTY: str(partitions), **_CREATE_PROPERTIES}
        properties |= _stored(overrides)
        try:
            DeltaTable.create(
                self.table_uri(topic),
                TABLE_SCHEMA,
                storage_options=storage_options(self.table_uri(topic)),
                mode="error",
                partition_by=["partition"],
                name=topic,
                configuration=properties,
                raise_if_key_not_exists=False,
            )
        except (DeltaError, OSError) as exc:
            if self.exists(topic) and not if_not_exists:
                raise TopicExistsError(f"topic {topic!r} already exists") from exc
            if not self.exists(topic):
                raise StorageError(
                    f"cannot create topic {topic!r}: {storage_message(exc)}"
                ) from exc
        log.info("created topic=%s partitions=%d", topic, partitions)

    def list(self) -> list[str]:
        """Return the names of all topics, sorted."""
        names = []
        for info in self.root.list_dir(self.root.path(TOPICS_DIR)):
            if info.type == pafs.FileType.Directory and self.root.exists(f"{info.path}/_delta_log"):
                names.append(info.base_name)
        return sorted(names)

    def num_partitions(self, topic: str) -> int:
        """Return the partition count of ``topic``."""
        return self.index(topic).num_partitions

    def describe(self, topic: str) -> TopicDescription:
        """Return the partition count, configuration and per-partition offsets."""
        index = self.index(topic)
        parts = []
        for p in range(index.num_partitions):
            plog = index.log(p)
            size = sum(self._size(topic, s.path, s.size) for s in plog.segments)
            parts.append(
                PartitionDescription(
                    p, plog.start, plog.end, plog.records, len(plog.segments), size
                )
            )
        return TopicDescription(
            topic,
            index.num_partitions,
            self.configs(topic),
            parts,
            index.version,
            len(index.removed),
        )

    def _size(self, topic: str, path: str, known: int | None) -> int:
        if known is not None:
            return known
        full = path if "://" in path else f"{self.table_path(topic)}/{path}"
        try:
            return self.root.file_size(full)
        except StorageError:
            return 0

    def configs(self, topic: str) -> dict[str, str]:
        """Return the topic-level configuration overrides of ``topic`` (a Delta property
        every topic is created with counts only once changed)."""
        props = self._table(topic).metadata().configuration
        return {
            k.removeprefix(TOPIC_CONFIG_PREFIX): v
            for k, v in sorted(props.items())
            if (k.startswith(TOPIC_CONFIG_PREFIX) or k in _DELTA_KEYS)
            and v is not None
            and _CREATE_PROPERTIES.get(k) != v
        }

    def alter_partitions(self, topic: str, partitions: int) -> None:
        """Increase the partition count (Kafka never decreases it).

        Also the repair of a count lowered by hand (:class:`PartitionCountError`): the
        property is set back to at least the count the log had.

        Raises:
            InvalidPartitionsError: ``partitions`` is not larger than the current count.
        """
        _check_partition_count(partitions)
        try:
            current, lowered = self.num_partitions(topic), False
        except PartitionCountError as exc:
            current, lowered = exc.old, True
        if partitions < current or (partitions == current and not lowered):
            raise InvalidPartitionsError(
                f"topic {topic!r} has {current} partitions; the count can only be increased "
                f"(asked for {partitions})"
            )
        self._set_properties(topic, {PARTITIONS_PROPERTY: str(partitions)})
        log.info("altered topic=%s partitions=%d->%d", topic, current, partitions)

    def alter_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """Set topic-level configuration overrides."""
        overrides = validate_topic_config(configs)
        self._set_properties(topic, _stored(overrides))

    def delete(self, topic: str) -> None:
        """Delete a topic: its data files, Delta log and offset index.

        Raises:
            UnknownTopicError: the topic does not exist.
        """
        if not self.exists(topic):
            raise UnknownTopicError(f"topic {topic!r} does not exist under {self.root.uri}")
        self.root.delete_dir(self.table_path(topic))
        self._logs.pop(topic, None)
        self._generations[topic] = self._generations.get(topic, 0) + 1
        log.info("deleted topic=%s", topic)

    def _table(self, topic: str) -> DeltaTable:
        if not self.exists(topic):
            raise UnknownTopicError(
                f"topic {topic!r} does not exist under {self.root.uri}; create it with "
                "'streams-eos topics --create'"
            )
        uri = self.table_uri(topic)
        table = self.kept(topic, "table", _Handle)

        def opened() -> DeltaTable:
            try:
                if table.handle is None:
                    table.handle = DeltaTable(uri, storage_options=storage_options(uri))
                else:
                    table.handle.update_incremental()
                return table.handle
            except (DeltaError, OSError) as exc:
                table.handle = None  # opened anew by the next attempt
                message = f"cannot open topic {topic!r}: {storage_message(exc)}"
                raise StorageError(message) from exc

        return retried(opened, what=f"open topic {topic}")

    def _set_properties(self, topic: str, properties: Mapping[str, str]) -> None:
        table = self._table(topic)
        try:
            table.alter.set_table_properties(dict(properties), raise_if_not_exists=False)
        except (DeltaError, OSError) as exc:
            raise StorageError(f"cannot alter topic {topic!r}: {storage_message(exc)}") from exc


def _stored(overrides: Mapping[str, str]) -> dict[str, str]:
    """Return the table properties of validated topic configs (Delta's own keys as they
    are, the others under ``streams.topic.``)."""
    return {(k if k in _DELTA_KEYS else TOPIC_CONFIG_PREFIX + k): v for k, v in overrides.items()}


def _check_partition_count(partitions: int) -> None:
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise InvalidPartitionsError(f"partition count must be a whole number, got {partitions!r}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitionsError(
            f"partition count {partitions} is out of range; allowed: 1..{MAX_PARTITIONS}"
        )


class _Handle:
    """A kept Delta table handle (None until opened, or after a failed update)."""

    __slots__ = ("handle",)

    def __init__(self) -> None:
        self.handle: DeltaTable | None = None
