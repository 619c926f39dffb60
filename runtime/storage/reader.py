"""Read a topic partition from an offset, in offset order; look offsets up by time.

Reads go straight to the parquet files the offset index names, and only to the row groups
that hold the asked-for offsets. Only committed data is ever listed in the Delta log, so
every read is ``read_committed``.

A compacted changelog (:mod:`runtime.storage.compaction`) has gaps: its head is one sparse
file whose records carry their offsets in an ``offset`` column. Planning finds rows there
through the column's row-group statistics (one row group read per bound); ordinary dense
files keep the arithmetic path, with no per-record work.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.errors import InvalidPartitionsError, OffsetOutOfRangeError, StorageError
from common.pools import shared_pool
from runtime.storage.fs import StorageRoot
from runtime.storage.offset_index import OFFSET_COLUMN, OffsetIndex, PartitionLog, Segment
from runtime.storage.records import FILE_SCHEMA, READ_SCHEMA, ConsumerRecord, records_from_table
from runtime.storage.retries import retried
from runtime.storage.topics import TopicAdmin

#: How many data files of one read an object store serves at once: a restore replays a
#: changelog of up to ``statestore.snapshot.interval`` small files, each a HEAD and a GET
#: whose time is mostly the store's latency; one after another they were most of a
#: restarted task's opening (each a thread's wait, not its CPU).
REMOTE_READERS = 8

#: Special timestamps of Kafka's ListOffsets: the log-end and the log-start offset.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Rows ``[start, start + length)`` of one data file, holding offsets from
    ``segment.base + start`` on. Picklable: a driver plans slices, an executor reads them
    with :func:`read_slices` without touching the Delta log."""

    segment: Segment
    start: int  # row in the file
    length: int
    file: str  # the file's full path or URI under the storage root
    first: int | None = None  # a sparse (compacted) file's first offset in the slice

    @property
    def first_offset(self) -> int:
        """Return the offset of the slice's first record."""
        return self.segment.base + self.start if self.first is None else self.first


class TopicReader:
    """Reads committed records of topics under one storage root.

    Args:
        root: the storage root (path, URI, ``StorageRoot`` or ``TopicAdmin``).
    """

    def __init__(self, root: str | StorageRoot | TopicAdmin) -> None:
        self.admin = root if isinstance(root, TopicAdmin) else TopicAdmin(root)
        self.root = self.admin.root

    def index(self, topic: str) -> OffsetIndex:
        """Return the topic's offset index, refreshed to the latest commit."""
        return self.admin.index(topic)

    def beginning_offsets(self, topic: str) -> dict[int, int]:
        """Return the log-start offset of every partition."""
        index = self.index(topic)
        return {p: index.log(p).start for p in range(index.num_partitions)}

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Return the log-end offset (next offset to be written) of every partition."""
        return self.index(topic).end_offsets()

    def read(
        self, topic: str, partition: int, offset: int, max_records: int | None = None
    ) -> pa.Table:
        """Return the records of ``partition`` from ``offset`` on, in offset order.

        Args:
            max_records: the records of offsets ``[offset, offset + max_records)``: that
                many, except across a compacted range's gaps (all up to the log end when
                None).

        Returns:
            A table of ``READ_SCHEMA`` (``partition, offset, key, value, timestamp,
            headers``); empty when ``offset`` is the log-end offset.

        Raises:
            OffsetOutOfRangeError: ``offset`` is below log-start or above log-end.
        """
        return read_slices(
            self.root, topic, partition, self.plan(topic, partition, offset, max_records)
        )

    def plan(
        self, topic: str, partition: int, offset: int, max_records: int | None = None
    ) -> list[FileSlice]:
        """Return the file slices that hold ``partition``'s records from ``offset`` on.

        ``max_records`` bounds the offsets: records in ``[offset, offset + max_records)``
        are planned, which is that many records except across a compacted range's gaps.

        Raises:
            OffsetOutOfRangeError: ``offset`` is below log-start or above log-end.
        """
        plog = self._log_at(topic, partition, offset)
        stop = plog.end if max_records is None else min(plog.end, offset + max(0, max_records))
        slices = []
        table_path = self.admin.table_path(topic)
        for segment in plog.segments_from(offset):
            if segment.base >= stop:
                break
            path = segment.path
            full = path if "://" in path else f"{table_path}/{path}"
            if segment.sparse:
                piece = self._sparse_slice(topic, segment, full, offset, stop)
                if piece is not None:
                    slices.append(piece)
                continue
            start = max(0, offset - segment.base)
            length = min(segment.count, stop - segment.base) - start
            slices.append(FileSlice(segment, start, length, full))
        return slices

    def next_record_offset(self, topic: str, partition: int, offset: int) -> int | None:
        """Return the offset of the first record at or after ``offset`` (``offset`` itself
        except in a compacted range's gap), or None when no record follows.

        Raises:
            OffsetOutOfRangeError: ``offset`` is below log-start or above log-end.
        """
        plog = self._log_at(topic, partition, offset)
        for segment in plog.segments_from(offset):
            if not segment.sparse:
                return max(offset, segment.base)
            full = self._full_path(topic, segment)
            piece = self._sparse_slice(topic, segment, full, offset, segment.end)
            if piece is not None:
                return piece.first_offset
        return None

    def _sparse_slice(
        self, topic: str, segment: Segment, full: str, lo: int, hi: int
    ) -> FileSlice | None:
        """Plan the rows of a compacted file holding offsets ``[lo, hi)`` (None: none); its
        reads are tried again on a transient storage error, as a slice's are (a thread's
        start, fetching its group's positions, ended its instance on one)."""
        (start, first), (stop, _) = retried(
            lambda: _rows_at(_open_file(self.root, topic, segment, full), [lo, hi]),
            what=f"read {full}",
        )
        if stop <= start:
            return None
        return FileSlice(segment, start, stop - start, full, first)

    def _full_path(self, topic: str, segment: Segment) -> str:
        path = segment.path
        return path if "://" in path else f"{self.admin.table_path(topic)}/{path}"

    def records(
        self, topic: str, partition: int, offset: int, max_records: int | None = None
    ) -> list[ConsumerRecord]:
        """Return :meth:`read` as ``ConsumerRecord`` objects."""
        return records_from_table(topic, self.read(topic, partition, offset, max_records))

    def offsets_for_times(self, topic: str, timestamp: int) -> dict[int, int | None]:
        """Return, per partition, the first offset whose timestamp is ``>= timestamp``.

        ``-1`` gives the log-end and ``-2`` the log-start offsets, as Kafka's ListOffsets.
        A partition with no such record maps to None.
        """
        if timestamp == LATEST_TIMESTAMP:
            return dict(self.end_offsets(topic))
        if timestamp == EARLIEST_TIMESTAMP:
            return dict(self.beginning_offsets(topic))
        if timestamp < 0:
            raise ValueError(f"timestamp must be >= 0, -1 (latest) or -2 (earliest): {timestamp}")
        index = self.index(topic)
        return {
            p: self._offset_for_time(topic, index, p, timestamp)
            for p in range(index.num_partitions)
        }

    def _offset_for_time(
        self, topic: str, index: OffsetIndex, partition: int, timestamp: int
    ) -> int | None:
        for segment in index.log(partition).segments:
            if segment.max_timestamp is not None and segment.max_timestamp < timestamp:
                continue
            pfile = self._open(topic, segment)
            ts = pfile.read(columns=["timestamp"]).column(0)
            hits = np.flatnonzero(np.asarray(pc.greater_equal(ts, timestamp)))
            if not len(hits):
                continue
            if segment.sparse:  # a compacted file: the offset is in the record
                return int(pfile.read(columns=[OFFSET_COLUMN]).column(0)[int(hits[0])].as_py())
            return segment.base + int(hits[0])
        return None

    def _log_at(self, topic: str, partition: int, offset: int) -> PartitionLog:
        plog = self._partition_log(topic, partition)
        if offset < plog.start or offset > plog.end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {topic}-{partition} "
                f"(log-start {plog.start}, log-end {plog.end})"
            )
        return plog

    def _partition_log(self, topic: str, partition: int) -> PartitionLog:
        index = self.index(topic)
        if not 0 <= partition < index.num_partitions:
            raise InvalidPartitionsError(
                f"partition {partition} is not a partition of topic {topic!r} "
                f"(it has {index.num_partitions})"
            )
        return index.log(partition)

    def _open(self, topic: str, segment: Segment) -> pq.ParquetFile:
        return _open_file(self.root, topic, segment, self._full_path(topic, segment))


def read_slices(root: StorageRoot, topic: str, partition: int, slices: list[FileSlice]) -> pa.Table:
    """Read planned slices of one partition as a ``READ_SCHEMA`` table, in offset order
    (on an object store, :data:`REMOTE_READERS` files at once)."""
    if root.is_local or len(slices) < 2 or REMOTE_READERS < 2:
        tables = [_read_slice(root, topic, partition, piece) for piece in slices]
    else:
        pool = shared_pool("slice-reads", REMOTE_READERS)
        tables = list(pool.map(lambda piece: _read_slice(root, topic, partition, piece), slices))
    if not tables:
        return READ_SCHEMA.empty_table()
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _open_file(root: StorageRoot, topic: str, segment: Segment, full: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(root.fs.open_input_file(full))
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(
            f"cannot read data file {full} of topic {topic} (offsets {segment.base}.."
            f"{segment.end - 1}): {exc}"
        ) from exc


class SegmentMismatchError(StorageError):
    """A data file holds another number of records than the log says (damage: reading it
    again does not help)."""


def _read_slice(root: StorageRoot, topic: str, partition: int, piece: FileSlice) -> pa.Table:
    """One slice, read again on a transient storage error (a read is safe to repeat; the
    SDK's own retries stop when a storm drained its retry quota)."""
    return retried(
        lambda: _read_slice_once(root, topic, partition, piece),
        what=f"read {piece.file}",
        never=(SegmentMismatchError,),
    )


def _read_slice_once(root: StorageRoot, topic: str, partition: int, piece: FileSlice) -> pa.Table:
    pfile = _open_file(root, topic, piece.segment, piece.file)
    meta = pfile.metadata
    if meta.num_rows != piece.segment.count:
        raise SegmentMismatchError(
            f"data file {piece.segment.path} of {topic}-{partition} holds {meta.num_rows} "
            f"records, the log says {piece.segment.count}"
        )
    firsts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    lo = bisect.bisect_right(firsts.tolist(), piece.start) - 1
    hi = bisect.bisect_left(firsts.tolist(), piece.start + piece.length)
    groups = list(range(max(lo, 0), min(hi, meta.num_row_groups)))
    sparse = piece.segment.sparse
    names = [*FILE_SCHEMA.names, OFFSET_COLUMN] if sparse else FILE_SCHEMA.names
    data = pfile.read_row_groups(groups, columns=names)
    data = data.slice(piece.start - int(firsts[groups[0]]), piece.length)
    if sparse:  # a compacted file: records keep their offsets, with gaps between them
        offsets = data.column(OFFSET_COLUMN).cast(pa.int64())
    else:
        first = piece.first_offset
        offsets = pa.array(np.arange(first, first + piece.length, dtype=np.int64))
    parts = pa.array(np.full(piece.length, partition, dtype=np.int32))
    columns = [parts, offsets, *(data.column(name) for name in FILE_SCHEMA.names)]
    return pa.Table.from_arrays(columns, schema=READ_SCHEMA)


def _rows_at(pfile: pq.ParquetFile, targets: list[int]) -> list[tuple[int, int | None]]:
    """Return, per target offset, the row of a compacted file's first record with an offset
    ``>= target`` and that offset (``(num_rows, None)`` past the last record).

    The ``offset`` column is sorted; its row-group statistics pick the one group to read.
    """
    meta = pfile.metadata
    column = pfile.schema_arrow.get_field_index(OFFSET_COLUMN)
    if column < 0:
        raise StorageError(f"compacted data file has no {OFFSET_COLUMN!r} column")
    firsts = [0]
    maxima: list[int | None] = []
    for g in range(meta.num_row_groups):
        firsts.append(firsts[-1] + meta.row_group(g).num_rows)
        stats = meta.row_group(g).column(column).statistics
        maxima.append(int(stats.max) if stats is not None and stats.has_min_max else None)
    out: list[tuple[int, int | None]] = []
    for target in targets:
        group = next(
            (g for g, top in enumerate(maxima) if top is None or top >= target),
            meta.num_row_groups,
        )
        if group == meta.num_row_groups:
            out.append((meta.num_rows, None))
            continue
        values = pfile.read_row_group(group, columns=[OFFSET_COLUMN]).column(0).to_numpy()
        i = int(np.searchsorted(values, target, side="left"))
        if i == len(values):  # a group without statistics, wholly below the target
            out.append(_rows_at_after(pfile, group + 1, firsts, target))
            continue
        out.append((firsts[group] + i, int(values[i])))
    return out


def _rows_at_after(
    pfile: pq.ParquetFile, group: int, firsts: list[int], target: int
) -> tuple[int, int | None]:
    for g in range(group, pfile.metadata.num_row_groups):
        values = pfile.read_row_group(g, columns=[OFFSET_COLUMN]).column(0).to_numpy()
        i = int(np.searchsorted(values, target, side="left"))
        if i < len(values):
            return firsts[g] + i, int(values[i])
    return pfile.metadata.num_rows, None
