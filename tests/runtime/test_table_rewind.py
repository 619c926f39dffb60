"""A topic put back to an earlier cut in one Delta commit: the files written since are
removed, the cut's files a compaction removed since come back (a pin kept them from the
vacuum), offsets after the cut are written again, and running it again commits nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from common.errors import StorageError
from runtime.storage.cleaner import LogCleaner
from runtime.storage.delta_log import log_path
from runtime.storage.pins import pin, pinned, unpin
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.table_rewind import rewind_sink, rewind_topic
from runtime.storage.topics import TopicAdmin
from runtime.storage.vacuum import vacuum
from tests.runtime.test_log_cleaner import T0, everything, produce_files

LATER = int(time.time() * 1000) + 10**7  # past every removal's file.delete.delay.ms


def cut_of(admin: TopicAdmin, topic: str) -> dict:
    index = admin.index(topic).to_json()
    index.pop("removed")
    return index


def files_of(cut: dict) -> list[str]:
    return [s[2] for log in cut["logs"].values() for s in log["segments"]]


def test_a_compacted_topic_goes_back_to_its_cut_and_offsets_go_on_from_there(
    admin: TopicAdmin, producer: Producer, reader: TopicReader
) -> None:
    admin.create("profiles", 1, configs={"cleanup.policy": "compact"})
    produce_files(producer, "profiles", 3, per_file=7, keys=5)  # offsets 0..20
    at_cut = everything(reader, "profiles")
    cut = cut_of(admin, "profiles")
    pin(admin, "profiles", "app@sp", files_of(cut))
    produce_files(producer, "profiles", 3, per_file=7, keys=5, t0=T0 + 10_000)  # 21..41
    done = LogCleaner(admin).clean("profiles", now_ms=T0 + 10**9, merge=False)
    assert done.compactions  # the cut's files are no longer live
    assert not set(files_of(cut)) & {s.path for s in admin.index("profiles").log(0).segments}
    removed = set(admin.index("profiles").removed)
    assert removed > set(files_of(cut))  # the compaction's inputs, the cut's and newer
    assert vacuum(admin, "profiles", delay_ms=0, now_ms=LATER).files == len(
        removed - set(files_of(cut))
    )
    assert pinned(admin, "profiles") == set(files_of(cut))
    for path in files_of(cut):  # kept by the pin
        assert Path(admin.table_path("profiles"), path).exists()
    since = admin.index("profiles").version

    version = rewind_topic(admin, "profiles", cut, "r1", since=since)
    assert version == since + 1
    fresh = TopicReader(TopicAdmin(admin.root.uri))  # a reader that never saw the topic
    for r in (reader, fresh):
        assert everything(r, "profiles") == at_cut
        assert r.end_offsets("profiles") == {0: 21}
    assert rewind_topic(admin, "profiles", cut, "r1", since=since) is None  # landed before
    producer.send("profiles", b"k9", b"after", timestamp=T0, partition=0)
    producer.flush()
    assert [r.offset for r in everything(reader, "profiles")][-2:] == [20, 21]
    # the Delta log itself says what is live: any Delta reader sees the cut's records
    table = DeltaTable(admin.table_uri("profiles"))
    assert table.to_pyarrow_table().num_rows == 22

    unpin(admin, "profiles", "app@sp")
    assert pinned(admin, "profiles") == set()


def test_a_rewind_refuses_when_a_file_of_the_cut_was_vacuumed(
    admin: TopicAdmin, producer: Producer
) -> None:
    admin.create("profiles", 1, configs={"cleanup.policy": "compact"})
    produce_files(producer, "profiles", 3, per_file=7, keys=5)
    cut = cut_of(admin, "profiles")  # never pinned
    produce_files(producer, "profiles", 3, per_file=7, keys=5, t0=T0 + 10_000)
    LogCleaner(admin).clean("profiles", now_ms=T0 + 10**9, merge=False)
    vacuum(admin, "profiles", delay_ms=0, now_ms=LATER)
    with pytest.raises(StorageError, match="of the cut is gone"):
        rewind_topic(admin, "profiles", cut, "r1", since=0)


def test_an_unreadable_pin_stops_the_vacuum_with_its_name(
    admin: TopicAdmin, producer: Producer
) -> None:
    admin.create("events", 1)
    produce_files(producer, "events", 2)
    bad = Path(admin.table_path("events"), "_streams_pins", "x@y.json")
    bad.parent.mkdir()
    bad.write_text("{")
    with pytest.raises(StorageError, match="x@y.json"):
        vacuum(admin, "events", delay_ms=0, now_ms=T0)


def test_a_delta_sink_is_restored_to_its_version_or_emptied(root: str, admin: TopicAdmin) -> None:
    path = str(Path(root, "tables", "totals"))
    write_deltalake(path, pa.table({"k": ["a"], "v": [1]}))
    write_deltalake(path, pa.table({"k": ["b"], "v": [2]}), mode="append")
    write_deltalake(path, pa.table({"k": ["c"], "v": [3]}), mode="append")
    assert rewind_sink(admin, path, 0, "r1", since=2) == 3
    assert DeltaTable(path).to_pyarrow_table().column("k").to_pylist() == ["a"]
    assert rewind_sink(admin, path, 0, "r1", since=2) is None  # at the cut already
    write_deltalake(path, pa.table({"k": ["d"], "v": [4]}), mode="append")
    rewind_sink(admin, path, None, "r2", since=4)
    assert DeltaTable(path).to_pyarrow_table().num_rows == 0
    history = DeltaTable(path).history(1)[0]
    assert json.dumps(history).count("r2") == 1


def test_a_torn_rewind_commit_is_completed_from_its_commit_info(
    admin: TopicAdmin, producer: Producer, root: str
) -> None:
    """A rewind commit cut after its commitInfo (a crash mid-write) is completed by the
    first reader from the cut it lists: the re-added files with their counts, the removes."""
    admin.create("profiles", 1, configs={"cleanup.policy": "compact"})
    produce_files(producer, "profiles", 3, per_file=7, keys=5)
    at_cut = everything(TopicReader(root), "profiles")
    cut = cut_of(admin, "profiles")
    pin(admin, "profiles", "app@sp", files_of(cut))
    produce_files(producer, "profiles", 3, per_file=7, keys=5, t0=T0 + 10_000)
    LogCleaner(admin).clean("profiles", now_ms=T0 + 10**9, merge=False)
    version = rewind_topic(admin, "profiles", cut, "r1", since=0)
    assert version is not None
    commit = Path(log_path(admin.root, admin.table_path("profiles"), version))
    lines = commit.read_bytes().splitlines(keepends=True)
    assert len(lines) > 2
    commit.write_bytes(lines[0])  # only the commitInfo survived
    fresh = TopicReader(root)
    assert everything(fresh, "profiles") == at_cut
    assert fresh.end_offsets("profiles") == {0: 21}
    assert DeltaTable(admin.table_uri("profiles")).to_pyarrow_table().num_rows == 21
