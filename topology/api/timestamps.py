"""Timestamp extractors: where a record's event time comes from (Kafka's
``TimestampExtractor``).

The default, :class:`FailOnInvalidTimestamp`, takes the record's own timestamp and fails on
a negative one. An extractor that returns a negative timestamp makes the task skip the
record (counted, as Kafka's ``RecordQueue`` does). Configure one per source with
``Consumed.with_timestamp_extractor`` or for the application with
``default.timestamp.extractor``.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Protocol, runtime_checkable

from common.errors import ConfigError, InvalidTimestampError
from topology.api.record import ConsumedRecord

_LOG = logging.getLogger(__name__)


@runtime_checkable
class TimestampExtractor(Protocol):
    """Return the event time (ms) of ``record``; ``partition_time`` is the largest
    timestamp seen so far on its partition (-1 before the first)."""

    def extract(self, record: ConsumedRecord, partition_time: int) -> int: ...


class FailOnInvalidTimestamp:
    """Use the record's timestamp; raise InvalidTimestampError if it is negative."""

    def extract(self, record: ConsumedRecord, partition_time: int) -> int:
        """Return ``record.timestamp`` or raise on a negative one."""
        if record.timestamp < 0:
            raise invalid_timestamp(record.topic, record.partition, record.offset, record.timestamp)
        return record.timestamp


class LogAndSkipOnInvalidTimestamp:
    """Use the record's timestamp; a negative one is logged and the record skipped."""

    def extract(self, record: ConsumedRecord, partition_time: int) -> int:
        """Return ``record.timestamp`` (negative means: skip the record)."""
        if record.timestamp < 0:
            _LOG.warning(
                "skipping record with invalid timestamp topic=%s partition=%s offset=%s "
                "timestamp=%s",
                record.topic,
                record.partition,
                record.offset,
                record.timestamp,
            )
        return record.timestamp


class UsePartitionTimeOnInvalidTimestamp:
    """Use the record's timestamp, or the partition time when it is negative (and fail when
    there is no partition time yet)."""

    def extract(self, record: ConsumedRecord, partition_time: int) -> int:
        """Return ``record.timestamp``, else ``partition_time``."""
        if record.timestamp >= 0:
            return record.timestamp
        if partition_time < 0:
            raise invalid_timestamp(record.topic, record.partition, record.offset, record.timestamp)
        return partition_time


class WallclockTimestampExtractor:
    """Use the current wall-clock time (processing-time semantics)."""

    def extract(self, record: ConsumedRecord, partition_time: int) -> int:
        """Return the current time in ms."""
        return time.time_ns() // 1_000_000


def invalid_timestamp(
    topic: str, partition: int, offset: int, timestamp: int
) -> InvalidTimestampError:
    """Build the error for a negative input timestamp, naming the record."""
    return InvalidTimestampError(
        f"Input record topic={topic} partition={partition} offset={offset} has invalid "
        f"(negative) timestamp {timestamp}. Fix the producer, or use a timestamp extractor "
        "that skips such records (log_and_skip) or uses partition time (use_partition_time)."
    )


_NAMED: dict[str, type[TimestampExtractor]] = {
    "fail_on_invalid": FailOnInvalidTimestamp,
    "log_and_skip": LogAndSkipOnInvalidTimestamp,
    "use_partition_time": UsePartitionTimeOnInvalidTimestamp,
    "wallclock": WallclockTimestampExtractor,
}


def extractor_from_name(name: str) -> TimestampExtractor:
    """Return the extractor a ``default.timestamp.extractor`` value names.

    Args:
        name: ``fail_on_invalid``, ``log_and_skip``, ``use_partition_time``, ``wallclock``,
            or ``pkg.module.Name`` / ``pkg.module:Name`` naming an extractor class.

    Raises:
        ConfigError: The name is unknown or does not give an extractor.
    """
    if name in _NAMED:
        return _NAMED[name]()
    module_name, sep, attr = name.partition(":") if ":" in name else name.rpartition(".")
    if not module_name or not sep:
        raise ConfigError(
            f"default.timestamp.extractor: unknown extractor {name!r}; allowed: "
            f"{', '.join(_NAMED)} or an import path"
        )
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"default.timestamp.extractor: cannot import {name!r}: {exc}") from exc
    extractor = obj() if isinstance(obj, type) else obj
    if not isinstance(extractor, TimestampExtractor):
        raise ConfigError(f"default.timestamp.extractor: {name!r} has no extract() method")
    return extractor
