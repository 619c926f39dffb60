"""Dense per-partition offsets derived from the order of a topic's Delta log.

A record's offset is the number of records committed to its partition before it. Each data
file holds the records of one partition, so the offsets of a file are a contiguous range
``[base, base + count)``: the index keeps, per partition, the live files ("segments") sorted
by base offset, and the log-end offset.

How a version assigns bases:

- A commit by our producer carries ``streams.offsets`` in its commitInfo: the file list
  with partition, base offset, record count and max timestamp, and the resulting end
  offsets. The index checks that each base equals the partition's end before the commit (it
  always does, because the commit was a compare-and-swap on the version it was computed
  from) and takes the files in that order.
- A foreign append (Spark or delta-rs writing the table directly) gets offsets in the order
  of its add actions, with counts from the Delta statistics (``numRecords``) or the parquet
  footer. So users may fill input topics with any Delta writer.
- A remove drops the file from the index (retention, purge): the log-start offset moves
  up. The removed file stays on storage until the vacuum deletes it, ``file.delete.delay.ms``
  later (a reader that planned it before the removal still finds it): the index keeps the
  removed files and when they were removed (:attr:`OffsetIndex.removed`) until then.
- A rewrite (:mod:`runtime.storage.rewrite`: a compaction, or a merge of small files)
  carries ``streams.compaction`` in its commitInfo: it removes files of a partition and adds
  files whose records keep their offsets in an explicit ``offset`` column. A compacted
  segment is *sparse*: it spans the offsets of the files it replaced, holds fewer records,
  and readers take each record's offset from the column; a merged one holds every offset
  it spans and is read as a dense one. Log-end offsets never change; log-start becomes
  the first offset kept.
- A rewind (:mod:`runtime.storage.table_rewind`) carries ``streams.rewind``: it puts the
  topic back to an earlier cut (a savepoint's): it removes the files written since and adds
  back the cut's files that were removed since, and its metadata holds the cut's segments
  and end offsets, which the index takes as they are. This is the one commit that lowers
  log-end offsets: the offsets after the cut are written again.
- Any other rewrite (``dataChange = false`` adds, e.g. OPTIMIZE) would re-order records and
  is refused: offsets must never silently change.

Snapshots of the index are kept under ``<table>/_streams_index/`` every
``SNAPSHOT_EVERY`` versions (and by the log cleaner before it lets Delta delete old log
files), so opening a topic never replays more than that many commits, and offsets stay
answerable after Delta cleans up old log files. An index that finds a version missing while
newer ones exist (cleaned up while it was not looking) reloads the newest snapshot.
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from common.errors import StorageError
from runtime.storage.delta_log import (
    PARTITIONS_PROPERTY,
    LogDamageError,
    LogEntry,
    PartitionCountError,
    relative_file_path,
)

log = logging.getLogger(__name__)

#: Versions between two snapshots of an index. A restart's first refresh of each topic
#: reads the commits since its newest snapshot: with a hundred, a restart on an object store
#: spent 12.5 s there (eight topics sharing the read-ahead); a snapshot is one PUT per
#: process refreshing the topic every so many commits.
SNAPSHOT_EVERY = 25
SNAPSHOTS_KEPT = 3
#: An index not refreshed for this long checks, at the log end, that Delta's log cleanup did
#: not remove commits it has not read (cleanup keeps at least MIN_LOG_RETENTION_MS of them).
GAP_CHECK_AFTER_S = 30.0
#: The shortest Delta log retention the log cleaner applies (twice GAP_CHECK_AFTER_S).
MIN_LOG_RETENTION_MS = 60_000
INDEX_DIR = "_streams_index"
_FORMAT = 1

#: Key of the commit metadata a changelog compaction writes into its commitInfo.
COMPACTION_KEY = "streams.compaction"

#: Key of the commit metadata a rewind (:mod:`runtime.storage.table_rewind`) writes: the
#: partitions' segments and ends of the cut it puts the topic back to.
REWIND_KEY = "streams.rewind"

#: Column of a compacted (sparse) data file holding each record's offset.
OFFSET_COLUMN = "offset"


@dataclass(frozen=True, slots=True)
class Segment:
    """One data file of a partition: offsets ``[base, base + count)``.

    A compacted file is *sparse* (``span`` set): it covers offsets ``[base, base + span)``
    but holds only ``count`` of them, each record's offset stored in its ``offset`` column.
    """

    base: int
    count: int
    path: str
    max_timestamp: int | None
    span: int | None = None
    size: int | None = None  # bytes of the file (None: not known, an old index snapshot)

    @property
    def end(self) -> int:
        """Return the offset after the last offset the segment covers."""
        return self.base + (self.count if self.span is None else self.span)

    @property
    def sparse(self) -> bool:
        """Return True for a compacted file (offsets taken from its ``offset`` column)."""
        return self.span is not None


class PartitionLog:
    """The live segments of one partition, sorted by base offset, and its end offset."""

    __slots__ = ("_bases", "end", "segments")

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.end = 0

    @property
    def start(self) -> int:
        """Return the log-start offset (the end offset when no data is left)."""
        return self.segments[0].base if self.segments else self.end

    @property
    def records(self) -> int:
        """Return how many records the live segments hold."""
        return sum(s.count for s in self.segments)

    def append(self, segment: Segment) -> None:
        """Add a segment at the end of the log."""
        self.segments.append(segment)
        self._bases.append(segment.base)
        self.end = segment.end

    def insert(self, segment: Segment) -> None:
        """Add a compacted segment where its offsets belong (the log end is unchanged).

        Raises:
            StorageError: it overlaps a live segment or lies beyond the log end.
        """
        i = bisect.bisect_left(self._bases, segment.base)
        before = self.segments[i - 1] if i > 0 else None
        after = self.segments[i] if i < len(self.segments) else None
        if (
            (before is not None and before.end > segment.base)
            or (after is not None and segment.end > after.base)
            or segment.end > self.end
        ):
            raise StorageError(
                f"compacted file {segment.path} (offsets {segment.base}..{segment.end - 1}) "
                "overlaps live data files or lies beyond the log end"
            )
        self.segments.insert(i, segment)
        self._bases.insert(i, segment.base)

    def remove(self, path: str) -> bool:
        """Drop the segment of file ``path``; return False when it is not here."""
        for i, segment in enumerate(self.segments):
            if segment.path == path:
                del self.segments[i]
                del self._bases[i]
                return True
        return False

    def segments_from(self, offset: int) -> list[Segment]:
        """Return the segments holding offsets ``>= offset``, in order."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0 or self.segments[i].end <= offset:
            i += 1
        return self.segments[i:]


class OffsetIndex:
    """Offsets of every partition of one topic as of one Delta version."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.version = -1
        self.num_partitions = 0
        self.logs: dict[int, PartitionLog] = {}
        #: Files removed from the log and not vacuumed yet: path -> when (epoch ms).
        self.removed: dict[str, int] = {}
        #: ``(old count, new count, version)`` while ``streams.partitions`` is lowered.
        self.shrunk: tuple[int, int, int, str] | None = None
        #: The highest ``txn`` version of each transactional id in the commits after
        #: :attr:`txns_from` (-1: every commit): whether a transaction's commit landed is
        #: a look-up, not a Delta log replay.
        self.txns: dict[str, int] = {}
        self.txns_from = -1

    def log(self, partition: int) -> PartitionLog:
        """Return the log of ``partition`` (empty when nothing was written there yet)."""
        found = self.logs.get(partition)
        if found is None:
            found = self.logs[partition] = PartitionLog()
        return found

    def end_offsets(self) -> dict[int, int]:
        """Return the log-end offset of every partition."""
        return {p: self.log(p).end for p in range(self.num_partitions)}

    def apply(self, entry: LogEntry, count_rows: Callable[[str], int]) -> None:
        """Advance the index by one committed version.

        Args:
            entry: the version's actions; must be ``self.version + 1``.
            count_rows: reads a data file's row count when a foreign add has no statistics.

        Raises:
            StorageError: the version is out of order, rewrites data, or disagrees with the
                offsets recorded in its commit metadata.
        """
        if entry.version != self.version + 1:
            raise StorageError(
                f"topic {self.topic}: offset index at version {self.version} "
                f"cannot apply version {entry.version}"
            )
        check_whole(self.topic, entry)
        self._set_partitions(entry)
        for txn in entry.txns:
            app_id, version = str(txn.get("appId")), int(txn.get("version", -1))
            self.txns[app_id] = max(version, self.txns.get(app_id, -1))
        when = int(entry.commit_info.get("timestamp") or 0)
        for action in entry.removes:
            path = relative_file_path(action["path"])
            self._remove(path)
            self.removed[path] = int(action.get("deletionTimestamp") or when)
        compaction = compaction_metadata(entry)
        rewind = compaction_metadata(entry, REWIND_KEY)
        meta = entry.offsets_metadata
        sizes = {relative_file_path(a["path"]): a.get("size") for a in entry.adds}
        if rewind is not None:
            self._apply_rewind(rewind)
        elif compaction is not None:
            self._apply_compaction(entry, compaction, sizes)
        elif meta is not None:
            self._apply_ours(entry, meta, sizes)
        else:
            self._apply_foreign(entry, count_rows)
        self.version = entry.version

    def _set_partitions(self, entry: LogEntry) -> None:
        """Take a metaData action's partition count; a lowered one is kept aside (the
        largest count stays, so no partition vanishes) until the property is set back."""
        count = entry.partitions
        if count is None:
            return
        if count < self.num_partitions:
            self.shrunk = (self.num_partitions, count, entry.version, entry.path)
            return
        self.num_partitions = count
        self.shrunk = None

    def check_partitions(self) -> None:
        """Raise PartitionCountError while the log's newest partition count is lower than
        the count it had: its records would vanish from every partition above it."""
        if self.shrunk is None:
            return
        old, new, version, path = self.shrunk
        raise PartitionCountError(
            f"topic {self.topic}: the table property {PARTITIONS_PROPERTY} was lowered from "
            f"{old} to {new} at version {version} ({path}); a topic's partitions only grow "
            f"and partitions {new}..{old - 1} would vanish. Set it back: 'streams-eos topics "
            f"--alter --topic {self.topic} --partitions {old}' (or more)",
            path=path,
            version=version,
            old=old,
            new=new,
        )

    def txn_committed(self, app_id: str) -> int | None:
        """Return the highest ``txn`` version of ``app_id`` up to :attr:`version` (None:
        none, or not known: see :attr:`txns_from`)."""
        return self.txns.get(app_id)

    def vacuumed(self, paths: Iterable[str]) -> None:
        """Forget removed files that the vacuum deleted."""
        for path in paths:
            self.removed.pop(path, None)

    def _apply_compaction(
        self, entry: LogEntry, meta: dict[str, Any], sizes: dict[str, Any]
    ) -> None:
        for path, partition, base, span, count, max_ts in meta.get("files", []):
            # a merged file holds every offset it spans: dense, read without its offsets
            gaps = None if int(span) == int(count) else int(span)
            segment = Segment(int(base), int(count), path, max_ts, gaps, sizes.get(path))
            try:
                self.log(int(partition)).insert(segment)
            except StorageError as exc:
                raise StorageError(f"topic {self.topic} version {entry.version}: {exc}") from exc

    def _apply_rewind(self, meta: dict[str, Any]) -> None:
        """Take the cut's segments and ends; the files added back are live again."""
        cut = OffsetIndex.from_json({**meta["cut"], "removed": {}})
        self.logs = {p: cut.log(p) for p in range(self.num_partitions)}
        for path, _partition in meta.get("files", []):
            self.removed.pop(str(path), None)

    def _apply_ours(self, entry: LogEntry, meta: dict[str, Any], sizes: dict[str, Any]) -> None:
        for path, partition, base, count, max_ts in meta.get("files", []):
            plog = self.log(int(partition))
            if base != plog.end:
                raise self._offsets_error(
                    entry,
                    f"file {path} starts partition {partition} at offset {base}, "
                    f"but the commits before it end that partition at {plog.end}",
                )
            plog.append(Segment(int(base), int(count), path, max_ts, None, sizes.get(path)))
        ends = meta.get("end") or []
        for p, end in enumerate(ends):
            if p in self.logs and int(end) != self.logs[p].end:
                raise self._offsets_error(
                    entry,
                    f"it records partition {p}'s end offset as {end}, but its files "
                    f"end it at {self.logs[p].end}",
                )

    def _offsets_error(self, entry: LogEntry, what: str) -> LogDamageError:
        return LogDamageError(
            f"topic {self.topic}: the offsets of commit {entry.version} ({entry.path}) do not "
            f"follow: {what}. The log was changed by hand or by a writer that does not keep "
            "offsets; restore the commit from a backup or a copy of the table",
            kind="offsets",
            path=entry.path,
            version=entry.version,
        )

    def _apply_foreign(self, entry: LogEntry, count_rows: Callable[[str], int]) -> None:
        for add in entry.adds:
            path = relative_file_path(add["path"])
            if not add.get("dataChange", True):
                raise StorageError(
                    f"topic {self.topic} version {entry.version} rewrote data files "
                    f"({path}); rewrites such as OPTIMIZE re-order records and break offsets. "
                    "Do not compact topic tables with external tools"
                )
            raw = (add.get("partitionValues") or {}).get("partition")
            if raw is None:
                raise StorageError(
                    f"topic {self.topic} version {entry.version}: file {path} has no "
                    "'partition' value"
                )
            stats = _parse_stats(add.get("stats"))
            count = stats.get("numRecords")
            if count is None:
                count = count_rows(path)
            max_ts = (stats.get("maxValues") or {}).get("timestamp")
            plog = self.log(int(raw))
            size = add.get("size")
            plog.append(Segment(plog.end, int(count), path, _as_millis(max_ts), None, size))

    def _remove(self, path: str) -> None:
        for plog in self.logs.values():
            if plog.remove(path):
                return

    def to_json(self) -> dict[str, Any]:
        """Return the index as a JSON-able snapshot."""
        return {
            "format": _FORMAT,
            "topic": self.topic,
            "version": self.version,
            "partitions": self.num_partitions,
            "logs": {
                str(p): {
                    "end": plog.end,
                    "segments": [_segment_json(s) for s in plog.segments],
                }
                for p, plog in sorted(self.logs.items())
            },
            "removed": self.removed,
            "txns": self.txns,
            "txns_from": self.txns_from,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OffsetIndex:
        """Rebuild an index from :meth:`to_json` output."""
        if data.get("format") != _FORMAT:
            raise StorageError(f"offset index snapshot has unknown format {data.get('format')}")
        index = cls(data["topic"])
        index.version = int(data["version"])
        index.num_partitions = int(data["partitions"])
        for p, raw in data["logs"].items():
            plog = index.log(int(p))
            for base, count, path, max_ts, *rest in raw["segments"]:
                span = rest[0] if rest else None
                size = rest[1] if len(rest) > 1 else None
                plog.append(Segment(base, count, path, max_ts, span, size))
            plog.end = int(raw["end"])
        index.removed = {str(k): int(v) for k, v in (data.get("removed") or {}).items()}
        # a snapshot written before the index kept transactions knows those after it only
        index.txns = {str(k): int(v) for k, v in (data.get("txns") or {}).items()}
        index.txns_from = int(data.get("txns_from", -1 if "txns" in data else index.version))
        return index


def _segment_json(segment: Segment) -> list[Any]:
    row: list[Any] = [segment.base, segment.count, segment.path, segment.max_timestamp]
    if segment.size is not None:
        return [*row, segment.span, segment.size]
    return row if segment.span is None else [*row, segment.span]


def compaction_metadata(entry: LogEntry, key: str = COMPACTION_KEY) -> dict[str, Any] | None:
    """Return a compaction commit's metadata (``streams.compaction``), or a rewind's with
    ``key`` :data:`REWIND_KEY`; None when the commit has none.

    Raises:
        StorageError: the metadata is not a JSON object.
    """
    raw = entry.commit_info.get(key)
    if raw is None:
        return None
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise LogDamageError(
            f"{entry.path or f'version {entry.version}'}: commit metadata "
            f"{key!r} is not a JSON object: the commit is damaged; restore the "
            "file from a backup",
            kind="unparsable",
            path=entry.path,
            version=entry.version,
        )
    return data


def check_whole(topic: str, entry: LogEntry) -> None:
    """Raise LogDamageError when a commit of ours lacks actions its metadata lists.

    Our producer's and the log cleaner's commits list their files in their commitInfo
    (written first) and carry a ``txn`` action when a transaction wrote them: a commit
    whose adds, removes or ``txn`` do not match was cut short (a crash or a full disk
    during a write that was not atomic). Delta has no checksum of a commit: delta-rs reads
    such a file as a commit of what is left, so a reader that trusted it would serve fewer
    records than were committed, and a roll-forward that found no ``txn`` would add its
    files again. Every reader here refuses it instead, naming it.
    """
    meta = (
        compaction_metadata(entry)
        or compaction_metadata(entry, REWIND_KEY)
        or entry.offsets_metadata
    )
    if meta is None:
        return
    listed = sorted(str(f[0]) for f in meta.get("files", []))
    added = sorted(relative_file_path(a["path"]) for a in entry.adds)
    missing = []
    if listed != added:
        missing.append(f"{len(added)} of the {len(listed)} files its commitInfo lists")
    removed = meta.get("removed")
    if removed is not None and len(removed) != len(entry.removes):
        missing.append(f"{len(entry.removes)} of the {len(removed)} files it removes")
    txn = meta.get("txn")
    if txn and entry.txn_version(str(txn[0])) != int(txn[1]):
        missing.append(f"no txn action of transaction {txn[0]!r} {txn[1]}")
    if missing:
        raise LogDamageError(
            f"topic {topic}: commit {entry.version} ({entry.path}) is torn: it holds "
            f"{'; '.join(missing)}: a write cut short, which delta-rs would read short. "
            "Readers here complete a torn newest commit from its commitInfo, else refuse "
            "it: run 'streams-eos doctor --repair', or restore it from a backup",
            kind="torn",
            path=entry.path,
            version=entry.version,
        )


def _parse_stats(raw: Any) -> dict[str, Any]:
    if not raw:
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _as_millis(value: Any) -> int | None:
    """Return a statistics max timestamp as epoch millis (long or ISO text)."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    return None  # a timestamp-typed column written by another tool: treat as unknown
