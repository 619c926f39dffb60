"""The caching layer's flush: proportional to the dirty entries, in last-write order,
eviction unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from statestores.caching import CachingBytesStore
from statestores.context import StandaloneContext


class CountingStore:
    """A dict bytes store counting the writes that reach it."""

    name = "counting"

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.puts: list[bytes] = []

    def init(self, context: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def persistent(self) -> bool:
        return False

    def is_open(self) -> bool:
        return True

    def abort(self) -> None:
        pass

    def approximate_num_entries(self) -> int:
        return len(self.data)

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        self.puts.append(key)
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = value

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return [self.get(key) for key in keys]

    def put_many(
        self, keys: list[bytes], values: list[bytes | None], timestamps: list[int]
    ) -> None:
        for key, value in zip(keys, values, strict=True):
            self.put(key, value)

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        for key in [k for k in self.data if lo <= k < hi]:
            del self.data[key]

    def items(
        self, lo: bytes | None, hi: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        keys = sorted(self.data, reverse=reverse)
        return iter([(k, self.data[k]) for k in keys])


def _cache(max_bytes: int = 10 * 1024 * 1024) -> tuple[CachingBytesStore, CountingStore]:
    inner = CountingStore()
    cache = CachingBytesStore(inner)
    cache.init(StandaloneContext(app_config={"statestore.cache.max.bytes": max_bytes}))
    return cache, inner


def test_flush_writes_dirty_entries_in_last_write_order() -> None:
    cache, inner = _cache()
    flushed: list[bytes] = []
    cache.set_flush_listener(lambda k, new, old, ts: flushed.append(k))
    cache.put(b"a", b"1")
    cache.put(b"b", b"1")
    cache.put(b"c", b"1")
    cache.put(b"a", b"2")  # a rewrite moves the key to the end, as Kafka's dirty keys
    assert cache.get(b"b") == b"1"  # reads do not reorder the dirty keys
    cache.flush()
    assert flushed == [b"b", b"c", b"a"] and inner.puts == [b"b", b"c", b"a"]
    cache.flush()  # nothing dirty: nothing written
    assert inner.puts == [b"b", b"c", b"a"]


def test_flush_touches_only_the_dirty_entries_of_a_large_cache() -> None:
    cache, inner = _cache()
    for i in range(1000):
        cache.put(b"k%04d" % i, b"v")
    cache.flush()
    inner.puts.clear()
    cache.put(b"k0500", b"w")
    cache.flush()
    assert inner.puts == [b"k0500"]
    assert cache._dirty == {}  # the bookkeeping under test


def test_eviction_writes_the_dirty_lru_entry_once() -> None:
    cache, inner = _cache(max_bytes=400)
    for i in range(10):
        cache.put(b"k%d" % i, b"v" * 10)
    evicted = list(inner.puts)
    assert evicted and evicted[0] == b"k0"  # least recently used first
    cache.flush()
    assert sorted(inner.puts) == sorted(b"k%d" % i for i in range(10))  # each written once
    assert {k: v for k, v in cache.items(None, None)} == {b"k%d" % i: b"v" * 10 for i in range(10)}


def test_abort_forgets_dirty_entries() -> None:
    cache, inner = _cache()
    cache.put(b"a", b"1")
    cache.abort()
    cache.flush()
    assert inner.puts == []
