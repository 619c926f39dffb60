"""Producing and reading records: dense offsets, partitioning, time lookup, foreign writers."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError

from common.errors import (
    InvalidPartitionsError,
    OffsetOutOfRangeError,
    SerializationError,
    StorageError,
)
from runtime.storage import committer, topic_log
from runtime.storage.offset_index import OffsetIndex
from runtime.storage.partitioner import partition_for_key
from runtime.storage.producer import ROW_GROUP_SIZE, Producer
from runtime.storage.reader import TopicReader
from runtime.storage.records import TABLE_SCHEMA
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.producer import TransactionalProducer


def offsets_of(reader: TopicReader, topic: str, partition: int) -> list[int]:
    return (
        reader.read(topic, partition, reader.beginning_offsets(topic)[partition])
        .column("offset")
        .to_pylist()
    )


def test_offsets_are_dense_across_flushes(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("t", 3)
    for batch in range(5):
        for i in range(40):
            producer.send("t", b"key-%d" % i, b"%d-%d" % (batch, i))
        producer.flush()
    for p in range(3):
        offsets = offsets_of(reader, "t", p)
        assert offsets == list(range(len(offsets)))
    assert sum(reader.end_offsets("t").values()) == 200


def test_keyed_records_land_where_kafka_puts_them(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("t", 6)
    keys = [b"user-%d" % i for i in range(100)]
    for key in keys:
        producer.send("t", key, b"v")
    producer.flush()
    for p in range(6):
        got = {r.key for r in reader.records("t", p, 0)}
        assert got == {k for k in keys if partition_for_key(k, 6) == p}


def test_per_key_order_is_kept(admin: TopicAdmin, producer: Producer, reader: TopicReader) -> None:
    admin.create("t", 4)
    for i in range(300):
        producer.send("t", b"k%d" % (i % 7), b"%d" % i)
        if i % 37 == 0:
            producer.flush()
    producer.flush()
    for p in range(4):
        by_key: dict[bytes | None, list[int]] = {}
        for r in reader.records("t", p, 0):
            by_key.setdefault(r.key, []).append(int(r.value or b""))
        for seq in by_key.values():
            assert seq == sorted(seq)


def test_null_keys_are_spread_over_partitions(admin: TopicAdmin, reader: TopicReader) -> None:
    admin.create("t", 4)
    producer = Producer(admin, batch_size=1000)
    for _ in range(400):
        producer.send("t", None, b"x" * 100)
    producer.flush()
    counts = reader.end_offsets("t")
    assert sum(counts.values()) == 400
    assert all(c > 0 for c in counts.values()), counts


def test_record_fields_round_trip(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("t", 2)
    headers = [("trace", b"abc"), ("trace", b"def"), ("empty", None)]
    producer.send("t", None, None, timestamp=123, headers=headers, partition=1)
    producer.send("t", b"", b"", timestamp=456, partition=1)
    results = producer.flush()
    assert [(r.partition, r.base_offset, r.count) for r in results] == [(1, 0, 2)]
    first, second = reader.records("t", 1, 0)
    assert (first.key, first.value, first.timestamp, first.headers) == (None, None, 123, headers)
    assert (second.key, second.value, second.timestamp, second.headers) == (b"", b"", 456, [])


def test_send_rejects_bad_input(admin: TopicAdmin, producer: Producer) -> None:
    admin.create("t", 2)
    with pytest.raises(SerializationError, match="value must be bytes.*str"):
        producer.send("t", b"k", "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidPartitionsError, match="partition 2 is not a partition"):
        producer.send("t", b"k", b"v", partition=2)
    with pytest.raises(InvalidPartitionsError):
        producer.send_batch("t", None, [b"v"], partitions=[5])


def test_send_batch_matches_send(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("a", 5)
    admin.create("b", 5)
    keys = [b"key%d" % i for i in range(500)]
    values = [b"value%d" % i for i in range(500)]
    for k, v in zip(keys, values, strict=True):
        producer.send("a", k, v, timestamp=7)
    producer.send_batch("b", pa.array(keys, pa.binary()), values, timestamps=7)
    producer.flush()
    for p in range(5):
        a = reader.read("a", p, 0).select(["offset", "key", "value", "timestamp"])
        b = reader.read("b", p, 0).select(["offset", "key", "value", "timestamp"])
        assert a.equals(b)


def test_read_from_offset_and_max_records(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("t", 1)
    for chunk in range(4):
        producer.send_batch("t", None, [b"%d" % i for i in range(chunk * 10, chunk * 10 + 10)])
        producer.flush()
    got = reader.read("t", 0, 13, max_records=15)
    assert got.column("offset").to_pylist() == list(range(13, 28))
    assert got.column("value").to_pylist() == [b"%d" % i for i in range(13, 28)]
    assert reader.read("t", 0, 40).num_rows == 0
    with pytest.raises(OffsetOutOfRangeError, match="log-end 40"):
        reader.read("t", 0, 41)


def test_reads_only_the_row_groups_needed(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("t", 1)
    n = ROW_GROUP_SIZE * 2 + 100
    producer.send_batch("t", None, [b"%d" % i for i in range(n)], partitions=[0] * n)
    producer.flush()
    for start, count in [(0, 5), (ROW_GROUP_SIZE - 2, 4), (ROW_GROUP_SIZE * 2 + 50, 50)]:
        got = reader.read("t", 0, start, max_records=count)
        assert got.column("value").to_pylist() == [b"%d" % i for i in range(start, start + count)]


def test_offsets_for_times_is_first_offset_at_or_after(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("t", 2)
    # Timestamps are not monotonic (CreateTime): the answer is the first offset >= T.
    stamps = [100, 300, 200, 400, 250]
    for ts in stamps:
        producer.send("t", None, b"v", timestamp=ts, partition=0)
    producer.flush()
    producer.send("t", None, b"v", timestamp=500, partition=0)
    producer.flush()
    assert reader.offsets_for_times("t", 0) == {0: 0, 1: None}
    assert reader.offsets_for_times("t", 150)[0] == 1
    assert reader.offsets_for_times("t", 300)[0] == 1
    assert reader.offsets_for_times("t", 301)[0] == 3
    assert reader.offsets_for_times("t", 450)[0] == 5
    assert reader.offsets_for_times("t", 501)[0] is None
    assert reader.offsets_for_times("t", -1) == {0: 6, 1: 0}
    assert reader.offsets_for_times("t", -2) == {0: 0, 1: 0}


def test_lost_compare_and_swap_retries_with_new_offsets(
    admin: TopicAdmin, root: str, reader: TopicReader
) -> None:
    admin.create("t", 1)
    first, second = Producer(root), Producer(root)
    first.send("t", None, b"a1")
    first.flush()
    # Let `second` commit right after `first` computed its offsets and before it commits.
    tlog = first.admin.topic_log("t")
    refresh = tlog.refresh
    raced = []

    def refresh_then_race(upto: int | None = None) -> OffsetIndex:
        index = refresh(upto)
        if upto is not None and not raced:
            raced.append(True)
            second.send("t", None, b"b1")
            second.flush()
        return index

    tlog.refresh = refresh_then_race  # type: ignore[method-assign]
    first.send("t", None, b"a2")
    (result,) = first.flush()
    assert raced and first.metrics["commit_conflicts"] == 1
    assert result.base_offset == 2
    assert [r.value for r in reader.records("t", 0, 0)] == [b"a1", b"b1", b"a2"]


def test_foreign_appends_get_offsets_in_log_order(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("t", 2)
    producer.send("t", None, b"ours-0", partition=1)
    producer.flush()
    foreign = pa.table(
        {
            "partition": pa.array([1, 1, 0], pa.int32()),
            "key": pa.array([b"x", b"y", b"z"], pa.binary()),
            "value": pa.array([b"theirs-1", b"theirs-2", b"theirs-p0"], pa.binary()),
            "timestamp": pa.array([1, 2, 3], pa.int64()),
            "headers": pa.array([[], [], []], TABLE_SCHEMA.field("headers").type),
        },
        schema=TABLE_SCHEMA,
    )
    write_deltalake(admin.table_uri("t"), foreign, mode="append")
    producer.send("t", None, b"ours-3", partition=1)
    producer.flush()
    got = [(r.offset, r.value) for r in reader.records("t", 1, 0)]
    assert got == [(0, b"ours-0"), (1, b"theirs-1"), (2, b"theirs-2"), (3, b"ours-3")]
    assert [(r.offset, r.value) for r in reader.records("t", 0, 0)] == [(0, b"theirs-p0")]


def test_rewrites_that_break_offsets_are_refused(
    admin: TopicAdmin, producer: Producer, root: str
) -> None:
    admin.create("t", 1)
    for i in range(3):
        producer.send("t", None, b"%d" % i)
        producer.flush()
    DeltaTable(admin.table_uri("t")).optimize.compact()
    with pytest.raises(StorageError, match="OPTIMIZE"):
        TopicReader(root).end_offsets("t")


def test_removed_files_move_log_start(admin: TopicAdmin, producer: Producer, root: str) -> None:
    admin.create("t", 2)
    for i in range(3):
        producer.send("t", None, b"%d" % i, partition=0)
        producer.flush()
    producer.send("t", None, b"other", partition=1)
    producer.flush()
    # Retention: drop the oldest file of partition 0 from the log.
    DeltaTable(admin.table_uri("t")).delete("partition = 0 AND value = X'30'")
    reader = TopicReader(root)
    assert reader.beginning_offsets("t") == {0: 1, 1: 0}
    assert [r.offset for r in reader.records("t", 0, 1)] == [1, 2]
    with pytest.raises(OffsetOutOfRangeError, match="log-start 1"):
        reader.read("t", 0, 0)


def test_index_snapshot_survives_log_cleanup(
    admin: TopicAdmin, producer: Producer, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topic_log, "SNAPSHOT_EVERY", 10)
    admin.create("t", 2)
    for i in range(25):
        producer.send("t", b"k%d" % i, b"%d" % i)
        producer.flush()
    snapshots = glob.glob(os.path.join(admin.table_path("t"), "_streams_index", "*.json.gz"))
    assert snapshots, "the producer should have written an offset-index snapshot"
    newest = max(int(os.path.basename(s).split(".")[0]) for s in snapshots)
    # Delta may clean up old commits; offsets must stay answerable.
    for version in range(newest + 1):
        os.remove(os.path.join(admin.table_path("t"), "_delta_log", f"{version:020d}.json"))
    fresh = TopicReader(root)
    assert sum(fresh.end_offsets("t").values()) == 25
    values = sorted(int(r.value or b"") for p in range(2) for r in fresh.records("t", p, 0))
    assert values == list(range(25))


def test_missing_log_without_snapshot_is_an_error(admin: TopicAdmin, root: str) -> None:
    admin.create("t", 1)
    os.remove(os.path.join(admin.table_path("t"), "_delta_log", f"{0:020d}.json"))
    with pytest.raises(StorageError, match="no version 0"):
        TopicReader(root).end_offsets("t")


def _data_files(admin: TopicAdmin, topic: str) -> list[str]:
    return sorted(glob.glob(os.path.join(admin.table_path(topic), "partition=*", "*.parquet")))


def test_commit_reported_failed_but_landed_is_not_repeated(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("t", 1)
    producer.send("t", None, b"first")
    producer.flush()
    table = producer.committer("t").table()
    real = table.create_write_transaction

    def commit_then_lose_the_answer(*args: object, **kwargs: object) -> None:
        real(*args, **kwargs)  # type: ignore[arg-type]
        raise DeltaError("connection reset after the commit was written")

    table.create_write_transaction = commit_then_lose_the_answer  # type: ignore[method-assign]
    producer.send("t", None, b"second")
    (result,) = producer.flush()
    assert result.base_offset == 1
    assert [r.value for r in reader.records("t", 0, 0)] == [b"first", b"second"]
    assert len(_data_files(admin, "t")) == 2  # the landed file was kept


def test_commit_that_did_not_land_removes_its_files(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("t", 2)
    producer.send("t", None, b"first", partition=0)
    producer.flush()
    table = producer.committer("t").table()

    def refuse(*args: object, **kwargs: object) -> None:
        raise DeltaError("permission denied")

    table.create_write_transaction = refuse  # type: ignore[method-assign]
    producer.send("t", None, b"lost", partition=0)
    producer.send("t", None, b"lost", partition=1)
    with pytest.raises(StorageError, match="permission denied"):
        producer.flush()
    assert len(_data_files(admin, "t")) == 1
    assert reader.end_offsets("t") == {0: 1, 1: 0}


def test_failed_file_write_leaves_no_partial_batch(
    admin: TopicAdmin, producer: Producer, reader: TopicReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin.create("t", 4)
    real, calls = committer.pq.write_table, []

    def disk_full_on_third(*args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(committer.pq, "write_table", disk_full_on_third)
    for p in range(4):
        producer.send("t", None, b"v", partition=p)
    with pytest.raises(StorageError, match="No space left"):
        producer.flush()
    assert _data_files(admin, "t") == []
    assert reader.end_offsets("t") == {0: 0, 1: 0, 2: 0, 3: 0}


def test_the_index_knows_each_transactions_commit_through_its_snapshots(
    admin: TopicAdmin, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a transaction's commit landed is a look-up in the offset index, kept in its
    snapshots; a snapshot written before the index kept transactions knows only those
    after it (the committer then asks the Delta log)."""
    monkeypatch.setattr(topic_log, "SNAPSHOT_EVERY", 3)
    admin.create("t", 1)
    for seq in range(1, 5):
        producer = TransactionalProducer(admin, f"app-{seq % 2}")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"k", b"%d" % seq)
        producer.commit_transaction()
        producer.close()
    index = TopicReader(root).index("t")
    assert index.txns_from == -1
    coordinator = TransactionCoordinator(admin)
    for tid in ("app-0", "app-1"):
        snap = coordinator.load(tid)
        assert snap is not None and index.txn_committed(tid) == snap.meta.txn_sequence > 0
    assert index.txn_committed("app-2") is None
    snapshot = index.to_json()
    assert OffsetIndex.from_json(snapshot).txns == index.txns
    del snapshot["txns"], snapshot["txns_from"]  # as written before
    old = OffsetIndex.from_json(snapshot)
    assert old.txns == {} and old.txns_from == index.version
