"""A DataFrame source's batch written where its rows are (see
:mod:`runtime.app.dataframe_sources`).

Each Spark task of the batch turns its rows into records and writes them as the topic's
data files, not committed (:func:`stage_rows`, run by ``mapInArrow`` on the executors):
partitioned by key as a producer partitions them, a file per topic partition every
:data:`SPILL_BYTES` of records. What reaches the driver is one small row per file (its
path, partition, record count, size and timestamps); the driver commits them all in one
Delta commit. So the rows of a large input never pass through the driver, whose memory
stays flat whatever the input rate. A task that fails, or runs again, leaves files that
no commit names: the storage's orphan sweep removes them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from common.columns import epoch_millis
from common.errors import InvalidPartitionsError
from runtime.storage.committer import StagedFile
from runtime.storage.producer import Producer

#: Records a task buffers before it writes them as files (and starts buffering again).
SPILL_BYTES = 64 * 1024 * 1024
#: What each task hands back: a row per file it wrote, in the order it wrote them.
STAGED_SCHEMA = (
    "path string, partition int, count bigint, size bigint, min_timestamp bigint, "
    "max_timestamp bigint, task int, seq int"
)
_STAGED_FIELDS = ("path", "partition", "count", "size", "min_timestamp", "max_timestamp")


@dataclass(frozen=True, slots=True)
class StagingSpec:
    """What a task needs to stage a batch's rows (sent to the executors)."""

    root: str
    topic: str
    batch_id: int
    timestamp: bool  # the rows have a timestamp column
    partition: bool  # ... a partition column
    headers: bool  # ... a headers column
    compression: str


def stage_task(spec: StagingSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function: :func:`stage_rows` of the running Spark task."""
    context = TaskContext.get()
    return stage_rows(spec, 0 if context is None else context.partitionId(), batches)


def stage_rows(
    spec: StagingSpec, task: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Write the rows of one Spark task as the topic's data files; yield a row per file.

    Raises:
        InvalidPartitionsError: a row names a partition the topic lacks.
        StorageError: a file could not be written (what the task wrote is removed).
    """
    producer = Producer(spec.root, buffer_memory=1 << 62, compression=spec.compression)
    staged: list[StagedFile] = []
    row = 0
    try:
        buffered = 0
        for batch in batches:
            buffered += _append(producer, spec, task, row, pa.Table.from_batches([batch]))
            row += batch.num_rows
            if buffered >= SPILL_BYTES:
                staged += producer.stage(spec.topic)
                buffered = 0
        staged += producer.stage(spec.topic)
    except BaseException:
        producer.discard(spec.topic, staged)
        raise
    columns: dict[str, list[Any]] = {name: [] for name in _STAGED_FIELDS}
    for f in staged:
        for name in _STAGED_FIELDS:
            columns[name].append(getattr(f, name))
    yield pa.RecordBatch.from_pydict(
        {
            **{
                name: pa.array(values, pa.int32() if name == "partition" else None)
                for name, values in columns.items()
            },
            "task": pa.array([task] * len(staged), pa.int32()),
            "seq": pa.array(range(len(staged)), pa.int32()),
        }
    )


def staged_files(rows: list[Any]) -> list[StagedFile]:
    """The files the tasks wrote (rows of :data:`STAGED_SCHEMA`), in task order."""
    ordered = sorted(rows, key=lambda r: (r["task"], r["seq"]))
    return [StagedFile(*(r[name] for name in _STAGED_FIELDS)) for r in ordered]


def _append(producer: Producer, spec: StagingSpec, task: int, first: int, table: pa.Table) -> int:
    """Buffer the table's rows as records; return their bytes."""
    n = table.num_rows
    timestamps: Any = None
    if spec.timestamp:
        now = int(time.time() * 1000)  # a null timestamp: the time of ingestion
        timestamps = pc.fill_null(epoch_millis(table.column("timestamp")), now)
    partitions = None
    if spec.partition:
        partitions = _partitions(producer, spec, task, first, table.column("partition"))
    headers = None
    if spec.headers:
        headers = table.column("headers").combine_chunks()
        if headers.null_count:
            headers = pc.if_else(pc.is_null(headers), pa.array([[]] * n, headers.type), headers)
    keys, values = _as_binary(table.column("key")), _as_binary(table.column("value"))
    producer.send_batch(
        spec.topic, keys, values, timestamps=timestamps, partitions=partitions, headers=headers
    )
    return int(keys.nbytes + values.nbytes + 24 * n)


def _partitions(
    producer: Producer, spec: StagingSpec, task: int, first: int, column: pa.ChunkedArray
) -> pa.Array:
    parts = pc.fill_null(column.combine_chunks().cast(pa.int64()), -1)
    count = producer.accumulator.num_partitions(spec.topic)
    lo, hi = pc.min_max(parts).values()
    if hi.as_py() >= count or lo.as_py() < -1:
        row = int(pc.index(pc.or_(pc.greater_equal(parts, count), pc.less(parts, -1)), True))
        raise InvalidPartitionsError(
            f"DataFrame source {spec.topic!r}, batch {spec.batch_id}, Spark partition {task}, "
            f"row {first + row}: partition {parts[row].as_py()} is not a partition of topic "
            f"{spec.topic!r} (it has {count}); create the topic with more partitions "
            f"(streams-eos topics --alter --topic {spec.topic} --partitions N) or drop the "
            "partition column"
        )
    return parts.cast(pa.int32())


def _as_binary(column: pa.ChunkedArray) -> pa.Array:
    array = column.combine_chunks()
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), pa.binary())
    return array.cast(pa.binary())  # binary as it is, strings as their UTF-8 bytes


_RAISED = re.compile(r"^(?:\w+\.)*\w+(?:Error|Exception): (.+)$", re.MULTILINE)
_PROJECT_ERROR = re.compile(r"^(?:common\.errors|runtime\.[\w.]+)\.\w+: (.+)$", re.MULTILINE)


def raised_on_executor(error: BaseException) -> str | None:
    """The message of the error :func:`stage_rows` raised on an executor, found in what
    Spark reports (the Python worker's traceback), or None."""
    text = str(getattr(error, "desc", None) or error)
    ours = _PROJECT_ERROR.findall(text)
    if ours:
        return str(ours[-1])
    return None if "Traceback" not in text else next(iter(_RAISED.findall(text)[-1:]), None)
