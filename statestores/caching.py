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
cache keeps many clean entries.

Over a window store (Kafka's ``CachingWindowStore``) a read does not fill the cache, and
the cache knows nothing of retention: an entry stays until it is evicted, and a read
returns it, merged over the store below, after that store expired its window; a flush
writes it below (which may drop it) and forwards it all the same.
"""

from __future__ import annotations

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
        self._cache: dict[bytes, _Entry] = {}
        self._dirty: dict[bytes, None] = {}  # dirty keys, oldest write first
        self._keys = SortedKeys(self._cache)
        self._bytes = 0
        self._max_bytes = DEFAULT_CACHE_MAX_BYTES
        self._listener: BytesFlushListener | None = None
        self._batch_listener: BytesBatchListener | None = None
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
    ) -> None:
        """Receive every dirty entry written below on flush or eviction; with
        ``batch_listener``, a flush hands on its entries at once, in the same order, after
        writing them all below (an eviction still hands on its one entry)."""
        self._listener = listener
        self._batch_listener = batch_listener

    def get(self, key: bytes) -> bytes | None:
        """Return the cached value, or read it below and cache it."""
        entry = self._cache.get(key)
        if entry is not None:
            return entry.value
        value = self.wrapped.get(key)
        if self._cache_reads:
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
        """The cached values; the others read below at once, then cached."""
        cache = self._cache
        found: list[bytes | None] = []
        missing: list[int] = []
        for i, key in enumerate(keys):
            entry = cache.get(key)
            if entry is None:
                missing.append(i)
                found.append(None)
            else:
                found.append(entry.value)
        if missing:
            below = self.wrapped.get_many([keys[i] for i in missing])
            insert = self._insert if self._cache_reads else None
            for i, value in zip(missing, below, strict=True):
                found[i] = value
                if insert is not None:
                    insert(keys[i], _Entry(value, False, 0))
        return found

    def first_key(self, lo: bytes, hi: bytes) -> bytes | None:
        """Return the smallest cached key in ``[lo, hi)``, or None."""
        keys = self._keys.between(lo, hi)
        return next((key for key in keys if key < hi), None)

    def put_many(
        self, keys: list[bytes], values: list[bytes | None], timestamps: list[int]
    ) -> None:
        """Write each key into the cache (dirty) with its timestamp, in order."""
        insert = self._insert
        for key, value, timestamp in zip(keys, values, timestamps, strict=True):
            insert(key, _Entry(value, True, timestamp))

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
            keys = list(self._dirty)
            self._dirty.clear()
            if self._batch_listener is not None and self._listener is not None:
                self._flush_batch(keys, self._batch_listener)
            else:
                cache = self._cache
                for key in keys:
                    entry = cache.get(key)
                    if entry is not None and entry.dirty:
                        self._write_down(key, entry)
        self.wrapped.flush()

    def _flush_batch(self, keys: list[bytes], listener: BytesBatchListener) -> None:
        """Write the dirty entries of ``keys`` below, then hand them on at once."""
        cache, wrapped = self._cache, self.wrapped
        entries = [(key, cache.get(key)) for key in keys]
        dirty = [(key, entry) for key, entry in entries if entry is not None and entry.dirty]
        if not dirty:
            return
        written = [key for key, _ in dirty]
        values = [entry.value for _, entry in dirty]
        olds_below = wrapped.get_many(written)
        # written below as one put each would be: stamped with the flush's timestamp
        wrapped.put_many(written, values, [self._timestamp()] * len(written))
        out: list[bytes] = []
        news: list[bytes | None] = []
        olds: list[bytes | None] = []
        stamps: list[int] = []
        for (key, entry), value, old in zip(dirty, values, olds_below, strict=True):
            entry.dirty = False
            if old is not None or value is not None:
                out.append(key)
                news.append(value)
                olds.append(old)
                stamps.append(entry.timestamp)
        if out:
            listener(out, news, olds, stamps)

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

    def _evict(self) -> None:
        cache = self._cache
        # A zero-sized cache keeps nothing (Kafka: every write is forwarded at once);
        # otherwise the entry just written stays, however large.
        keep = 0 if self._max_bytes == 0 else 1
        while self._bytes > self._max_bytes and len(cache) > keep:
            key = next(iter(cache))
            entry = cache[key]
            if entry.dirty:
                self._write_down(key, entry)
            self._drop(key)

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
        old = self.wrapped.get(key) if listener is not None else None
        self.wrapped.put(key, entry.value)
        entry.dirty = False
        if listener is not None and (old is not None or entry.value is not None):
            listener(key, entry.value, old, entry.timestamp)
