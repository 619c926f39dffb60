"""Planned reads: the file slices holding offsets ``[start, end)`` of a topic partition,
and reading them straight into Arrow.

The driver plans them (:mod:`runtime.thread.read_plan`); executors and task hosts read
them. Nothing here needs Spark, so a task host never imports it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from runtime.storage.fs import StorageRoot
from runtime.storage.reader import FileSlice, read_slices


@dataclass(frozen=True)
class TopicSlices:
    """The planned records of one topic partition: offsets ``[start, end)``."""

    topic: str
    partition: int
    start: int
    end: int
    slices: tuple[FileSlice, ...]


def read_topic_slices(root: str, topics: Sequence[TopicSlices]) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``topics`` as Arrow batches, a ``topic`` column first."""
    storage = StorageRoot(root)
    for item in topics:
        table = read_slices(storage, item.topic, item.partition, list(item.slices))
        topic = pa.array([item.topic] * table.num_rows, pa.string())
        table = table.add_column(0, pa.field("topic", pa.string()), topic)
        yield from table.to_batches()
