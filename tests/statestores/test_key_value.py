"""Key-value stores: the same behaviour from RocksDB and from memory (acceptance 1)."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import ConfigError
from common.serdes import Serdes
from statestores.api import KeyValueStore, StoreBuilder
from statestores.context import RecordingCollector, StandaloneContext
from statestores.stores import Stores


def kv_store(
    persistent: bool, context: StandaloneContext, *, caching: bool = False, logging: bool = True
) -> Any:
    supplier = (
        Stores.persistent_key_value_store("kv")
        if persistent
        else Stores.in_memory_key_value_store("kv")
    )
    builder = Stores.key_value_store_builder(supplier, Serdes.String(), Serdes.Long())
    builder = builder.with_caching_enabled() if caching else builder
    builder = builder if logging else builder.with_logging_disabled()
    store = builder.build()
    store.init(context)
    return store


@pytest.mark.parametrize("caching", [False, True])
def test_get_put_delete_and_put_if_absent(
    persistent: bool, context: StandaloneContext, caching: bool
) -> None:
    store = kv_store(persistent, context, caching=caching)
    assert isinstance(store, KeyValueStore)
    assert store.persistent() is persistent and store.is_open()
    assert store.get("a") is None
    store.put("a", 1)
    assert store.get("a") == 1
    assert store.put_if_absent("a", 2) == 1 and store.get("a") == 1
    assert store.put_if_absent("b", 3) is None and store.get("b") == 3
    assert store.delete("a") == 1 and store.get("a") is None
    store.put("b", None)  # a tombstone deletes, as Kafka's put(key, null)
    assert store.get("b") is None
    store.put_all([("x", 1), ("y", 2), ("x", None)])
    assert list(store.all()) == [("y", 2)]
    store.close()
    assert not store.is_open()


@pytest.mark.parametrize("caching", [False, True])
def test_ranges_are_inclusive_in_byte_order_and_see_uncommitted_writes(
    persistent: bool, context: StandaloneContext, caching: bool
) -> None:
    store = kv_store(persistent, context, caching=caching)
    for i in range(0, 20, 2):
        store.put(f"k{i:02d}", i)
    store.flush()  # half committed, half in the overlay / cache
    for i in range(1, 20, 2):
        store.put(f"k{i:02d}", i)
    store.put("k04", None)
    assert [v for _, v in store.range("k03", "k07")] == [3, 5, 6, 7]
    assert [v for _, v in store.reverse_range("k03", "k07")] == [7, 6, 5, 3]
    assert [v for _, v in store.range(None, "k02")] == [0, 1, 2]
    assert [v for _, v in store.range("k17", None)] == [17, 18, 19]
    assert [v for _, v in store.all()] == [i for i in range(20) if i != 4]
    assert [v for _, v in store.reverse_all()] == [i for i in reversed(range(20)) if i != 4]
    assert list(store.range("k09", "k05")) == []
    store.flush()
    assert [v for _, v in store.range("k03", "k07")] == [3, 5, 6, 7]


def test_unsigned_byte_order(persistent: bool, context: StandaloneContext) -> None:
    store = kv_store(persistent, context)
    for key in ("\u00e9", "a", "Z", "\x7f", "ab"):
        store.put(key, 1)
    expected = sorted(["\u00e9", "a", "Z", "\x7f", "ab"], key=lambda s: s.encode())
    assert [k for k, _ in store.all()] == expected


def test_iterators_are_snapshots(persistent: bool, context: StandaloneContext) -> None:
    store = kv_store(persistent, context)
    for i in range(10):
        store.put(f"k{i}", i)
    store.flush()
    store.put("k5", 50)
    iterator = store.all()
    first = next(iterator)
    for i in range(10):
        store.put(f"k{i}", 100 + i)  # writes while iterating
    store.put("k99", 99)
    store.flush()
    assert [first, *iterator] == [(f"k{i}", 50 if i == 5 else i) for i in range(10)]


def test_prefix_scan(persistent: bool, context: StandaloneContext) -> None:
    store = kv_store(persistent, context)
    for key in ("ab", "abc", "abd", "ac", "b", "a"):
        store.put(key, len(key))
    assert [k for k, _ in store.prefix_scan("ab")] == ["ab", "abc", "abd"]
    assert [k for k, _ in store.prefix_scan("ab", Serdes.String())] == ["ab", "abc", "abd"]
    assert list(store.prefix_scan("z")) == []


def test_approximate_num_entries(persistent: bool, context: StandaloneContext) -> None:
    store = kv_store(persistent, context)
    for i in range(100):
        store.put(f"k{i}", i)
    store.flush()
    assert 50 <= store.approximate_num_entries() <= 200


def test_changelog_records_every_change(
    persistent: bool, context: StandaloneContext, collector: RecordingCollector
) -> None:
    context.record_timestamp = 42
    store = kv_store(persistent, context)
    store.put("a", 1)
    store.delete("a")
    assert collector.records == [
        ("kv", b"a", (1).to_bytes(8, "big"), 42),
        ("kv", b"a", None, 42),
    ]


def test_logging_disabled_sends_nothing(
    persistent: bool, context: StandaloneContext, collector: RecordingCollector
) -> None:
    store = kv_store(persistent, context, logging=False)
    store.put("a", 1)
    store.flush()
    assert collector.records == [] and store.get("a") == 1


def test_cache_deduplicates_and_forwards_on_flush(
    persistent: bool, context: StandaloneContext, collector: RecordingCollector
) -> None:
    store = kv_store(persistent, context, caching=True)
    forwarded: list[tuple[object, ...]] = []
    assert store.set_flush_listener(lambda *entry: forwarded.append(entry))
    store.put("a", 1)
    store.put("a", 2)
    store.put("b", 5)
    store.put("b", None)  # created and deleted between commits: nothing to forward
    assert collector.records == [] and forwarded == []
    store.flush()
    assert forwarded == [("a", 2, None, 0)]
    # b never reached the store: Kafka's cache neither writes nor logs its tombstone
    assert [r[1] for r in collector.records] == [b"a"]
    store.put("a", 3)
    store.flush()
    assert forwarded[-1] == ("a", 3, 2, 0)  # new and old value


def test_cache_evicts_dirty_entries_past_its_size(persistent: bool, tmp_path: object) -> None:
    collector = RecordingCollector()
    context = StandaloneContext(
        state_dir=str(tmp_path),
        changelog=collector,
        app_config={"statestore.cache.max.bytes": 2000},
    )
    store = kv_store(persistent, context, caching=True)
    forwarded: list[object] = []
    store.set_flush_listener(lambda k, new, old, ts: forwarded.append(k))
    for i in range(100):
        store.put(f"k{i:03d}", i)
    assert 0 < len(forwarded) < 100 and forwarded[0] == "k000"  # least recently used first
    assert [v for _, v in store.all()] == list(range(100))


def test_builders_are_frozen_and_default_as_kafka() -> None:
    builder = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("s"), Serdes.String(), Serdes.String()
    )
    assert isinstance(builder, StoreBuilder)
    assert builder.name == "s" and builder.kind == "key_value"
    assert builder.logging_enabled and not builder.caching_enabled
    cached = builder.with_caching_enabled()
    assert cached is not builder and cached.caching_enabled and not builder.caching_enabled
    logged = builder.with_logging_enabled({"min.compaction.lag.ms": "100"})
    assert logged.logging_config == {"min.compaction.lag.ms": "100"}
    assert logged.changelog_config() == {
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": "100",
    }
    assert not builder.with_logging_disabled().logging_enabled
    with pytest.raises(Exception):  # noqa: B017 - frozen dataclass
        builder.caching_enabled = True  # type: ignore[misc]


def test_invalid_names_and_windows_are_refused() -> None:
    with pytest.raises(ConfigError, match="store name"):
        Stores.in_memory_key_value_store("bad name")
    with pytest.raises(ConfigError, match="at least the window size"):
        Stores.in_memory_window_store("w", 10, 100)


@pytest.mark.parametrize("caching", [False, True])
def test_get_many_and_put_many_are_get_and_put_one_by_one(
    persistent: bool, tmp_path: Any, caching: bool
) -> None:
    """The batched reads and writes of a batch's distinct keys give what one get or put
    per key gives: values, uncommitted writes, changelog records stamped with each
    write's timestamp, and what a cache forwards at its flush."""
    runs = []
    for batched in (False, True):
        collector = RecordingCollector()
        context = StandaloneContext(
            state_dir=str(tmp_path / str(batched)),
            changelog=collector,
            app_config={"statestore.cache.max.bytes": 10 * 1024 * 1024},
        )
        store = kv_store(persistent, context, caching=caching)
        forwarded: list[tuple[object, ...]] = []
        store.set_flush_listener(lambda *entry, into=forwarded: into.append(entry))
        keys, values, stamps = ["b", "a", "c", "a"][:3], [2, 1, None], [7, 5, 9]
        store.put("c", 3)
        store.put("d", 4)
        if batched:
            got = store.get_many(["a", "c", "d", "zz"])
            store.put_many(keys, values, stamps)
            context.record_timestamp = stamps[-1]  # where writing one by one leaves it
        else:
            got = [store.get(k) for k in ["a", "c", "d", "zz"]]
            for key, value, stamp in zip(keys, values, stamps, strict=True):
                context.record_timestamp = stamp
                store.put(key, value)
        after = store.get_many(["a", "b", "c", "d"]) if batched else None
        store.flush()
        runs.append((got, after, collector.records, forwarded, sorted(store.all())))
        store.close()
    assert runs[0][0] == runs[1][0] == [None, 3, 4, None]
    assert runs[1][1] == [1, 2, None, 4]
    assert runs[0][2:] == runs[1][2:]


@pytest.mark.parametrize("written_before", [False, True])
def test_put_many_of_a_key_twice_keeps_the_last_value_once(
    persistent: bool, tmp_path: Any, written_before: bool
) -> None:
    """A batch that writes a key twice leaves its last value, listed once in a range,
    whether or not the open transaction already wrote other keys."""
    context = StandaloneContext(state_dir=str(tmp_path), app_config={})
    store = kv_store(persistent, context, caching=False)
    if written_before:
        store.put("z", 0)
    store.put_many(["a", "b", "a", "c"], [1, 2, 3, None], [1, 2, 3, 4])
    expected = [("a", 3), ("b", 2)] + ([("z", 0)] if written_before else [])
    assert list(store.all()) == expected
    assert store.get_many(["a", "b", "c"]) == [3, 2, None]
    store.flush()
    assert list(store.all()) == expected
    store.close()
