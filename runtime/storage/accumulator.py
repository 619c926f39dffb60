"""Buffer records per topic and assign their partitions (Kafka's RecordAccumulator).

Shared by the plain and the transactional producer: appending costs a few list appends per
record; ``drain`` partitions a topic's records in one vectorised pass (murmur2 over the key
column, sticky assignment for keyless records) and returns them grouped by partition, in
send order within each partition.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.errors import InvalidPartitionsError, SerializationError, UnknownTopicError
from runtime.storage.committer import split_by_partition
from runtime.storage.partitioner import StickyPartitioner, partitions_for_keys
from runtime.storage.records import HEADERS_TYPE, Headers, headers_array
from runtime.storage.topics import TopicAdmin


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

    def seal(self) -> None:
        """Move the records appended one by one into ``tables``, so that a batch appended
        next comes after them (send order is kept)."""
        if self.keys:
            self.tables.append(
                pa.table(
                    {
                        "key": pa.array(self.keys, pa.binary()),
                        "value": pa.array(self.values, pa.binary()),
                        "timestamp": pa.array(self.timestamps, pa.int64()),
                        "headers": headers_array([h or () for h in self.headers]),
                        "partition": pa.array(self.partitions, pa.int32()),
                    }
                )
            )
            self.keys, self.values, self.timestamps = [], [], []
            self.headers, self.partitions = [], []

    def to_table(self) -> pa.Table:
        """Return every buffered record as one table (``FILE_SCHEMA`` + ``partition``)."""
        self.seal()
        tables = self.tables
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


class RecordAccumulator:
    """Buffers records per topic and assigns their partitions at drain time."""

    def __init__(
        self,
        admin: TopicAdmin | None,
        *,
        batch_size: int = 16_384,
        partition_counts: Mapping[str, int] | None = None,
    ) -> None:
        """Args:
        admin: where partition counts are looked up (None: only ``partition_counts``).
        partition_counts: fixed counts, for writers that must not read the Delta log
            (Spark tasks: the driver names the topics and their counts).
        """
        if admin is None and partition_counts is None:
            raise ValueError("a RecordAccumulator needs an admin or fixed partition_counts")
        self.admin = admin
        self._batch_size = batch_size
        self._buffers: dict[str, _Buffer] = {}
        self._fixed = dict(partition_counts or {})
        self._partition_counts: dict[str, int] = dict(self._fixed)
        self._sticky: dict[str, StickyPartitioner] = {}

    def topics(self) -> list[str]:
        """Return the topics with buffered records."""
        return [t for t, b in self._buffers.items() if len(b)]

    def clear(self) -> None:
        """Drop every buffered record (an aborted transaction)."""
        self._buffers.clear()

    def append(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        timestamp: int | None,
        headers: Headers | None,
        partition: int | None,
    ) -> int:
        """Buffer one record; return the topic's buffered bytes.

        Raises:
            SerializationError: key or value is not bytes (serialize first).
            InvalidPartitionsError: ``partition`` is not a partition of the topic.
            UnknownTopicError: the topic does not exist.
        """
        for what, data in (("key", key), ("value", value)):
            if data is not None and not isinstance(data, bytes):
                raise SerializationError(
                    f"{what} must be bytes or None, got {type(data).__name__}", topic=topic
                )
        buf = self._buffer(topic)
        buf.keys.append(key)
        buf.values.append(value)
        buf.timestamps.append(int(time.time() * 1000) if timestamp is None else timestamp)
        buf.headers.append(headers)
        buf.partitions.append(-1 if partition is None else self.check_partition(topic, partition))
        buf.bytes += (len(key) if key else 0) + (len(value) if value else 0) + 24
        return buf.bytes

    def append_batch(
        self,
        topic: str,
        keys: pa.Array | Sequence[bytes | None] | None,
        values: pa.Array | Sequence[bytes | None],
        *,
        timestamps: pa.Array | Sequence[int] | int | None,
        partitions: pa.Array | Sequence[int] | None,
        headers: pa.Array | None,
    ) -> int:
        """Buffer many records from Arrow arrays or sequences; return the buffered bytes."""
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
                self.check_partition(topic, int(top))
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
        buf.seal()
        buf.tables.append(table)
        buf.bytes += key_arr.nbytes + vals.nbytes + 24 * n
        return buf.bytes

    def has(self, topic: str) -> bool:
        """Whether records of ``topic`` are buffered."""
        buf = self._buffers.get(topic)
        return buf is not None and len(buf) > 0

    def drain(self, topic: str) -> list[tuple[int, pa.Table]]:
        """Remove ``topic``'s records from the buffer; return them grouped by partition."""
        buf = self._buffers.pop(topic, None)
        if buf is None or len(buf) == 0:
            return []
        table = buf.to_table()
        parts = self._assign_partitions(topic, table)
        return list(split_by_partition(table.drop_columns(["partition"]), parts))

    def num_partitions(self, topic: str, *, refresh: bool = False) -> int:
        """Return the topic's partition count (cached; ``refresh`` re-reads it)."""
        if topic in self._fixed:
            return self._fixed[topic]
        if self.admin is None:
            raise UnknownTopicError(
                f"topic {topic!r} is not among the topics this writer was given "
                f"({', '.join(sorted(self._fixed)) or 'none'}); declare it in the topology"
            )
        if refresh or topic not in self._partition_counts:
            self._partition_counts[topic] = self.admin.index(topic).num_partitions
        return self._partition_counts[topic]

    def check_partition(self, topic: str, partition: int) -> int:
        """Return ``partition`` if the topic has it, else raise InvalidPartitionsError."""
        if partition >= 0 and (
            partition < self.num_partitions(topic)
            or partition < self.num_partitions(topic, refresh=True)
        ):
            return partition
        count = self.num_partitions(topic)
        raise InvalidPartitionsError(
            f"partition {partition} is not a partition of topic {topic!r} "
            f"(it has {count}: 0..{count - 1})"
        )

    def _buffer(self, topic: str) -> _Buffer:
        buf = self._buffers.get(topic)
        if buf is None:
            self.num_partitions(topic)  # fails early on an unknown topic
            buf = self._buffers[topic] = _Buffer()
        return buf

    def _assign_partitions(self, topic: str, table: pa.Table) -> np.ndarray:
        n_parts = self.num_partitions(topic, refresh=True)
        parts = np.array(table.column("partition").to_numpy(zero_copy_only=False), np.int32)
        open_ = parts < 0
        if not open_.any():
            return parts
        keys = table.column("key").combine_chunks()
        parts = np.where(open_, partitions_for_keys(keys, n_parts), parts)
        keyless = parts < 0
        if keyless.any():
            values = table.column("value").combine_chunks()
            sizes = np.asarray(pc.fill_null(pc.binary_length(values), 0), dtype=np.int64)
            sticky = self._sticky.setdefault(
                topic, StickyPartitioner(self._batch_size, random.randrange(n_parts))
            )
            parts[keyless] = sticky.assign(sizes[keyless] + 24, n_parts)
        return parts


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
