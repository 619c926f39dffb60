"""The log cleaner of one storage root: keeps every topic's storage bounded.

:meth:`LogCleaner.clean` runs, for one topic, the steps a Kafka broker's log manager and
log cleaner run, each one Delta commit at most (:mod:`runtime.storage.rewrite`):

1. **retention and purge**: files wholly past ``retention.ms`` / ``retention.bytes``
   (topics whose ``cleanup.policy`` has ``delete``), or wholly below the offsets every
   group committed (``purge_below``: repartition topics), leave the log; log-start offsets
   move up (:func:`runtime.storage.retention.deletable`);
2. **compaction** (``cleanup.policy`` has ``compact``): the latest record per key below the
   clean horizon (:mod:`runtime.storage.compaction`);
3. **merging**: runs of small files become one file each, every offset kept
   (:func:`runtime.storage.retention.merge_runs`);
4. **vacuum**: removed files are deleted ``file.delete.delay.ms`` after their removal;
5. **Delta log cleanup**: commits older than the log retention that a checkpoint covers.

A step that loses a race with another cleaner is skipped (the next run does it); any other
failure is raised to the caller. Records a reader may still need are never deleted: a
removed file stays readable for ``file.delete.delay.ms``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.storage import rewrite
from runtime.storage.compaction import ChangelogCompactor, PartitionCompaction
from runtime.storage.offset_index import MIN_LOG_RETENTION_MS, PartitionLog, Segment
from runtime.storage.reader import FileSlice, read_slices
from runtime.storage.retention import (
    MERGE_FANOUT,
    TopicPolicy,
    compaction_horizon,
    deletable,
    merge_runs,
)
from runtime.storage.rewrite import NewFile, Rewrite, RewriteConflictError, write_file
from runtime.storage.topics import LOG_RETENTION_PROPERTY, TopicAdmin, parse_interval_ms
from runtime.storage.vacuum import clean_delta_log, vacuum

log = logging.getLogger(__name__)


@dataclass(slots=True)
class CleanResult:
    """What one clean of a topic did."""

    topic: str
    deleted_files: int = 0
    deleted_bytes: int = 0
    deleted_records: int = 0
    merged_files: int = 0
    merges: int = 0
    compactions: list[PartitionCompaction] = field(default_factory=list)
    vacuumed_files: int = 0
    vacuumed_bytes: int = 0
    log_files_deleted: int = 0
    skipped: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        compacted = sum(c.removed for c in self.compactions)
        return (
            f"topic={self.topic} deleted_files={self.deleted_files} "
            f"deleted_records={self.deleted_records} merged_files={self.merged_files}->"
            f"{self.merges} compacted_records={compacted} vacuumed_files={self.vacuumed_files} "
            f"log_files_deleted={self.log_files_deleted}"
        )


class LogCleaner:
    """Cleans the topics of one storage root.

    Args:
        admin: the storage root's topic admin.
        defaults: topic settings where a topic sets nothing (``retention.ms``,
            ``segment.bytes``, ...: the broker-like ``log.*`` configuration).
        delta_log_retention_ms: how long Delta log commits are kept where a topic sets no
            ``delta.logRetentionDuration``.
        compression: parquet codec of merged and compacted files.
    """

    def __init__(
        self,
        admin: TopicAdmin,
        defaults: Mapping[str, Any] | None = None,
        *,
        delta_log_retention_ms: int = 86_400_000,
        compression: str = "zstd",
    ) -> None:
        self.admin = admin
        self.defaults = dict(defaults or {})
        self.delta_log_retention_ms = delta_log_retention_ms
        self.compression = compression

    def policy(
        self,
        topic: str,
        kind: Mapping[str, Any] | None = None,
        configs: Mapping[str, str] | None = None,
    ) -> TopicPolicy:
        """Return ``topic``'s effective settings: its own configs over ``kind`` (the
        settings of its kind of topic, e.g. a changelog's ``cleanup.policy=compact``) over
        the defaults."""
        own = self.admin.configs(topic) if configs is None else configs
        return TopicPolicy.of(own, {**self.defaults, **(kind or {})})

    def clean(
        self,
        topic: str,
        *,
        now_ms: int | None = None,
        retention: bool = True,
        purge_below: Mapping[int, int] | None = None,
        compaction_horizons: Mapping[int, int] | None = None,
        delete_below: Mapping[int, int] | None = None,
        compact: bool = True,
        merge: bool = True,
        vacuum_files: bool = True,
        kind: Mapping[str, Any] | None = None,
    ) -> CleanResult:
        """Run the cleaner's steps on ``topic``.

        Args:
            now_ms: the current time (default: the clock).
            retention: apply ``retention.ms`` / ``retention.bytes``, clean the Delta log.
            purge_below: per partition, the offset every consuming group committed past.
            compaction_horizons: per partition, the highest offset compaction may clean
                (changelogs: their oldest snapshot); a partition absent is not compacted.
                None: every partition up to ``min.compaction.lag.ms``.
            delete_below: per partition, the offset retention may not delete past (a
                changelog: its oldest snapshot; a partition absent is not touched). None:
                no bound.
            compact: compact when the policy says so.
            merge: merge small files.
            vacuum_files: delete removed files past ``file.delete.delay.ms``.
            kind: settings of the topic's kind, under its own (see :meth:`policy`).
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        configs = self.admin.configs(topic)
        policy = self.policy(topic, kind, configs)
        out = CleanResult(topic)
        if retention or purge_below:
            purge = purge_below
            self._guarded(
                out,
                "retention",
                lambda: self._delete(
                    out, policy, now, retention=retention, purge_below=purge, bound=delete_below
                ),
            )
        if compact and policy.compacts:
            self._guarded(
                out, "compaction", lambda: self._compact(out, policy, now, compaction_horizons)
            )
        if merge:
            self._guarded(out, "merge", lambda: self._merge(out, policy, now, compaction_horizons))
        if vacuum_files:
            done = vacuum(self.admin, topic, delay_ms=policy.file_delete_delay_ms, now_ms=now)
            out.vacuumed_files, out.vacuumed_bytes = done.files, done.bytes
        if retention:
            out.log_files_deleted = clean_delta_log(
                self.admin, topic, retention_ms=self._log_retention(configs), now_ms=now
            )
        return out

    def _guarded(self, out: CleanResult, step: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except RewriteConflictError as exc:
            log.info("[cleaner %s] %s skipped: %s", out.topic, step, exc)
            out.skipped.append(step)

    def _delete(
        self,
        out: CleanResult,
        policy: TopicPolicy,
        now: int,
        *,
        retention: bool,
        purge_below: Mapping[int, int] | None,
        bound: Mapping[int, int] | None,
    ) -> None:
        topic = out.topic
        index = self.admin.topic_log(topic).refresh()
        if not retention:
            policy = TopicPolicy(cleanup_policy="")  # a purge only
        removed: list[tuple[int, Segment]] = []
        for p in range(index.num_partitions):
            below = None if purge_below is None else purge_below.get(p)
            gone = deletable(
                index.log(p).segments, policy, now, size_of=self._size_of(topic), purge_below=below
            )
            if bound is not None:
                limit = bound.get(p, -1)
                gone = [s for s in gone if s.end <= limit]
            removed.extend((p, s) for s in gone)
        if not removed:
            return
        kind = "retention" if retention and policy.deletes else "purge"
        done = Rewrite(topic, kind, tuple(removed))
        rewrite.commit(self.admin, done)
        out.deleted_files += len(removed)
        out.deleted_bytes += done.bytes_removed
        out.deleted_records += sum(s.count for _, s in removed)

    def _compact(
        self, out: CleanResult, policy: TopicPolicy, now: int, horizons: Mapping[int, int] | None
    ) -> None:
        topic = out.topic
        index = self.admin.topic_log(topic).refresh()
        compactor = ChangelogCompactor(self.admin, topic, compression=self.compression)
        for p in range(index.num_partitions):
            horizon = _clean_horizon(index.log(p), policy, now, horizons, p)
            if horizon is None:
                continue
            done = compactor.compact(
                p, horizon=horizon, delete_retention_ms=policy.delete_retention_ms, now_ms=now
            )
            if done.version is not None:
                out.compactions.append(done)

    def _merge(
        self, out: CleanResult, policy: TopicPolicy, now: int, horizons: Mapping[int, int] | None
    ) -> None:
        topic = out.topic
        index = self.admin.topic_log(topic).refresh()
        size_of = self._size_of(topic)
        for p in range(index.num_partitions):
            plog = index.log(p)
            runs = merge_runs(
                plog.segments,
                policy.segment_bytes,
                size_of=size_of,
                max_span_ms=policy.merge_span_ms(),
                max_offsets=self._dirty_eighth(plog, policy, now, horizons, p),
            )
            if not runs:
                continue
            added: list[NewFile] = []
            removed: list[tuple[int, Segment]] = []
            try:
                for run in runs:
                    added.append(self._merged(topic, p, run))
                    removed.extend((p, s) for s in run)
            except BaseException:
                rewrite.abort(self.admin, Rewrite(topic, "merge", (), tuple(added)))
                raise
            details = {"partition": p, "runs": len(runs)}
            rewrite.commit(
                self.admin, Rewrite(topic, "merge", tuple(removed), tuple(added), details)
            )
            out.merged_files += len(removed)
            out.merges += len(added)

    @staticmethod
    def _dirty_eighth(
        plog: PartitionLog,
        policy: TopicPolicy,
        now: int,
        horizons: Mapping[int, int] | None,
        p: int,
    ) -> int | None:
        """A compacted partition merges runs of at most an eighth of its tail above the
        clean horizon: compaction takes whole files only, so a merged file reaching far
        above the horizon would stay uncompacted long after most of it fell below."""
        if not policy.compacts:
            return None
        horizon = _clean_horizon(plog, policy, now, horizons, p)
        return None if horizon is None else max(0, plog.end - horizon) // MERGE_FANOUT

    def _merged(self, topic: str, partition: int, run: list[Segment]) -> NewFile:
        table = self.admin.table_path(topic)
        records = read_slices(
            self.admin.root,
            topic,
            partition,
            [FileSlice(s, 0, s.count, f"{table}/{s.path}") for s in run],
        )
        return write_file(
            self.admin,
            topic,
            partition,
            records,
            prefix="merged",
            span_end=run[-1].end,
            codec=self.compression,
        )

    def _size_of(self, topic: str) -> Any:
        table = self.admin.table_path(topic)
        sizes: dict[str, int] = {}

        def size_of(segment: Segment) -> int:
            if segment.size is not None:
                return segment.size
            if segment.path not in sizes:
                sizes[segment.path] = self.admin.root.file_size(f"{table}/{segment.path}")
            return sizes[segment.path]

        return size_of

    def _log_retention(self, configs: Mapping[str, str]) -> int:
        own = configs.get(LOG_RETENTION_PROPERTY)
        parsed = parse_interval_ms(own) if own else None
        chosen = self.delta_log_retention_ms if parsed is None else parsed
        return max(chosen, MIN_LOG_RETENTION_MS)  # readers rely on it (see topic_log)


def _clean_horizon(
    plog: PartitionLog, policy: TopicPolicy, now: int, horizons: Mapping[int, int] | None, p: int
) -> int | None:
    """Return the offset below which compaction may clean partition ``p`` (None: it is
    not compacted, its task has no snapshot yet)."""
    horizon = compaction_horizon(plog.segments, plog.end, policy.min_compaction_lag_ms, now)
    if horizons is None:
        return horizon
    if p not in horizons:
        return None
    return min(horizon, horizons[p])
