"""How window stores expire windows, layer by layer, as Kafka's do.

Kafka's window store is metered → caching → change-logging → segmented (RocksDB or
memory). Only the store at the bottom expires windows, by its observed stream time (the
largest window start put *to it*): ``RocksDBWindowStore`` drops a put whose whole segment
is out of retention and hides a window older than ``stream time - retention + 1``; the
time-ordered store of emit-on-close aggregations (``RocksDBTimeOrderedWindowStore``) hides
it from ``stream time - retention`` on, one ms later; ``InMemoryWindowStore`` drops and
hides by window start. The cache above knows nothing of retention
(``CachingWindowStore``): it merges what it holds over the store's live windows, so a
window it still holds is read, and forwarded at its flush, after the store expired it.

Scenarios from ``TimeWindowedKStreamImplTest``, ``KStreamWindowAggregateTest``,
``TimeWindowedCogroupedKStreamImplTest``, ``AbstractRocksDBWindowStoreTest`` (run by
``RocksDBWindowStoreTest`` and ``RocksDBTimeOrderedWindowStoreTest``),
``AbstractWindowBytesStoreTest`` and ``CachingPersistentWindowStoreTest``. The store-level
ones drive a store built by ``Stores`` directly; Kafka's ``segmentDirs`` are the segments
holding entries in the bytes store at the bottom.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from common.serdes import Serdes
from statestores.api import Window, Windowed
from statestores.bytes_layer import bottom
from statestores.context import RecordingCollector, StandaloneContext
from statestores.segments import META_END, decode_time
from statestores.stores import Stores
from tests.conformance.conftest import L, S
from topology import (
    Consumed,
    EmitStrategy,
    Grouped,
    Materialized,
    Produced,
    StreamsBuilder,
    TimeWindows,
    ValueAndTimestamp,
)
from topology.api.emit import ON_WINDOW_UPDATE
from topology.api.windowed_serdes import WindowedSerdes

CLOSE = EmitStrategy.on_window_close()
CACHING = pytest.mark.parametrize("caching", [True, False], ids=["cache", "no-cache"])
WINDOWED = WindowedSerdes.time_windowed_serde_from(S, 10)
Rows = list[tuple[str, str, int]]
#: Kafka's driver runs the DSL's RocksDB stores (this project's, in-memory ones unless told).
ROCKSDB = {"default.dsl.store": "rocksDB"}


def _cache(mat: Materialized, caching: bool) -> Materialized:
    return mat.with_caching_enabled() if caching else mat.with_caching_disabled()


def _pipe(d: Any, records: Sequence[tuple[str, str, int]], topic: str) -> None:
    i = d.create_input_topic(topic, S, S)
    for key, value, ts in records:
        i.pipe_input(key, value, ts)


def _read(d: Any, topic: str, serde: Any = WINDOWED) -> Rows:
    records = d.create_output_topic(topic, serde, S).read_records_to_list()
    return [(str(r.key), r.value, r.timestamp) for r in records]


def _concat(key: str, value: str, agg: str) -> str:
    """Kafka's ``MockAggregator.TOSTRING_ADDER``."""
    return f"{agg}+{value}"


def _remove(key: str, value: str, agg: str) -> str:
    """Kafka's ``MockAggregator.TOSTRING_REMOVER``."""
    return f"{agg}-{value}"


# -- TimeWindowedKStreamImplTest --------------------------------------------------------------

W500 = {
    (key, start): Windowed(key, Window(start, start + 500))
    for key in "12"
    for start in (0, 500, 1000)
}


@CACHING
@pytest.mark.parametrize("emit", [ON_WINDOW_UPDATE, CLOSE], ids=["update", "close"])
def test_should_materialize_count(drive: Any, caching: bool, emit: EmitStrategy) -> None:
    """TimeWindowedKStreamImplTest.shouldMaterializeCount, every strategy, cache on and
    off: 500 ms tumbling windows, no grace (retention 500), stream time 1000. The cache
    still holds (and the fetch merges) every window; below, the window store keeps the
    windows from 501 on and the time-ordered store of emit-on-close from 500 on."""
    b = StreamsBuilder()
    mat = Materialized.as_("count-store").with_key_serde(S).with_value_serde(L)
    (
        b.stream("topic", Consumed.with_(S, S))
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(TimeWindows.of_size_with_no_grace(500))
        .emit_strategy(emit)
        .count(_cache(mat, caching))
    )
    d = drive(b.build(), **ROCKSDB)
    _pipe(d, [("1", "1", 10), ("1", "2", 15), ("1", "3", 500), ("2", "10", 550),
              ("2", "20", 500), ("2", "30", 1000)], "topic")  # fmt: skip
    if caching:
        expected = [(("1", 0), 2, 15), (("1", 500), 1, 500), (("2", 500), 2, 550)]
    elif emit.on_close:
        expected = [(("1", 500), 1, 500), (("2", 500), 2, 550)]
    else:
        expected = []
    expected.append((("2", 1000), 1, 1000))
    plain = d.get_window_store("count-store").fetch_range("1", "2", 0, 1000)
    assert list(plain) == [(W500[slot], count) for slot, count, _ in expected]
    stamped = d.get_timestamped_window_store("count-store").fetch_range("1", "2", 0, 1000)
    assert list(stamped) == [(W500[s], ValueAndTimestamp(c, t)) for s, c, t in expected]


# -- KStreamWindowAggregateTest ---------------------------------------------------------------


def _closing_table(b: StreamsBuilder, topic: str, mat: Materialized) -> Any:
    return (
        b.stream(topic)
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(TimeWindows.of_size_and_grace(10, 5).advance_by(5))
        .emit_strategy(CLOSE)
        .aggregate(lambda: "0", _concat, mat.with_value_serde(S))
    )


@CACHING
def test_join(drive: Any, caching: bool) -> None:
    """KStreamWindowAggregateTest.testJoin (emit final): two closing hopping-window tables
    (size 10, advance 5, grace 5: retention 15) joined. When table 2 closes ``[0, 10)`` at
    its stream time 15, table 1 (stream time 20) has expired that window below (the
    time-ordered store keeps starts from 5 on): only its cache still serves it to the
    join's value getter. ``[5, 15)`` is still kept below, so it joins either way. (Kafka's
    test checks table 2's first closed windows without the cache one step later; they are
    the same records.)"""
    b = StreamsBuilder()
    table1 = _closing_table(b, "topic1", _cache(Materialized.as_("topic1-Canonized"), caching))
    table2 = _closing_table(b, "topic2", _cache(Materialized.as_("topic2-Canonized"), caching))
    table1.to_stream().to("table1", Produced.with_(WINDOWED, S))
    table2.to_stream().to("table2", Produced.with_(WINDOWED, S))
    joined = table1.join(table2, lambda p1, p2: f"{p1}%{p2}")
    joined.to_stream().to("joined", Produced.with_(WINDOWED, S))
    d = drive(b.build(), **ROCKSDB)

    _pipe(d, [("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3), ("A", "1", 9),
              ("A", "1", 15)], "topic1")  # fmt: skip
    assert _read(d, "table1") == [
        ("[A@0/10]", "0+1+1", 9), ("[B@0/10]", "0+2", 1), ("[C@0/10]", "0+3", 2),
        ("[D@0/10]", "0+4", 3),
    ]  # fmt: skip
    assert _read(d, "table2") == _read(d, "joined") == []

    _pipe(d, [("A", "1", 10), ("B", "2", 11), ("D", "4", 12), ("B", "2", 13), ("C", "3", 14),
              ("A", "1", 20)], "topic1")  # fmt: skip
    assert _read(d, "table1") == [
        ("[A@5/15]", "0+1+1", 10), ("[B@5/15]", "0+2+2", 13), ("[C@5/15]", "0+3", 14),
        ("[D@5/15]", "0+4", 12),
    ]  # fmt: skip
    assert _read(d, "table2") == _read(d, "joined") == []

    _pipe(d, [("A", "a", 0), ("B", "b", 1), ("C", "c", 2), ("D", "d", 10), ("A", "a", 15)],
          "topic2")  # fmt: skip
    assert _read(d, "table1") == []
    assert _read(d, "table2") == [("[A@0/10]", "0+a", 0), ("[B@0/10]", "0+b", 1),
                                  ("[C@0/10]", "0+c", 2)]  # fmt: skip
    cached_joins = [("[A@0/10]", "0+1+1%0+a", 9), ("[B@0/10]", "0+2%0+b", 1),
                    ("[C@0/10]", "0+3%0+c", 2)]  # fmt: skip
    assert _read(d, "joined") == (cached_joins if caching else [])

    _pipe(d, [("A", "a", 5), ("B", "b", 6), ("D", "d", 7), ("D", "d", 18), ("A", "a", 21)],
          "topic2")  # fmt: skip
    assert _read(d, "table1") == []
    assert _read(d, "table2") == [
        ("[A@5/15]", "0+a", 5), ("[B@5/15]", "0+b", 6), ("[D@5/15]", "0+d+d", 10),
    ]  # fmt: skip
    assert _read(d, "joined") == [
        ("[A@5/15]", "0+1+1%0+a", 10), ("[B@5/15]", "0+2+2%0+b", 13),
        ("[D@5/15]", "0+4%0+d+d", 12),
    ]  # fmt: skip


# -- TimeWindowedCogroupedKStreamImplTest -----------------------------------------------------

SERDE_500 = WindowedSerdes.time_windowed_serde_from(S, 500)


@CACHING
@pytest.mark.parametrize("dsl_store", ["rocksDB", "in_memory"])
def test_time_window_aggregate_streams_beyond_retention(
    drive: Any, caching: bool, dsl_store: str
) -> None:
    """TimeWindowedCogroupedKStreamImplTest.timeWindowAggregateTestStreamsTest, with the
    streams' timestamps apart by more than the store's retention (500 ms windows, no
    grace: retention 500): ``topic`` (TOSTRING_ADDER) is at 0 when ``topic2``
    (TOSTRING_REMOVER) moves the store's stream time to 500, which expires ``[0, 500)``
    below. Each stream's aggregate observes its own stream time, so ``topic``'s record at
    1 still updates ``[0, 500)``: the cache still holds its aggregate and forwards
    ``0+1+3``; without the cache the store has none, and ``0+3`` goes out."""
    b = StreamsBuilder()
    one = b.stream("topic", Consumed.with_(S, S)).group_by_key()
    two = b.stream("topic2", Consumed.with_(S, S)).group_by_key()
    table = (
        one.cogroup(_concat)
        .cogroup(two, _remove)
        .windowed_by(TimeWindows.of_size_with_no_grace(500))
        .aggregate(lambda: "0", _cache(Materialized.with_(S, S), caching))
    )
    table.to_stream().to("output", Produced.with_(SERDE_500, S))
    d = drive(b.build(), **{"default.dsl.store": dsl_store})
    _pipe(d, [("k1", "1", 0)], "topic")
    _pipe(d, [("k1", "2", 600)], "topic2")
    _pipe(d, [("k1", "3", 1)], "topic")
    assert _read(d, "output", SERDE_500) == [
        ("[k1@0/500]", "0+1", 0),
        ("[k1@500/1000]", "0-2", 600),
        ("[k1@0/500]", "0+1+3" if caching else "0+3", 1),
    ]


# -- the stores -------------------------------------------------------------------------------

SEGMENT_INTERVAL = 60_000
RETENTION = 2 * SEGMENT_INTERVAL
KINDS = {
    "RocksDBWindowStore": Stores.persistent_window_store,
    "RocksDBTimeOrderedWindowStore": Stores.persistent_time_ordered_window_store,
    "InMemoryWindowStore": Stores.in_memory_window_store,
}


def _store(tmp_path: Path, kind: str, retention: int, size: int, caching: bool = False) -> Any:
    supplier = KINDS[kind]("store", retention, size)
    builder = Stores.window_store_builder(supplier, Serdes.Integer(), Serdes.String())
    store = (builder.with_caching_enabled() if caching else builder).build()
    store.init(StandaloneContext(state_dir=str(tmp_path / "task"), changelog=RecordingCollector()))
    return store


def _segment_ids(store: Any) -> set[int]:
    """Kafka's ``segmentDirs``: the segments holding entries at the bottom."""
    return {decode_time(k, 0) for k, _ in bottom(store).items(META_END, None)}


def _values(store: Any, key: int, at: int, size: int) -> set[str]:
    return {value for _, value in store.fetch(key, at - size, at + size)}


@pytest.mark.parametrize("kind", ["RocksDBWindowStore", "RocksDBTimeOrderedWindowStore"])
def test_rolling(tmp_path: Path, kind: str) -> None:
    """AbstractRocksDBWindowStoreTest.testRolling (retention two segments of 60 000 ms,
    windows of 3 ms): a put drops the segments below ``segmentId(stream time -
    retention)``; a fetch hides windows older than ``stream time - retention + 1``, the
    time-ordered store's from ``stream time - retention``."""
    size, start, step = 3, 2 * SEGMENT_INTERVAL, SEGMENT_INTERVAL // 2
    store = _store(tmp_path, kind, RETENTION, size)
    ordered = kind == "RocksDBTimeOrderedWindowStore"
    names = ["zero", "one", "two", "three", "four", "five", "six"]
    store.put(0, "zero", start)
    assert _segment_ids(store) == {2}
    store.put(1, "one", start + step)
    assert _segment_ids(store) == {2}
    store.put(2, "two", start + 2 * step)
    assert _segment_ids(store) == {2, 3}
    store.put(4, "four", start + 4 * step)
    assert _segment_ids(store) == {2, 3, 4}
    store.put(5, "five", start + 5 * step)
    assert _segment_ids(store) == {2, 3, 4}
    kept = [set(), {"one"} if ordered else set(), {"two"}, set(), {"four"}, {"five"}]
    for i, want in enumerate(kept):
        assert _values(store, i, start + i * step, size) == want, names[i]
    store.put(6, "six", start + 6 * step)
    assert _segment_ids(store) == {3, 4, 5}
    kept = [set(), set(), {"two"} if ordered else set(), set(), {"four"}, {"five"}, {"six"}]
    for i, want in enumerate(kept):
        assert _values(store, i, start + i * step, size) == want, names[i]


@pytest.mark.parametrize("kind", list(KINDS))
def test_should_not_throw_exception_when_fetch_range_is_expired(tmp_path: Path, kind: str) -> None:
    """AbstractWindowBytesStoreTest.shouldNotThrowExceptionWhenFetchRangeIsExpired: a put
    four retentions later expires the first; a fetch over it finds nothing."""
    store = _store(tmp_path, kind, RETENTION, 3)
    store.put(1, "one", 0)
    store.put(1, "two", 4 * RETENTION)
    assert list(store.fetch(1, 0, 10)) == []
    assert store.fetch_value(1, 0) is None


@pytest.mark.parametrize("kind", list(KINDS))
def test_should_measure_expired_records(tmp_path: Path, kind: str) -> None:
    """AbstractWindowBytesStoreTest.shouldMeasureExpiredRecords: after a put at two
    retentions, a put at 0 is dropped (its segment, or its window, is expired) and one at
    retention + 1 is kept."""
    store = _store(tmp_path, kind, RETENTION, 3)
    store.put(1, "initial record", 2 * RETENTION)
    store.put(1, "late record", 0)
    store.put(1, "another on-time record", RETENTION + 1)
    assert list(store.fetch(1, 0, 2 * RETENTION)) == [
        (RETENTION + 1, "another on-time record"),
        (2 * RETENTION, "initial record"),
    ]
    assert 0 not in {decode_time(k, len(k) - 12) for k, _ in bottom(store).items(META_END, None)}


@pytest.mark.parametrize("kind", ["RocksDBWindowStore", "InMemoryWindowStore"])
def test_take_value_from_cache_after_the_store_expired_it(tmp_path: Path, kind: str) -> None:
    """CachingPersistentWindowStoreTest.shouldTakeValueFromCacheIfSameTimestampFlushedToRocks
    and shouldFetchAllWithinTimestampRange, past retention (100 ms, windows of 10 ms):
    the cache keeps a flushed window after a later put expired it below; ``fetch_value``,
    ``fetch``, ``fetch_range`` and ``fetch_all`` still return it, merged over the store's
    live windows, and a store without a cache returns nothing there."""
    cached = _store(tmp_path / "cached", kind, 100, 10, caching=True)
    plain = _store(tmp_path / "plain", kind, 100, 10)
    for store in (cached, plain):
        store.put(1, "a", 10)
        store.flush()
        store.put(1, "b", 10)
        store.put(2, "c", 500)  # stream time 500 below at the flush: 10 expired there
        store.flush()
    w10, w500 = Windowed(1, Window(10, 20)), Windowed(2, Window(500, 510))
    assert cached.fetch_value(1, 10) == "b"
    assert list(cached.fetch(1, 0, 1000)) == [(10, "b")]
    assert list(cached.backward_fetch(1, 0, 1000)) == [(10, "b")]
    assert list(cached.fetch_range(1, 2, 0, 1000)) == [(w10, "b"), (w500, "c")]
    assert list(cached.fetch_all(0, 1000)) == [(w10, "b"), (w500, "c")]
    assert plain.fetch_value(1, 10) is None
    assert list(plain.fetch(1, 0, 1000)) == []
    assert list(plain.fetch_all(0, 1000)) == [(w500, "c")]


@pytest.mark.parametrize("kind", ["RocksDBWindowStore", "InMemoryWindowStore"])
def test_forward_dirty_items_of_expired_windows_when_flush_called(
    tmp_path: Path, kind: str
) -> None:
    """CachingPersistentWindowStoreTest.shouldForwardDirtyItemsWhenFlushCalled, for a
    window the store below has expired: the flush writes it down (the store drops it, or
    keeps it hidden in a live segment) and forwards it all the same, with no old value."""
    store = _store(tmp_path, kind, 100, 10, caching=True)
    forwarded: list[tuple[Any, Any, Any]] = []
    store.set_flush_listener(lambda key, new, old, ts: forwarded.append((key, new, old)))
    store.put(2, "late", 500)
    store.flush()
    store.put(1, "a", 10)
    store.flush()
    assert forwarded == [
        (Windowed(2, Window(500, 510)), "late", None),
        (Windowed(1, Window(10, 20)), "a", None),
    ]
    # RocksDB writes it into its still live segment, hidden; memory drops it
    kept = {decode_time(k, len(k) - 12) for k, _ in bottom(store).items(META_END, None)}
    assert (10 in kept) == (kind == "RocksDBWindowStore")
    assert store.fetch_value(1, 10) == "a"  # still cached
