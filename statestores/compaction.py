"""Changelog compaction: keep the latest value per key, drop old tombstones, safely.

Kafka's log cleaner, as a pure function over a changelog partition's records, for the
runtime's background compaction to apply to the Delta topic:

* only records below the *clean horizon* are touched: the offset of the oldest snapshot
  still kept (see :meth:`statestores.snapshots.SnapshotManager.horizon`), or the smallest
  committed offset of any live copy of the store if lower. Every restore reads from one of
  those offsets on, so nothing a restore needs is ever removed;
* below it, a record is kept only if it is the latest record of its key in the partition;
* a tombstone that is the latest of its key is dropped once it is older than
  ``delete.retention.ms`` (a reader that started below it had that long to see it).

Offsets are kept (records keep their offset; the log gets gaps, as Kafka's), which is
what lets a store's committed offset stay meaningful after compaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChangelogRecord:
    """One changelog record: ``value`` None is a tombstone."""

    offset: int
    key: bytes
    value: bytes | None
    timestamp: int


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """The records kept, in offset order, and how many were removed."""

    kept: list[ChangelogRecord]
    removed: int
    tombstones_removed: int


def compact(
    records: Iterable[ChangelogRecord],
    *,
    clean_horizon: int,
    now_ms: int,
    delete_retention_ms: int,
) -> CompactionResult:
    """Compact a changelog partition's records (given in offset order).

    Args:
        records: every record of the partition (or of the range being cleaned and
            everything after it).
        clean_horizon: records at or above this offset are kept untouched.
        now_ms: the current time, for tombstone retention.
        delete_retention_ms: how long a tombstone survives compaction.

    Returns:
        The records to keep and counts of what was removed.

    Raises:
        ValueError: the records are not in increasing offset order.
    """
    ordered = list(records)
    latest: dict[bytes, int] = {}
    previous = -1
    for record in ordered:
        if record.offset <= previous:
            raise ValueError(
                f"changelog records must be in increasing offset order: {record.offset} "
                f"follows {previous}"
            )
        previous = record.offset
        latest[record.key] = record.offset
    kept: list[ChangelogRecord] = []
    tombstones = 0
    for record in ordered:
        if record.offset >= clean_horizon:
            kept.append(record)
        elif latest[record.key] != record.offset:
            continue  # superseded by a later record of the same key
        elif record.value is None and record.timestamp < now_ms - delete_retention_ms:
            tombstones += 1
        else:
            kept.append(record)
    return CompactionResult(kept, len(ordered) - len(kept), tombstones)


def replay(records: Iterable[ChangelogRecord]) -> dict[bytes, bytes]:
    """Return the state a restore from these records builds (for checks and tests)."""
    state: dict[bytes, bytes] = {}
    for record in records:
        if record.value is None:
            state.pop(record.key, None)
        else:
            state[record.key] = record.value
    return state
