"""``KTable.suppress``: hold table updates in a buffer and emit them later, as Kafka's
``KTableSuppressProcessor``.

* ``Suppressed.until_window_closes(config)``: a windowed table's update is buffered under
  its window's end; once the node's observed stream time reaches ``end + grace`` the
  latest update of the window (its final result) is emitted, tombstones dropped. The grace
  is found on the windowed aggregation upstream (sessions: gap + grace).
* ``Suppressed.until_time_limit(limit, config)``: a key's update is buffered under its
  record timestamp and emitted, with every later update of the key folded in, once
  stream time reaches that timestamp plus ``limit``.

Both are driven by stream time only (no wall-clock punctuation). A key keeps its place in
the buffer when updated (Kafka's non-resetting semantics). When the buffer exceeds its
``BufferConfig`` bound it either emits its oldest entries early or stops the application
with :class:`~common.errors.StreamsError`. The buffer is kept in memory and mirrored
into an in-memory key-value store (changelogged unless logging is disabled), from which it
is rebuilt when the task starts.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple, Self

from common.errors import SerializationError, StreamsError, TopologyError
from common.serdes import Serde
from topology.api.processor import Processor
from topology.api.record import Change, Headers, Record
from topology.api.windows import Duration, to_ms
from topology.graph.graph import ProcessorSpec
from topology.graph.stores import ChangeSerde, KeyValueStoreFactory
from topology.processors.proc_table import TableParams

if TYPE_CHECKING:
    from topology.dsl.ktable import KTable

KTABLE_SUPPRESS = "KTABLE-SUPPRESS-"
_UNBOUNDED = (1 << 63) - 1
_TIMES = struct.Struct(">qq")
_new = tuple.__new__


@dataclass(frozen=True, slots=True)
class BufferConfig:
    """The bound of a suppression buffer and what happens when it is exceeded.

    Example:
        >>> BufferConfig.max_records(100).shut_down_when_full().emit_early
        False
    """

    record_limit: int = _UNBOUNDED
    byte_limit: int = _UNBOUNDED
    emit_early: bool = False
    logging_enabled: bool = True
    logging_config: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def unbounded(cls) -> BufferConfig:
        """No bound (the buffer grows with the open windows); never emits early."""
        return cls()

    @classmethod
    def max_records(cls, n: int) -> BufferConfig:
        """At most ``n`` keys; emits the oldest early when full (change with
        :meth:`shut_down_when_full`)."""
        return cls(record_limit=_check(n, "max records"), emit_early=True)

    @classmethod
    def max_bytes(cls, n: int) -> BufferConfig:
        """At most about ``n`` bytes of keys and values; emits the oldest early when full."""
        return cls(byte_limit=_check(n, "max bytes"), emit_early=True)

    def with_max_records(self, n: int) -> Self:
        """Return a copy bounded to ``n`` keys."""
        return replace(self, record_limit=_check(n, "max records"))

    def with_max_bytes(self, n: int) -> Self:
        """Return a copy bounded to about ``n`` bytes."""
        return replace(self, byte_limit=_check(n, "max bytes"))

    def with_no_bound(self) -> Self:
        """Return an unbounded copy that never emits early."""
        return replace(self, record_limit=_UNBOUNDED, byte_limit=_UNBOUNDED, emit_early=False)

    def shut_down_when_full(self) -> Self:
        """Return a copy that stops the application when the buffer is full."""
        return replace(self, emit_early=False)

    shutdown_when_full = shut_down_when_full

    def emit_early_when_full(self) -> Self:
        """Return a copy that emits the oldest entries early when the buffer is full."""
        return replace(self, emit_early=True)

    def with_logging_disabled(self) -> Self:
        """Return a copy whose buffer has no changelog (lost on failure)."""
        return replace(self, logging_enabled=False, logging_config={})

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> Self:
        """Return a copy whose buffer is changelogged (``config``: topic settings)."""
        return replace(self, logging_enabled=True, logging_config=dict(config or {}))


def _check(n: int, what: str) -> int:
    if n < 0:
        raise ValueError(f"{what} must not be negative, got {n}")
    return n


@dataclass(frozen=True, slots=True)
class Suppressed:
    """What ``KTable.suppress`` holds back and for how long.

    Example:
        >>> Suppressed.until_time_limit(1000, BufferConfig.max_records(10)).time_limit_ms
        1000
    """

    final_results: bool
    time_limit_ms: int
    buffer_config: BufferConfig
    name: str | None = None

    @classmethod
    def until_window_closes(cls, buffer_config: BufferConfig) -> Suppressed:
        """Emit only the final result of each window, when it closes (windowed tables).

        Raises:
            TopologyError: ``buffer_config`` emits early (final results need a buffer that
                shuts down when full, e.g. ``BufferConfig.unbounded()``).
        """
        if buffer_config.emit_early:
            raise TopologyError(
                "Suppressed.until_window_closes needs a strict buffer: use "
                "BufferConfig.unbounded() or .shut_down_when_full(), not emit-early"
            )
        return cls(True, 0, buffer_config)

    @classmethod
    def until_time_limit(cls, time_to_wait: Duration, buffer_config: BufferConfig) -> Suppressed:
        """Emit a key's latest update ``time_to_wait`` after its first buffered update."""
        wait = to_ms(time_to_wait, "time to wait for more events")
        if wait < 0:
            raise ValueError(f"time to wait for more events must not be negative, got {wait}")
        return cls(False, wait, buffer_config)

    def with_name(self, name: str) -> Self:
        """Return a copy naming the suppress node (its store is ``<name>-store``)."""
        return replace(self, name=name)


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
    """Buffer a table's updates and emit them when stream time allows."""

    def __init__(self, name: str, store_name: str, suppressed: Suppressed, grace_ms: int) -> None:
        self.name = name
        self.store_name = store_name
        self.final_results = suppressed.final_results
        self.wait_ms = grace_ms if suppressed.final_results else suppressed.time_limit_ms
        self.config = suppressed.buffer_config
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
        config = self.config
        return len(self._buffer) > config.record_limit or self.num_bytes > config.byte_limit

    def _enforce(self) -> None:
        expiry = self.observed_stream_time - self.wait_ms
        heap = self._heap
        while heap and heap[0][0] <= expiry:
            self._evict()
        if not self._over_capacity():
            return
        if not self.config.emit_early:
            raise StreamsError(
                f"{self.name} buffer exceeded its max capacity. Currently "
                f"[{len(self._buffer)}/{self.config.record_limit}] records and "
                f"[{self.num_bytes}/{self.config.byte_limit}] bytes."
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


def suppress(table: KTable[Any, Any], suppressed: Suppressed) -> KTable[Any, Any]:
    """Record a suppress node under ``table`` (see :meth:`topology.dsl.ktable.KTable.suppress`)."""
    from statestores.stores import Stores
    from topology.dsl.ktable import KTable

    builder = table.builder
    names, graph = builder.names, builder.graph
    name = suppressed.name or names.new_processor_name(KTABLE_SUPPRESS)
    grace = 0
    if suppressed.final_results:
        if table.window_grace_ms is None:
            raise TopologyError(
                f"Processor {name}: suppress(until_window_closes) needs a windowed table; "
                f"window close time is only defined for windowed computations, got "
                f"{table.node}"
            )
        grace = table.window_grace_ms
    store = f"{suppressed.name}-store" if suppressed.name else names.new_store_name(KTABLE_SUPPRESS)
    config = suppressed.buffer_config
    graph.add_processor(
        ProcessorSpec(
            name=name,
            supplier=lambda: SuppressProcessor(name, store, suppressed, grace),
            parents=(table.node,),
        )
    )
    factory = KeyValueStoreFactory(
        name=store,
        key_serde=table.key_serde,
        value_serde=BufferValueSerde(table.value_serde),
        supplier=Stores.in_memory_key_value_store(store),
        caching_enabled=False,
        logging_enabled=config.logging_enabled,
        logging_config=config.logging_config,
        timestamped=False,
    )
    graph.add_store(factory, name)
    if suppressed.name is None:
        graph.note_generated(name, store)
    params = TableParams()
    result: KTable[Any, Any] = KTable(builder, name, table.key_serde, table.value_serde, params)
    result.window_grace_ms = table.window_grace_ms

    def enable() -> None:
        params.send_old_values = True
        table.enable_send_old_values()

    result._enable_old = enable
    return result
