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
:class:`~common.errors.StreamsError`. A buffered update's size counts as Kafka's
``InMemoryTimeOrderedKeyValueChangeBuffer`` counts it: buffer time, key, prior, old and new
values (serialized), and the record context (timestamp, offset, partition, topic,
headers). The buffer is kept in memory and mirrored into an in-memory key-value store
(changelogged unless logging is disabled), from which it is rebuilt when the task starts.

The columnar engine hands the node a batch whole
(:meth:`SuppressProcessor.process_batch`): its updates go through the buffer one by one,
as :meth:`~SuppressProcessor.process` takes them, but each distinct key is serialized
once, an update's size is counted only where a byte limit can be reached, the store is
written once per key the batch changed (a key buffered and emitted within the batch is
never written: the store ends as it would, and its changelog holds each key's state as of
the commit), and the emitted updates go on as one batch, each with the row of the record
that emitted it.

A join reads the suppressed table through :class:`SuppressedGetter` (the ``view()`` of
Kafka's ``KTableSuppressProcessorSupplier``): a buffered key reads as its *prior* value,
the value the table had before its first buffered update, which is what downstream has
seen; any other key reads through the upstream table.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from common.errors import SerializationError, StreamsError
from common.serdes import Serde
from statestores.api import Windowed
from topology.api.processor import Processor
from topology.api.record import Change, Headers, Record, ValueAndTimestamp
from topology.engine.columnar import Batch, rows_at
from topology.graph.stores import ChangeSerde

_TIMES = struct.Struct(">qq")
_LEN = struct.Struct(">i")
#: The fixed part of a buffered update's size: buffer time, and the record context's
#: timestamp, offset and partition (Kafka's ``computeRecordSize``).
_FIXED_SIZE = 8 + 8 + 8 + 4
_new = tuple.__new__
#: More bytes than a buffer ever holds: a byte limit at or past it bounds nothing.
_UNREACHABLE_BYTES = 1 << 48
#: Key types whose equal values serialize alike (see ``_memo_safe``).
_EXACT = frozenset({str, bytes, int})


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
    """One buffered update: its buffer time, the update's timestamp, the change, the key's
    prior value (its old value when first buffered) and the record's topic and headers."""

    time: int
    timestamp: int
    change: Change[Any]
    prior: Any = None
    topic: str | None = None
    headers: Headers = ()


def _pack(data: bytes | None) -> bytes:
    return _LEN.pack(-1) if data is None else _LEN.pack(len(data)) + data


def _unpack(data: bytes, pos: int) -> tuple[bytes | None, int]:
    (size,) = _LEN.unpack_from(data, pos)
    pos += _LEN.size
    if size < 0:
        return None, pos
    return data[pos : pos + size], pos + size


def _chars(text: str) -> int:
    """The length of ``text`` in Java chars (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


class BufferValueSerde:
    """Serialise a :class:`BufferValue`: buffer time and timestamp (8 bytes each,
    big-endian), the topic, the headers (a count, then each key and value), the prior
    value (each a 4-byte length, -1 for none, then the bytes), then the change
    (:class:`~topology.graph.stores.ChangeSerde`)."""

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
        parts = [_TIMES.pack(data[0], data[1]), _pack(_encoded(data.topic))]
        parts.append(_LEN.pack(len(data.headers)))
        for name, header in data.headers:
            parts += (_pack(name.encode()), _pack(header))
        prior = data.prior
        assert self.inner is not None
        parts.append(_pack(None if prior is None else self.inner.serialize(topic, prior)))
        return b"".join(parts) + change

    def deserialize(self, topic: str, data: bytes | None) -> BufferValue | None:
        """Return the buffered update."""
        if data is None:
            return None
        if len(data) < 16:
            raise SerializationError(f"a suppress buffer value needs 16+ bytes, got {len(data)}")
        time, ts = _TIMES.unpack_from(data)
        raw_topic, pos = _unpack(data, _TIMES.size)
        (count,) = _LEN.unpack_from(data, pos)
        pos += _LEN.size
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(count):
            name, pos = _unpack(data, pos)
            header, pos = _unpack(data, pos)
            headers.append(((name or b"").decode(), header))
        raw_prior, pos = _unpack(data, pos)
        assert self.inner is not None
        prior = None if raw_prior is None else self.inner.deserialize(topic, raw_prior)
        change = self.change_serde.deserialize(topic, data[pos:]) or Change(None, None)
        context_topic = None if raw_topic is None else raw_topic.decode()
        return BufferValue(time, ts, change, prior, context_topic, tuple(headers))


def _encoded(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


class _Entry(NamedTuple):
    time: int
    key: Any
    value: BufferValue
    size: int  # -1: not counted yet (see SuppressProcessor._bytes)


def _memo_safe(keys: list[Any]) -> bool:
    """Whether equal keys among ``keys`` are sure to serialize alike, so each distinct key
    may be serialized once: strings, bytes and ints (not bools, floats or containers,
    where ``1 == True`` or ``0.0 == -0.0``), or windowed keys of those."""
    kinds = set(map(type, keys))
    if kinds <= _EXACT:
        return True
    return kinds == {Windowed} and {type(k.key) for k in keys} <= _EXACT


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
        #: Whether each update's size is counted as it is buffered (else only when a
        #: message names the buffer's bytes: no buffer reaches an unbounded byte limit).
        self._sized = limits.byte_limit < _UNREACHABLE_BYTES
        self._buffer: dict[bytes, _Entry] = {}
        self._heap: list[tuple[int, bytes]] = []

    def init(self, context: Any) -> None:
        """Open the buffer store and rebuild the buffer from it."""
        self.context = context
        self.store: Any = context.get_state_store(self.store_name)
        self._each = context.record_by_record(self.process)
        store = self.store
        for key, value in store.all():
            raw_key = store.key_serde.serialize(store.topic, key)
            if raw_key not in self._buffer:
                heapq.heappush(self._heap, (value.time, raw_key))
            self._remember(raw_key, key, value)

    def _remember(self, raw_key: bytes, key: Any, value: BufferValue) -> None:
        """Hold ``value`` as the buffered update of ``key`` (``raw_key`` serialized)."""
        old = self._buffer.get(raw_key)
        if old is not None and old.size >= 0:
            self.num_bytes -= old.size
        size = self._size(raw_key, value) if self._sized else -1
        self._buffer[raw_key] = _Entry(value.time, key, value, size)
        if size >= 0:
            self.num_bytes += size

    def _size(self, raw_key: bytes, value: BufferValue) -> int:
        """The size Kafka counts for a buffered update (``computeRecordSize``): buffer
        time, key, prior value, old value unless equal to the prior one, new value, and
        the record context (timestamp, offset, partition, topic, header keys and values)."""
        inner, topic = self.store.value_serde.inner, self.store.topic
        new, old = value.change[0], value.change[1]
        raw = [None if v is None else inner.serialize(topic, v) for v in (value.prior, old, new)]
        size = _FIXED_SIZE + len(raw_key) + len(raw[0] or b"") + len(raw[2] or b"")
        if raw[1] is not None and raw[1] != raw[0]:
            size += len(raw[1])
        if value.topic is not None:
            size += _chars(value.topic)
        for name, header in value.headers:
            size += _chars(name) + (0 if header is None else len(header))
        return size

    def _bytes(self) -> int:
        """The buffer's size in bytes, counting the updates not counted yet."""
        buffer = self._buffer
        for raw_key, entry in buffer.items():
            if entry.size < 0:
                size = self._size(raw_key, entry.value)
                buffer[raw_key] = entry._replace(size=size)
                self.num_bytes += size
        return self.num_bytes

    def _hold(  # noqa: PLR0917 - one update's fields
        self, raw_key: bytes, key: Any, change: Any, ts: int, headers: Headers, topic: str | None
    ) -> BufferValue:
        """Buffer the update ``change`` of ``key`` (the store not written): under its
        buffer time, or the time the key already has (non-resetting), with the key's
        prior value (what downstream saw before the key's first buffered update)."""
        self.observed_stream_time = max(self.observed_stream_time, ts)
        time = key.window.end if self.final_results else ts
        held = self._buffer.get(raw_key)
        prior = change[1]
        if held is None:
            heapq.heappush(self._heap, (time, raw_key))
        else:
            time = held.time  # an updated key keeps its place (non-resetting)
            prior = held.value.prior
        value = BufferValue(time, ts, Change(change[0], change[1]), prior, topic, headers)
        self._remember(raw_key, key, value)
        return value

    def process(self, record: Record[Any, Any]) -> None:
        """Buffer the update, then emit what stream time (or the bound) releases."""
        key = record[0]
        raw_key: bytes = self.store.key_serde.serialize(self.store.topic, key)
        value = self._hold(raw_key, key, record[1], record[2], record[3], self.context.topic)
        self.store.put(key, value)
        self._enforce(self._evicted)

    def process_batch(self, batch: Batch) -> None:
        """Buffer a batch's updates as :meth:`process` buffers them one by one (the same
        buffer times, priors and sizes, the same updates emitted in the same order, each
        with its record's row), serializing each distinct key once and writing the store
        once per key changed (its state after the batch, stamped with the timestamp of
        the record that last changed it). A batch with a null or unhashable key, or one
        its serde refuses, goes record by record."""
        raws = self._raw_keys(batch.keys)
        if raws is None:
            self._each(batch)
            return
        ks, vs, ts = batch.keys, batch.values, batch.timestamps
        topic, buffer = self.context.topic, self._buffer
        last: dict[bytes, int] = {}  # key -> the record that last changed it, in that order
        held: dict[bytes, bool] = {}  # key -> whether the store held it before the batch
        out: list[_Entry] = []
        rows: list[int] = []
        at = 0

        def evicted(raw_key: bytes, entry: _Entry) -> None:
            if raw_key not in held:
                held[raw_key] = True
            last.pop(raw_key, None)
            last[raw_key] = at
            if entry.value.change[0] is not None or not self.final_results:
                out.append(entry)
                rows.append(at)

        try:
            for at in range(len(ks)):
                raw_key = raws[at]
                if raw_key not in held:
                    held[raw_key] = raw_key in buffer
                self._hold(raw_key, ks[at], vs[at], ts[at], batch.header(at), topic)
                last.pop(raw_key, None)
                last[raw_key] = at
                self._enforce(evicted)
        finally:  # what the records before a failure did is done, as one by one
            self._write(last, held, ts)
            self._forward_evicted(batch, out, rows)

    def _raw_keys(self, keys: list[Any]) -> list[bytes] | None:
        """Each key serialized as the store holds it (each distinct key once where that
        is sure to give the same bytes), or None: a key that is null, unhashable or that
        its serde refuses (then the records go one by one, failing where they fail)."""
        store = self.store
        serialize, topic = store.key_serde.serialize, store.topic
        try:
            if _memo_safe(keys):
                found = {key: serialize(topic, key) for key in set(keys)}
                raws = [found[key] for key in keys]
            else:
                raws = [None if key is None else serialize(topic, key) for key in keys]
        except Exception:
            return None
        return None if None in raws else raws

    def _write(self, last: dict[bytes, int], held: dict[bytes, bool], ts: list[int]) -> None:
        """Write the keys a batch changed, in the order of their last change: the update
        each still buffers, or a tombstone for one the store held that went out."""
        buffer, serialize = self._buffer, self.store.value_serde.serialize
        topic = self.store.topic
        raw_keys: list[bytes] = []
        values: list[bytes | None] = []
        stamps: list[int] = []
        for raw_key, i in last.items():
            entry = buffer.get(raw_key)
            if entry is None and not held[raw_key]:
                continue  # buffered and emitted within the batch: the store never had it
            raw_keys.append(raw_key)
            values.append(None if entry is None else serialize(topic, entry.value))
            stamps.append(ts[i])
        if raw_keys:
            self.store.put_raw_many(raw_keys, values, stamps)

    def _forward_evicted(self, batch: Batch, out: list[_Entry], rows: list[int]) -> None:
        """Forward the updates a batch emitted, each with the row of the record that
        emitted it: as one batch to children that take batches, else one by one."""
        if not out:
            return
        context: Any = self.context
        if not context.forwards_batches():
            for entry in out:
                self._forward(entry)
            return
        values = [entry.value for entry in out]
        headers = [v.headers for v in values]
        context.forward_batch(
            Batch(
                [entry.key for entry in out],
                [v.change for v in values],
                [v.timestamp for v in values],
                headers if any(headers) else None,
                rows_at(batch.rows, rows),
            )
        )

    def _over_capacity(self) -> bool:
        limits = self.limits
        return len(self._buffer) > limits.record_limit or self.num_bytes > limits.byte_limit

    def _enforce(self, evicted: Callable[[bytes, _Entry], None]) -> None:
        """Emit what stream time releases, then what the bound does (or stop the
        application), handing each entry to ``evicted`` as it leaves the buffer."""
        expiry = self.observed_stream_time - self.wait_ms
        heap = self._heap
        while heap and heap[0][0] <= expiry:
            evicted(*self._pop())
        if not self._over_capacity():
            return
        if not self.limits.emit_early:
            raise StreamsError(
                f"{self.name} buffer exceeded its max capacity. Currently "
                f"[{len(self._buffer)}/{self.limits.record_limit}] records and "
                f"[{self._bytes()}/{self.limits.byte_limit}] bytes."
            )
        while heap and self._over_capacity():
            evicted(*self._pop())

    def _pop(self) -> tuple[bytes, _Entry]:
        """Take the oldest entry out of the buffer."""
        _, raw_key = heapq.heappop(self._heap)
        entry = self._buffer.pop(raw_key)
        if entry.size >= 0:
            self.num_bytes -= entry.size
        return raw_key, entry

    def _evicted(self, raw_key: bytes, entry: _Entry) -> None:
        """An entry out of the buffer, one record at a time: deleted from the store and
        forwarded unless it is a final result's tombstone."""
        self.store.delete(entry.key)
        if entry.value.change[0] is not None or not self.final_results:
            self._forward(entry)

    def _forward(self, entry: _Entry) -> None:
        value = entry.value
        out = _new(Record, (entry.key, value.change, value.timestamp, value.headers))
        self.context.forward(out)


class SuppressedGetter:
    """Read a suppressed table by key (the ``view()`` of Kafka's
    ``KTableSuppressProcessorSupplier``): a buffered key reads as its prior value (timestamp
    unknown, -1; none when the key had no value before), any other key through ``parent``,
    the upstream table's getter.

    Args:
        store_name: the store mirroring the suppress buffer.
        parent: the upstream table's value getter.
    """

    def __init__(self, store_name: str, parent: Any) -> None:
        self.store_name = store_name
        self.parent = parent
        self.store: Any = None

    def init(self, context: Any) -> None:
        """Open the parent's stores and the buffer's (the suppress processor owns it)."""
        self.parent.init(context)
        self.store = context.get_state_store(self.store_name)

    def get(self, key: Any) -> ValueAndTimestamp[Any] | None:
        """Return the key's prior value if it is buffered, else the upstream value."""
        buffered: BufferValue | None = self.store.get(key)
        if buffered is None:
            found: ValueAndTimestamp[Any] | None = self.parent.get(key)
            return found
        prior = buffered.prior
        return None if prior is None else ValueAndTimestamp(prior, -1)
