"""The caching layer: deduplicate writes between commits, forward them on flush or eviction.

Kafka's ``CachingKeyValueStore`` over its ``ThreadCache``: reads and writes hit an LRU
cache of at most ``statestore.cache.max.bytes`` bytes; a key written many times between two
commits reaches the changelog and the inner store once. When the cache is flushed (at
commit) or evicts a dirty entry, the entry is written below and handed to the flush
listener as ``(key, new value, old value, timestamp)`` — how the DSL forwards aggregates
downstream only on flush (Kafka's ``TimestampedCacheFlushListener``).

The dirty keys are also kept apart, in the order they were last written (Kafka's
``NamedCache.dirtyKeys``: a rewrite moves the key to the end), so a flush costs the dirty
entries only, not the whole cache: the test driver and the runtime commit often, while the
cache keeps many clean entries. Evicting a dirty entry flushes every dirty entry, the
evicted one first (Kafka's ``NamedCache.evict``): the entries after it are written below
and handed on in one batch and stay cached, clean, so the evictions that follow cost
nothing, however many new keys a batch brings.

Over a window store (Kafka's ``CachingWindowStore``) a read does not fill the cache, and
the cache knows nothing of retention: an entry stays until it is evicted, and a read
returns it, merged over the store below, after that store expired its window; a flush
writes it below (which may drop it) and forwards it all the same.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from statestores.api import StateStoreContext
from statestores.bytes_layer import (
    BytesBatchListener,
    BytesFlushListener,
    BytesKeyValue,
    WrappingBytesStore,
)
from statestores.merge import merge_sorted
from statestores.sorted_keys import SortedKeys

CACHE_MAX_BYTES_KEY = "statestore.cache.max.bytes"
#: The deprecated name of :data:`CACHE_MAX_BYTES_KEY` (KIP-770).
DEPRECATED_CACHE_MAX_BYTES_KEY = "cache.max.bytes.buffering"
DEFAULT_CACHE_MAX_BYTES = 10 * 1024 * 1024
_ENTRY_OVERHEAD = 64  # approximate bytes of bookkeeping per cached entry


def cache_max_bytes(app_config: Mapping[str, Any]) -> int:
    """Return the cache size ``app_config`` sets: ``statestore.cache.max.bytes``, else its
    deprecated name ``cache.max.bytes.buffering``, else the default (Kafka's precedence)."""
    for key in (CACHE_MAX_BYTES_KEY, DEPRECATED_CACHE_MAX_BYTES_KEY):
        if key in app_config:
            return int(app_config[key])
    return DEFAULT_CACHE_MAX_BYTES


def _size(value: bytes | None) -> int:
    return 0 if value is None else len(value)


class _Entry:
    __slots__ = ("dirty", "timestamp", "value")

    def __init__(self, value: bytes | None, dirty: bool, timestamp: int) -> None:
        self.value = value
        self.dirty = dirty
        self.timestamp = timestamp


class CachingBytesStore(WrappingBytesStore):
    """An LRU write-back cache in front of ``wrapped``.

    Args:
        wrapped: the inner bytes store (change-logging or the bottom store).
        cache_reads: keep what a read finds below (Kafka's key-value cache); False for a
            window store, whose reads go below on a miss and leave the cache as it is.
    """

    def __init__(self, wrapped: BytesKeyValue, *, cache_reads: bool = True) -> None:
        super().__init__(wrapped)
        self._cache_reads = cache_reads
        # LRU order, eldest first (an OrderedDict: a plain dict's first key costs the
        # deleted slots before it, so evicting from the front grows with the cache)
        self._cache: OrderedDict[bytes, _Entry] = OrderedDict()
        self._dirty: dict[bytes, None] = {}  # dirty keys, oldest write first
        self._keys = SortedKeys(self._cache)
        self._bytes = 0
        self._max_bytes = DEFAULT_CACHE_MAX_BYTES
        self._listener: BytesFlushListener | None = None
        self._batch_listener: BytesBatchListener | None = None
        self._old_values = True
        self._timestamp: Callable[[], int] = lambda: 0

    def init(self, context: StateStoreContext) -> None:
        """Open the inner store; size the cache from ``statestore.cache.max.bytes``."""
        super().init(context)
        self._max_bytes = cache_max_bytes(context.app_config)
        self._timestamp = context.timestamp

    def set_flush_listener(
        self,
        listener: BytesFlushListener | None,
        batch_listener: BytesBatchListener | None = None,
        *,
        old_values: bool = True,
    ) -> None:
        """Receive every dirty entry written below on flush or eviction; with
        ``batch_listener``, a flush hands on its entries at once, in the same order, after
        writing them all below.

        Args:
            old_values: hand on the value each entry replaces below (read before it is
                written); False reads it only under a tombstone (to skip one that deletes
                nothing) and hands on None, as Kafka's ``CachingKeyValueStore`` reads the
                old value only when the listener sends old values or the new one is null.
        """
        self._listener = listener
        self._batch_listener = batch_listener
        self._old_values = old_values

    def get(self, key: bytes) -> bytes | None:
        """Return the cached value, or read it below and cache it."""
        entry = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)  # the most recently used (Kafka's updateLRU)
            return entry.value
        value = self.wrapped.get(key)
        if self._cache_reads and value is not None:  # Kafka caches what it found only
            self._insert(key, _Entry(value, False, 0))
        return value

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write ``key`` into the cache (dirty); evict past the size bound."""
        self._insert(key, _Entry(value, True, self._timestamp()))

    def put_through(self, key: bytes, value: bytes | None) -> None:
        """Write ``key`` below the cache at once, never to a flush listener (a metadata
        entry: bookkeeping kept with the data, not a record of it)."""
        self._drop(key)
        self.wrapped.put(key, value)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """As one :meth:`get` after another (a hit becomes the most recently used, what a
        miss finds below is cached, clean), with the misses read below at once and the
        size bound kept once, at the end (a batch: one eviction run, not one a key)."""
        cache = self._cache
        entries = list(map(cache.get, keys)) if cache else None
        if entries is None or entries.count(None) == len(entries):  # all read below
            found = self.wrapped.get_many(keys)
            if not self._cache_reads or found.count(None) == len(found):  # no miss cached
                return found
            touched = [i for i, value in enumerate(found) if value is not None]
        else:
            found = [None if entry is None else entry.value for entry in entries]
            missing = [i for i, entry in enumerate(entries) if entry is None]
            if missing:
                below = self.wrapped.get_many([keys[i] for i in missing])
                for i, value in zip(missing, below, strict=True):
                    found[i] = value
            reads = self._cache_reads
            touched = [
                i
                for i, entry in enumerate(entries)
                if entry is not None or (reads and found[i] is not None)
            ]
        # in order: a hit (or a key read twice) moves to the end, a value found is cached
        self._insert_many(
            [keys[i] for i in touched], [found[i] for i in touched], dirty=False, timestamps=None
        )
        return found

    def first_key(self, lo: bytes, hi: bytes) -> bytes | None:
        """Return the smallest cached key in ``[lo, hi)``, or None."""
        keys = self._keys.between(lo, hi)
        return next((key for key in keys if key < hi), None)

    def put_many(
        self, keys: list[bytes], values: list[bytes | None], timestamps: list[int]
    ) -> None:
        """Write each key into the cache (dirty) with its timestamp, in order; past the
        size bound, evict once all are in."""
        self._insert_many(keys, values, dirty=True, timestamps=timestamps)

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        """Drop cached keys in ``[lo, hi)`` and delete the range below. A dirty key is
        written down first: its listener (the forward downstream) has not seen that update
        yet, as Kafka forwards an entry before its segment is dropped."""
        for key in self._keys.between(lo, hi):
            if key < hi:
                entry = self._cache.get(key)
                if entry is not None and entry.dirty:
                    self._write_down(key, entry)
                self._drop(key)
        self.wrapped.delete_range(lo, hi)

    def items(
        self, lo: bytes | None, hi: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Return the inner entries merged with the cached ones (snapshot)."""
        below = self.wrapped.items(lo, hi, reverse=reverse)
        keys = self._keys.between(lo, hi, reverse=reverse)
        if not keys:
            return below
        cache = self._cache
        return merge_sorted(below, [(k, cache[k].value) for k in keys], reverse=reverse)

    def flush(self) -> None:
        """Write every dirty entry below (oldest write first), tell the listener, flush
        below. The dirty set is taken first: what a listener writes meanwhile waits for the
        next flush, as in Kafka."""
        if self._dirty:
            cache = self._cache
            entries = [(key, cache[key]) for key in self._dirty]
            self._dirty.clear()
            self._write_dirty(entries)
        self.wrapped.flush()

    def _write_dirty(self, entries: list[tuple[bytes, _Entry]]) -> None:
        """Write the dirty entries below, in order, and hand them on (at once, to a batch
        listener). The dirty set is cleared first: what a listener writes meanwhile waits
        for the next flush, as in Kafka."""
        if self._batch_listener is not None and self._listener is not None:
            self._flush_batch(entries, self._batch_listener)
            return
        for key, entry in entries:
            if entry.dirty:
                self._write_down(key, entry)

    def _flush_batch(
        self, entries: list[tuple[bytes, _Entry]], listener: BytesBatchListener
    ) -> None:
        """Write the dirty ``entries`` below, then hand them on at once."""
        dirty = [(key, entry) for key, entry in entries if entry.dirty]
        if not dirty:
            return
        for _, entry in dirty:
            entry.dirty = False
        self._flush_columns(
            [key for key, _ in dirty],
            [entry.value for _, entry in dirty],
            [entry.timestamp for _, entry in dirty],
        )

    def _flush_columns(
        self, written: list[bytes], values: list[bytes | None], stamps: list[int]
    ) -> None:
        """Write dirty entries below, in order, then hand them on at once (to the batch
        listener, if any)."""
        wrapped = self.wrapped
        listener = self._batch_listener if self._listener is not None else None
        if listener is None:  # nobody to tell: written below as they are
            wrapped.put_many(written, values, [self._timestamp()] * len(written))
            return
        if self._old_values:
            olds_below = wrapped.get_many(written)
        else:  # only under tombstones: whether there is anything to delete
            olds_below = [None] * len(written)
            gone = [i for i, value in enumerate(values) if value is None]
            if gone:
                for i, old in zip(gone, wrapped.get_many([written[i] for i in gone]), strict=True):
                    olds_below[i] = old
        # a tombstone of a key that is not below is neither written nor handed on
        # (Kafka's putAndMaybeForward); written below as one put each would be: stamped
        # with the flush's timestamp
        if None in values:
            kept = [
                i
                for i, (value, old) in enumerate(zip(values, olds_below, strict=True))
                if old is not None or value is not None
            ]
            if not kept:
                return
            if len(kept) < len(written):
                written = [written[i] for i in kept]
                values = [values[i] for i in kept]
                olds_below = [olds_below[i] for i in kept]
                stamps = [stamps[i] for i in kept]
        wrapped.put_many(written, values, [self._timestamp()] * len(written))
        listener(written, values, olds_below, stamps)

    def abort(self) -> None:
        """Forget the cache (dirty entries belong to the aborted transaction)."""
        self._clear()
        self.wrapped.abort()

    def close(self) -> None:
        """Drop the cache and close below (flush first to keep writes)."""
        self._clear()
        self.wrapped.close()

    def cached_bytes(self) -> int:
        """Return the approximate bytes the cache holds."""
        return self._bytes

    # -- internals -----------------------------------------------------------------------

    def _clear(self) -> None:
        self._cache.clear()
        self._dirty.clear()
        self._keys.reset()
        self._bytes = 0

    def _insert(self, key: bytes, entry: _Entry) -> None:
        cache = self._cache
        old = cache.pop(key, None)
        if old is None:
            self._keys.added(key)
            self._bytes += len(key) + _ENTRY_OVERHEAD
        else:
            self._bytes -= 0 if old.value is None else len(old.value)
            entry.dirty = entry.dirty or old.dirty
        self._bytes += 0 if entry.value is None else len(entry.value)
        cache[key] = entry  # re-inserted: the most recently used
        if entry.dirty:
            dirty = self._dirty
            dirty.pop(key, None)  # a rewrite moves the key to the end, as Kafka's
            dirty[key] = None
        if self._bytes > self._max_bytes:
            self._evict()

    def _insert_many(
        self,
        keys: list[bytes],
        values: list[bytes | None],
        *,
        dirty: bool,
        timestamps: list[int] | None,
    ) -> None:
        """:meth:`_insert` of many entries (all dirty or all clean), evicting at the end.

        A clean entry never replaces a cached one (a read fills only what is missing)."""
        cache, dirty_keys, sorted_keys = self._cache, self._dirty, self._keys
        size = self._bytes
        stamps = timestamps if timestamps is not None else [0] * len(keys)
        if dirty and self._overflows(keys, values) and self._flush_through(keys, values, stamps):
            return
        for key, value, stamp in zip(keys, values, stamps, strict=True):
            old = cache.pop(key, None)
            if old is None:
                sorted_keys.added(key)
                size += len(key) + _ENTRY_OVERHEAD
            elif not dirty:
                cache[key] = old  # already cached (a duplicate key): keep what is there
                continue
            elif old.value is not None:
                size -= len(old.value)
            if value is not None:
                size += len(value)
            cache[key] = _Entry(value, dirty, stamp)
            if dirty:
                dirty_keys.pop(key, None)  # a rewrite moves the key to the end
                dirty_keys[key] = None
        self._bytes = size
        if size > self._max_bytes:
            self._evict()

    def _overflows(self, keys: list[bytes], values: list[bytes | None]) -> bool:
        """Whether these entries alone outgrow the cache (a batch of many new keys)."""
        if len(keys) * _ENTRY_OVERHEAD <= self._max_bytes:
            return sum(map(len, keys)) + sum(map(_size, values)) + len(keys) * _ENTRY_OVERHEAD > (
                self._max_bytes
            )
        return True

    def _flush_through(
        self, keys: list[bytes], values: list[bytes | None], stamps: list[int]
    ) -> bool:
        """:meth:`_insert_many` of dirty entries that alone outgrow the cache, without
        caching each first: the outcome of inserting them all and evicting once, computed.

        The eviction that follows such a batch reaches a dirty entry (an older one, or the
        batch's first), so it flushes every dirty entry: the evicted one first, then the
        others in the order they were written (the batch's last). Every older entry is
        evicted, and of the batch only the most recent entries that fit stay, clean.
        Return False, having done nothing, for a batch that writes a key twice or a flush
        listener without a batch path (the entry by entry path keeps those exact)."""
        if self._listener is not None and self._batch_listener is None:
            return False
        batch = set(keys)
        if len(batch) != len(keys):
            return False
        cache, dirty = self._cache, self._dirty
        older = [key for key in dirty if key not in batch]  # dirty, left in write order
        flushed_keys, flushed_values, flushed_stamps = keys, values, stamps
        if older:  # the eldest of them in LRU order is evicted (and flushed) first
            pending = set(older)
            first = next(key for key in cache if key in pending)
            flushed_keys = [*older, *keys]
            flushed_values = [cache[key].value for key in older] + list(values)
            flushed_stamps = [cache[key].timestamp for key in older] + list(stamps)
            at = older.index(first)
            flushed_keys.insert(0, flushed_keys.pop(at))
            flushed_values.insert(0, flushed_values.pop(at))
            flushed_stamps.insert(0, flushed_stamps.pop(at))
        # what stays: the batch's most recent entries that fit (at least one, unless the
        # cache holds nothing), clean
        kept, size = 0, 0
        limit = self._max_bytes
        if limit > 0:
            for key, value in zip(reversed(keys), reversed(values), strict=True):
                entry_size = len(key) + _ENTRY_OVERHEAD + _size(value)
                if kept and size + entry_size > limit:
                    break
                size += entry_size
                kept += 1
        cache.clear()
        dirty.clear()
        start = len(keys) - kept
        for key, value, stamp in zip(keys[start:], values[start:], stamps[start:], strict=True):
            cache[key] = _Entry(value, False, stamp)
        self._keys.reset(cache)
        self._bytes = size
        self._flush_columns(flushed_keys, flushed_values, flushed_stamps)
        return True

    def _evict(self) -> None:
        """Drop the least recently used entries until the cache fits its bound. Evicting a
        dirty entry flushes every dirty entry, the evicted one first (Kafka's
        ``NamedCache.evict``); the evicted entry leaves the cache first, so a listener that
        writes its key again caches the new write."""
        cache = self._cache
        # A zero-sized cache keeps nothing (Kafka: every write is forwarded at once);
        # otherwise the entry just written stays, however large.
        keep = 0 if self._max_bytes == 0 else 1
        while self._bytes > self._max_bytes and len(cache) > keep:
            key, entry = cache.popitem(last=False)
            self._bytes -= (
                len(key) + _ENTRY_OVERHEAD + (0 if entry.value is None else len(entry.value))
            )
            self._keys.removed()
            if entry.dirty:
                dirty = self._dirty
                dirty.pop(key, None)
                flushed = [(key, entry), *((k, cache[k]) for k in dirty)]
                dirty.clear()
                self._write_dirty(flushed)

    def _drop(self, key: bytes) -> None:
        entry = self._cache.pop(key, None)
        if entry is not None:
            self._dirty.pop(key, None)
            self._bytes -= (
                len(key) + _ENTRY_OVERHEAD + (0 if entry.value is None else len(entry.value))
            )
            self._keys.removed()

    def _write_down(self, key: bytes, entry: _Entry) -> None:
        listener = self._listener
        entry.dirty = False
        if listener is None:
            self.wrapped.put(key, entry.value)
            return
        old = self.wrapped.get(key) if self._old_values or entry.value is None else None
        if old is not None or entry.value is not None:  # else: a tombstone of nothing
            self.wrapped.put(key, entry.value)
            listener(key, entry.value, old, entry.timestamp)
