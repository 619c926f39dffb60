"""Kafka's ``NamedCacheTest`` and ``CachingKeyValueStore`` reads, as facts about the
caching layer (:class:`statestores.caching.CachingBytesStore`).

Each entry here is one key byte and one value byte (66 bytes with the bookkeeping), and
the cache holds three of them, so the fourth write evicts the least recently used entry.
"""

from __future__ import annotations

import random

import pytest

from statestores.caching import _ENTRY_OVERHEAD, CachingBytesStore
from tests.statestores.test_caching import _cache

THREE = 3 * (2 + _ENTRY_OVERHEAD)


def _flushes(cache: CachingBytesStore) -> list[list[tuple[bytes, bytes | None]]]:
    """Record each flush the batch listener receives as ``[(key, new value), ...]``."""
    seen: list[list[tuple[bytes, bytes | None]]] = []
    cache.set_flush_listener(
        lambda k, new, old, ts: seen.append([(k, new)]),
        lambda keys, news, olds, stamps: seen.append(list(zip(keys, news, strict=True))),
    )
    return seen


def test_should_flush_dirty_entries_on_eviction() -> None:
    """Evicting a dirty entry flushes every dirty entry of the cache in one flush, the
    evicted one first; a clean entry is not flushed."""
    cache, inner = _cache(THREE)
    inner.data[b"\x01"] = b"\x14"
    cache.put(b"\x00", b"\x0a")
    assert cache.get(b"\x01") == b"\x14"  # read below: cached clean
    cache.put(b"\x02", b"\x1e")
    seen = _flushes(cache)
    cache.put(b"\x03", b"\x28")  # over the bound: evicts \x00, the eldest (dirty)
    assert seen == [[(b"\x00", b"\x0a"), (b"\x02", b"\x1e"), (b"\x03", b"\x28")]]
    assert inner.puts == [b"\x00", b"\x02", b"\x03"]
    cache.flush()
    assert len(seen) == 1  # every dirty entry went with the eviction's flush


def test_should_keep_track_of_most_recently_and_least_recently_used() -> None:
    """A read makes an entry the most recently used: the eviction takes another."""
    cache, inner = _cache(THREE)
    for key in (b"\x00", b"\x01", b"\x02"):
        cache.put(key, b"v")
    cache.flush()
    inner.puts.clear()
    assert cache.get(b"\x00") == b"v"  # now the most recently used
    cache.put(b"\x03", b"w")
    assert set(cache._cache) == {b"\x02", b"\x00", b"\x03"}  # \x01 was the eldest


def test_a_read_that_finds_nothing_is_not_cached() -> None:
    """``CachingKeyValueStore.getInternal``: a miss that finds nothing below caches
    nothing, so reads of new keys never evict what the cache holds."""
    cache, _ = _cache(THREE)
    for key in (b"\x00", b"\x01"):
        cache.put(key, b"v")
    assert cache.get(b"\x09") is None
    assert cache.get_many([b"\x07", b"\x08", b"\x00"]) == [None, None, b"v"]
    assert set(cache._cache) == {b"\x00", b"\x01"}


def test_should_not_lose_a_write_of_the_evicted_key_made_by_the_listener() -> None:
    """``shouldNotThrowIllegalArgumentAfterEvictingDirtyRecordAndThenPuttingNewRecordWith
    SameKey``: the evicted entry leaves the cache before the listener runs, so the
    listener's write of the same key is cached (dirty) and flushed next time."""
    cache, inner = _cache(THREE)
    rewritten: list[bytes] = []

    def listener(key: bytes, new: bytes | None, old: bytes | None, ts: int) -> None:
        if key == b"\x00" and not rewritten:
            rewritten.append(key)
            cache.put(key, b"again")

    cache.set_flush_listener(listener)
    for key in (b"\x00", b"\x01", b"\x02", b"\x03"):
        cache.put(key, b"v")
    assert rewritten == [b"\x00"]
    cache.flush()
    assert inner.data[b"\x00"] == b"again"


def test_put_all_evicts_once_all_entries_are_in() -> None:
    """``ThreadCache.putAll`` puts every entry, then evicts: a batch larger than the cache
    is flushed in one piece, in write order, and the cache is back within its bound."""
    cache, _ = _cache(THREE)
    seen = _flushes(cache)
    keys = [bytes([i]) for i in range(10)]
    cache.put_many(keys, [b"v"] * 10, list(range(10)))
    assert seen == [[(k, b"v") for k in keys]]
    assert cache.cached_bytes() <= THREE and set(cache._cache) == set(keys[-3:])


@pytest.mark.parametrize("old_values", [False, True])
def test_the_old_value_is_read_below_only_when_it_is_sent_or_the_new_one_is_null(
    old_values: bool,
) -> None:
    """``CachingKeyValueStore.putAndMaybeForward``: without old values the flush reads
    below only under a tombstone, to skip one that deletes nothing (neither written below,
    so the changelog gets no record of it, nor forwarded); with them, each entry's old
    value is read and handed on."""
    cache, inner = _cache()
    inner.data.update({b"a": b"0", b"gone": b"0"})
    reads: list[bytes] = []
    get = inner.get

    def counting_get(key: bytes) -> bytes | None:
        reads.append(key)
        return get(key)

    inner.get = counting_get  # type: ignore[method-assign]
    seen: list[tuple[bytes, bytes | None, bytes | None]] = []
    cache.set_flush_listener(
        lambda k, new, old, ts: seen.append((k, new, old)),
        lambda keys, news, olds, ts: seen.extend(zip(keys, news, olds, strict=True)),
        old_values=old_values,
    )
    cache.put_many([b"a", b"new", b"gone", b"never"], [b"1", b"1", None, None], [0] * 4)
    cache.flush()
    if old_values:
        assert reads == [b"a", b"new", b"gone", b"never"]
        assert seen == [(b"a", b"1", b"0"), (b"new", b"1", None), (b"gone", None, b"0")]
    else:
        assert reads == [b"gone", b"never"]
        assert seen == [(b"a", b"1", None), (b"new", b"1", None), (b"gone", None, b"0")]
    assert inner.data == {b"a": b"1", b"new": b"1"}
    assert inner.puts == [b"a", b"new", b"gone"]


class _NamedCacheModel:
    """Kafka's ``NamedCache`` as plainly as it reads: an LRU map, the dirty keys in write
    order, ``put`` evicting after each entry, ``putAll`` after all of them, a dirty
    eviction flushing every dirty entry (the evicted one first). Only the order of what is
    flushed and what stays cached is modelled; the values come from the writes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.lru: dict[bytes, tuple[bytes | None, bool]] = {}  # eldest first
        self.dirty: dict[bytes, None] = {}
        self.flushes: list[list[tuple[bytes, bytes | None]]] = []
        self.below: dict[bytes, bytes] = {}

    def size(self) -> int:
        return sum(len(k) + _ENTRY_OVERHEAD + len(v or b"") for k, (v, _) in self.lru.items())

    def _write(self, key: bytes, value: bytes | None) -> None:
        self.lru.pop(key, None)
        self.lru[key] = (value, True)
        self.dirty.pop(key, None)
        self.dirty[key] = None

    def _flush(self, first: bytes | None = None) -> None:
        order = ([first] if first is not None else []) + [k for k in self.dirty if k != first]
        self.dirty.clear()
        batch = []
        for key in order:
            value = self.lru[key][0] if key in self.lru else self.evicted_value
            if key in self.lru:
                self.lru[key] = (value, False)
            if value is None and key not in self.below:
                continue  # a tombstone of nothing
            batch.append((key, value))
            if value is None:
                del self.below[key]
            else:
                self.below[key] = value
        if batch:
            self.flushes.append(batch)

    def _evict(self) -> None:
        while self.size() > self.max_bytes and len(self.lru) > (0 if self.max_bytes == 0 else 1):
            key = next(iter(self.lru))
            value, dirty = self.lru.pop(key)
            if dirty:
                self.evicted_value = value
                self._flush(first=key)

    def put(self, key: bytes, value: bytes | None) -> None:
        self._write(key, value)
        self._evict()

    def put_all(self, keys: list[bytes], values: list[bytes | None]) -> None:
        for key, value in zip(keys, values, strict=True):
            self._write(key, value)
        self._evict()

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """One get after another, evicting once at the end."""
        out: list[bytes | None] = []
        for key in keys:
            if key in self.lru:
                self.lru[key] = self.lru.pop(key)
                out.append(self.lru[key][0])
            else:
                out.append(self.below.get(key))
                if out[-1] is not None:
                    self.lru[key] = (out[-1], False)
        self._evict()
        return out

    def get(self, key: bytes) -> bytes | None:
        if key in self.lru:
            self.lru[key] = self.lru.pop(key)
            return self.lru[key][0]
        value = self.below.get(key)
        if value is not None:
            self.lru[key] = (value, False)
            self._evict()
        return value


@pytest.mark.parametrize("seed", range(40))
def test_batches_larger_than_the_cache_flush_as_named_cache_does(seed: int) -> None:
    """Random puts, reads, batches (many larger than the whole cache, some writing a key
    twice or deleting) and flushes: what is flushed, in what order, what is below and
    what stays cached (and whether dirty) are what Kafka's ``NamedCache`` gives."""
    rng = random.Random(seed)
    max_bytes = rng.choice([0, THREE, 8 * (2 + _ENTRY_OVERHEAD), 20 * (3 + _ENTRY_OVERHEAD)])
    cache, inner = _cache(max_bytes)
    seen = _flushes(cache)
    model = _NamedCacheModel(max_bytes)
    keys = [bytes([i]) for i in range(30)]
    for _ in range(60):
        action = rng.random()
        if action < 0.35:
            size = rng.choice([1, 2, 5, 12, 25])
            batch = rng.sample(keys, size) if rng.random() < 0.8 else rng.choices(keys, k=size)
            values = [None if rng.random() < 0.15 else bytes([rng.randrange(256)]) for _ in batch]
            cache.put_many(batch, values, [0] * size)
            model.put_all(batch, values)
        elif action < 0.65:
            key, value = rng.choice(keys), bytes([rng.randrange(256)]) * rng.choice([1, 2])
            cache.put(key, value)
            model.put(key, value)
        elif action < 0.8:
            key = rng.choice(keys)
            assert cache.get(key) == model.get(key)
        elif action < 0.9:
            some = rng.choices(keys, k=rng.choice([1, 3, 12]))
            assert cache.get_many(some) == model.get_many(some)
        else:
            cache.flush()
            model._flush()
        assert seen == model.flushes
        assert inner.data == model.below
        assert list(cache._cache) == list(model.lru)
        assert [e.dirty for e in cache._cache.values()] == [d for _, d in model.lru.values()]
        assert list(cache._dirty) == list(model.dirty)
