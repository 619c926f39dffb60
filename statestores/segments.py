"""Time segments of window and session stores, laid over one sorted bytes key space.

Kafka's segmented stores keep one RocksDB per time segment and drop whole segments once
they fall out of retention. Here every entry key starts with its 8-byte segment id, so a
segment is a key range, and dropping it is one range delete (unlogged, applied at the next
commit). Segment interval: ``max(retention / 2, 60 000 ms)`` as Kafka's.

Stream time is the largest timestamp (window start, or session end) this store has seen;
entries older than ``stream time - retention + 1`` are expired: not written, not returned.

A few *metadata* entries (a processor's bookkeeping kept with the data, such as the last
window close a node emitted: Kafka keeps it in the commit's processor metadata) live below
every segment, under the 8-byte prefix of no segment (:data:`META_PREFIX`): written through
the same layers as the data, they are logged, cached and committed with it, and no segment
drop or scan reaches them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from statestores.bytes_layer import BytesKeyValue

_U64 = struct.Struct(">Q")
_SIGN = 1 << 63
MIN_SEGMENT_INTERVAL = 60_000
NO_TIME = -(1 << 62)
#: The prefix of metadata entries: the segment id -2**63, which no timestamp reaches.
META_PREFIX = b"\x00" * 8
#: Every metadata key sorts below it (and every segment's key above it).
_META_END = b"\x00" * 7 + b"\x01"


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
        live = self.segment_of(self.min_live_time())
        # a segment is dropped once its last moment is expired: segments below ``live``
        first = self._first_segment() if self._min_segment is None else self._min_segment
        if first is not None and first < live:
            self.store.delete_range(self.prefix(first), self.prefix(live))
            first = live
        self._min_segment = first

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
        last = next(iter(self.store.items(_META_END, None, reverse=True)), None)
        if last is None or last[0] < _META_END:
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
        first = next(iter(self.store.items(_META_END, None)), None)
        return None if first is None else decode_time(first[0], 0)

    def read_meta(self, name: str) -> int | None:
        """Return the metadata entry ``name`` (an int), or None if it was never written."""
        raw = self.store.get(META_PREFIX + name.encode())
        return None if raw is None else int.from_bytes(raw, "big", signed=True)

    def write_meta(self, name: str, value: int) -> None:
        """Write the metadata entry ``name`` through the store's layers (so it is logged
        and committed with the data written beside it)."""
        self.store.put(META_PREFIX + name.encode(), value.to_bytes(8, "big", signed=True))
