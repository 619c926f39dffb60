"""``read_store``: a store's committed state as a DataFrame, read on the executors, equal to
what an interactive query answers, for key-value, window, session and versioned stores."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.config import StreamsConfig
from common.errors import ConfigError
from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.app.read_store import read_store
from runtime.app.savepoints import create_savepoint
from runtime.app.store_queries import (
    InvalidStateStoreError,
    QueryableStore,
)
from runtime.app.topology_record import StoreRecord, TableRecord, TopologyRecord, write_record
from runtime.storage.topics import TopicAdmin
from statestores.api import VersionedRecord
from tests.runtime.spark.helpers import eos_config
from tests.runtime.spark.test_store_queries import committed_counts, lines_of, produce, wait_until
from tests.runtime.test_store_frames import keep_catalog
from tests.statestores.test_versioned_store import APP, STORE, VersionedTask
from topology import Materialized, Produced, SessionWindows, StreamsBuilder, TimeWindows

S, L = Serdes.String(), Serdes.Long()


def three_stores() -> Any:
    """Word counts kept three ways: per word, per word and 1 s window, per word session."""
    b = StreamsBuilder()
    words = b.stream("lines").flat_map_values(str.split).group_by(lambda _k, w: w)
    counts = words.count(Materialized.as_("word-counts"))
    counts.to_stream().to("counts-out", Produced.with_(S, L))
    words.windowed_by(TimeWindows.of_size_and_grace(1000, 600_000)).count(
        Materialized.as_("windowed-counts")
    )
    words.windowed_by(SessionWindows.of_inactivity_gap_and_grace(150, 600_000)).count(
        Materialized.as_("session-counts")
    )
    return b.build()


def ms(stamp: Any) -> int:
    """A timestamp column's cell as epoch milliseconds."""
    return int(stamp.timestamp() * 1000)


def test_read_store_equals_the_queries_of_every_kind_while_running_and_after_stop(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """While the word count takes more input, a read is one cut: its counts lie between
    the committed output before and after it, and evaluating it again (later commits
    between) gives the same rows. After stop, the key-value, window and session stores
    read as data equal the interactive queries' answers, timestamps included."""
    admin.create("lines", 2)
    admin.create("counts-out", 2)
    config = eos_config("rs", root, str(tmp_path / "state"), **{"max.poll.records": 5})
    app = StreamsApp(three_stores(), config, spark=spark)
    produce(admin, lines_of(20, 1), 1000)
    app.start()
    try:
        wait_until(lambda: committed_counts(root))
        feeder = threading.Thread(target=produce, args=(admin, lines_of(60, 2), 9000))
        feeder.start()
        before = committed_counts(root)
        frame = read_store(spark, "rs", "word-counts", root=root)
        first = sorted((r.key, r.value, ms(r.timestamp)) for r in frame.collect())
        after = committed_counts(root)
        feeder.join()
        wait_until(lambda: committed_counts(root) != after)
        assert sorted((r.key, r.value, ms(r.timestamp)) for r in frame.collect()) == first
        for word, count, _ in first:
            assert before.get(word, 0) <= count <= after[word], (word, before, after)
        assert {w for w, _, _ in first} >= set(before)
    finally:
        app.close()

    with app.store("word-counts", timestamped=True) as query:
        expected_kv = sorted((k, v.value, v.timestamp) for k, v in query.all())
    rows = read_store(spark, "rs", "word-counts", root=root).collect()
    assert sorted((r.key, r.value, ms(r.timestamp)) for r in rows) == expected_kv
    assert dict((k, v) for k, v, _ in expected_kv) == committed_counts(root)

    with app.store("windowed-counts", timestamped=True) as query:
        expected_windows = sorted(
            (w.key, w.window.start, w.window.end, v.value, v.timestamp) for w, v in query.all()
        )
    frame = read_store(spark, "rs", "windowed-counts", root=root)
    assert frame.columns == ["key", "value", "timestamp", "window_start", "window_end"]
    got = sorted(
        (r.key, ms(r.window_start), ms(r.window_end), r.value, ms(r.timestamp))
        for r in frame.collect()
    )
    assert got == expected_windows and len(got) > len(expected_kv)

    frame = read_store(spark, "rs", "session-counts", root=root)
    sessions = frame.collect()
    with app.store("session-counts") as query:
        expected_sessions = sorted(
            (word, s.window.start, s.window.end, count)
            for word in {r.key for r in sessions} | set(expected_kv_words(expected_kv))
            for s, count in query.fetch(word)
        )
    got = sorted((r.key, ms(r.window_start), ms(r.window_end), r.value) for r in sessions)
    assert got == expected_sessions and got
    # every word's sessions count all its occurrences
    totals: dict[str, int] = {}
    for word, _, _, count in got:
        totals[word] = totals.get(word, 0) + count
    assert totals == committed_counts(root)
    same_at_a_savepoint(spark, admin, root, config)


def same_at_a_savepoint(spark: SparkSession, admin: TopicAdmin, root: str, config: Any) -> None:
    """At a savepoint: the same rows, also once the application went on past it."""
    create_savepoint(admin, "rs", "after-stop")
    now = {n: sorted(map(tuple, read_store(spark, "rs", n, root=root).collect())) for n in STORES}
    StreamsApp(three_stores(), config, spark=spark).run_until_idle()  # nothing new yet
    produce(admin, lines_of(30, 3), 50_000)
    StreamsApp(three_stores(), config, spark=spark).run_until_idle()
    for name in STORES:
        saved = read_store(spark, "rs", name, as_of="after-stop", root=root).collect()
        assert sorted(map(tuple, saved)) == now[name], name
        later = read_store(spark, "rs", name, root=root).collect()
        assert sorted(map(tuple, later)) != now[name], name


STORES = ("word-counts", "windowed-counts", "session-counts")


def expected_kv_words(rows: list[tuple[str, int, int]]) -> list[str]:
    return [word for word, _, _ in rows]


def test_read_store_of_a_versioned_store_gives_every_version(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    """A versioned store reads as one row per version (tombstones left out), with
    ``valid_to`` null for the current one: what ``get_versions`` answers, key by key."""
    task = VersionedTask(root, str(tmp_path / "state"))
    task.write([("a", "1", 10), ("a", "2", 20), ("b", "x", 15)])
    task.write([("a", None, 30), ("a", "3", 40), ("a", "late", 25), ("c", "only", 5)])
    task.close()
    factory = keep_catalog(root)
    properties = {"application.id": APP, "processing.guarantee": "exactly_once_v2"}
    admin = TopicAdmin(root)
    frame = read_store(spark, APP, STORE, root=root)
    assert frame.columns == ["key", "value", "timestamp", "valid_to"]
    got = sorted(
        (r.key, r.value, ms(r.timestamp), None if r.valid_to is None else ms(r.valid_to))
        for r in frame.collect()
    )
    config = StreamsConfig(**{**properties, "topics.root": root})
    with QueryableStore(factory, 0, config, admin, STORE) as query:
        expected = sorted(
            (key, v.value, v.timestamp, v.valid_to)
            for key in ("a", "b", "c")
            for v in query.get_versions(key, ascending=True)
        )
    assert got == expected
    assert ("a", "3", 40, None) in got and ("a", "late", 25, 30) in got
    assert VersionedRecord("1", 10, 20) in [VersionedRecord(v, t, e) for k, v, t, e in got]

    # at a savepoint: the same versions, after more were written
    changelog = f"{APP}-{STORE}-changelog"
    write_record(
        admin,
        TopologyRecord(
            application_id=APP,
            guarantee="exactly_once_v2",
            started_ms=0,
            sources={},
            outputs={changelog: TableRecord(kind="changelog", path="", partitions=1)},
            stores={STORE: StoreRecord(kind="versioned", subtopology=0, changelog=changelog)},
            description="",
        ),
    )
    kept = create_savepoint(admin, APP, "v").stores[STORE]
    assert kept.snapshots == kept.ends and kept.ends[0] > 0  # restored to the cut, snapshotted
    more = VersionedTask(root, str(tmp_path / "state"))
    more.write([("a", "4", 50), ("d", "new", 60)])
    more.close()
    saved = read_store(spark, APP, STORE, as_of="v", root=root).collect()
    assert (
        sorted((r.key, r.value, ms(r.timestamp), r.valid_to and ms(r.valid_to)) for r in saved)
        == got
    )


def test_read_store_says_what_is_missing(spark: SparkSession, root: str, monkeypatch: Any) -> None:
    monkeypatch.delenv("STREAMS_ROOT", raising=False)
    with pytest.raises(ConfigError, match="no storage root"):
        read_store(spark, "nobody", "word-counts")
    with pytest.raises(InvalidStateStoreError, match="has kept no store catalog"):
        read_store(spark, "nobody", "word-counts", root=root)


def test_a_failed_read_says_what_failed(spark: SparkSession, root: str, tmp_path: Path) -> None:
    """A partition is read in a fork of the Spark worker (which never opens RocksDB
    itself: it may fork the task hosts later); the fork's error comes back naming the
    partitions and the store: here a catalog whose value serde cannot read the values."""
    task = VersionedTask(root, str(tmp_path / "state"))
    task.write([("a", "not a number", 10)])
    task.close()
    keep_catalog(root, Serdes.Integer())
    frame = read_store(spark, APP, STORE, root=root)
    with pytest.raises(Exception, match=r"reading partitions \[0\] of store 'prices' failed: "):
        frame.collect()
