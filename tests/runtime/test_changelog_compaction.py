"""Changelog compaction on real Delta topics: latest value per key, tombstone retention,
the clean horizon, reads across gaps, concurrent producers, and restores (RocksDB)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from common.errors import OffsetOutOfRangeError
from runtime.state.changelog_compaction import compact_changelogs
from runtime.storage import rewrite
from runtime.storage.compaction import (
    ChangelogCompactor,
    CompactionConflictError,
    compact_changelog,
)
from runtime.storage.offset_index import OffsetIndex
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.records import ConsumerRecord
from runtime.storage.topics import TopicAdmin
from statestores.bytes_layer import bottom
from statestores.compaction import ChangelogRecord, compact
from tests.statestores.harness import APP, STORE, Task

TOPIC = "app-counts-changelog"
T0 = 1_000_000
Batch = list[tuple[bytes, bytes | None, int]]


def produce(producer: Producer, batches: list[Batch], partition: int = 0) -> None:
    """Commit each batch as one file of ``partition``."""
    for batch in batches:
        for key, value, ts in batch:
            producer.send(
                TOPIC, key, value, timestamp=ts, partition=partition, headers=[("h", key)]
            )
        producer.flush()


def everything(reader: TopicReader, partition: int = 0) -> list[ConsumerRecord]:
    start = reader.beginning_offsets(TOPIC)[partition]
    return reader.records(TOPIC, partition, start)


def latest_below(records: list[ConsumerRecord], horizon: int) -> list[ConsumerRecord]:
    latest: dict[bytes | None, ConsumerRecord] = {}
    for r in records:
        if r.offset < horizon:
            latest[r.key] = r
    return sorted(latest.values(), key=lambda r: r.offset)


def history(files: int, per_file: int = 10, keys: int = 7) -> list[Batch]:
    """``files`` batches: updates of ``keys`` hot keys, every fourth record a key written
    once (so compaction leaves gaps between kept records), every fifth a tombstone."""
    out: list[Batch] = []
    n = 0
    for _ in range(files):
        batch: Batch = []
        for _ in range(per_file):
            key = b"u%d" % n if n % 4 == 1 else b"k%d" % (n % keys)
            batch.append((key, None if n % 5 == 4 else b"v%d" % n, T0 + n))
            n += 1
        out.append(batch)
    return out


@pytest.fixture
def topic(admin: TopicAdmin) -> str:
    admin.create(TOPIC, 2, configs={"cleanup.policy": "compact"})
    return TOPIC


def test_keeps_latest_value_per_key_and_leaves_the_rest_untouched(
    topic: str, producer: Producer, reader: TopicReader, root: str
) -> None:
    produce(producer, history(4))  # files [0,10) [10,20) [20,30) [30,40)
    before = everything(reader)
    result = compact_changelog(root, topic, 0, horizon=30, delete_retention_ms=10**9, now_ms=T0)
    (done,) = result.partitions
    assert (done.horizon, done.files_removed, done.version) == (30, 3, 5)
    after = everything(reader)
    expected = latest_below(before, 30)
    assert [r for r in after if r.offset < 30] == expected  # same offsets, values, headers
    assert [r for r in after if r.offset >= 30] == before[30:]
    assert done.records_before == 30 and done.records_after == len(expected) < 30
    assert result.removed == 30 - len(expected) and result.tombstones_removed == 0
    assert reader.end_offsets(topic) == {0: 40, 1: 0}
    assert reader.beginning_offsets(topic) == {0: expected[0].offset, 1: 0}
    assert after[0].offset > 0  # the log really has a gap at its head
    # a Delta reader that knows nothing of offsets sees the compacted table too
    assert DeltaTable(TopicAdmin(root).table_uri(topic)).to_pyarrow_table().num_rows == len(after)


def test_tombstones_are_dropped_only_after_delete_retention(
    topic: str, producer: Producer, reader: TopicReader, root: str
) -> None:
    produce(producer, [[(b"a", b"1", T0), (b"b", b"1", T0)], [(b"a", None, T0 + 10)], []])
    produce(producer, [[(b"c", b"1", T0 + 20)]])
    young = compact_changelog(root, topic, 0, horizon=3, delete_retention_ms=100, now_ms=T0 + 109)
    assert young.tombstones_removed == 0 and young.removed == 1  # a=1 is superseded
    assert [(r.key, r.value) for r in everything(reader)] == [
        (b"b", b"1"),
        (b"a", None),
        (b"c", b"1"),
    ]
    old = compact_changelog(root, topic, 0, horizon=3, delete_retention_ms=100, now_ms=T0 + 111)
    assert old.tombstones_removed == 1 and old.removed == 1
    assert [(r.offset, r.key) for r in everything(reader)] == [(1, b"b"), (3, b"c")]
    assert reader.end_offsets(topic)[0] == 4


def test_nothing_at_or_above_the_horizon_and_never_the_last_file_is_touched(
    topic: str, producer: Producer, reader: TopicReader, root: str, admin: TopicAdmin
) -> None:
    produce(producer, history(3))
    before = everything(reader)
    segments = admin.index(topic).log(0).segments
    # a horizon inside the second file: only the first file lies wholly below it
    (done,) = compact_changelog(
        root, topic, 0, horizon=15, delete_retention_ms=0, now_ms=T0 + 10**6
    ).partitions
    assert done.horizon == 10 and done.files_removed == 1
    assert [s for s in admin.index(topic).log(0).segments if not s.sparse] == segments[1:]
    assert everything(reader)[-20:] == before[10:]
    # a horizon at the log end still leaves the last file (Kafka's active segment)
    (done,) = compact_changelog(
        root, topic, 0, horizon=10**9, delete_retention_ms=0, now_ms=T0 + 10**6
    ).partitions
    assert done.horizon == 20
    assert admin.index(topic).log(0).segments[-1] == segments[-1]
    assert [r for r in everything(reader) if r.offset >= 20] == before[20:]


def test_reads_from_any_offset_inside_a_gap(
    topic: str, producer: Producer, reader: TopicReader, root: str
) -> None:
    produce(producer, history(5, per_file=20, keys=6))
    compact_changelog(root, topic, 0, horizon=80, delete_retention_ms=0, now_ms=T0 + 10**6)
    kept = everything(reader)
    start, end = reader.beginning_offsets(topic)[0], reader.end_offsets(topic)[0]
    assert len([r for r in kept if r.offset < 80]) < 30  # heavily compacted, with gaps
    for offset in range(start, end + 1):
        assert reader.records(TOPIC, 0, offset) == [r for r in kept if r.offset >= offset]
        window = reader.records(TOPIC, 0, offset, 7)  # offsets [offset, offset + 7)
        assert window == [r for r in kept if offset <= r.offset < offset + 7]
        following = [r.offset for r in kept if r.offset >= offset]
        assert reader.next_record_offset(TOPIC, 0, offset) == (following[0] if following else None)
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(TOPIC, 0, start - 1)
    # offsets by time come from the records, gaps included
    assert reader.offsets_for_times(TOPIC, T0)[0] == start
    assert reader.offsets_for_times(TOPIC, T0 + 85)[0] == 85


def test_producer_appends_after_compaction_get_the_next_offsets(
    topic: str, producer: Producer, reader: TopicReader, root: str
) -> None:
    produce(producer, history(3))
    compact_changelog(root, topic, 0, horizon=20, delete_retention_ms=0, now_ms=T0 + 10**6)
    producer.send(TOPIC, b"new", b"x", timestamp=T0, partition=0)
    (landed,) = producer.flush()
    assert (landed.base_offset, landed.count) == (30, 1)
    assert reader.records(TOPIC, 0, 30)[0].key == b"new"
    assert reader.end_offsets(topic)[0] == 31
    # the index survives a snapshot round trip and a fresh process replaying the log
    index = TopicAdmin(root).index(topic)
    again = OffsetIndex.from_json(index.to_json())
    assert again.log(0).segments == index.log(0).segments and index.log(0).segments[0].sparse
    assert TopicReader(root).records(TOPIC, 0, index.log(0).start) == everything(reader)


def test_recompaction_merges_the_compacted_head(
    topic: str, producer: Producer, reader: TopicReader, root: str, admin: TopicAdmin
) -> None:
    produce(producer, history(4))
    before = everything(reader)
    compact_changelog(root, topic, 0, horizon=20, delete_retention_ms=10**9, now_ms=T0)
    compact_changelog(root, topic, 0, horizon=30, delete_retention_ms=10**9, now_ms=T0)
    sparse = [s for s in admin.index(topic).log(0).segments if s.sparse]
    assert len(sparse) == 1 and sparse[0].end == 30
    assert [r for r in everything(reader) if r.offset < 30] == latest_below(before, 30)
    # nothing more to remove: no commit
    (done,) = compact_changelog(
        root, topic, 0, horizon=30, delete_retention_ms=10**9, now_ms=T0
    ).partitions
    assert done.version is None and done.removed == 0


def test_a_producer_commit_between_prepare_and_commit_is_kept(
    topic: str, producer: Producer, reader: TopicReader, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    produce(producer, history(3))
    before = everything(reader)
    compactor = ChangelogCompactor(TopicAdmin(root), topic)
    plan = compactor.prepare(0, horizon=20, delete_retention_ms=0, now_ms=T0 + 10**6)
    assert plan is not None
    produce(producer, [[(b"k2", b"later", T0)]], partition=1)  # version 4
    checked: list[int] = []
    check = rewrite._check_live

    def racing(*args: Any) -> tuple[DeltaTable, int]:
        table, version = check(*args)
        checked.append(version)
        if len(checked) == 1:  # a producer commit lands after the check: the CAS is lost
            produce(producer, [[(b"k1", b"late", T0)]])  # version 5
        return table, version

    monkeypatch.setattr(rewrite, "_check_live", racing)
    done = compactor.commit(plan)
    assert checked == [4, 5] and done.version == 6
    records = everything(reader)
    assert [(r.offset, r.value) for r in records[-2:]] == [(29, before[29].value), (30, b"late")]
    assert reader.end_offsets(topic) == {0: 31, 1: 1}
    live = [r for r in latest_below(before, 20) if r.value is not None]
    assert [r for r in records if r.offset < 20] == live


def test_a_concurrent_compaction_of_the_same_files_fails_cleanly(
    topic: str, producer: Producer, reader: TopicReader, root: str
) -> None:
    produce(producer, history(3))
    first = ChangelogCompactor(TopicAdmin(root), topic)
    second = ChangelogCompactor(TopicAdmin(root), topic)
    plan_a = first.prepare(0, horizon=20, delete_retention_ms=0, now_ms=T0 + 10**6)
    plan_b = second.prepare(0, horizon=20, delete_retention_ms=0, now_ms=T0 + 10**6)
    assert plan_a is not None and plan_b is not None and plan_b.added is not None
    first.commit(plan_a)
    expected = everything(reader)
    with pytest.raises(CompactionConflictError, match="removed by another writer"):
        second.commit(plan_b)
    assert not Path(root, "topics", topic, plan_b.added.path).exists()  # its file is gone
    assert everything(reader) == expected
    assert TopicAdmin(root).index(topic).version == 4  # nothing more was committed


def test_compaction_races_producers_without_losing_a_record(
    topic: str, reader: TopicReader, root: str
) -> None:
    sent: list[tuple[bytes, bytes]] = []

    def run() -> None:
        with Producer(root) as own:
            for n in range(40):
                own.send(TOPIC, b"k%d" % (n % 5), b"%d" % n, timestamp=T0, partition=0)
                sent.append((b"k%d" % (n % 5), b"%d" % n))
                own.flush()

    thread = threading.Thread(target=run)
    thread.start()
    compactions = 0
    while thread.is_alive() or compactions < 3:
        end = reader.end_offsets(TOPIC)[0]
        if end > 2:
            compact_changelog(root, TOPIC, 0, horizon=end - 1, delete_retention_ms=0, now_ms=T0)
            compactions += 1
    thread.join()
    assert reader.end_offsets(TOPIC)[0] == 40
    records = everything(reader)
    assert [(r.key, r.value) for r in records if r.offset >= 39] == [sent[39]]
    state = {r.key: r.value for r in records}
    assert state == dict(sent)  # the latest value of each key survived every race


def _write_history(task: Task, commits: int) -> dict[str, str]:
    expected: dict[str, str] = {}
    for n in range(commits):
        batch: dict[str, str | None] = {f"k{(n * 7 + i) % 60:02d}": f"v{n}-{i}" for i in range(20)}
        batch[f"k{(n * 3) % 60:02d}"] = None
        task.write(batch)
        for key, value in batch.items():
            if value is None:
                expected.pop(key, None)
            else:
                expected[key] = value
    return expected


def test_store_restored_from_snapshot_and_compacted_changelog_is_unchanged(
    root: str, tmp_path: Path
) -> None:
    state_dir = str(tmp_path / "state")
    task = Task(root, state_dir, config={"statestore.snapshot.interval": 4})
    expected = _write_history(task, 10)  # snapshots after commits 4 and 8
    snapshots = task.manager.snapshots
    assert snapshots is not None
    oldest, newest = (s.offset for s in snapshots.list(STORE))
    task.close()
    admin = TopicAdmin(root)
    changelog = f"{APP}-{STORE}-changelog"
    end = TopicReader(root).end_offsets(changelog)[0]

    # a live store's committed offset below the oldest snapshot lowers the horizon
    (limited,) = compact_changelogs(admin, APP, {}, lower_bounds={(changelog, 0): 21}, now_ms=T0)
    assert limited.partitions[0].horizon <= 21
    (result,) = compact_changelogs(admin, APP, {"delete.retention.ms": 0}, now_ms=2**62)
    (done,) = result.partitions
    assert done.horizon == oldest and done.removed > 0 and done.tombstones_removed > 0
    assert TopicReader(root).end_offsets(changelog)[0] == end

    shutil.rmtree(state_dir)  # the task moves: snapshot + tail
    rebuilt = Task(root, state_dir)
    assert rebuilt.state() == expected
    assert rebuilt.manager.restored[STORE] == end - newest
    # transactional changelog commits go on after compaction
    rebuilt.write({"after": "x", "k00": None})
    expected = {k: v for k, v in {**expected, "after": "x"}.items() if k != "k00"}
    assert rebuilt.state() == expected
    offsets = rebuilt.reader.offsets(changelog, 0)
    assert offsets is not None and bottom(rebuilt.store).committed_offset() == offsets[1] > end
    rebuilt.close()

    # without a snapshot the whole compacted changelog, gaps included, rebuilds the store
    fresh = Task(root, str(tmp_path / "fresh"), snapshots=False)
    assert fresh.state() == expected
    assert bottom(fresh.store).committed_offset() == offsets[1]
    assert fresh.reader.records_read < offsets[1] - offsets[0]  # fewer records than offsets
    fresh.close()


def test_no_snapshot_means_no_compaction(
    topic: str, producer: Producer, reader: TopicReader, admin: TopicAdmin
) -> None:
    produce(producer, history(4))
    before = everything(reader)
    (result,) = compact_changelogs(admin, "app", None, now_ms=T0 + 10**6)
    assert result.topic == topic and result.partitions == []
    assert everything(reader) == before
    other = "app-other-repartition"
    admin.create(other, 1)  # not a changelog: never looked at
    assert [r.topic for r in compact_changelogs(admin, "app", None)] == [topic]


def test_the_pure_function_refuses_records_out_of_offset_order() -> None:
    records = [ChangelogRecord(5, b"a", b"1", 0), ChangelogRecord(3, b"a", b"2", 0)]
    with pytest.raises(ValueError, match="increasing offset order"):
        compact(records, clean_horizon=10, now_ms=0, delete_retention_ms=0)
