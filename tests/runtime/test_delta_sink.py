"""Delta sinks without Spark: staged typed rows are fitted to the table before the
transaction's PrepareCommit, committed once however often the commit phase runs, and the
log manager's maintenance compacts and vacuums the table without changing a row."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from common.delta_rows import RowColumns, RowKeySerde, RowValueSerde, rows_table, sink_topic
from common.errors import SerializationError
from runtime.storage.delta_sink import (
    DeltaSinkCommitter,
    maintain,
    prepare,
    sink_table,
    write_rows,
)
from runtime.storage.topics import TopicAdmin

COLS = RowColumns()
KEYS, VALUES = RowKeySerde(COLS), RowValueSerde(COLS)


@dataclasses.dataclass
class Order:
    item: str
    qty: int


def stage(admin: TopicAdmin, topic: str, records: list[tuple[Any, Any, int]], txn: str) -> Any:
    sink = sink_table(admin.root, topic)
    assert sink is not None
    rows, keys = rows_table(
        sink.table,
        sink.mode,
        [KEYS.serialize(topic, k) for k, _, _ in records],
        [VALUES.serialize(topic, v) for _, v, _ in records],
        [t for _, _, t in records],
    )
    staged = write_rows(
        admin.root, sink.path, f"txn-staging/{txn}", rows, mode=sink.mode, keys=keys
    )
    return sink, prepare(admin.root, sink, [staged])


def table_rows(uri: str) -> list[dict[str, Any]]:
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    return sorted(({k: v for k, v in r.items() if k != "timestamp"} for r in rows), key=str)


def test_an_upsert_keeps_one_row_per_key_deletes_on_tombstones_and_commits_once(
    admin: TopicAdmin,
) -> None:
    topic = sink_topic("orders", "upsert")
    sink, files = stage(
        admin,
        topic,
        [("a", Order("x", 1), 1), ("b", Order("y", 2), 2), ("a", Order("x", 3), 3)],
        "t1",
    )
    committer = DeltaSinkCommitter(admin.root, sink)
    committer.commit(files, timeout_ms=10_000, app_txn=("app-1", 0))
    committer.commit(files, timeout_ms=10_000, app_txn=("app-1", 0))  # a roll-forward
    assert table_rows(sink.uri) == [
        {"key": "a", "item": "x", "qty": 3},
        {"key": "b", "item": "y", "qty": 2},
    ]
    # a new field becomes a column; a tombstone deletes its key's row
    _, files = stage(
        admin, topic, [("b", None, 4), ("c", {"item": "z", "qty": 5, "note": "new"}, 5)], "t2"
    )
    committer.commit(files, timeout_ms=10_000, app_txn=("app-1", 1))
    assert table_rows(sink.uri) == [
        {"key": "a", "item": "x", "qty": 3, "note": None},
        {"key": "c", "item": "z", "qty": 5, "note": "new"},
    ]
    assert DeltaTable(sink.uri).transaction_version("app-1") == 1


def test_rows_that_cannot_fit_the_table_fail_before_anything_is_decided(
    admin: TopicAdmin,
) -> None:
    topic = sink_topic("events", "append")
    sink, files = stage(admin, topic, [("k", {"n": 1}, 1)], "t1")
    DeltaSinkCommitter(admin.root, sink).commit(files, timeout_ms=10_000, app_txn=("a", 0))
    with pytest.raises(SerializationError, match=r"column 'n' is int64 in the table"):
        stage(admin, topic, [("k", {"n": "one"}, 2)], "t2")
    with pytest.raises(SerializationError, match=r"field 'key' has the name of one"):
        stage(admin, topic, [("k", {"key": 1}, 2)], "t3")
    assert table_rows(sink.uri) == [{"key": "k", "n": 1}]


def test_maintenance_compacts_small_files_and_vacuums_them_keeping_every_row(
    admin: TopicAdmin, root: str
) -> None:
    topic = sink_topic(str(Path(root).parent / "outside" / "clicks"), "append")
    sink = None
    for i in range(10):
        sink, files = stage(admin, topic, [(f"u{i}", {"page": f"/{i}"}, i)], f"t{i}")
        DeltaSinkCommitter(admin.root, sink).commit(files, timeout_ms=10_000)
    assert sink is not None and len(DeltaTable(sink.uri).file_uris()) == 10
    before = table_rows(sink.uri)
    done = maintain(sink, target_bytes=64 << 20, vacuum_hours=0)
    assert done.compacted_files == 10
    assert len(DeltaTable(sink.uri).file_uris()) == 1 and table_rows(sink.uri) == before
    assert done.vacuumed_files == 10  # removed more than 0 hours ago
    assert maintain(sink, target_bytes=64 << 20).compacted_files == 0  # nothing small
    properties = DeltaTable(sink.uri).metadata().configuration
    assert properties["delta.deletedFileRetentionDuration"] == "interval 1 hour"
