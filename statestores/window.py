"""The window store: values per key and window start, kept for the retention period.

Entry keys are ``[segment 8][serialised key][window start 8][sequence 4]`` in one sorted
bytes space (see :mod:`statestores.segments`), so a fetch of one key over a time range is
one range read per live segment. Without duplicates the sequence is always 0 (a put
replaces); with ``retain_duplicates`` (stream-stream joins) every put gets the next
sequence number, as Kafka's ``seqnum``, so all of them are kept in insertion order. The
counter restarts after the largest sequence of the newest segment when a store is opened.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar, cast

from common.serdes import Serde, deserialize_many, serialize_many
from statestores.api import Window, Windowed
from statestores.bytes_layer import BytesKeyValue
from statestores.caching import CachingBytesStore
from statestores.metered import BatchListener, FlushListener, MeteredStore
from statestores.segments import (
    META_END,
    NO_TIME,
    SegmentedBytesStore,
    decode_time,
    encode_time,
    read_meta,
    write_meta,
)

K = TypeVar("K")
V = TypeVar("V")

_SUFFIX = 12  # window start (8) + sequence (4)
_ZERO_SEQ = b"\x00\x00\x00\x00"
_MAX_SEQ = b"\xff\xff\xff\xff"


class MeteredWindowStore(MeteredStore, Generic[K, V]):
    """A typed :class:`~statestores.api.WindowStore` over a bytes stack.

    As Kafka's ``MeteredWindowStore``: serdes and counters only. Expiry is the business of
    the :class:`~statestores.segments.SegmentedBytesStore` at the bottom of the stack, below
    the cache: a read merges the cache, which may still hold a window the store below
    expired, over the live windows below.

    Args:
        wrapped: the bytes stack.
        segmented: the segments at its bottom.
        key_serde: serde of the record keys.
        value_serde: serde of the values.
        window_size_ms: the size of the windows (end = start + size).
        retain_duplicates: keep every put of the same key and window start.
    """

    def __init__(
        self,
        wrapped: BytesKeyValue,
        segmented: SegmentedBytesStore,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        window_size_ms: int,
        retain_duplicates: bool = False,
    ) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self._segmented = segmented
        self._segments = segmented.segments
        self._cache = wrapped if isinstance(wrapped, CachingBytesStore) else None
        self._retention = segmented.segments.retention
        self._size = window_size_ms
        self._dups = retain_duplicates
        self._seq = 0
        #: The largest window start put here (Kafka's ``CachingWindowStore``
        #: ``maxObservedTimestamp``): the cache may hold windows up to it.
        self._top = NO_TIME

    @property
    def window_size(self) -> int:
        """The window size in ms."""
        return self._size

    @property
    def retention_period(self) -> int:
        """The retention period in ms."""
        return self._retention

    @property
    def stream_time(self) -> int:
        """The largest window start written below the cache (``NO_TIME``: none yet): the
        stream time the store's expiry follows."""
        return self._segmented.stream_time

    def read_floor(self, stream_time: int) -> int:
        """The oldest window start a read returns from below the cache once the store's
        stream time is ``stream_time`` (``NO_TIME``: any)."""
        if stream_time == NO_TIME:
            return NO_TIME
        slack = 0 if self._segmented.expiry.from_retention else 1
        return stream_time - self._retention + slack

    def segment_of(self, window_start: int) -> int:
        """The segment holding the windows starting at ``window_start`` (a range read
        looks at the expiry once per segment)."""
        return self._segments.segment_of(window_start)

    def cached_bytes(self) -> int | None:
        """The bytes the store's cache holds (None: no cache)."""
        return None if self._cache is None else self._cache.cached_bytes()

    def _bind(self) -> None:
        self.on_restored()

    def on_restored(self) -> None:
        """Recompute stream time and the sequence counter from the stored entries."""
        self._seq = self._segmented.recover()
        self._top = NO_TIME

    def abort(self) -> None:
        """Discard uncommitted writes; stream time goes back to what is stored."""
        super().abort()
        self.on_restored()

    def _key(self, key: K) -> bytes:
        raw: bytes = self.key_serde.serialize(self.topic, key)
        return raw

    def put(self, key: K, value: V | None, window_start: int) -> None:
        """Store ``value`` for ``key`` in the window starting at ``window_start``; ``None``
        deletes (ignored with ``retain_duplicates``). The store below drops a put to an
        expired window; a cache above it keeps it."""
        self.metrics["put"] += 1
        if value is None and self._dups:
            return
        self._top = max(self._top, window_start)
        if self._dups:
            self._seq = (self._seq + 1) & 0xFFFFFFFF
            seq = self._seq.to_bytes(4, "big")
        else:
            seq = _ZERO_SEQ
        entry = self._entry(self._key(key), window_start, seq)
        raw = None if value is None else self.value_serde.serialize(self.topic, value)
        self.wrapped.put(entry, raw)

    def fetch_value(self, key: K, window_start: int) -> V | None:
        """Return the value of ``key`` in the window starting at ``window_start``."""
        self.metrics["get"] += 1
        if self._dups:
            return next((v for _, v in self.fetch(key, window_start, window_start)), None)
        raw = self.wrapped.get(self._entry(self._key(key), window_start))
        return None if raw is None else self.value_serde.deserialize(self.topic, raw)

    def fetch_values(self, keys: list[K], window_starts: list[int]) -> list[V | None]:
        """Each key's value in the window starting at ``window_starts[i]``, as
        :meth:`fetch_value` one by one, read from below at once."""
        if self._dups:
            return [self.fetch_value(k, s) for k, s in zip(keys, window_starts, strict=True)]
        self.metrics["get"] += len(keys)
        if not keys:
            return []
        raws = self.wrapped.get_many(self._entries(keys, window_starts))
        return deserialize_many(self.value_serde, self.topic, raws)

    def put_many(
        self,
        keys: list[K],
        values: list[V | None],
        window_starts: list[int],
        timestamps: list[int],
    ) -> None:
        """Write each key's value in its window, in order, as :meth:`put` one by one with
        the record timestamp ``timestamps[i]`` (the store below drops what is expired by
        then, as one put after another)."""
        if self._dups:
            for key, value, start in zip(keys, values, window_starts, strict=True):
                self.put(key, value, start)
            return
        self.metrics["put"] += len(keys)
        if not keys:
            return
        self._top = max(self._top, *window_starts)
        topic, vser = self.topic, self.value_serde.serialize
        self.wrapped.put_many(
            self._entries(keys, window_starts),
            [None if value is None else vser(topic, value) for value in values],
            timestamps,
        )

    def _segment_ids(self, time_from: int, time_to: int, reverse: bool) -> list[int]:
        """The segments that may hold windows starting in ``[time_from, time_to]``: the
        live ones below, and older ones the cache still holds entries of."""
        segmented, segments = self._segmented, self._segments
        below = segmented.stream_time
        top = max(self._top, below)
        if top == NO_TIME or time_to < time_from:
            return []
        high = segments.segment_of(min(time_to, top))
        if below == NO_TIME:  # nothing below yet: only what the cache holds
            low = high + 1
        else:
            low = segments.segment_of(max(time_from, segmented.min_read_time()))
        ids = list(range(low, high + 1))
        cache = self._cache
        older = segments.segment_of(time_from)
        if cache is not None and older < low:
            bound, found = segments.prefix(min(low, high + 1)), []
            while True:
                first = cache.first_key(segments.prefix(older), bound)
                if first is None or first < META_END:
                    break
                older = decode_time(first, 0)
                found.append(older)
                older += 1
            ids = found + ids
        if reverse:
            ids.reverse()
        return ids

    def _entries(self, keys: list[K], window_starts: list[int]) -> list[bytes]:
        """The stored key of each key and window start (no duplicates kept)."""
        raw = serialize_many(self.key_serde, self.topic, keys)
        if None in raw:
            raise TypeError(f"store {self.name}: a key serialized to null")
        entry = self._entry
        return [
            entry(key, start)
            for key, start in zip(cast("list[bytes]", raw), window_starts, strict=True)
        ]

    def _entry(self, raw_key: bytes, window_start: int, seq: bytes = _ZERO_SEQ) -> bytes:
        """The stored key: segment, key bytes, window start, sequence."""
        segments = self._segments
        return b"".join(
            (
                segments.prefix(segments.segment_of(window_start)),
                raw_key,
                encode_time(window_start),
                seq,
            )
        )

    def _fetch(
        self, key: K, time_from: int, time_to: int, reverse: bool
    ) -> Iterator[tuple[int, V]]:
        self.metrics["range"] += 1
        raw_key = self._key(key)
        size = 8 + len(raw_key) + _SUFFIX
        segments, topic, vde = self._segments, self.topic, self.value_serde.deserialize
        lo_time, hi_time = encode_time(time_from), encode_time(time_to)
        for segment in self._segment_ids(time_from, time_to, reverse):
            prefix = segments.prefix(segment) + raw_key
            items = self.wrapped.items(
                prefix + lo_time + _ZERO_SEQ, prefix + hi_time + _MAX_SEQ, reverse=reverse
            )
            for entry, value in items:
                if len(entry) == size:
                    yield decode_time(entry, size - _SUFFIX), vde(topic, value)

    def fetch(self, key: K, time_from: int, time_to: int) -> Iterator[tuple[int, V]]:
        """``(window_start, value)`` of ``key`` with ``time_from <= start <= time_to``."""
        return self._fetch(key, time_from, time_to, False)

    def backward_fetch(self, key: K, time_from: int, time_to: int) -> Iterator[tuple[int, V]]:
        """As :meth:`fetch`, newest first."""
        return self._fetch(key, time_from, time_to, True)

    def _scan(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        time_from: int,
        time_to: int,
        reverse: bool = False,
    ) -> Iterator[tuple[Windowed[K], V]]:
        self.metrics["range"] += 1
        segments, topic = self._segments, self.topic
        kde, vde = self.key_serde.deserialize, self.value_serde.deserialize
        for segment in self._segment_ids(time_from, time_to, reverse):
            prefix = segments.prefix(segment)
            hi = segments.prefix(segment + 1)
            for entry, value in self.wrapped.items(prefix, hi, reverse=reverse):
                if entry == hi:
                    continue
                raw_key = entry[8:-_SUFFIX]
                if (key_from is not None and raw_key < key_from) or (
                    key_to is not None and raw_key > key_to
                ):
                    continue
                start = decode_time(entry, len(entry) - _SUFFIX)
                if time_from <= start <= time_to:
                    window = Window(start, start + self._size)
                    yield Windowed(kde(topic, raw_key), window), vde(topic, value)

    def fetch_range(
        self, key_from: K | None, key_to: K | None, time_from: int, time_to: int
    ) -> Iterator[tuple[Windowed[K], V]]:
        """Windows of keys ``key_from <= key <= key_to`` starting in ``[time_from, time_to]``,
        segment by segment, by key within a segment."""
        lo = None if key_from is None else self._key(key_from)
        hi = None if key_to is None else self._key(key_to)
        return self._scan(lo, hi, time_from, time_to)

    def fetch_closed(
        self,
        time_from: int,
        time_to: int,
        pending: Mapping[tuple[K, int], V] | None = None,
    ) -> list[tuple[Windowed[K], V]]:
        """Every window starting in ``[time_from, time_to]``, by start then key bytes (the
        order of Kafka's time-ordered window store, which emit-on-close range-scans).

        ``pending``: values by ``(key, window start)`` not written yet (a batch's), read
        over the stored ones. What is kept is what :meth:`fetch_all` returns: the windows
        the cache holds and the live ones below (Kafka's emit-on-close store is the
        time-ordered one, which keeps a window from ``stream time - retention`` on).
        """
        self.metrics["range"] += 1
        segments, topic, size = self._segments, self.topic, self._size
        found: dict[tuple[int, bytes], tuple[Any, Any]] = {}
        for segment in self._segment_ids(time_from, time_to, False):
            prefix, hi = segments.prefix(segment), segments.prefix(segment + 1)
            for entry, value in self.wrapped.items(prefix, hi):
                start = decode_time(entry, len(entry) - _SUFFIX)
                if entry != hi and time_from <= start <= time_to:
                    found[(start, entry[8:-_SUFFIX])] = (None, value)
        stored = sorted(found)
        keys = deserialize_many(self.key_serde, topic, [raw for _, raw in stored])
        values = deserialize_many(self.value_serde, topic, [found[s][1] for s in stored])
        for slot, key, typed in zip(stored, keys, values, strict=True):
            found[slot] = (key, typed)
        picked = [(k, s) for k, s in (pending or ()) if time_from <= s <= time_to]
        if picked:
            raws = self._entries([k for k, _ in picked], [s for _, s in picked])
            for (key, start), entry in zip(picked, raws, strict=True):
                found[(start, entry[8:-_SUFFIX])] = (key, pending[(key, start)])  # type: ignore[index]
        return [
            (Windowed(key, Window(start, start + size)), value)
            for (start, _), (key, value) in sorted(found.items(), key=lambda item: item[0])
        ]

    def read_meta(self, name: str) -> int | None:
        """Return the int metadata entry ``name`` kept with the windows (see
        :mod:`statestores.segments`), or None."""
        return read_meta(self.wrapped, name)

    def write_meta(self, name: str, value: int) -> None:
        """Write the int metadata entry ``name``, logged and committed with the windows."""
        write_meta(self.wrapped, name, value)

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Windowed[K], V]]:
        """Every window starting in ``[time_from, time_to]``."""
        return self._scan(None, None, time_from, time_to)

    def all(self) -> Iterator[tuple[Windowed[K], V]]:
        """Every live window."""
        return self._scan(None, None, -(1 << 62), 1 << 62)

    def backward_all(self) -> Iterator[tuple[Windowed[K], V]]:
        """Every live window, in reverse."""
        return self._scan(None, None, -(1 << 62), 1 << 62, reverse=True)

    def _typed_batch_listener(self, listener: BatchListener) -> Any:
        topic, size = self.topic, self._size
        key_serde, value_serde = self.key_serde, self.value_serde

        def forward(
            entries: list[bytes], news: list[Any], olds: list[Any], timestamps: list[int]
        ) -> None:
            starts = [decode_time(entry, len(entry) - _SUFFIX) for entry in entries]
            keys = deserialize_many(key_serde, topic, [entry[8:-_SUFFIX] for entry in entries])
            listener(
                [
                    Windowed(key, Window(start, start + size))
                    for key, start in zip(keys, starts, strict=True)
                ],
                deserialize_many(value_serde, topic, news),
                deserialize_many(value_serde, topic, olds),
                timestamps,
            )

        return forward

    def _typed_listener(self, listener: FlushListener) -> Any:
        topic, size = self.topic, self._size
        kde, vde = self.key_serde.deserialize, self.value_serde.deserialize

        def forward(entry: bytes, new: bytes | None, old: bytes | None, timestamp: int) -> None:
            start = decode_time(entry, len(entry) - _SUFFIX)
            key = Windowed(kde(topic, entry[8:-_SUFFIX]), Window(start, start + size))
            listener(key, vde(topic, new), vde(topic, old), timestamp)

        return forward
