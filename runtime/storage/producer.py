"""A non-transactional producer: records buffered per topic, one Delta commit per flush.

``flush()`` writes one parquet file per partition that received records and adds them all
to the topic's Delta log in a single commit. The commit is a compare-and-swap on the
version the offsets were computed from (``max_commit_retries=0``): when another producer
committed first, the index is refreshed, offsets are recomputed and the same files are
committed again. So concurrent producers, in any number of processes, never leave a gap or a
duplicate offset, and the data files are never rewritten. Acknowledged (returned) means
durable.

Per-record cost is a few list appends; partitioning (murmur2), grouping and encoding run
once per flush over Arrow columns.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, RemoveAction

from runtime.storage.delta_log import OFFSETS_KEY, read_entry
from runtime.storage.fs import StorageRoot
from runtime.storage.partitioner import StickyPartitioner, partitions_for_keys
from runtime.storage.records import FILE_SCHEMA, HEADERS_TYPE, TABLE_SCHEMA, AppendResult, Headers
from runtime.storage.topics import TopicAdmin
from streams.errors import (
    CommitOutcomeUnknownError,
    CommitTimeoutError,
    InvalidPartitionsError,
    SerializationError,
    StorageError,
    StreamsError,
)

log = logging.getLogger(__name__)

#: Rows per parquet row group: readers fetch only the row groups an offset range needs.
ROW_GROUP_SIZE = 65_536


@dataclass(slots=True)
class _Buffer:
    """Records sent to one topic since the last flush."""

    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    headers: list[Headers | None] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    tables: list[pa.Table] = field(default_factory=list)
    bytes: int = 0

    def __len__(self) -> int:
        return len(self.keys) + sum(int(t.num_rows) for t in self.tables)

    def to_table(self) -> pa.Table:
        """Return every buffered record as one table (``FILE_SCHEMA`` + ``partition``)."""
        tables = list(self.tables)
        if self.keys:
            tables.append(
                pa.table(
                    {
                        "key": pa.array(self.keys, pa.binary()),
                        "value": pa.array(self.values, pa.binary()),
                        "timestamp": pa.array(self.timestamps, pa.int64()),
                        "headers": pa.array([_header_dicts(h) for h in self.headers], HEADERS_TYPE),
                        "partition": pa.array(self.partitions, pa.int32()),
                    }
                )
            )
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


@dataclass(frozen=True, slots=True)
class _StagedFile:
    partition: int
    path: str  # relative to the table
    count: int
    size: int
    min_timestamp: int
    max_timestamp: int


class Producer:
    """Send records to topics; ``flush()`` commits them.

    Args:
        root: the storage root (path, URI, ``StorageRoot`` or ``TopicAdmin``).
        batch_size: bytes a keyless record stream sticks to one partition (Kafka's
            ``batch.size``).
        buffer_memory: buffered bytes that trigger an automatic flush (``buffer.memory``).
        delivery_timeout_ms: how long a flush keeps retrying lost compare-and-swaps.
        compression: parquet codec of data files (``snappy``, ``zstd``, ``lz4``, ``none``).

    Not thread-safe: use one producer per thread.

    Example:
        >>> with Producer("/data/streams") as producer:  # doctest: +SKIP
        ...     producer.send("words", key=b"k", value=b"hello")
    """

    def __init__(
        self,
        root: str | StorageRoot | TopicAdmin,
        *,
        batch_size: int = 16_384,
        buffer_memory: int = 32 * 1024 * 1024,
        delivery_timeout_ms: int = 120_000,
        compression: str = "snappy",
    ) -> None:
        self.admin = root if isinstance(root, TopicAdmin) else TopicAdmin(root)
        self.root: StorageRoot = self.admin.root
        self.buffer_memory = buffer_memory
        self.delivery_timeout_ms = delivery_timeout_ms
        self.compression = compression
        self._batch_size = batch_size
        self._buffers: dict[str, _Buffer] = {}
        self._partition_counts: dict[str, int] = {}
        self._sticky: dict[str, StickyPartitioner] = {}
        self._tables: dict[str, DeltaTable] = {}
        self.metrics = {"records": 0, "commits": 0, "commit_conflicts": 0, "files": 0}

    def send(
        self,
        topic: str,
        key: bytes | None = None,
        value: bytes | None = None,
        *,
        timestamp: int | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        """Buffer one record for ``topic``; it is committed by the next ``flush()``.

        Raises:
            SerializationError: key or value is not bytes (serialize first).
            InvalidPartitionsError: ``partition`` is not a partition of the topic.
            UnknownTopicError: the topic does not exist.
        """
        if key is not None and not isinstance(key, bytes):
            raise SerializationError(
                f"key must be bytes or None, got {type(key).__name__}", topic=topic
            )
        if value is not None and not isinstance(value, bytes):
            raise SerializationError(
                f"value must be bytes or None, got {type(value).__name__}", topic=topic
            )
        buf = self._buffer(topic)
        buf.keys.append(key)
        buf.values.append(value)
        buf.timestamps.append(int(time.time() * 1000) if timestamp is None else timestamp)
        buf.headers.append(headers)
        buf.partitions.append(-1 if partition is None else self._check_partition(topic, partition))
        buf.bytes += (len(key) if key else 0) + (len(value) if value else 0) + 24
        if buf.bytes >= self.buffer_memory:
            self._flush_topic(topic)

    def send_batch(
        self,
        topic: str,
        keys: pa.Array | Sequence[bytes | None] | None,
        values: pa.Array | Sequence[bytes | None],
        *,
        timestamps: pa.Array | Sequence[int] | int | None = None,
        partitions: pa.Array | Sequence[int] | None = None,
        headers: pa.Array | None = None,
    ) -> None:
        """Buffer many records at once from Arrow arrays or sequences (the fast path).

        ``keys`` may be None (all keyless); ``timestamps`` one value or one per record
        (default: now); ``partitions`` one per record (-1 = let the partitioner choose).
        """
        vals = _binary(values, "values", topic)
        n = len(vals)
        key_arr = pa.nulls(n, pa.binary()) if keys is None else _binary(keys, "keys", topic)
        if len(key_arr) != n:
            raise ValueError(f"send_batch: {len(key_arr)} keys for {n} values")
        if timestamps is None or isinstance(timestamps, int):
            ts = int(time.time() * 1000) if timestamps is None else timestamps
            ts_arr = pa.array(np.full(n, ts, dtype=np.int64))
        else:
            ts_arr = pa.array(timestamps, pa.int64())
        if partitions is None:
            part_arr = pa.array(np.full(n, -1, dtype=np.int32))
        else:
            part_arr = pa.array(partitions, pa.int32())
            top = pc.max(part_arr).as_py()
            if top is not None and top >= 0:
                self._check_partition(topic, int(top))
        hdr_arr = headers if headers is not None else _empty_headers(n)
        table = pa.table(
            {
                "key": key_arr,
                "value": vals,
                "timestamp": ts_arr,
                "headers": hdr_arr,
                "partition": part_arr,
            }
        )
        buf = self._buffer(topic)
        buf.tables.append(table)
        buf.bytes += key_arr.nbytes + vals.nbytes + 24 * n
        if buf.bytes >= self.buffer_memory:
            self._flush_topic(topic)

    def flush(self) -> list[AppendResult]:
        """Commit every buffered record; return where each partition's records landed.

        Raises:
            CommitTimeoutError: other writers kept winning past ``delivery_timeout_ms``.
            StorageError: the storage failed; nothing of that topic's batch was committed.
        """
        results: list[AppendResult] = []
        for topic in list(self._buffers):
            results.extend(self._flush_topic(topic))
        return results

    def close(self) -> None:
        """Flush and release the producer."""
        self.flush()
        self._tables.clear()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()

    # -- internals -------------------------------------------------------------------

    def _buffer(self, topic: str) -> _Buffer:
        buf = self._buffers.get(topic)
        if buf is None:
            self._num_partitions(topic)  # fails early on an unknown topic
            buf = self._buffers[topic] = _Buffer()
        return buf

    def _num_partitions(self, topic: str, *, refresh: bool = False) -> int:
        if refresh or topic not in self._partition_counts:
            self._partition_counts[topic] = self.admin.index(topic).num_partitions
        return self._partition_counts[topic]

    def _check_partition(self, topic: str, partition: int) -> int:
        if partition >= 0 and (
            partition < self._num_partitions(topic)
            or partition < self._num_partitions(topic, refresh=True)
        ):
            return partition
        raise InvalidPartitionsError(
            f"partition {partition} is not a partition of topic {topic!r} "
            f"(it has {self._num_partitions(topic)}: 0..{self._num_partitions(topic) - 1})"
        )

    def _flush_topic(self, topic: str) -> list[AppendResult]:
        buf = self._buffers.pop(topic, None)
        if buf is None or len(buf) == 0:
            return []
        table = buf.to_table()
        parts = self._assign_partitions(topic, table)
        staged = self._write_files(topic, table.drop_columns(["partition"]), parts)
        try:
            results = self._commit(topic, staged)
        except CommitOutcomeUnknownError:
            raise
        except StreamsError:
            # _commit raises these only after checking that the commit did not land, so the
            # files are orphans. On any other interruption they are left alone: the commit
            # may have landed, and an unreferenced file is harmless (VACUUM removes it).
            for f in staged:
                self.root.delete_file(f"{self.admin.table_path(topic)}/{f.path}")
            raise
        self.metrics["records"] += table.num_rows
        return results

    def _assign_partitions(self, topic: str, table: pa.Table) -> np.ndarray:
        n_parts = self._num_partitions(topic, refresh=True)
        parts = np.array(table.column("partition").to_numpy(zero_copy_only=False), np.int32)
        open_ = parts < 0
        if not open_.any():
            return parts
        keys = table.column("key").combine_chunks()
        hashed = partitions_for_keys(keys, n_parts)
        parts = np.where(open_, hashed, parts)
        keyless = parts < 0
        if keyless.any():
            values = table.column("value").combine_chunks()
            sizes = np.asarray(pc.fill_null(pc.binary_length(values), 0), dtype=np.int64)
            sticky = self._sticky.setdefault(
                topic, StickyPartitioner(self._batch_size, random.randrange(n_parts))
            )
            parts[keyless] = sticky.assign(sizes[keyless] + 24, n_parts)
        return parts

    def _write_files(self, topic: str, table: pa.Table, parts: np.ndarray) -> list[_StagedFile]:
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        table = table.take(pa.array(order))
        bounds = np.flatnonzero(np.diff(sorted_parts)) + 1
        starts = np.concatenate([[0], bounds])
        ends = np.concatenate([bounds, [len(sorted_parts)]])
        staged = []
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            p = int(sorted_parts[start])
            chunk = table.slice(start, end - start)
            staged.append(self._write_file(topic, p, chunk))
        return staged

    def _write_file(self, topic: str, partition: int, chunk: pa.Table) -> _StagedFile:
        rel = f"partition={partition}/part-{uuid.uuid4().hex}.{self.compression}.parquet"
        full = f"{self.admin.table_path(topic)}/{rel}"
        codec = None if self.compression == "none" else self.compression
        try:
            with self.root.output(full) as out:
                pq.write_table(
                    chunk.cast(FILE_SCHEMA),
                    out,
                    compression=codec,
                    row_group_size=ROW_GROUP_SIZE,
                    use_dictionary=False,
                    write_statistics=["timestamp"],
                )
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot write data file {full}: {exc}") from exc
        ts = chunk.column("timestamp")
        lo, hi = pc.min_max(ts).values()
        self.metrics["files"] += 1
        return _StagedFile(
            partition, rel, chunk.num_rows, self.root.file_size(full), lo.as_py(), hi.as_py()
        )

    def _commit(self, topic: str, staged: list[_StagedFile]) -> list[AppendResult]:
        """Commit ``staged`` by compare-and-swap, recomputing offsets after each lost race."""
        table = self._delta_table(topic)
        tlog = self.admin.topic_log(topic)
        commit_id = uuid.uuid4().hex
        deadline = time.monotonic() + self.delivery_timeout_ms / 1000
        adds: list[AddAction | RemoveAction] = [_add_action(f) for f in staged]
        attempt = 0
        while True:
            index = tlog.refresh(upto=table.version())
            while index.version > table.version():  # the index ran ahead of the table
                table.update_incremental()
                index = tlog.refresh(upto=table.version())
            base_version = index.version
            ends = index.end_offsets()
            results, files = [], []
            for f in staged:
                base = ends[f.partition]
                files.append([f.path, f.partition, base, f.count, f.max_timestamp])
                results.append(AppendResult(topic, f.partition, base, f.count))
                ends[f.partition] = base + f.count
            meta = {
                "v": 1,
                "id": commit_id,
                "files": files,
                "end": [ends[p] for p in range(index.num_partitions)],
            }
            try:
                table.create_write_transaction(
                    adds,
                    "append",
                    TABLE_SCHEMA,
                    partition_by=["partition"],
                    commit_properties=CommitProperties(
                        custom_metadata={OFFSETS_KEY: json.dumps(meta, separators=(",", ":"))},
                        max_commit_retries=0,
                    ),
                )
            except CommitFailedError as exc:
                landed = self._landed(topic, table, base_version, commit_id)
                if landed is not None:
                    return landed
                attempt += 1
                self.metrics["commit_conflicts"] += 1
                if time.monotonic() > deadline:
                    raise CommitTimeoutError(
                        f"topic {topic}: gave up after {attempt} lost compare-and-swaps in "
                        f"{self.delivery_timeout_ms} ms; nothing was committed"
                    ) from exc
                time.sleep(random.uniform(0, min(0.2, 0.002 * 2 ** min(attempt, 7))))
                continue
            except DeltaError as exc:
                if (landed := self._landed(topic, table, base_version, commit_id)) is not None:
                    return landed
                raise StorageError(f"cannot commit to topic {topic}: {exc}") from exc
            self.metrics["commits"] += 1
            return results

    def _landed(
        self, topic: str, table: DeltaTable, base_version: int, commit_id: str
    ) -> list[AppendResult] | None:
        """Return the results if a commit that reported failure was in fact written."""
        try:
            table.update_incremental()
            entries = [
                read_entry(self.root, self.admin.table_path(topic), version)
                for version in range(base_version + 1, table.version() + 1)
            ]
        except (DeltaError, StreamsError) as exc:
            raise CommitOutcomeUnknownError(
                f"topic {topic}: a commit failed and the log could not be read back to see "
                f"whether it landed: {exc}"
            ) from exc
        for entry in entries:
            meta = entry.offsets_metadata if entry else None
            if meta and meta.get("id") == commit_id:
                self.metrics["commits"] += 1
                return [
                    AppendResult(topic, p, base, count)
                    for _path, p, base, count, _ts in meta["files"]
                ]
        return None

    def _delta_table(self, topic: str) -> DeltaTable:
        table = self._tables.get(topic)
        try:
            if table is None:
                table = self._tables[topic] = DeltaTable(self.admin.table_uri(topic))
            else:
                table.update_incremental()
        except DeltaError as exc:
            raise StorageError(f"cannot open topic {topic}: {exc}") from exc
        return table


def _add_action(f: _StagedFile) -> AddAction:
    stats = {
        "numRecords": f.count,
        "minValues": {"timestamp": f.min_timestamp},
        "maxValues": {"timestamp": f.max_timestamp},
        "nullCount": {"timestamp": 0},
    }
    return AddAction(
        f.path,
        f.size,
        {"partition": str(f.partition)},
        int(time.time() * 1000),
        True,
        json.dumps(stats, separators=(",", ":")),
    )


def _binary(data: Any, what: str, topic: str) -> pa.Array:
    if isinstance(data, pa.ChunkedArray):
        data = data.combine_chunks()
    if isinstance(data, pa.Array):
        if pa.types.is_binary(data.type):
            return data
        if pa.types.is_large_binary(data.type) or pa.types.is_fixed_size_binary(data.type):
            return data.cast(pa.binary())
        raise SerializationError(f"send_batch {what} must be binary, got {data.type}", topic=topic)
    try:
        return pa.array(data, pa.binary())
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SerializationError(
            f"send_batch {what} must be bytes or None: {exc}", topic=topic
        ) from exc


def _empty_headers(n: int) -> pa.Array:
    offsets = pa.array(np.zeros(n + 1, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array([], HEADERS_TYPE.value_type))


def _header_dicts(headers: Headers | None) -> list[dict[str, Any]]:
    if not headers:
        return []
    return [{"key": k, "value": v} for k, v in headers]
