"""Time segments of window and session stores, laid over one sorted bytes key space.

Kafka's segmented stores keep one RocksDB per time segment and drop whole segments once
they fall out of retention. Here every entry key starts with its 8-byte segment id, so a
segment is a key range, and dropping it is one range delete (unlogged, applied at the next
commit). Segment interval: ``max(retention / 2, 60 000 ms)`` as Kafka's.

Stream time is the largest timestamp (window start, or session end) this store has seen;
entries older than ``stream time - retention + 1`` are expired: not returned. As Kafka's
``AbstractSegments.getOrCreateSegmentIfLive`` / ``cleanupExpiredSegments``, the segments
below ``segmentId(stream time - retention)`` are dropped.

A window store keeps its segments in :class:`SegmentedBytesStore`, the bottom layer of its
stack, below the cache and the changelog, where Kafka's segmented stores sit: a window the
cache still holds is read and forwarded from there after the store below expired it. Its
:class:`Expiry` is that of one of Kafka's three window stores.

A few *metadata* entries (a processor's bookkeeping kept with the data, such as the last
window close a node emitted: Kafka keeps it in the commit's processor metadata) live below
every segment, under the 8-byte prefix of no segment (:data:`META_PREFIX`): written through
the same layers as the data, they are logged, cached and committed with it, and no segment
drop or scan reaches them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from statestores.bytes_layer import BytesKeyValue, WrappingBytesStore

_U64 = struct.Struct(">Q")
_SIGN = 1 << 63
MIN_SEGMENT_INTERVAL = 60_000
NO_TIME = -(1 << 62)
#: The prefix of metadata entries: the segment id -2**63, which no timestamp reaches.
META_PREFIX = b"\x00" * 8
#: Every metadata key sorts below it (and every segment's key above it).
META_END = b"\x00" * 7 + b"\x01"


def encode_time(timestamp: int) -> bytes:
    """Return 8 bytes that sort like ``timestamp`` (signed), unsigned byte order."""
    return _U64.pack(timestamp + _SIGN)


def decode_time(data: bytes, offset: int) -> int:
    """Return the timestamp encoded at ``data[offset:offset + 8]``."""
    return int(_U64.unpack_from(data, offset)[0]) - _SIGN


class Segments:
    """Segment arithmetic, stream time and expiry over a bytes store.

    Args:
        store: the bytes stack the entries live in.
        retention_ms: how long entries are kept, in stream time.
    """

    def __init__(self, store: BytesKeyValue, retention_ms: int) -> None:
        self.store = store
        self.retention = retention_ms
        self.interval = max(retention_ms // 2, MIN_SEGMENT_INTERVAL)
        self.stream_time = NO_TIME
        self._min_segment: int | None = None  # the oldest segment that may hold entries

    def segment_of(self, timestamp: int) -> int:
        """Return the segment id holding ``timestamp``."""
        return timestamp // self.interval

    def prefix(self, segment: int) -> bytes:
        """Return the 8-byte key prefix of ``segment``."""
        return encode_time(segment)

    def min_live_time(self) -> int:
        """Return the oldest timestamp not yet expired."""
        if self.stream_time == NO_TIME:
            return NO_TIME
        return self.stream_time - self.retention + 1

    def expired(self, timestamp: int) -> bool:
        """Return whether an entry at ``timestamp`` is out of retention."""
        return timestamp < self.min_live_time()

    def observe(self, timestamp: int) -> None:
        """Advance stream time to ``timestamp``; drop segments that fell out of retention."""
        if timestamp <= self.stream_time:
            return
        self.stream_time = timestamp
        # Kafka's cleanupExpiredSegments: the segments below segmentId(stream - retention)
        live = self.segment_of(timestamp - self.retention)
        first = self._first_segment() if self._min_segment is None else self._min_segment
        if first is not None and first < live:
            self.store.delete_range(self.prefix(first), self.prefix(live))
            first = live
        self._min_segment = first

    def wrote(self, segment: int) -> None:
        """Note an entry written into ``segment`` (it may be below the oldest known)."""
        if self._min_segment is not None and segment < self._min_segment:
            self._min_segment = segment

    def live_segments(self, time_from: int, time_to: int, *, reverse: bool = False) -> range:
        """Return the ids of the segments that may hold live entries in
        ``[time_from, time_to]``."""
        if self.stream_time == NO_TIME:
            return range(0)
        low = self.segment_of(max(time_from, self.min_live_time()))
        high = self.segment_of(min(time_to, self.stream_time))
        if reverse:
            return range(high, low - 1, -1)
        return range(low, high + 1)

    def recover(self, time_offset: int) -> int:
        """Recompute stream time from the stored entries (after open, restore or abort).

        Args:
            time_offset: where the timestamp sits in a key, counted from the key's end
                (the timestamp is at ``len(key) - time_offset``).

        Returns:
            The largest sequence suffix seen in the newest segment (window duplicates).
        """
        self.stream_time = NO_TIME
        self._min_segment = None
        last = next(iter(self.store.items(META_END, None, reverse=True)), None)
        if last is None or last[0] < META_END:
            return 0
        segment = decode_time(last[0], 0)
        newest, seq = NO_TIME, 0
        for key, _ in self._segment_items(segment):
            newest = max(newest, decode_time(key, len(key) - time_offset))
            if time_offset == 12:  # window keys end with a 4-byte sequence number
                seq = max(seq, int.from_bytes(key[-4:], "big"))
        self.stream_time = newest
        return seq

    def _segment_items(self, segment: int) -> Iterator[tuple[bytes, bytes]]:
        lo = self.prefix(segment)
        hi = self.prefix(segment + 1)
        for key, value in self.store.items(lo, hi):
            if key >= hi:
                break
            yield key, value

    def _first_segment(self) -> int | None:
        first = next(iter(self.store.items(META_END, None)), None)
        return None if first is None else decode_time(first[0], 0)

    def read_meta(self, name: str) -> int | None:
        """Return the metadata entry ``name`` (an int), or None if it was never written."""
        return read_meta(self.store, name)

    def write_meta(self, name: str, value: int) -> None:
        """Write the metadata entry ``name`` through the store's layers (so it is logged
        and committed with the data written beside it)."""
        write_meta(self.store, name, value)


def read_meta(store: BytesKeyValue, name: str) -> int | None:
    """Return the metadata entry ``name`` (an int) of ``store``, or None."""
    raw = store.get(META_PREFIX + name.encode())
    return None if raw is None else int.from_bytes(raw, "big", signed=True)


def write_meta(store: BytesKeyValue, name: str, value: int) -> None:
    """Write the metadata entry ``name`` of ``store`` through its layers (below a cache at
    once: no flush listener sees it)."""
    put = getattr(store, "put_through", store.put)
    put(META_PREFIX + name.encode(), value.to_bytes(8, "big", signed=True))


@dataclass(frozen=True, slots=True)
class Expiry:
    """When one of Kafka's window stores drops a write and hides a window.

    Attributes:
        segment_puts: a put is dropped only when its whole segment is out of retention
            (RocksDB stores: ``getOrCreateSegmentIfLive``); else when its window start is
            (``InMemoryWindowStore``: ``start <= stream time - retention``).
        from_retention: reads keep windows from ``stream time - retention`` on (the
            time-ordered store of emit-on-close aggregations, Kafka's time-first key
            schema); else from ``stream time - retention + 1``.
    """

    segment_puts: bool
    from_retention: bool = False


#: Kafka's ``RocksDBWindowStore``.
PERSISTENT = Expiry(segment_puts=True)
#: Kafka's ``RocksDBTimeOrderedWindowStore`` (the emit-on-close aggregations' store).
TIME_ORDERED = Expiry(segment_puts=True, from_retention=True)
#: Kafka's ``InMemoryWindowStore``.
IN_MEMORY = Expiry(segment_puts=False)


class SegmentedBytesStore(WrappingBytesStore):
    """The segments of a window store: the bottom layer, expiring what it keeps.

    Kafka's segmented bytes stores: each put advances the stream time to its window start
    and drops the segments out of retention (unlogged: the changelog above already logged
    the put, as Kafka's ``ChangeLoggingWindowBytesStore`` logs before the store below may
    drop it); a put to an expired window is dropped (see :class:`Expiry`); every read
    (``get``, ranges) hides windows that are expired. Metadata entries pass through.

    Args:
        wrapped: the transactional bytes store.
        retention_ms: how long windows are kept, in stream time.
        expiry: which of Kafka's stores this one behaves as.
        time_offset: where the window start sits, counted from a key's end.
    """

    def __init__(
        self, wrapped: BytesKeyValue, retention_ms: int, expiry: Expiry, time_offset: int = 12
    ) -> None:
        super().__init__(wrapped)
        self.segments = Segments(wrapped, retention_ms)
        self.expiry = expiry
        self._offset = time_offset
        self._slack = 0 if expiry.from_retention else 1

    @property
    def stream_time(self) -> int:
        """The largest window start written here (NO_TIME: none yet)."""
        return self.segments.stream_time

    def min_read_time(self) -> int:
        """The oldest window start a read returns."""
        stream = self.segments.stream_time
        return NO_TIME if stream == NO_TIME else stream - self.segments.retention + self._slack

    def recover(self) -> int:
        """Recompute stream time from the stored entries (see :meth:`Segments.recover`)."""
        return self.segments.recover(self._offset)

    def _time(self, key: bytes) -> int:
        return decode_time(key, len(key) - self._offset)

    def _dropped(self, timestamp: int, stream: int) -> bool:
        """Whether a put at ``timestamp`` is dropped at stream time ``stream`` (a put at
        ``timestamp`` is never dropped while a later one is not, at the same time)."""
        segments = self.segments
        oldest = stream - segments.retention
        if self.expiry.segment_puts:
            return segments.segment_of(timestamp) < segments.segment_of(oldest)
        return timestamp <= oldest

    def put(self, key: bytes, value: bytes | None) -> None:
        """Advance stream time to the window start of ``key``; write unless expired."""
        if key < META_END:
            self.wrapped.put(key, value)
            return
        timestamp = self._time(key)
        segments = self.segments
        segments.observe(timestamp)
        if not self._dropped(timestamp, segments.stream_time):
            segments.wrote(segments.segment_of(timestamp))
            self.wrapped.put(key, value)

    def put_many(
        self, keys: list[bytes], values: list[bytes | None], timestamps: list[int]
    ) -> None:
        """As :meth:`put` one by one: an entry expired at the stream time reached by then
        is not written; the segments out of retention are dropped after the writes (an
        entry written into one before is dropped with it, as one by one)."""
        if not keys:
            return
        segments, offset = self.segments, self._offset
        kept: list[int] | None = None  # None: every one
        if min(keys) < META_END:  # metadata among them: entry by entry
            kept, stream = self._kept_one_by_one(keys)
        else:
            starts = [decode_time(key, len(key) - offset) for key in keys]
            stream = max(segments.stream_time, *starts)
            if self._dropped(min(starts), stream):  # else none is dropped
                kept, stream = self._kept_one_by_one(keys)
        data = [self._time(keys[i]) for i in kept or () if keys[i] >= META_END]
        if kept is None:
            segments.wrote(segments.segment_of(min(starts)))
            self.wrapped.put_many(keys, values, timestamps)
        elif kept:
            if data:
                segments.wrote(segments.segment_of(min(data)))
            self.wrapped.put_many(
                [keys[i] for i in kept], [values[i] for i in kept], [timestamps[i] for i in kept]
            )
        if stream > segments.stream_time:
            segments.observe(stream)

    def _kept_one_by_one(self, keys: list[bytes]) -> tuple[list[int], int]:
        """The entries of ``keys`` not expired at the stream time reached by each, and the
        stream time reached."""
        stream, kept, time = self.segments.stream_time, [], self._time
        for i, key in enumerate(keys):
            if key < META_END:
                kept.append(i)
                continue
            start = time(key)
            stream = max(stream, start)
            if not self._dropped(start, stream):
                kept.append(i)
        return kept, stream

    def get(self, key: bytes) -> bytes | None:
        """Read ``key`` unless its window is expired."""
        if key >= META_END and self._time(key) < self.min_read_time():
            return None
        return self.wrapped.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Each key's value, as :meth:`get` one by one."""
        low = self.min_read_time()
        if low == NO_TIME:
            return self.wrapped.get_many(keys)
        time, above = self._time, self.segments.prefix(self.segments.segment_of(low) + 1)
        # a key of a newer segment than the oldest live one is live: no decoding
        live = [
            i for i, key in enumerate(keys) if key >= above or key < META_END or time(key) >= low
        ]
        out: list[bytes | None] = [None] * len(keys)
        if live:
            found = self.wrapped.get_many([keys[i] for i in live])
            for i, value in zip(live, found, strict=True):
                out[i] = value
        return out

    def items(
        self, lo: bytes | None, hi: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """The entries in ``[lo, hi]`` whose windows are not expired (the segments below
        the oldest live one are skipped, the oldest live one is filtered)."""
        low = self.min_read_time()
        if low == NO_TIME or (lo is not None and lo < META_END):
            return self.wrapped.items(lo, hi, reverse=reverse)
        segment = self.segments.segment_of(low)
        first = self.segments.prefix(segment)
        if hi is not None and hi < first:
            return iter(())
        items = self.wrapped.items(first if lo is None else max(lo, first), hi, reverse=reverse)
        return self._hide_expired(items, self.segments.prefix(segment + 1), low)

    def _hide_expired(
        self, items: Iterator[tuple[bytes, bytes]], above: bytes, low: int
    ) -> Iterator[tuple[bytes, bytes]]:
        time = self._time
        for key, value in items:
            if key >= above or time(key) >= low:
                yield key, value
