"""Stream-stream windowed joins (Kafka's ``KStreamImplJoin`` and ``KStreamKStreamJoin``,
with the KIP-633 fix of spurious left/outer results).

The graph of ``left.join(right, ...)``::

    left  -> KSTREAM-WINDOWED-a (puts into this-join-store)  -> KSTREAM-JOINTHIS-c  \\
                                                                                    KSTREAM-MERGE-e
    right -> KSTREAM-WINDOWED-b (puts into other-join-store) -> KSTREAM-JOINOTHER-d /

Each side buffers its records in a window store that keeps duplicates; a record joins the
other side's records in ``[t - before, t + after]`` (bounds swapped for the right side) and
each match is emitted at once with timestamp ``max(t, t_other)``. A left/outer record that
found no match is *not* emitted at once: it waits in the shared outer store (keyed by
``(timestamp, side, key)``, Kafka's ``TimestampedKeyAndJoinSide`` → ``LeftOrRightValue``)
and is emitted with a null partner only when the shared stream time (max over both sides)
passes ``t + after + grace`` (``t + before + grace`` for a right record) without a match;
a later match removes it. Unlike Kafka, emission is not throttled by wall-clock time
(Kafka's internal ``emit.interval``), so results depend only on the input.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.config import StreamsConfig
from common.errors import SerializationError
from common.serdes import Serde
from statestores.api import StoreBuilder
from statestores.stores import Stores
from topology.api.processor import Processor
from topology.api.record import Record
from topology.engine.columnar import Batch
from topology.graph.stores import resolve_serde
from topology.processors.joins import KeyedJoiner, call_joiner

_new = tuple.__new__
_TS = struct.Struct(">q")
_LEN = struct.Struct(">i")
_NO_TIME = -1
_MAX_TIME = (1 << 63) - 1
#: Where a join's results go: ``(key, joined, timestamp)``.
_Out = Callable[[Any, Any, int], None]


def _store_supplier(config: StreamsConfig, supplier: Any, make: str, *args: Any) -> Any:
    if supplier is not None:
        return supplier
    kind = "in_memory" if config.default_dsl_store == "in_memory" else "persistent"
    return getattr(Stores, f"{kind}_{make}")(*args)


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinWindowStoreFactory:
    """One side's buffer: a window store with duplicates, retention ``size + grace``, its
    changelog ``cleanup.policy=delete`` (duplicates must not be compacted away)."""

    name: str
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    retention_ms: int
    window_size_ms: int
    supplier: Any = None
    logging_enabled: bool = True
    logging_config: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """Always ``window``."""
        return "window"

    def builder(self, config: StreamsConfig) -> StoreBuilder:
        """Build through :class:`statestores.stores.Stores` (``default.dsl.store``)."""
        supplier = _store_supplier(
            config,
            self.supplier,
            "window_store",
            self.name,
            self.retention_ms,
            self.window_size_ms,
            True,
        )
        builder: Any = Stores.window_store_builder(
            supplier,
            resolve_serde(self.key_serde, config.default_key_serde),
            resolve_serde(self.value_serde, config.default_value_serde),
        )
        if not self.logging_enabled:
            return builder.with_logging_disabled()  # type: ignore[no-any-return]
        config_ = {**self.logging_config, "cleanup.policy": "delete"}
        return builder.with_logging_enabled(config_)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True, kw_only=True)
class OuterJoinStoreFactory:
    """The shared store of a left/outer join: non-joined records waiting for their window
    to close, ordered by timestamp (a key-value store, no cache)."""

    name: str
    key_serde: Serde[Any] | None
    left_serde: Serde[Any] | None
    right_serde: Serde[Any] | None
    persistent: bool | None = None
    logging_enabled: bool = True
    logging_config: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """Always ``key_value``."""
        return "key_value"

    def builder(self, config: StreamsConfig) -> StoreBuilder:
        """Build an uncached key-value store with the join-side serdes."""
        persistent = self.persistent
        if persistent is None:
            persistent = config.default_dsl_store != "in_memory"
        supplier = (
            Stores.persistent_key_value_store(self.name)
            if persistent
            else Stores.in_memory_key_value_store(self.name)
        )
        key = resolve_serde(self.key_serde, config.default_key_serde)
        left = resolve_serde(self.left_serde, config.default_value_serde)
        right = resolve_serde(self.right_serde, config.default_value_serde)
        builder: Any = Stores.key_value_store_builder(
            supplier, TimestampedKeyAndJoinSideSerde(key), LeftOrRightListSerde(left, right)
        ).with_caching_disabled()
        if not self.logging_enabled:
            return builder.with_logging_disabled()  # type: ignore[no-any-return]
        return builder.with_logging_enabled(dict(self.logging_config))  # type: ignore[no-any-return]


class TimestampedKeyAndJoinSideSerde:
    """``(timestamp, is_left, key)`` as Kafka writes it: 8-byte timestamp, a side byte
    (1: left), the key's bytes; byte order is timestamp order, then right before left."""

    __slots__ = ("inner",)

    def __init__(self, inner: Serde[Any]) -> None:
        self.inner = inner

    def serialize(self, topic: str, data: tuple[int, bool, Any] | None) -> bytes | None:
        """Return the key bytes."""
        if data is None:
            return None
        raw = self.inner.serialize(topic, data[2]) or b""
        return _TS.pack(data[0]) + (b"\x01" if data[1] else b"\x00") + raw

    def deserialize(self, topic: str, data: bytes | None) -> tuple[int, bool, Any] | None:
        """Return ``(timestamp, is_left, key)``."""
        if data is None:
            return None
        if len(data) < 9:
            raise SerializationError(f"join-side key needs at least 9 bytes, got {len(data)}")
        return _TS.unpack_from(data)[0], data[8] == 1, self.inner.deserialize(topic, data[9:])


class LeftOrRightListSerde:
    """A list of ``(is_left, value)``: per entry a side byte, a 4-byte length and the value
    bytes (the left or right value serde) — Kafka's list of ``LeftOrRightValue``."""

    __slots__ = ("left", "right")

    def __init__(self, left: Serde[Any], right: Serde[Any]) -> None:
        self.left = left
        self.right = right

    def serialize(self, topic: str, data: list[tuple[bool, Any]] | None) -> bytes | None:
        """Return the list's bytes."""
        if data is None:
            return None
        out = bytearray()
        for is_left, value in data:
            raw = (self.left if is_left else self.right).serialize(topic, value) or b""
            out += (b"\x01" if is_left else b"\x00") + _LEN.pack(len(raw)) + raw
        return bytes(out)

    def deserialize(self, topic: str, data: bytes | None) -> list[tuple[bool, Any]] | None:
        """Return the list."""
        if data is None:
            return None
        out, pos = [], 0
        while pos < len(data):
            is_left, size = data[pos] == 1, _LEN.unpack_from(data, pos + 1)[0]
            raw = data[pos + 5 : pos + 5 + size]
            out.append((is_left, (self.left if is_left else self.right).deserialize(topic, raw)))
            pos += 5 + size
        return out


class _Alone:
    """A record of its own (its key is unhashable): hashed by identity."""

    __slots__ = ("row",)

    def __init__(self, row: int) -> None:
        self.row = row


class TimeTracker:
    """Stream time seen by both sides of one join in one task, and the oldest timestamp
    that may wait in the outer store (Kafka's ``TimeTracker``)."""

    __slots__ = ("min_time", "stream_time")

    def __init__(self) -> None:
        self.stream_time = _NO_TIME
        self.min_time = _MAX_TIME


class TimeTrackers:
    """One :class:`TimeTracker` per task, shared by a join's two processors."""

    def __init__(self) -> None:
        self._by_task: dict[str, TimeTracker] = {}

    def get(self, task_id: str) -> TimeTracker:
        """Return the task's tracker (created on first use)."""
        return self._by_task.setdefault(task_id, TimeTracker())

    def remove(self, task_id: str) -> None:
        """Forget the task's tracker (its processors closed)."""
        self._by_task.pop(task_id, None)


class JoinWindowProcessor(Processor[Any, Any, Any, Any]):
    """Forward each record to the join processor, then buffer it (non-null key) in this
    side's window store (Kafka's ``KStreamJoinWindow``)."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: Any) -> None:
        """Open the window store."""
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record[Any, Any]) -> None:
        """Forward, then store."""
        self.context.forward(record)
        if record[0] is not None:
            self.store.put(record[0], record[1], record[2])

    def process_batch(self, batch: Batch) -> None:
        """Forward the batch, then store its records in order (the join below reads only
        the other side's store, so each record still meets that side as it stands)."""
        context: Any = self.context
        context.forward_batch(batch)
        put, set_timestamp = self.store.put, context.set_timestamp
        for key, value, ts in zip(batch.keys, batch.values, batch.timestamps, strict=True):
            if key is not None:
                set_timestamp(ts)
                put(key, value, ts)


@dataclass(frozen=True, slots=True, kw_only=True)
class SideSpec:
    """How one side of a stream-stream join looks up the other."""

    name: str
    is_left: bool
    outer: bool
    other_store: str
    outer_store: str | None
    join_before_ms: int  # this side's bounds: the other side's are swapped
    join_after_ms: int
    windows_before_ms: int
    windows_after_ms: int
    grace_ms: int


class StreamStreamJoinProcessor(Processor[Any, Any, Any, Any]):
    """One side of a stream-stream join (Kafka's ``KStreamKStreamJoin{Left,Right}Side``).

    A batch of this side's records is joined as :meth:`process` joins them one by one:
    the other side's store (which this side's records do not change) read once per
    distinct key over the batch's time range, the shared outer store read and written
    record by record, the results forwarded in order as one batch.

    Args:
        spec: the side's settings.
        joiner: the user's ``(key, left, right)`` joiner.
        fn: the user's function (named in errors).
        trackers: the join's shared time trackers.
    """

    def __init__(
        self, spec: SideSpec, joiner: KeyedJoiner, fn: Any, trackers: TimeTrackers
    ) -> None:
        self.spec = spec
        self.joiner = joiner
        self.fn = fn
        self.trackers = trackers
        self.dropped = 0

    def init(self, context: Any) -> None:
        """Open the other side's window store and the shared outer store."""
        self.context = context
        self.other = context.get_state_store(self.spec.other_store)
        self.shared: Any = None
        if self.spec.outer_store is not None:
            self.shared = context.get_state_store(self.spec.outer_store)
        self.tracker = self.trackers.get(context.task_id)

    def close(self) -> None:
        """Drop the task's shared tracker."""
        self.trackers.remove(self.context.task_id)

    def _join(self, key: Any, this: Any, other: Any) -> Any:
        left, right = (this, other) if self.spec.is_left else (other, this)
        return call_joiner(self.spec.name, self.fn, self.joiner, key, left, right)

    def process(self, record: Record[Any, Any]) -> None:
        """Emit closed non-joined records, join ``record``, and park it if unmatched."""
        key, value, ts, headers = record
        forward = self.context.forward

        def out(k: Any, joined: Any, t: int) -> None:
            forward(_new(Record, (k, joined, t, headers)))

        if self._admit(key, value, ts, out):
            spec = self.spec
            partners = self.other.fetch(
                key, max(0, ts - spec.join_before_ms), max(0, ts + spec.join_after_ms)
            )
            self._join_one(key, value, ts, partners, out)

    def _admit(self, key: Any, value: Any, ts: int, out: _Out) -> bool:
        """Advance stream time; pass a null key (outer) or drop a null; emit the closed
        non-joined records when ``ts`` is the stream time. Whether to join the record."""
        spec, tracker = self.spec, self.tracker
        tracker.stream_time = max(tracker.stream_time, ts)
        if spec.outer and key is None and value is not None:  # KIP-962: null keys pass
            out(key, self._join(key, value, None), ts)
            return False
        if key is None or value is None:
            self.dropped += 1
            return False
        if self.shared is not None and ts == tracker.stream_time:
            self._emit_non_joined(out)
        return True

    def _join_one(
        self, key: Any, value: Any, ts: int, partners: Iterable[tuple[int, Any]], out: _Out
    ) -> None:
        """Join a record with its ``partners`` (the other side's records in its window, in
        the store's order), then emit it alone or park it if none matched."""
        spec, tracker, shared = self.spec, self.tracker, self.shared
        matched = False
        for other_ts, other_value in partners:
            matched = True
            if shared is not None:  # the partner is joined now: never emit it alone
                parked = (other_ts, not spec.is_left, key)
                if shared.get(parked) is not None:
                    shared.put(parked, None)
            out(key, self._join(key, value, other_value), max(ts, other_ts))
        if spec.outer and not matched:
            if shared is None or max(0, ts + spec.join_after_ms) < tracker.stream_time:
                out(key, self._join(key, value, None), ts)
            else:
                tracker.min_time = min(tracker.min_time, ts)
                parked = (ts, spec.is_left, key)
                shared.put(parked, [*(shared.get(parked) or ()), (spec.is_left, value)])

    def process_batch(self, batch: Batch) -> None:
        """Join a batch of this side's records (see the class's docstring): the joiner
        called once per match and unmatched record, in the record engine's order."""
        ks, vs, ts = batch.keys, batch.values, batch.timestamps
        index: list[int] = []
        out_keys: list[Any] = []
        joined: list[Any] = []
        stamps: list[int] = []
        row = 0

        def out(k: Any, value: Any, t: int) -> None:
            index.append(row)
            out_keys.append(k)
            joined.append(value)
            stamps.append(t)

        partners = self._partners(ks, vs, ts, range(len(ks)))
        if self.spec.outer or self.shared is not None:
            for row in range(len(ks)):
                key, value, t = ks[row], vs[row], ts[row]
                if self._admit(key, value, t, out):
                    self._join_one(key, value, t, partners[row], out)
        else:  # an inner join: no stream time to follow per record but the batch's
            self.tracker.stream_time = max(self.tracker.stream_time, *ts)
            self.dropped += len(ks) - len(partners)
            for row, found in sorted(partners.items()):
                for other_ts, other_value in found:
                    out(ks[row], self._join(ks[row], vs[row], other_value), max(ts[row], other_ts))
        if index:
            context: Any = self.context
            context.forward_batch(batch.standing_at(index, out_keys, joined, stamps))

    def _partners(
        self, ks: list[Any], vs: list[Any], ts: list[int], rows: Iterable[int]
    ) -> dict[int, list[tuple[int, Any]]]:
        """Each record of ``rows`` with a key and a value: its partners in the other
        side's store, in the store's order (the store read once per distinct key over
        those records' time range; it does not change within the batch)."""
        before, after = self.spec.join_before_ms, self.spec.join_after_ms
        by_key: dict[Any, list[int]] = {}
        valid = [i for i in rows if ks[i] is not None and vs[i] is not None]
        try:
            for i in valid:  # by type too: 1 and True are one dict key, not one stored key
                by_key.setdefault((type(ks[i]), ks[i]), []).append(i)
        except TypeError:  # an unhashable key: a fetch per record
            by_key = {_Alone(i): [i] for i in valid}
        partners: dict[int, list[tuple[int, Any]]] = {}
        fetch = self.other.fetch
        for index in by_key.values():
            key = ks[index[0]]
            lo = max(0, min(ts[i] for i in index) - before)
            found = list(fetch(key, lo, max(0, max(ts[i] for i in index) + after)))
            times = [t for t, _ in found]
            for i in index:
                low = bisect.bisect_left(times, max(0, ts[i] - before))
                high = bisect.bisect_right(times, max(0, ts[i] + after))
                partners[i] = found[low:high]
        return partners

    def _window_open(self, ts: int, is_left: bool) -> bool:
        spec = self.spec
        look_back = spec.windows_after_ms if is_left else spec.windows_before_ms
        return ts + look_back + spec.grace_ms >= self.tracker.stream_time

    def _emit_non_joined(self, out: _Out) -> None:
        """Emit (with a null partner) and delete the parked records whose window closed,
        in timestamp order, as Kafka's ``emitNonJoinedOuterRecords``: the store read from
        its oldest entry on, until an entry of each side is still open."""
        spec, tracker = self.spec, self.tracker
        if tracker.min_time + spec.join_after_ms + spec.grace_ms >= tracker.stream_time:
            return
        tracker.min_time = _MAX_TIME
        open_sides: set[bool] = set()
        emitted = []
        for parked, values in self.shared.all():
            ts, is_left, key = parked
            tracker.min_time = ts
            if len(open_sides) == 2:
                break
            if self._window_open(ts, is_left):
                open_sides.add(is_left)
                continue
            for side, value in values:
                left, right = (value, None) if side else (None, value)
                out(key, call_joiner(spec.name, self.fn, self.joiner, key, left, right), ts)
            emitted.append(parked)
        for parked in emitted:  # once read: the store is not written while it is read
            self.shared.put(parked, None)
