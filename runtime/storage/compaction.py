"""Changelog compaction on Delta topics: Kafka's log cleaner, one commit per partition.

A compaction of a changelog partition, in three phases (:class:`ChangelogCompactor`):

1. ``prepare``: pick the head of the partition's files that lie wholly below the clean
   horizon, read their records, keep what :func:`statestores.compaction.compact` keeps
   (the latest record per key; tombstones until ``delete.retention.ms``), and write them as
   ONE parquet file with an explicit ``offset`` column: records keep their offsets and the
   log gets gaps, as Kafka's.
2. ``commit``: one Delta commit removes the old files and adds the new one
   (``dataChange = false``: no record a Delta streaming reader has not seen appears), with
   ``streams.compaction`` in its commitInfo so the offset index knows the file is sparse.
3. ``abort``: delete the written file (nothing was committed).

Invariants kept here:

* Nothing a restore needs is removed: only records below the horizon are touched, and the
  horizon is never above the oldest kept snapshot's offset nor a caller's lower bound
  (:func:`runtime.state.changelog_compaction.compact_changelogs`); without a snapshot nothing
  is compacted.
* The partition's last file is never compacted (Kafka never cleans the active segment),
  so the record before the log end always exists: a reader anywhere below the end always
  finds a record, and log-end offsets never change.
* A file partly above the horizon is left whole rather than split: splitting would rewrite
  the records a restore reads next, for little gain (the next run takes the whole file).
* The commit is a compare-and-swap on the version it was checked against: a concurrent
  append only makes it re-check and commit again; if a file it removes was removed
  meanwhile (another compactor), it gives up with :class:`CompactionConflictError`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from runtime.storage import rewrite
from runtime.storage.fs import StorageRoot
from runtime.storage.offset_index import Segment
from runtime.storage.reader import FileSlice, read_slices
from runtime.storage.rewrite import NewFile, Rewrite, RewriteConflictError, write_file
from runtime.storage.topics import TopicAdmin
from statestores.compaction import ChangelogRecord, compact

log = logging.getLogger(__name__)

#: Kafka's default ``delete.retention.ms`` (one day).
DEFAULT_DELETE_RETENTION_MS = 86_400_000


#: A file a compaction was replacing was removed by another writer first (nothing was
#: committed, the file it wrote was deleted; run it again).
CompactionConflictError = RewriteConflictError


@dataclass(frozen=True, slots=True)
class PartitionCompaction:
    """What one compaction of a partition did (``version`` None: nothing to do)."""

    topic: str
    partition: int
    horizon: int  # the clean horizon applied: a file boundary at or below the one asked
    records_before: int
    records_after: int
    tombstones_removed: int
    files_removed: int
    version: int | None = None

    @property
    def removed(self) -> int:
        """Return how many records the compaction removed."""
        return self.records_before - self.records_after


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """The compactions of one topic's partitions, with totals."""

    topic: str
    partitions: list[PartitionCompaction] = field(default_factory=list)

    @property
    def records_before(self) -> int:
        """Return the records of the compacted ranges before compaction."""
        return sum(p.records_before for p in self.partitions)

    @property
    def records_after(self) -> int:
        """Return the records of the compacted ranges after compaction."""
        return sum(p.records_after for p in self.partitions)

    @property
    def removed(self) -> int:
        """Return how many records were removed."""
        return sum(p.removed for p in self.partitions)

    @property
    def tombstones_removed(self) -> int:
        """Return how many tombstones were removed."""
        return sum(p.tombstones_removed for p in self.partitions)


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """A prepared compaction: what it will do and the rewrite (files replaced, file
    written, if any) to commit."""

    result: PartitionCompaction
    rewrite: Rewrite

    @property
    def removed(self) -> tuple[Segment, ...]:
        """Return the segments the compaction replaces."""
        return tuple(s for _, s in self.rewrite.removed)

    @property
    def added(self) -> Segment | None:
        """Return the segment of the file it wrote (None: every record was dropped)."""
        return self.rewrite.added[0].segment if self.rewrite.added else None


class ChangelogCompactor:
    """Compacts the partitions of one compacted topic (prepare → commit, or abort).

    Args:
        admin: the topic admin of the storage root.
        topic: the topic (a changelog, ``__consumer_offsets``, or any compacted topic).
        compression: parquet codec of the compacted files.
        timeout_ms: how long a commit keeps retrying lost compare-and-swaps.
    """

    def __init__(
        self,
        admin: TopicAdmin,
        topic: str,
        *,
        compression: str = "zstd",
        timeout_ms: int = 60_000,
    ) -> None:
        self.admin = admin
        self.topic = topic
        self.compression = compression
        self.timeout_ms = timeout_ms
        self.log = admin.topic_log(topic)
        self.table_path = admin.table_path(topic)

    def compact(
        self, partition: int, *, horizon: int, delete_retention_ms: int, now_ms: int
    ) -> PartitionCompaction:
        """Prepare and commit the compaction of ``partition`` below ``horizon``.

        Raises:
            CompactionConflictError: another cleaner replaced the same files first.
            CommitTimeoutError: producers kept winning the compare-and-swap too long.
        """
        plan = self.prepare(
            partition, horizon=horizon, delete_retention_ms=delete_retention_ms, now_ms=now_ms
        )
        if plan is None:
            return self._nothing(partition, horizon)
        return self.commit(plan)

    def prepare(
        self, partition: int, *, horizon: int, delete_retention_ms: int, now_ms: int
    ) -> CompactionPlan | None:
        """Phase 1: read the files below ``horizon``, compact, write the new file.

        Returns:
            The plan to commit, or None when compaction would remove nothing.
        """
        plog = self.log.refresh().log(partition)
        limit = min(horizon, plog.end - 1)  # the record before the log end always stays
        head = _head_below(plog.segments, limit)
        if not head:
            return None
        clean = head[-1].end
        records = read_slices(
            self.admin.root,
            self.topic,
            partition,
            [FileSlice(s, 0, s.count, self._full(s.path)) for s in head],
        )
        kept, tombstones = _compact_table(records, clean, delete_retention_ms, now_ms)
        before = records.num_rows
        if kept.num_rows == before:
            return None
        result = PartitionCompaction(
            self.topic, partition, clean, before, kept.num_rows, tombstones, len(head)
        )
        details = {
            "partition": partition,
            "horizon": clean,
            "records": [before, kept.num_rows],
            "tombstones_removed": tombstones,
        }
        added: tuple[NewFile, ...] = ()
        if kept.num_rows:
            added = (
                write_file(
                    self.admin,
                    self.topic,
                    partition,
                    kept,
                    prefix="compacted",
                    span_end=clean,
                    codec=self.compression,
                ),
            )
        removed = tuple((partition, s) for s in head)
        return CompactionPlan(result, Rewrite(self.topic, "compaction", removed, added, details))

    def commit(self, plan: CompactionPlan) -> PartitionCompaction:
        """Phase 2: commit the plan in one Delta commit (compare-and-swap, retried while
        only appends intervene).

        Raises:
            CompactionConflictError: a file being replaced was removed meanwhile.
            CommitTimeoutError: other writers kept winning past ``timeout_ms``.
            CommitOutcomeUnknownError: a failed commit's outcome could not be read.
        """
        version = rewrite.commit(self.admin, plan.rewrite, timeout_ms=self.timeout_ms)
        r = plan.result
        log.info(
            "[compaction %s-%d] committed version=%d horizon=%d records=%d->%d "
            "tombstones_removed=%d files_removed=%d",
            self.topic,
            r.partition,
            version,
            r.horizon,
            r.records_before,
            r.records_after,
            r.tombstones_removed,
            r.files_removed,
        )
        return dataclasses.replace(r, version=version)

    def abort(self, plan: CompactionPlan) -> None:
        """Phase 3 (on failure): delete the file the plan wrote."""
        rewrite.abort(self.admin, plan.rewrite)

    def _nothing(self, partition: int, horizon: int) -> PartitionCompaction:
        plog = self.log.index.log(partition)
        head = _head_below(plog.segments, min(horizon, plog.end - 1))
        count = sum(s.count for s in head)
        clean = head[-1].end if head else plog.start
        return PartitionCompaction(self.topic, partition, clean, count, count, 0, 0)

    def _full(self, rel: str) -> str:
        return rel if "://" in rel else f"{self.table_path}/{rel}"


def _head_below(segments: Iterable[Segment], limit: int) -> list[Segment]:
    """Return the leading segments that end at or below ``limit``."""
    head = []
    for segment in segments:
        if segment.end > limit:
            break
        head.append(segment)
    return head


def _compact_table(
    records: pa.Table, horizon: int, delete_retention_ms: int, now_ms: int
) -> tuple[pa.Table, int]:
    """Return the rows :func:`statestores.compaction.compact` keeps, and how many
    tombstones it dropped (headers are carried with their records). A record without a
    key (never written by a store) is kept as it is."""
    cols = records.select(["offset", "key", "value", "timestamp"]).to_pydict()
    keyed = [
        ChangelogRecord(o, k, v, t)
        for o, k, v, t in zip(
            cols["offset"], cols["key"], cols["value"], cols["timestamp"], strict=True
        )
        if k is not None
    ]
    result = compact(
        keyed, clean_horizon=horizon, now_ms=now_ms, delete_retention_ms=delete_retention_ms
    )
    kept = {r.offset for r in result.kept}
    kept.update(o for o, k in zip(cols["offset"], cols["key"], strict=True) if k is None)
    offsets = records.column("offset").to_numpy()
    rows = np.searchsorted(offsets, sorted(kept))
    return records.take(pa.array(rows, pa.int64())), result.tombstones_removed


def compact_changelog(
    root_or_admin: str | StorageRoot | TopicAdmin,
    topic: str,
    partitions: int | Iterable[int] | None = None,
    *,
    horizon: int | Mapping[int, int],
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS,
    now_ms: int | None = None,
) -> CompactionResult:
    """Compact ``topic``'s partitions below an explicit clean horizon, one commit each.

    Args:
        root_or_admin: the storage root or its topic admin.
        partitions: one partition, several, or None for all.
        horizon: the clean horizon (one for all, or per partition; a partition missing
            from the mapping is skipped): no restore may start below it.
        delete_retention_ms: how long a tombstone survives compaction.
        now_ms: the current time (default: the clock).

    Returns:
        What each partition's compaction did.

    Raises:
        CompactionConflictError: another compactor replaced the same files first.
        CommitTimeoutError: producers kept winning the compare-and-swap too long.
    """
    admin = root_or_admin if isinstance(root_or_admin, TopicAdmin) else TopicAdmin(root_or_admin)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if partitions is None:
        chosen: Iterable[int] = range(admin.num_partitions(topic))
    else:
        chosen = [partitions] if isinstance(partitions, int) else partitions
    compactor = ChangelogCompactor(admin, topic)
    out = CompactionResult(topic)
    for p in chosen:
        h = horizon.get(p) if isinstance(horizon, Mapping) else horizon
        if h is None:
            continue
        out.partitions.append(
            compactor.compact(p, horizon=h, delete_retention_ms=delete_retention_ms, now_ms=now)
        )
    return out
