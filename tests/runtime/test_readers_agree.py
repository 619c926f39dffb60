"""Every Delta reader reads every table alike: the project's reader, ``deltalake``, polars'
``read_delta`` and pyarrow over the log's files (its partition from the Hive-style path)
give the same rows, the ``partition`` column included, whoever wrote the files: the plain
producer, transactions (committed, aborted, several participants), and the cleaner's
merges and compactions."""

from __future__ import annotations

from pathlib import Path

from runtime.storage.cleaner import LogCleaner
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from runtime.txn.producer import TransactionalProducer
from tests.delta_readers import readers_agree

T0 = 1_700_000_000_000


def test_transactions_committed_and_aborted_read_alike(admin: TopicAdmin, root: str) -> None:
    admin.create("a", 3)
    admin.create("b", 2)
    producer = TransactionalProducer(admin, "app-0")
    producer.init_transactions()
    for txn in range(4):
        producer.begin_transaction()
        for i in range(30):
            producer.send("a", b"k%d" % i, b"t%d-%d" % (txn, i), timestamp=T0 + i)
            producer.send("b", None, b"t%d" % txn, timestamp=T0)
        if txn == 2:
            producer.abort_transaction()
        else:
            producer.commit_transaction()
    rows = readers_agree(admin, root, "a")
    assert sum(rows.values()) == 90 and {r[0] for r in rows} == {0, 1, 2}
    assert sum(readers_agree(admin, root, "b").values()) == 90
    staged = [p for p in Path(admin.table_path("a"), "txn-staging").rglob("*.parquet")]
    assert staged and all(p.parent.name.startswith("partition=") for p in staged)


def test_plain_merged_and_compacted_files_read_alike(admin: TopicAdmin, root: str) -> None:
    admin.create("events", 2, configs={"retention.ms": "-1"})
    admin.create("profiles", 2, configs={"cleanup.policy": "compact"})
    producer = Producer(admin)
    for n in range(40):
        for topic in ("events", "profiles"):
            producer.send(topic, b"k%d" % (n % 7), b"v%d" % n, timestamp=T0 + n)
        producer.flush()
    txn = TransactionalProducer(admin, "app-1")
    txn.init_transactions()
    txn.begin_transaction()
    txn.send("events", b"k1", b"in a transaction", timestamp=T0 + 99)
    txn.commit_transaction()
    before = readers_agree(admin, root, "events")
    cleaner = LogCleaner(admin)
    for _ in range(3):
        cleaner.clean("events", now_ms=T0)
    compacted = cleaner.clean("profiles", now_ms=T0 + 10**9).compactions
    assert readers_agree(admin, root, "events") == before
    latest = readers_agree(admin, root, "profiles")
    assert compacted and sum(latest.values()) < 40
    assert {key for _p, key, _v, _t in latest} == {b"k%d" % i for i in range(7)}
