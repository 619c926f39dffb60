"""The log cleaner on real Delta topics: retention, compaction, merging, purges, vacuum and
the Delta log cleanup keep every offset a reader may still read, and bound the files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from common.config import StreamsConfig
from common.errors import OffsetOutOfRangeError, StorageError, TopicError
from runtime.storage.cleaner import LogCleaner
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader, read_slices
from runtime.storage.records import ConsumerRecord
from runtime.storage.topics import TopicAdmin
from runtime.storage.vacuum import clean_delta_log, vacuum
from runtime.thread.read_plan import ReadPlanner
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OffsetsStore
from tests.clitools import cli

T0 = 1_700_000_000_000
TOPIC = "events"


def produce_files(
    producer: Producer,
    topic: str,
    files: int,
    per_file: int = 5,
    *,
    partition: int = 0,
    keys: int | None = None,
    t0: int = T0,
    step_ms: int = 1000,
) -> None:
    """Commit ``files`` files to ``partition``, file ``i`` stamped ``t0 + i * step_ms``."""
    n = 0
    for i in range(files):
        for _ in range(per_file):
            key = b"k%d" % (n % keys) if keys else b"r%d" % n
            producer.send(topic, key, b"v%d" % n, timestamp=t0 + i * step_ms, partition=partition)
            n += 1
        producer.flush()


def everything(reader: TopicReader, topic: str, partition: int = 0) -> list[ConsumerRecord]:
    return reader.records(topic, partition, reader.beginning_offsets(topic)[partition])


def live_files(admin: TopicAdmin, topic: str, partition: int = 0) -> int:
    return len(admin.topic_log(topic).refresh().log(partition).segments)


def on_disk(root: str, topic: str) -> set[str]:
    out = set()
    for base, _dirs, names in os.walk(Path(root, "topics", topic)):
        if "_delta_log" in base or "_streams_index" in base:
            continue
        out |= {os.path.join(base, n) for n in names if n.endswith(".parquet")}
    return out


def test_retention_ms_removes_whole_expired_files_and_moves_log_start(
    admin: TopicAdmin, producer: Producer, reader: TopicReader, root: str
) -> None:
    admin.create(TOPIC, 2, configs={"retention.ms": "10000"})
    produce_files(producer, TOPIC, 6)  # files stamped T0 .. T0+5s, offsets [5i, 5i+5)
    before = everything(reader, TOPIC)
    files_before = on_disk(root, TOPIC)
    cleaner = LogCleaner(admin)
    # at T0+12.5 s the files stamped T0..T0+2 s are older than 10 s
    done = cleaner.clean(TOPIC, now_ms=T0 + 12_500, merge=False)
    assert (done.deleted_files, done.deleted_records) == (3, 15)
    assert reader.beginning_offsets(TOPIC) == {0: 15, 1: 0}
    assert reader.end_offsets(TOPIC) == {0: 30, 1: 0}
    assert everything(reader, TOPIC) == before[15:]
    with pytest.raises(OffsetOutOfRangeError, match="log-start 15"):
        reader.records(TOPIC, 0, 14)
    # the removed files stay on storage for file.delete.delay.ms (60 s by default)
    assert on_disk(root, TOPIC) == files_before
    later = cleaner.clean(TOPIC, now_ms=T0 + 12_500 + 59_000, merge=False)
    assert later.vacuumed_files == 0
    later = cleaner.clean(TOPIC, now_ms=T0 + 200_000, merge=False)
    # everything expired by now: every file goes, log-start reaches log-end
    assert reader.beginning_offsets(TOPIC) == {0: 30, 1: 0}
    assert reader.records(TOPIC, 0, 30) == []
    producer.send(TOPIC, b"k", b"new", timestamp=T0 + 200_000, partition=0)
    producer.flush()
    assert [(r.offset, r.value) for r in everything(reader, TOPIC)] == [(30, b"new")]


def test_retention_bytes_keeps_the_newest_files_within_the_limit(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create(TOPIC, 1)
    produce_files(producer, TOPIC, 8, t0=T0)
    sizes = [s.size for s in admin.topic_log(TOPIC).refresh().log(0).segments]
    assert all(sizes)
    limit = sum(sizes[-3:])  # room for the newest three files exactly
    admin.alter_configs(TOPIC, {"retention.bytes": str(limit), "retention.ms": "-1"})
    LogCleaner(admin).clean(TOPIC, now_ms=T0, merge=False)
    assert reader.beginning_offsets(TOPIC) == {0: 25}
    assert [r.offset for r in everything(reader, TOPIC)] == list(range(25, 40))


def test_a_consumer_behind_log_start_resets_as_configured(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create(TOPIC, 1, configs={"retention.ms": "1000"})
    produce_files(producer, TOPIC, 4, t0=T0, step_ms=10_000)
    LogCleaner(admin).clean(TOPIC, now_ms=T0 + 15_000, merge=False)  # two files expired
    assert reader.beginning_offsets(TOPIC) == {0: 10}

    def planner(reset: str) -> ReadPlanner:
        config = StreamsConfig(
            **{"application.id": "a", "topics.root": admin.root.uri, "auto.offset.reset": reset}
        )
        return ReadPlanner(reader, config, {TOPIC: 0}, frozenset(), "t")

    positions = {(TOPIC, 0): 3}  # committed before retention removed offsets 0..9
    reads = planner("earliest").plan([TOPIC], lambda _t, _p: True, positions)
    assert positions[(TOPIC, 0)] == 10 and reads.inputs[0][0].start == 10
    positions = {(TOPIC, 0): 3}
    assert not planner("latest").plan([TOPIC], lambda _t, _p: True, positions).inputs
    assert positions[(TOPIC, 0)] == 20
    with pytest.raises(OffsetOutOfRangeError, match="auto.offset.reset=none"):
        planner("none").plan([TOPIC], lambda _t, _p: True, {(TOPIC, 0): 3})


def test_a_compacted_topic_keeps_the_latest_value_per_key_at_its_offset(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("profiles", 1, configs={"cleanup.policy": "compact"})
    produce_files(producer, "profiles", 3, per_file=7, keys=5)  # offsets 0..20
    producer.send("profiles", b"solo", b"once", timestamp=T0, partition=0)  # offset 21
    producer.flush()
    produce_files(producer, "profiles", 3, per_file=7, keys=5)  # offsets 22..42
    before = everything(reader, "profiles")
    done = LogCleaner(admin).clean("profiles", now_ms=T0 + 10**9, merge=False)
    assert done.compactions and done.deleted_files == 0
    after = everything(reader, "profiles")
    last_file = before[36:]  # the newest file is never compacted
    below = {r.key: r for r in before[:36]}
    expected = sorted(below.values(), key=lambda r: r.offset) + last_file
    assert after == expected  # same offsets, keys, values, timestamps
    assert [r.offset for r in after[:2]] == [21, 31]  # solo, then the hot keys' latest
    assert reader.beginning_offsets("profiles") == {0: 21}
    assert reader.end_offsets("profiles") == {0: 43}
    # a reader positioned in a compacted gap reads on from the next record kept
    assert reader.records("profiles", 0, 22)[0].offset == 31
    # compaction never runs on a topic whose policy is delete
    admin.create(TOPIC, 1)
    produce_files(producer, TOPIC, 3, keys=1)
    assert not LogCleaner(admin).clean(TOPIC, now_ms=T0, merge=False).compactions


def test_merging_keeps_every_offset_and_record_for_every_reader(
    admin: TopicAdmin, producer: Producer, reader: TopicReader, root: str
) -> None:
    admin.create(TOPIC, 2, configs={"retention.ms": "-1"})
    produce_files(producer, TOPIC, 70, per_file=3)
    produce_files(producer, TOPIC, 5, per_file=3, partition=1)
    before = everything(reader, TOPIC)
    assert live_files(admin, TOPIC) == 70
    cleaner = LogCleaner(admin)
    for _ in range(3):  # eight files of like size become one, eight of those one more
        cleaner.clean(TOPIC, now_ms=T0)
    assert live_files(admin, TOPIC) <= 8
    assert live_files(admin, TOPIC, 1) == 5  # fewer than eight: nothing to merge
    fresh = TopicReader(root)  # another process: builds its index from the log
    for r in (reader, fresh):
        assert everything(r, TOPIC) == before
        for offset in (0, 17, 64, 209):  # any position reads on from exactly there
            assert r.records(TOPIC, 0, offset, 3) == before[offset : offset + 3]
    assert fresh.end_offsets(TOPIC) == {0: 210, 1: 15}
    # Delta readers see ordinary files with the same rows
    table = DeltaTable(admin.table_uri(TOPIC))
    rows = table.to_pyarrow_table(columns=["partition", "key", "value", "timestamp"])
    assert rows.num_rows == 225
    got = sorted(zip(rows.column("key").to_pylist(), rows.column("value").to_pylist(), strict=True))
    want = sorted((r.key, r.value) for r in before) + sorted(
        (r.key, r.value) for r in everything(reader, TOPIC, 1)
    )
    assert got == sorted(want)
    listed = pa.concat_tables(
        [pq.read_table(u, columns=["key", "value"]) for u in table.file_uris()]
    )
    assert (
        sorted(
            zip(listed.column("key").to_pylist(), listed.column("value").to_pylist(), strict=True)
        )
        == got
    )
    # the command line shows the live files and bytes per partition
    described = cli(root, "topics", "--describe", "--topic", TOPIC)
    assert described.returncode == 0, described.stderr
    head, p0, p1 = described.stdout.splitlines()
    live = admin.topic_log(TOPIC).refresh()
    size = sum(s.size or 0 for s in live.log(0).segments)
    assert f"Files: {live_files(admin, TOPIC)}\tBytes: {size}" in p0
    assert "LogStartOffset: 0\tLogEndOffset: 210\tRecords: 210" in p0
    assert "Files: 5\t" in p1 and f"AwaitingVacuum: {len(live.removed)}" in head
    # and the command line reads from any offset of a merged file
    out = cli(
        root,
        "console-consume",
        "--topic",
        TOPIC,
        "--partition",
        "0",
        "--offset",
        "101",
        "--max-messages",
        "3",
        "--property",
        "print.offset=true",
        "--timeout-ms",
        "300",
    )
    assert out.returncode == 0, out.stderr
    assert [line.split("\t")[0] for line in out.stdout.splitlines()] == ["101", "102", "103"]
    assert [line.split("\t")[1] for line in out.stdout.splitlines()] == [
        r.value.decode() for r in before[101:104]
    ]


def test_a_purge_never_removes_a_record_some_group_has_not_consumed(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    topic = "app-agg-repartition"
    admin.create(topic, 2, configs={"retention.ms": "-1"})
    produce_files(producer, topic, 6)  # partition 0: files [0,5) .. [25,30)
    produce_files(producer, topic, 2, partition=1)
    offsets = OffsetsStore(admin)
    offsets.commit("app", {(topic, 0): 27, (topic, 1): 10})
    offsets.commit("audit", {(topic, 0): 12})  # a second group, further behind
    below = offsets.consumed_by_all(topic)
    assert below == {0: 12, 1: 10}
    done = LogCleaner(admin).clean(
        topic, now_ms=T0, retention=False, purge_below=below, merge=False
    )
    assert done.deleted_files == 4  # [0,5) [5,10) of p0; both files of p1
    assert reader.beginning_offsets(topic) == {0: 10, 1: 10}
    assert reader.records(topic, 0, 10)[0].offset == 10  # the audit group reads on at 12
    assert len(reader.records(topic, 0, 12)) == 18
    offsets.commit("audit", {(topic, 0): 30})
    LogCleaner(admin).clean(
        topic, now_ms=T0, retention=False, purge_below=offsets.consumed_by_all(topic), merge=False
    )
    assert reader.beginning_offsets(topic) == {0: 25, 1: 10}  # the app is at 27


def test_the_vacuum_never_deletes_a_file_a_running_reader_still_needs(
    admin: TopicAdmin, producer: Producer, reader: TopicReader, root: str
) -> None:
    admin.create(TOPIC, 1, configs={"file.delete.delay.ms": "30000", "retention.ms": "-1"})
    produce_files(producer, TOPIC, 16)
    slices = reader.plan(TOPIC, 0, 0)  # a reader planned the small files...
    cleaner = LogCleaner(admin)
    done = cleaner.clean(TOPIC, now_ms=T0)  # ...then they were merged away
    assert done.merged_files == 16 and live_files(admin, TOPIC) == 2
    assert cleaner.clean(TOPIC, now_ms=T0 + 29_000).vacuumed_files == 0
    table = read_slices(admin.root, TOPIC, 0, slices)  # still all there
    assert table.column("offset").to_pylist() == list(range(80))
    # a batch of this process that planned them holds a lease: kept past the delay too
    lease = admin.leases.hold(piece.file for piece in slices)
    late = int(time.time() * 1000) + 31_000
    assert cleaner.clean(TOPIC, now_ms=late).vacuumed_files == 0
    admin.leases.release(lease)
    # the transaction coordinator's orphan sweep leaves them to the vacuum too
    TransactionCoordinator(admin).delete_orphans(min_age_ms=0)
    assert read_slices(admin.root, TOPIC, 0, slices).num_rows == 80
    gone = cleaner.clean(TOPIC, now_ms=int(time.time() * 1000) + 31_000)
    assert gone.vacuumed_files == 16
    with pytest.raises(StorageError, match="cannot read data file"):
        read_slices(admin.root, TOPIC, 0, slices)
    assert [r.offset for r in everything(reader, TOPIC)] == list(range(80))
    # the staging directories the files lived in are gone too
    staging = Path(root, "topics", TOPIC, "txn-staging")
    assert not any(p.is_dir() for p in staging.glob("*/*"))


def test_the_delta_log_is_cleaned_behind_an_index_snapshot(
    admin: TopicAdmin, producer: Producer, root: str
) -> None:
    admin.create(TOPIC, 1)
    produce_files(producer, TOPIC, 130, per_file=1)  # delta-rs checkpoints at version 100
    log_dir = Path(root, "topics", TOPIC, "_delta_log")
    assert (log_dir / "_last_checkpoint").exists()
    now = int(time.time() * 1000)
    assert clean_delta_log(admin, TOPIC, retention_ms=3_600_000, now_ms=now) == 0  # too young
    deleted = clean_delta_log(admin, TOPIC, retention_ms=0, now_ms=now + 1)
    assert deleted >= 99 and not (log_dir / f"{0:020d}.json").exists()
    fresh = TopicReader(root)  # a new process: starts from the index snapshot
    assert fresh.end_offsets(TOPIC) == {0: 130}
    assert [r.offset for r in fresh.records(TOPIC, 0, 120)] == list(range(120, 130))
    assert DeltaTable(admin.table_uri(TOPIC)).to_pyarrow_table().num_rows == 130
    producer.send(TOPIC, b"k", b"after", partition=0)
    producer.flush()
    assert fresh.end_offsets(TOPIC) == {0: 131}


def test_topic_configs_of_the_cleaner_are_validated(admin: TopicAdmin) -> None:
    admin.create(
        TOPIC,
        1,
        configs={
            "delta.logRetentionDuration": "interval 2 hours",
            "segment.bytes": "1048576",
            "file.delete.delay.ms": "0",
        },
    )
    configs = admin.configs(TOPIC)
    assert configs["delta.logRetentionDuration"] == "interval 2 hours"
    assert configs["segment.bytes"] == "1048576"
    with pytest.raises(TopicError, match="interval <n> <unit>"):
        admin.alter_configs(TOPIC, {"delta.logRetentionDuration": "2 hours"})
    with pytest.raises(TopicError, match="segment.bytes"):
        admin.alter_configs(TOPIC, {"segment.bytes": "10"})
    assert vacuum(admin, TOPIC, delay_ms=0, now_ms=T0).files == 0


def test_delta_checkpoints_keep_the_tombstones_of_merged_files_for_ten_minutes_only(
    admin: TopicAdmin, producer: Producer, root: str
) -> None:
    """Merges remove files at every batch: Delta's default keeps each tombstone in every
    checkpoint for a week (millions of rows in a month-old topic); topics keep them for ten
    minutes (changeable per topic)."""
    admin.create(TOPIC, 1, configs={"segment.ms": "3600000"})
    properties = DeltaTable(admin.table_uri(TOPIC)).metadata().configuration
    assert properties["delta.deletedFileRetentionDuration"] == "interval 10 minutes"
    with pytest.raises(TopicError, match="interval <n> <unit>"):
        admin.alter_configs(TOPIC, {"delta.deletedFileRetentionDuration": "1h"})
    admin.alter_configs(TOPIC, {"delta.deletedFileRetentionDuration": "interval 1 second"})
    assert admin.configs(TOPIC)["delta.deletedFileRetentionDuration"] == "interval 1 second"
    produce_files(producer, TOPIC, 64, per_file=2)
    cleaner = LogCleaner(admin)
    assert cleaner.clean(TOPIC, retention=False, now_ms=T0 + 64_000).merged_files == 64
    time.sleep(1.5)
    produce_files(producer, TOPIC, 1, per_file=1, t0=T0 + 70_000)
    DeltaTable(admin.table_uri(TOPIC)).create_checkpoint()
    checkpoint = sorted(Path(root, "topics", TOPIC, "_delta_log").glob("*.checkpoint.parquet"))
    actions = pq.read_table(checkpoint[-1])
    assert len(actions.column("remove").drop_null()) == 0  # 64 files removed, none kept
    assert len(actions.column("add").drop_null()) == 9  # 8 merged, 1 new
    assert [r.offset for r in everything(TopicReader(root), TOPIC)] == list(range(129))
