"""Interactive queries (``app.store``): the committed state, while the app runs and after
it stopped, never an uncommitted value."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.app.app_state import AppState
from runtime.app.store_queries import InvalidStateStoreError, StoreCatalog
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn import faults
from tests.runtime.spark.helpers import eos_config
from topology import Materialized, Produced, StreamsBuilder, TimeWindows

S, L = Serdes.String(), Serdes.Long()
WORDS = [f"w{i}" for i in range(9)]


def word_count(poison: str | None = None) -> Any:
    """The word count; with ``poison``, the count of that word fails the batch once it
    reaches 3 (after the store took the update: the batch aborts)."""

    def check(word: str, count: int) -> int:
        if word == poison and count >= 3:
            raise ValueError(f"{word} reached {count}")
        return count

    b = StreamsBuilder()
    words = b.stream("lines").flat_map_values(str.split).group_by(lambda _k, w: w)
    counts = words.count(Materialized.as_("word-counts"))
    counts.to_stream().map_values(check, with_key=True).to("counts-out", Produced.with_(S, L))
    words.windowed_by(TimeWindows.of_size_and_grace(1000, 600_000)).count(
        Materialized.as_("windowed-counts")
    )
    return b.build()


def committed_counts(root: str) -> dict[str, int]:
    """The last committed count of each word in the output topic (read_committed)."""
    reader = TopicReader(root)
    out: dict[str, int] = {}
    for p in sorted(reader.end_offsets("counts-out")):
        table = reader.read("counts-out", p, 0)
        keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
        for k, v in zip(keys, values, strict=True):
            out[k.decode()] = int(L.deserialize("counts-out", v) or 0)
    return out


def produce(admin: TopicAdmin, lines: list[str], first: int) -> None:
    producer = Producer(admin)
    for i, line in enumerate(lines):
        producer.send("lines", f"k{i % 3}".encode(), line.encode(), timestamp=first + i * 100)
    producer.flush()


def lines_of(n: int, seed: int) -> list[str]:
    return [" ".join(WORDS[(seed + i * j) % len(WORDS)] for j in range(1, 4)) for i in range(n)]


def wait_until(check: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)


def test_store_queries_answer_the_committed_counts_while_running_and_after_stop(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """While the word count runs through 8 rounds of input, each query's counts lie
    between the committed output read just before and just after it (counts only grow);
    once caught up, and after close(), they equal the committed output exactly, from the
    app's query and from a new one (what ``streams-eos state`` does)."""
    admin.create("lines", 2)
    admin.create("counts-out", 2)
    config = eos_config("iq", root, str(tmp_path / "state"), **{"max.poll.records": 7})
    app = StreamsApp(word_count(), config, spark=spark)
    produce(admin, lines_of(20, 1), 1000)
    app.start()
    try:
        wait_until(lambda: committed_counts(root))
        store = app.store("word-counts")
        checked = 0
        for round_ in range(8):
            feeder = threading.Thread(
                target=produce, args=(admin, lines_of(15, round_ + 2), 5000 + 2000 * round_)
            )
            feeder.start()
            for _ in range(3):
                before = committed_counts(root)
                seen = dict(store.all())
                after = committed_counts(root)
                for word, count in seen.items():
                    assert before.get(word, 0) <= count <= after[word], (word, before, seen)
                    checked += 1
                assert set(before) <= set(seen)
            feeder.join()
        total_words = sum(len(x.split()) for x in lines_of(20, 1)) + sum(
            len(x.split()) for r in range(8) for x in lines_of(15, r + 2)
        )
        wait_until(lambda: sum(committed_counts(root).values()) == total_words)
        wait_until(lambda: dict(store.all()) == committed_counts(root))
        assert store.get("w1") == committed_counts(root)["w1"]
        assert store.get("nope") is None
        assert store.approximate_num_entries() >= len(WORDS)
        windows = app.store("windowed-counts")
        assert sum(c for _, c in windows.fetch("w1", 0, 1 << 40)) == committed_counts(root)["w1"]
        assert checked > 0
    finally:
        app.close()
    final = committed_counts(root)
    assert dict(app.store("word-counts").all()) == final  # after stop
    # what `streams-eos state` does: from the catalog the application kept
    with StoreCatalog.read(TopicAdmin(root), "iq").query(TopicAdmin(root), "word-counts") as fresh:
        assert dict(fresh.all()) == final
        with pytest.raises(InvalidStateStoreError, match="window store"):
            fresh.fetch_all(0, 10)
    with pytest.raises(InvalidStateStoreError, match="no state store named 'nope'"):
        app.store("nope")


def test_an_aborted_batch_is_never_seen_by_a_store_query(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """A batch that updated the store, then failed (its transaction aborted), leaves the
    query's answer at the last committed counts."""
    admin.create("lines", 1)
    admin.create("counts-out", 1)
    config = eos_config("iq-abort", root, str(tmp_path / "state"))
    app = StreamsApp(word_count(poison="boom"), config, spark=spark)
    produce(admin, ["boom a", "boom b"], 1000)
    app.run_until_idle()
    assert committed_counts(root)["boom"] == 2
    app = StreamsApp(word_count(poison="boom"), config, spark=spark)
    produce(admin, ["boom c a"], 3000)
    with pytest.raises(Exception, match="boom reached 3"):
        app.run_until_idle()
    assert app.state is AppState.ERROR
    store = app.store("word-counts")
    assert store.get("boom") == 2
    assert store.get("c") is None  # counted in the aborted batch only
    assert dict(store.all()) == committed_counts(root)


def test_a_query_waits_for_a_decided_transaction_still_committing_its_topics(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """A transaction commits its topics one after another after its decision: a query asked
    once the output shows the new count, while the changelog is not committed yet, waits
    for it and answers the new count, never less than the output it followed (and a key
    asked before is not answered from what the replica read then)."""
    admin.create("lines", 1)
    admin.create("counts-out", 1)
    app = StreamsApp(word_count(), eos_config("iq-settle", root, str(tmp_path / "s")), spark=spark)
    produce(admin, ["a b"], 1000)
    app.start()
    try:
        wait_until(lambda: committed_counts(root).get("a") == 1)
        store = app.store("word-counts")
        assert store.get("a") == 1
        # the next commit stops for a second after its first two topics (the offsets and
        # the output, or the output and the other store's changelog: in name order)
        faults.arm_stall("after_participant_2", 1.0)
        try:
            produce(admin, ["a"], 2000)
            wait_until(lambda: committed_counts(root).get("a") == 2)
            asked = time.monotonic()
            assert store.get("a") == 2
            waited = time.monotonic() - asked
        finally:
            faults.arm_stall(None)
        assert waited > 0.2, waited  # the commit was still under way when the query asked
    finally:
        app.close()
