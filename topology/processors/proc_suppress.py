"""The suppress processor (Kafka's ``KTableSuppressProcessor``): it holds a table's
updates in a buffer and emits them later; ``KTable.suppress`` records it
(:mod:`topology.dsl.suppress`).

* Final results (``Suppressed.until_window_closes``): a windowed table's update is buffered
  under its window's end; once the node's observed stream time reaches ``end + grace`` the
  latest update of the window (its final result) is emitted, tombstones dropped.
* Time limit (``Suppressed.until_time_limit``): a key's update is buffered under its record
  timestamp and emitted, with every later update of the key folded in, once stream time
  reaches that timestamp plus the limit.

Both are driven by stream time only (no wall-clock punctuation). A key keeps its place in
the buffer when updated (Kafka's non-resetting semantics). When the buffer exceeds its
bound it either emits its oldest entries early or stops the application with
:class:`~common.errors.StreamsError`. The buffer is kept in memory and mirrored into an
in-memory key-value store (changelogged unless logging is disabled), from which it is
rebuilt when the task starts.
"""

from __future__ import annotations

import heapq
import struct
from typing import Any, NamedTuple, Protocol

from common.errors import SerializationError, StreamsError
from common.serdes import Serde
from topology.api.processor import Processor
from topology.api.record import Change, Headers, Record
from topology.graph.stores import ChangeSerde

_TIMES = struct.Struct(">qq")
_new = tuple.__new__


class BufferLimits(Protocol):
    """The bound of a suppression buffer (the DSL's ``BufferConfig``)."""

    @property
    def record_limit(self) -> int:
        """The most keys the buffer holds."""
        ...

    @property
    def byte_limit(self) -> int:
        """About the most bytes of keys and values the buffer holds."""
        ...

    @property
    def emit_early(self) -> bool:
        """Emit the oldest entries when full (else stop the application)."""
        ...


class BufferValue(NamedTuple):
    """One buffered update: its buffer time, the update's timestamp and the change."""

    time: int
    timestamp: int
    change: Change[Any]


class BufferValueSerde:
    """Serialise a :class:`BufferValue`: buffer time and timestamp (8 bytes each,
    big-endian), then the change (:class:`~topology.graph.stores.ChangeSerde`)."""

    __slots__ = ("change_serde", "inner")

    def __init__(self, inner: Serde[Any] | None) -> None:
        self.inner = inner  # None: the default value serde, set when the task starts
        self.change_serde = ChangeSerde(inner)

    def with_inner(self, inner: Serde[Any]) -> BufferValueSerde:
        """Return this serde over ``inner``."""
        return BufferValueSerde(inner)

    def serialize(self, topic: str, data: BufferValue | None) -> bytes | None:
        """Return the bytes of ``data``."""
        if data is None:
            return None
        change = self.change_serde.serialize(topic, data[2]) or b""
        return _TIMES.pack(data[0], data[1]) + change

    def deserialize(self, topic: str, data: bytes | None) -> BufferValue | None:
        """Return the buffered update."""
        if data is None:
            return None
        if len(data) < 16:
            raise SerializationError(f"a suppress buffer value needs 16+ bytes, got {len(data)}")
        time, ts = _TIMES.unpack_from(data)
        change = self.change_serde.deserialize(topic, data[16:])
        return BufferValue(time, ts, change or Change(None, None))


class _Entry(NamedTuple):
    time: int
    key: Any
    value: BufferValue
    headers: Headers
    size: int


class SuppressProcessor(Processor[Any, Any, Any, Any]):
    """Buffer a table's updates and emit them when stream time allows.

    Args:
        name: the node name.
        store_name: the store mirroring the buffer.
        final_results: buffer each update under its window's end and emit only the final
            result (tombstones dropped); else under its record timestamp.
        wait_ms: how far stream time must pass an update's buffer time to emit it (the
            grace of the windows, or the time limit).
        limits: the buffer's bound and what to do when it is exceeded.
    """

    def __init__(
        self, name: str, store_name: str, *, final_results: bool, wait_ms: int, limits: BufferLimits
    ) -> None:
        self.name = name
        self.store_name = store_name
        self.final_results = final_results
        self.wait_ms = wait_ms
        self.limits = limits
        self.observed_stream_time = -1
        self.num_bytes = 0
        self._buffer: dict[bytes, _Entry] = {}
        self._heap: list[tuple[int, bytes]] = []

    def init(self, context: Any) -> None:
        """Open the buffer store and rebuild the buffer from it."""
        self.context = context
        self.store: Any = context.get_state_store(self.store_name)
        for key, value in self.store.all():
            self._remember(key, value, ())

    def _remember(self, key: Any, value: BufferValue, headers: Headers) -> None:
        store = self.store
        raw_key: bytes = store.key_serde.serialize(store.topic, key)
        raw_value: bytes = store.value_serde.serialize(store.topic, value)
        old = self._buffer.get(raw_key)
        if old is None:
            heapq.heappush(self._heap, (value.time, raw_key))
        else:
            self.num_bytes -= old.size
        size = len(raw_key) + len(raw_value)
        self._buffer[raw_key] = _Entry(value.time, key, value, headers, size)
        self.num_bytes += size

    def process(self, record: Record[Any, Any]) -> None:
        """Buffer the update, then emit what stream time (or the bound) releases."""
        key, change, ts = record[0], record[1], record[2]
        self.observed_stream_time = max(self.observed_stream_time, ts)
        time = key.window.end if self.final_results else ts
        raw_key: bytes = self.store.key_serde.serialize(self.store.topic, key)
        held = self._buffer.get(raw_key)
        if held is not None:
            time = held.time  # an updated key keeps its place (non-resetting)
        value = BufferValue(time, ts, Change(change[0], change[1]))
        self._remember(key, value, record[3])
        self.store.put(key, value)
        self._enforce()

    def _over_capacity(self) -> bool:
        limits = self.limits
        return len(self._buffer) > limits.record_limit or self.num_bytes > limits.byte_limit

    def _enforce(self) -> None:
        expiry = self.observed_stream_time - self.wait_ms
        heap = self._heap
        while heap and heap[0][0] <= expiry:
            self._evict()
        if not self._over_capacity():
            return
        if not self.limits.emit_early:
            raise StreamsError(
                f"{self.name} buffer exceeded its max capacity. Currently "
                f"[{len(self._buffer)}/{self.limits.record_limit}] records and "
                f"[{self.num_bytes}/{self.limits.byte_limit}] bytes."
            )
        while heap and self._over_capacity():
            self._evict()

    def _evict(self) -> None:
        _, raw_key = heapq.heappop(self._heap)
        entry = self._buffer.pop(raw_key)
        self.num_bytes -= entry.size
        self.store.delete(entry.key)
        change = entry.value.change
        if change[0] is not None or not self.final_results:
            out = _new(Record, (entry.key, change, entry.value.timestamp, entry.headers))
            self.context.forward(out)
