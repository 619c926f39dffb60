"""The versions of a versioned key-value store (KIP-889), laid over one sorted bytes space.

Kafka's ``RocksDBVersionedStore`` keeps the latest value per key apart and older versions in
time segments by their ``validTo``, dropped whole once out of history retention. Here a
version is a few entries of the store's bytes stack (change-logging → the transactional
RocksDB store, as every store kind), so its writes commit, prepare, log and restore as the
other stores' writes do (KIP-892), and a changelog replayed gives back the very entries:

* ``\\x01 | len(key) 4 | key | validFrom 8`` → ``\\x01 + value``, or ``\\x00`` for a
  tombstone: one entry per version; a version is valid until the next one's ``validFrom``;
* ``\\x02 | segment 8 | len(key) 4 | key | validFrom 8`` → empty: the expiry index, one entry
  per version whose ``validTo`` is known (it was superseded, or it is a latest tombstone,
  valid to its own timestamp as Kafka's "degenerate" segment), in the segment of that
  ``validTo``. The versions of the segments below the one of ``stream time - history
  retention`` are deleted, as Kafka drops its segments: the latest value of a key never
  expires;
* ``\\x03 | validFrom 8 | len(key) 4 | key`` → empty: the time index, whose last entry is the
  observed stream time (the largest timestamp put: never expired, never replaced by an
  older one), read back when the store opens, restores or aborts.

A put's entries are logged with the version's timestamp as the records' timestamp. What a
reader sees is Kafka's: a ``get`` older than ``stream time - history retention`` answers
only the latest version (when it is old enough); a put older than that is not put
(:data:`~statestores.api.PUT_RETURN_CODE_NOT_PUT`) and writes nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from statestores.api import PUT_RETURN_CODE_NOT_PUT, PUT_RETURN_CODE_VALID_TO_UNDEFINED
from statestores.segments import decode_time, encode_time

_VERSION = b"\x01"
_INDEX = b"\x02"
_TIME = b"\x03"
_VALUE = b"\x01"
_TOMBSTONE = b"\x00"
_LEN = struct.Struct(">i")
MIN_TIME = -(1 << 63)
MAX_TIME = (1 << 63) - 1
#: Kafka's ``ConsumerRecord.NO_TIMESTAMP``: the observed stream time before any put.
NO_TIMESTAMP = -1


def default_segment_interval(history_retention_ms: int) -> int:
    """Return Kafka's default segment interval for a history retention (ms)."""
    if history_retention_ms <= 60_000:
        return max(history_retention_ms // 3, 2_000)
    if history_retention_ms <= 300_000:
        return max(history_retention_ms // 5, 20_000)
    if history_retention_ms <= 3_600_000:
        return max(history_retention_ms // 12, 60_000)
    return max(history_retention_ms // 24, 300_000)


class RawVersion(NamedTuple):
    """A version in bytes: value (None: a tombstone), valid from, valid to (None: open)."""

    value: bytes | None
    valid_from: int
    valid_to: int | None


def _prefix(key: bytes) -> bytes:
    return _VERSION + _LEN.pack(len(key)) + key


def _payload(value: bytes | None) -> bytes:
    return _TOMBSTONE if value is None else _VALUE + value


def _valid_to(valid_from: int, payload: bytes, next_ts: int | None) -> int | None:
    """Where a version's expiry entry goes: its successor's time; a latest tombstone's own."""
    if next_ts is not None:
        return next_ts
    return valid_from if payload[:1] == _TOMBSTONE else None


class Versions:
    """Versioned puts and reads over a bytes stack (see the module).

    Args:
        store: the bytes stack (``get``, ``items``, ``put_many``).
        history_retention_ms: how long old versions stay queryable, in stream time (also
            the grace period of puts, as Kafka's).
        segment_interval_ms: the width of the expiry segments.
    """

    def __init__(self, store: Any, history_retention_ms: int, segment_interval_ms: int) -> None:
        self.store = store
        self.retention = history_retention_ms
        self.interval = segment_interval_ms
        self.stream_time = NO_TIMESTAMP
        self._live_segment: int | None = None  # the segments below it are deleted
        self._writes: dict[bytes, bytes | None] = {}

    def load(self) -> None:
        """Read the observed stream time back from the time index."""
        last = next(iter(self.store.items(_TIME, _TIME + b"\xff", reverse=True)), None)
        self.stream_time = NO_TIMESTAMP if last is None else decode_time(last[0], 1)
        self._live_segment = None

    # -- reads ----------------------------------------------------------------------------

    def expired(self, timestamp: int) -> bool:
        """Whether ``timestamp`` is older than the history retention."""
        return timestamp < self.stream_time - self.retention

    def get(self, key: bytes, as_of: int | None = None) -> RawVersion | None:
        """The latest version of ``key`` or the one valid at ``as_of``; None for none, a
        tombstone, or a time out of the history retention the latest does not answer."""
        latest = self._floor(key, MAX_TIME)
        if as_of is None or latest is None or latest[0] <= as_of or self.expired(as_of):
            if latest is None or latest[1][:1] == _TOMBSTONE:
                return None
            if as_of is not None and latest[0] > as_of:
                return None
            return RawVersion(latest[1][1:], latest[0], None)
        found = self._floor(key, as_of)
        if found is None or found[1][:1] == _TOMBSTONE:
            return None
        after = self._after(key, found[0])
        return RawVersion(found[1][1:], found[0], None if after is None else after[0])

    def versions(self, key: bytes, time_from: int, time_to: int) -> list[RawVersion]:
        """The versions (tombstones left out) valid at some time in ``[time_from,
        time_to]``, oldest first (KIP-968); only the latest when ``time_to`` is older than
        the history retention."""
        if self.expired(time_to):
            latest = self.get(key)
            return [] if latest is None or latest.valid_from > time_to else [latest]
        prefix = _prefix(key)
        size = len(prefix)
        lo, hi = prefix + encode_time(MIN_TIME), prefix + encode_time(time_to)
        entries = [(decode_time(k, size), p) for k, p in self.store.items(lo, hi)]
        if not entries:
            return []
        after = self._after(key, entries[-1][0])
        ends: list[int | None] = [ts for ts, _ in entries[1:]]
        ends.append(None if after is None else after[0])
        return [
            RawVersion(payload[1:], ts, end)
            for (ts, payload), end in zip(entries, ends, strict=True)
            if payload[:1] != _TOMBSTONE and (end is None or end > time_from)
        ]

    def stored_keys(self) -> Iterator[bytes]:
        """Every key with a stored version (a tombstone too), in key byte order."""
        last = None
        for entry, _ in self.store.items(_VERSION, _INDEX, reverse=False):
            if entry[:1] != _VERSION:
                continue
            (size,) = _LEN.unpack_from(entry, 1)
            key = entry[5 : 5 + size]
            if key != last:
                yield key
                last = key

    def _floor(self, key: bytes, timestamp: int) -> tuple[int, bytes] | None:
        """The version of ``key`` with the largest ``validFrom <= timestamp``."""
        prefix = _prefix(key)
        lo, hi = prefix + encode_time(MIN_TIME), prefix + encode_time(timestamp)
        for entry, payload in self.store.items(lo, hi, reverse=True):
            return decode_time(entry, len(prefix)), payload
        return None

    def _after(self, key: bytes, timestamp: int) -> tuple[int, bytes] | None:
        """The version of ``key`` with the smallest ``validFrom > timestamp``."""
        if timestamp == MAX_TIME:
            return None
        prefix = _prefix(key)
        lo, hi = prefix + encode_time(timestamp + 1), prefix + encode_time(MAX_TIME)
        for entry, payload in self.store.items(lo, hi):
            return decode_time(entry, len(prefix)), payload
        return None

    # -- writes ---------------------------------------------------------------------------

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        """Put a version of ``key`` (``None``: a tombstone); return Kafka's put result."""
        if self.expired(timestamp):
            return PUT_RETURN_CODE_NOT_PUT
        writes = self._writes
        if timestamp > self.stream_time:
            self.stream_time = timestamp
            self._expire()
            if writes:  # the deletions first: the reads below must not see them
                self._flush(timestamp)
        before = self._floor(key, timestamp)
        after = self._after(key, timestamp)
        next_ts = None if after is None else after[0]
        payload = _payload(value)
        if before is not None and before[0] != timestamp:
            # the version before now ends at ``timestamp``
            self._reindex(key, before[0], _valid_to(before[0], before[1], next_ts), timestamp)
            before = None
        old_to = None if before is None else _valid_to(timestamp, before[1], next_ts)
        self._reindex(key, timestamp, old_to, _valid_to(timestamp, payload, next_ts))
        writes[_prefix(key) + encode_time(timestamp)] = payload
        writes[_TIME + encode_time(timestamp) + _LEN.pack(len(key)) + key] = b""
        self._flush(timestamp)
        return PUT_RETURN_CODE_VALID_TO_UNDEFINED if next_ts is None else next_ts

    def delete(self, key: bytes, timestamp: int) -> RawVersion | None:
        """Put a tombstone at ``timestamp``; return the version valid at ``timestamp``
        before it (None when the delete is older than the retention: not put)."""
        if self.expired(timestamp):
            return None
        existing = self.get(key, timestamp)
        self.put(key, None, timestamp)
        return existing

    def _index_key(self, key: bytes, valid_from: int, valid_to: int) -> bytes:
        segment = valid_to // self.interval
        return b"".join(
            (_INDEX, encode_time(segment), _LEN.pack(len(key)), key, encode_time(valid_from))
        )

    def _reindex(self, key: bytes, valid_from: int, old_to: int | None, new_to: int | None) -> None:
        if old_to == new_to:
            return
        if old_to is not None:
            self._writes[self._index_key(key, valid_from, old_to)] = None
        if new_to is not None:
            self._writes[self._index_key(key, valid_from, new_to)] = b""

    def _expire(self) -> None:
        """Delete the versions whose ``validTo`` segment is below the live ones."""
        live = (self.stream_time - self.retention) // self.interval
        if self._live_segment is not None and live <= self._live_segment:
            return
        self._live_segment = live
        hi = _INDEX + encode_time(live)
        writes = self._writes
        for entry, _ in list(self.store.items(_INDEX, hi)):
            if entry >= hi:
                break
            size = _LEN.unpack_from(entry, 9)[0]
            key, valid_from = entry[13 : 13 + size], entry[13 + size :]
            writes[entry] = None
            writes[_prefix(key) + valid_from] = None
            writes[_TIME + valid_from + entry[9 : 13 + size]] = None

    def _flush(self, timestamp: int) -> None:
        """Write the put's entries below, each logged with the version's timestamp."""
        writes = self._writes
        self.store.put_many(list(writes), list(writes.values()), [timestamp] * len(writes))
        writes.clear()
