"""What the log cleaner may do to a partition: Kafka's retention rules, and which small
files to merge.

Pure functions over a partition's segments (:class:`~runtime.storage.offset_index.Segment`):

* :func:`deletable` — the head of the partition that retention (``retention.ms`` by each
  file's newest record timestamp, ``retention.bytes`` by the partition's size) or a purge
  (offsets every group committed past) lets go, whole files only, oldest first, as Kafka
  deletes whole segments. A partition may lose every file (its log-start becomes its
  log-end, as Kafka rolls and deletes an expired active segment).
* :func:`merge_runs` — runs of consecutive small files to merge into one: eight files of
  like size (within a factor of eight) and together at most ``segment.bytes``, so files
  grow geometrically and each record is rewritten a few times at most, while the number of
  live files per partition stays bounded however many batches have run. A merged file
  also stays short in time (:meth:`TopicPolicy.merge_span_ms`) and, on a compacted topic,
  in offsets (the cleaner's ``max_offsets``): retention deletes a file by its newest
  record and compaction takes whole files only, so a file spanning much of the retention
  (or of the uncompacted tail) would keep its oldest records long past their time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from runtime.storage.offset_index import Segment

#: How many files of like size one merge takes (and the size ratio that counts as like).
MERGE_FANOUT = 8

#: Kafka's defaults (broker ``log.*`` settings) where a topic sets nothing; the merge
#: target is smaller than Kafka's 1 GiB segments: a merge holds its run in memory.
DEFAULTS = {
    "cleanup.policy": "delete",
    "retention.ms": 604_800_000,
    "retention.bytes": -1,
    "segment.bytes": 64 << 20,
    "segment.ms": 604_800_000,
    "file.delete.delay.ms": 60_000,
    "min.compaction.lag.ms": 0,
    "delete.retention.ms": 86_400_000,
}


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """A topic's effective cleanup settings (its overrides over the defaults)."""

    cleanup_policy: str = "delete"
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    segment_bytes: int = 64 << 20
    segment_ms: int = 604_800_000
    file_delete_delay_ms: int = 60_000
    min_compaction_lag_ms: int = 0
    delete_retention_ms: int = 86_400_000

    @property
    def deletes(self) -> bool:
        """Whether retention applies (``cleanup.policy`` has ``delete``)."""
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        """Whether compaction applies (``cleanup.policy`` has ``compact``)."""
        return "compact" in self.cleanup_policy

    def merge_span_ms(self) -> int:
        """Return the longest time one merged file may span: ``segment.ms``, and at most
        an eighth of ``retention.ms`` where retention applies, so a partition keeps at most
        9/8 of its retention (a file goes when its newest record expires)."""
        if self.deletes and self.retention_ms >= 0:
            return max(1, min(self.segment_ms, self.retention_ms // MERGE_FANOUT))
        return self.segment_ms

    @classmethod
    def of(cls, configs: Mapping[str, str], defaults: Mapping[str, object]) -> TopicPolicy:
        """Return the policy of a topic with overrides ``configs`` (validated topic
        configs) over ``defaults`` (keys as :data:`DEFAULTS`)."""
        merged = {**DEFAULTS, **defaults, **configs}
        return cls(
            cleanup_policy=str(merged["cleanup.policy"]),
            retention_ms=int(str(merged["retention.ms"])),
            retention_bytes=int(str(merged["retention.bytes"])),
            segment_bytes=int(str(merged["segment.bytes"])),
            segment_ms=int(str(merged["segment.ms"])),
            file_delete_delay_ms=int(str(merged["file.delete.delay.ms"])),
            min_compaction_lag_ms=int(str(merged["min.compaction.lag.ms"])),
            delete_retention_ms=int(str(merged["delete.retention.ms"])),
        )


def deletable(
    segments: Sequence[Segment],
    policy: TopicPolicy,
    now_ms: int,
    *,
    size_of: Callable[[Segment], int],
    purge_below: int | None = None,
) -> list[Segment]:
    """Return the leading segments that retention or a purge removes.

    Args:
        segments: the partition's live segments, in offset order.
        policy: the topic's settings (retention applies when it ``deletes``).
        now_ms: the current time.
        size_of: a segment's size in bytes.
        purge_below: offsets below it were consumed by every group that reads the topic
            (a repartition topic): files wholly below it go.
    """
    out: list[Segment] = []
    total = sum(size_of(s) for s in segments) if policy.deletes else 0
    for segment in segments:
        if not _gone(segment, policy, now_ms, total, purge_below):
            break
        out.append(segment)
        total -= size_of(segment)
    return out


def _gone(
    segment: Segment, policy: TopicPolicy, now_ms: int, total: int, purge_below: int | None
) -> bool:
    if purge_below is not None and segment.end <= purge_below:
        return True
    if not policy.deletes:
        return False
    newest = segment.max_timestamp
    if policy.retention_ms >= 0 and newest is not None and now_ms - newest > policy.retention_ms:
        return True
    return 0 <= policy.retention_bytes < total


def merge_runs(
    segments: Sequence[Segment],
    target_bytes: int,
    *,
    size_of: Callable[[Segment], int],
    fanout: int = MERGE_FANOUT,
    max_span_ms: int | None = None,
    max_offsets: int | None = None,
) -> list[list[Segment]]:
    """Return runs of ``fanout`` consecutive segments to merge, oldest first.

    A run is taken when its files are of like size (the largest less than ``fanout``
    times the smallest) and together at most ``target_bytes``: eight files of one batch
    each become one, eight of those one more, and so on up to ``target_bytes`` (a binary
    counter in base eight). Runs never overlap.

    Args:
        max_span_ms: the longest time a run's records may span (from the newest record
            of the file before the run, or of its own first file, to its newest record).
        max_offsets: the most offsets a run may cover.
    """
    runs: list[list[Segment]] = []
    i = 0
    while i + fanout <= len(segments):
        window = list(segments[i : i + fanout])
        sizes = [max(1, size_of(s)) for s in window]
        if (
            max(sizes) < fanout * min(sizes)
            and sum(sizes) <= target_bytes
            and (max_offsets is None or window[-1].end - window[0].base <= max_offsets)
            and _within(segments[i - 1] if i else window[0], window[-1], max_span_ms)
        ):
            runs.append(window)
            i += fanout
        else:
            i += 1
    return runs


def _within(before: Segment, last: Segment, max_span_ms: int | None) -> bool:
    if max_span_ms is None or before.max_timestamp is None or last.max_timestamp is None:
        return True
    return last.max_timestamp - before.max_timestamp <= max_span_ms


def compaction_horizon(segments: Sequence[Segment], end: int, lag_ms: int, now_ms: int) -> int:
    """Return the offset below which a compacted topic may be cleaned: records younger
    than ``min.compaction.lag.ms`` stay as written (the first file holding one bounds the
    horizon); the compactor itself never cleans the partition's last file."""
    if lag_ms <= 0:
        return end
    for segment in segments:
        newest = segment.max_timestamp
        if newest is None or now_ms - newest < lag_ms:
            return segment.base
    return end
