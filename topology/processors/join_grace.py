"""The grace buffer of a stream-table join with a versioned table (KIP-923; Kafka's
``RocksDBTimeOrderedKeyValueBuffer`` as ``KStreamKTableJoinProcessor`` uses it).

A stream record is held until the buffer's stream time (the largest timestamp it took) has
passed its timestamp by the grace period, then joined with the table *as of* its timestamp,
in timestamp order; a record already that late is joined at once. The buffer is a
key-value store named ``<join name>-Buffer`` (change-logged, so a task restores it): keys
``[timestamp 8][serialised key][sequence 4]`` as Kafka's ``TimeFirstWindowKeySchema``,
values the record (value, timestamp, topic, headers) as the suppress buffer keeps them.

The sequence numbers the records of one timestamp and key in arrival order (Kafka's is one
counter of the buffer, which orders them the same), so the buffer's entries do not depend
on which task holds which keys. The buffer's stream time is its newest record's timestamp,
read back from its last entry: with a grace period that record is always still buffered
(without one, every record is joined at once and a lost stream time changes nothing).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from common.errors import SerializationError
from common.serdes import Serde
from statestores.segments import decode_time, encode_time
from topology.api.record import Change, Headers
from topology.processors.proc_suppress import BufferValue

_SEQ = struct.Struct(">i")
NO_TIME = -1
_MAX_SEQ = 0x7FFFFFFF


class BufferKeySerde:
    """Serialise a buffer key ``(timestamp, key, sequence)`` time first."""

    __slots__ = ("inner",)

    def __init__(self, inner: Serde[Any] | None) -> None:
        self.inner = inner  # None: the default key serde, set when the task starts

    def __repr__(self) -> str:
        return f"BufferKeySerde({self.inner!r})"

    def with_inner(self, inner: Serde[Any]) -> BufferKeySerde:
        """Return this serde over ``inner``."""
        return BufferKeySerde(inner)

    def serialize(self, topic: str, data: tuple[int, Any, int] | None) -> bytes | None:
        """Return ``timestamp + key + sequence``."""
        if data is None:
            return None
        assert self.inner is not None
        raw = self.inner.serialize(topic, data[1]) or b""
        return encode_time(data[0]) + raw + _SEQ.pack(data[2])

    def deserialize(self, topic: str, data: bytes | None) -> tuple[int, Any, int] | None:
        """Return the buffer key."""
        if data is None:
            return None
        if len(data) < 12:
            raise SerializationError(f"a join buffer key needs 12+ bytes, got {len(data)}")
        assert self.inner is not None
        key = self.inner.deserialize(topic, data[8:-4])
        return decode_time(data, 0), key, _SEQ.unpack_from(data, len(data) - 4)[0]


class GraceBuffer:
    """The buffered stream records of one task's join.

    Args:
        store: the buffer's key-value store (keys :class:`BufferKeySerde`, values
            :class:`~topology.processors.proc_suppress.BufferValue`).
        grace_ms: how long past a record's timestamp stream time goes before it is joined.
    """

    def __init__(self, store: Any, grace_ms: int) -> None:
        self.store = store
        self.grace_ms = grace_ms
        last = next(iter(store.reverse_all()), None)
        #: the largest timestamp buffered (Kafka's buffer ``observedStreamTime``)
        self.stream_time = NO_TIME if last is None else last[0][0]

    def put(self, key: Any, value: Any, timestamp: int, headers: Headers, topic: Any) -> bool:
        """Buffer a record; return False when it is past the grace period already (join
        it now)."""
        if self.stream_time - self.grace_ms > timestamp:
            return False
        same = self.store.reverse_range((timestamp, key, 0), (timestamp, key, _MAX_SEQ))
        seq = next((k[2] for k, _ in same if k[1] == key), 0) + 1
        entry = BufferValue(timestamp, timestamp, Change(value, None), None, topic, headers)
        self.store.put((timestamp, key, seq), entry)
        self.stream_time = max(self.stream_time, timestamp)
        return True

    def evict(self) -> Iterator[tuple[Any, Any, int, Headers]]:
        """Take out, in timestamp order, every record at or below stream time minus the
        grace period: ``(key, value, timestamp, headers)``."""
        bound = self.stream_time - self.grace_ms
        due = []
        for buffer_key, entry in self.store.all():
            if buffer_key[0] > bound:
                break
            due.append((buffer_key, entry))
        for buffer_key, entry in due:
            self.store.delete(buffer_key)
            yield buffer_key[1], entry.change[0], buffer_key[0], entry.headers
