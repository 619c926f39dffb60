"""Window and session stores over RocksDB and memory: fetches, duplicates, retention."""

from __future__ import annotations

import random
from typing import Any

import pytest

from common.serdes import Serdes
from statestores.api import SessionStore, Window, Windowed, WindowStore
from statestores.bytes_layer import bottom
from statestores.context import RecordingCollector, StandaloneContext
from statestores.stores import Stores

MINUTE = 60_000


def window_store(
    persistent: bool,
    context: StandaloneContext,
    *,
    retention: int = 10 * MINUTE,
    size: int = 1000,
    dups: bool = False,
    caching: bool = False,
) -> Any:
    factory = Stores.persistent_window_store if persistent else Stores.in_memory_window_store
    builder = Stores.window_store_builder(
        factory("w", retention, size, dups), Serdes.String(), Serdes.Long()
    )
    store = (builder.with_caching_enabled() if caching else builder).build()
    store.init(context)
    return store


def session_store(persistent: bool, context: StandaloneContext, retention: int) -> Any:
    factory = Stores.persistent_session_store if persistent else Stores.in_memory_session_store
    store = Stores.session_store_builder(
        factory("s", retention), Serdes.String(), Serdes.Long()
    ).build()
    store.init(context)
    return store


@pytest.mark.parametrize("caching", [False, True])
def test_window_put_fetch_and_ranges(
    persistent: bool, context: StandaloneContext, caching: bool
) -> None:
    store = window_store(persistent, context, caching=caching)
    assert isinstance(store, WindowStore)
    assert store.window_size == 1000 and store.retention_period == 10 * MINUTE
    for start in (0, 1000, 2000, 3000):
        store.put("a", start, start)
        store.put("b", start + 1, start)
    store.put("ab", 7, 1000)  # a key that has "a" as a prefix must not leak into fetch("a")
    store.put("a", 99, 1000)  # replaces
    assert store.fetch_value("a", 1000) == 99 and store.fetch_value("a", 500) is None
    assert list(store.fetch("a", 1000, 2000)) == [(1000, 99), (2000, 2000)]
    assert list(store.backward_fetch("a", 0, 3000)) == [
        (3000, 3000),
        (2000, 2000),
        (1000, 99),
        (0, 0),
    ]
    got = [(w.key, w.window.start, v) for w, v in store.fetch_range("a", "ab", 1000, 1000)]
    assert sorted(got) == [("a", 1000, 99), ("ab", 1000, 7)]  # in stored byte order
    all_at_2000 = [(w.key, v) for w, v in store.fetch_all(2000, 2000)]
    assert all_at_2000 == [("a", 2000), ("b", 2001)]
    assert Windowed("a", Window(0, 1000)) in dict(store.all())
    store.put("a", None, 1000)
    assert store.fetch_value("a", 1000) is None
    store.flush()
    assert [s for s, _ in store.fetch("a", 0, 5000)] == [0, 2000, 3000]


def test_retained_duplicates_come_back_in_insertion_order(
    persistent: bool, context: StandaloneContext
) -> None:
    store = window_store(persistent, context, dups=True)
    for value in (5, 3, 9):
        store.put("k", value, 100)
    store.put("k", None, 100)  # ignored for duplicate stores
    store.flush()
    store.put("k", 1, 100)
    assert list(store.fetch("k", 0, 200)) == [(100, 5), (100, 3), (100, 9), (100, 1)]


def test_window_retention_drops_old_windows(persistent: bool, context: StandaloneContext) -> None:
    store = window_store(persistent, context, retention=2 * MINUTE, size=1000)
    store.put("k", 1, 0)
    store.put("k", 2, MINUTE)
    store.flush()
    store.put("k", 3, 3 * MINUTE - 1)  # windows starting before stream time - 2 min expire
    assert [s for s, _ in store.fetch("k", 0, 10 * MINUTE)] == [MINUTE, 3 * MINUTE - 1]
    store.put("k", 4, 0)  # expired on arrival: dropped
    assert store.fetch_value("k", 0) is None
    store.flush()
    store.put("k", 5, 10 * MINUTE)
    store.flush()
    assert [s for s, _ in store.fetch("k", 0, 10 * MINUTE)] == [10 * MINUTE]
    assert len(list(bottom(store).items(None, None))) == 1  # expired segments are gone


def test_window_stream_time_survives_reopen(persistent: bool, context: StandaloneContext) -> None:
    if not persistent:
        pytest.skip("an in-memory store starts empty")
    store = window_store(persistent, context, retention=2 * MINUTE)
    store.put("k", 1, 5 * MINUTE)
    store.flush()
    store.close()
    store = window_store(persistent, context, retention=2 * MINUTE)
    store.put("k", 2, MINUTE)  # expired relative to the stored stream time
    assert list(store.fetch("k", 0, 10 * MINUTE)) == [(5 * MINUTE, 1)]


def test_window_cache_forwards_windowed_keys(persistent: bool, context: StandaloneContext) -> None:
    store = window_store(persistent, context, caching=True)
    seen: list[tuple[object, ...]] = []
    store.set_flush_listener(lambda *entry: seen.append(entry))
    store.put("k", 1, 1000)
    store.put("k", 2, 1000)
    store.flush()
    assert seen == [(Windowed("k", Window(1000, 2000)), 2, None, 0)]


def test_sessions(persistent: bool, context: StandaloneContext) -> None:
    store = session_store(persistent, context, 10 * MINUTE)
    assert isinstance(store, SessionStore)
    for key, start, end, value in (
        ("a", 0, 10, 1),
        ("a", 20, 30, 2),
        ("a", 40, 40, 3),
        ("b", 5, 25, 4),
        ("aa", 0, 50, 5),
    ):
        store.put(Windowed(key, Window(start, end)), value)
    found = [(w.window.start, w.window.end, v) for w, v in store.find_sessions("a", 10, 30)]
    assert found == [(0, 10, 1), (20, 30, 2)]
    assert [v for _, v in store.backward_find_sessions("a", 0, 100)] == [3, 2, 1]
    assert store.fetch_session("a", 20, 30) == 2 and store.fetch_session("a", 20, 31) is None
    assert [v for _, v in store.fetch("a")] == [1, 2, 3]
    store.remove(Windowed("a", Window(20, 30)))
    store.flush()
    assert [v for _, v in store.fetch("a")] == [1, 3]


def test_session_retention(persistent: bool, context: StandaloneContext) -> None:
    store = session_store(persistent, context, MINUTE)
    store.put(Windowed("a", Window(0, 100)), 1)
    store.put(Windowed("a", Window(5 * MINUTE, 5 * MINUTE + 10)), 2)
    assert [v for _, v in store.fetch("a")] == [2]
    store.put(Windowed("a", Window(0, 200)), 3)  # expired on arrival
    assert store.fetch_session("a", 0, 200) is None


@pytest.mark.parametrize("caching", [False, True])
def test_many_puts_and_fetches_at_once_equal_one_by_one(
    persistent: bool, tmp_path: Any, caching: bool
) -> None:
    """Random batches of writes, across retention (expired windows, dropped segments),
    written and read at once give what one put and one fetch after another give."""
    rng = random.Random(11)
    logs = RecordingCollector(), RecordingCollector()
    one, many = (
        window_store(
            persistent,
            StandaloneContext(
                state_dir=str(tmp_path / name),
                changelog=log,
                app_config={"statestore.cache.max.bytes": 10 * 1024 * 1024},
            ),
            retention=5000,
            size=1000,
            caching=caching,
        )
        for name, log in zip(("one", "many"), logs, strict=True)
    )
    stream = 0
    for _ in range(30):
        cells: dict[tuple[str, int], int] = {}
        for _ in range(rng.randrange(1, 40)):
            start = max(0, stream + rng.randrange(-9000, 3000)) // 1000 * 1000
            cells[(rng.choice("abcdefg"), start)] = rng.randrange(100)
        keys = [k for k, _ in cells]
        starts = [s for _, s in cells]
        values = [v if v % 7 else None for v in cells.values()]  # some deletes
        stamps = [start + 1 for start in starts]
        expected = [one.fetch_value(k, s) for k, s in zip(keys, starts, strict=True)]
        assert many.fetch_values(keys, starts) == expected
        for k, v, s in zip(keys, values, starts, strict=True):
            one.put(k, v, s)
        many.put_many(keys, values, starts, stamps)
        stream = max(stream, *starts)
        assert list(many.all()) == list(one.all())
    one.flush()
    many.flush()
    assert list(many.all()) == list(one.all())
    # the same changelog records (the timestamps differ: one by one, the context's)
    changes = [[(s, k, v) for s, k, v, _ in log.records] for log in logs]
    assert changes[0] == changes[1] and changes[0]
