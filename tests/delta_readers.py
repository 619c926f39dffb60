"""Read a topic's Delta table with every reader there is and check they agree."""

from __future__ import annotations

from collections import Counter

import polars as pl
import pyarrow.dataset as ds
from deltalake import DeltaTable

from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin

Row = tuple[int, bytes | None, bytes | None, int]


def _ours(root: str, topic: str) -> Counter[Row]:
    reader = TopicReader(root)
    rows: Counter[Row] = Counter()
    for partition, start in reader.beginning_offsets(topic).items():
        for r in reader.records(topic, partition, start):
            rows[(r.partition, r.key, r.value, r.timestamp)] += 1
    return rows


def _rows(table: object) -> Counter[Row]:
    data = table.to_pydict()  # type: ignore[attr-defined]
    return Counter(
        zip(data["partition"], data["key"], data["value"], data["timestamp"], strict=True)
    )


def readers_agree(admin: TopicAdmin, root: str, topic: str) -> Counter[Row]:
    """Assert that the four readers give one answer; return it."""
    path = admin.table_path(topic)
    ours = _ours(root, topic)
    delta = DeltaTable(path)
    assert _rows(delta.to_pyarrow_table()) == ours, f"{topic}: deltalake"
    assert _rows(pl.read_delta(path).to_arrow()) == ours, f"{topic}: polars"
    uris = delta.file_uris()
    files = ds.dataset(uris, partitioning="hive", partition_base_dir=path)
    by_path = _rows(files.to_table()) if uris else Counter[Row]()
    assert by_path == ours, f"{topic}: pyarrow over the log's files"
    return ours


def every_table_agrees(admin: TopicAdmin, root: str) -> int:
    """Assert :func:`readers_agree` on every topic under the root (sources, outputs,
    repartition topics, changelogs, ``__consumer_offsets``); return how many."""
    topics = admin.list()
    for topic in topics:
        readers_agree(admin, root, topic)
    return len(topics)
