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
from statestores.metered import BatchListener, FlushListener, MeteredStore
from statestores.segments import NO_TIME, Segments, decode_time, encode_time

K = TypeVar("K")
V = TypeVar("V")

_SUFFIX = 12  # window start (8) + sequence (4)
_ZERO_SEQ = b"\x00\x00\x00\x00"
_MAX_SEQ = b"\xff\xff\xff\xff"


class MeteredWindowStore(MeteredStore, Generic[K, V]):
    """A typed :class:`~statestores.api.WindowStore` over a bytes stack.

    Args:
        wrapped: the bytes stack.
        key_serde: serde of the record keys.
        value_serde: serde of the values.
        retention_ms: how long windows are kept, in stream time.
        window_size_ms: the size of the windows (end = start + size).
        retain_duplicates: keep every put of the same key and window start.
    """

    def __init__(
        self,
        wrapped: BytesKeyValue,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        retention_ms: int,
        window_size_ms: int,
        retain_duplicates: bool = False,
    ) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self._retention = retention_ms
        self._size = window_size_ms
        self._dups = retain_duplicates
        self._segments = Segments(wrapped, retention_ms)
        self._seq = 0

    @property
    def window_size(self) -> int:
        """The window size in ms."""
        return self._size

    @property
    def retention_period(self) -> int:
        """The retention period in ms."""
        return self._retention

    def _bind(self) -> None:
        self.on_restored()

    def on_restored(self) -> None:
        """Recompute stream time and the sequence counter from the stored entries."""
        self._seq = self._segments.recover(_SUFFIX)

    def abort(self) -> None:
        """Discard uncommitted writes; stream time goes back to what is stored."""
        super().abort()
        self.on_restored()

    def _key(self, key: K) -> bytes:
        raw: bytes = self.key_serde.serialize(self.topic, key)
        return raw

    def put(self, key: K, value: V | None, window_start: int) -> None:
        """Store ``value`` for ``key`` in the window starting at ``window_start``; ``None``
        deletes (ignored with ``retain_duplicates``). Expired windows are dropped."""
        self.metrics["put"] += 1
        segments = self._segments
        segments.observe(window_start)
        if segments.expired(window_start) or (value is None and self._dups):
            return
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
        if self._segments.expired(window_start):
            return None
        raw = self.wrapped.get(self._entry(self._key(key), window_start))
        return None if raw is None else self.value_serde.deserialize(self.topic, raw)

    def fetch_values(self, keys: list[K], window_starts: list[int]) -> list[V | None]:
        """Each key's value in the window starting at ``window_starts[i]``, as
        :meth:`fetch_value` one by one, read from below at once."""
        if self._dups:
            return [self.fetch_value(k, s) for k, s in zip(keys, window_starts, strict=True)]
        self.metrics["get"] += len(keys)
        expired = self._segments.expired
        live = [i for i, start in enumerate(window_starts) if not expired(start)]
        out: list[V | None] = [None] * len(keys)
        if not live:
            return out
        raws = self.wrapped.get_many(
            self._entries([keys[i] for i in live], [window_starts[i] for i in live])
        )
        values = deserialize_many(self.value_serde, self.topic, raws)
        for i, value in zip(live, values, strict=True):
            out[i] = value
        return out

    def put_many(
        self,
        keys: list[K],
        values: list[V | None],
        window_starts: list[int],
        timestamps: list[int],
    ) -> None:
        """Write each key's value in its window, in order, as :meth:`put` one by one with
        the record timestamp ``timestamps[i]``: an entry whose window start is expired by
        then (stream time being the largest start observed before it) is not written, and
        segments out of retention are dropped after the writes, as the one-by-one puts
        would have dropped them (an entry written before a drop is dropped with it)."""
        if self._dups:
            for key, value, start in zip(keys, values, window_starts, strict=True):
                self.put(key, value, start)
            return
        self.metrics["put"] += len(keys)
        segments = self._segments
        retention, stream = self._retention, segments.stream_time
        kept: list[int] = []
        for i, start in enumerate(window_starts):
            stream = max(stream, start)
            if start >= stream - retention + 1:
                kept.append(i)
        if kept:
            topic, vser = self.topic, self.value_serde.serialize
            self.wrapped.put_many(
                self._entries([keys[i] for i in kept], [window_starts[i] for i in kept]),
                [None if values[i] is None else vser(topic, values[i]) for i in kept],
                [timestamps[i] for i in kept],
            )
        if window_starts:
            segments.observe(max(window_starts))

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
        low = max(time_from, segments.min_live_time())
        lo_time, hi_time = encode_time(low), encode_time(time_to)
        for segment in segments.live_segments(time_from, time_to, reverse=reverse):
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
        low = max(time_from, segments.min_live_time())
        for segment in segments.live_segments(time_from, time_to, reverse=reverse):
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
                if low <= start <= time_to:
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
        over the stored ones. As Kafka's time-first key schema, a stored window is kept one
        ms longer than :meth:`fetch_all` keeps it: from ``stream time - retention`` on.
        """
        self.metrics["range"] += 1
        segments, topic, size = self._segments, self.topic, self._size
        found: dict[tuple[int, bytes], tuple[Any, Any]] = {}
        if segments.stream_time != NO_TIME:
            low = max(time_from, segments.stream_time - self._retention)
            high = min(time_to, segments.stream_time)
            for segment in range(segments.segment_of(low), segments.segment_of(high) + 1):
                prefix, hi = segments.prefix(segment), segments.prefix(segment + 1)
                for entry, value in self.wrapped.items(prefix, hi):
                    start = decode_time(entry, len(entry) - _SUFFIX)
                    if entry != hi and low <= start <= high:
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
        return self._segments.read_meta(name)

    def write_meta(self, name: str, value: int) -> None:
        """Write the int metadata entry ``name``, logged and committed with the windows."""
        self._segments.write_meta(name, value)

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
