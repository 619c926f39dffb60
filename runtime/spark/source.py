"""The topic source: a Spark 4 Python streaming data source over Delta topics.

::

    spark.dataSource.register(TopicSource)
    df = (spark.readStream.format("streams-topic")
          .option("root", "/data/streams").option("topics", '["words"]')
          .option("starting_offsets", '{"words": {"0": 42}}').load())

Offsets are ``{topic: {partition: next offset}}`` (partition numbers as strings, for JSON).
Each micro-batch reads at most ``max_poll_records`` records per partition, unless Spark
asks for everything available. A batch has one Spark input partition per partition
*number*, holding that partition of every subscribed topic: a task ``(sub-topology,
partition)`` then finds all its records in one Spark partition, without a shuffle.

Planning (offsets, which file rows to read) runs on the driver from the offset index; an
executor only opens the parquet files its partition names (it never touches the Delta log).

With ``plan_only=true`` a batch has one row per Spark input partition naming the file
slices to read (:data:`PLAN_SCHEMA`), for a consumer that reads them itself.

A streams application does not read its topics through this source: its stream threads
plan each batch's reads themselves, from their committed positions, and their queries are
started by a trigger (:mod:`runtime.spark.trigger`).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from common.errors import ConfigError, OffsetOutOfRangeError
from runtime.storage.reader import TopicReader
from runtime.storage.slices import TopicSlices, read_topic_slices

SOURCE_NAME = "streams-topic"

#: The columns of a batch: a topic record with its origin.
SOURCE_SCHEMA = (
    "topic string, partition int, offset long, key binary, value binary, timestamp long, "
    "headers array<struct<key: string, value: binary>>"
)

#: The columns with ``plan_only``: one row per Spark input partition, the pickled
#: :class:`TaskInput` that the consumer reads itself (no JVM row per record).
PLAN_SCHEMA = "partition int, task_input binary"

Offsets = dict[str, dict[str, int]]


class TaskInput(InputPartition):
    """One Spark input partition: partition ``partition`` of every subscribed topic."""

    def __init__(self, root: str, partition: int, topics: Sequence[TopicSlices]) -> None:
        super().__init__(partition)
        self.root = root
        self.partition = partition
        self.topics = tuple(topics)


def resolve_positions(
    reader: TopicReader, topics: Sequence[str], committed: Offsets, reset: str
) -> Offsets:
    """Return start positions: ``committed`` where known, else ``auto.offset.reset``.

    Raises:
        OffsetOutOfRangeError: a partition has no committed offset and ``reset`` is none.
    """
    out: Offsets = {}
    for topic in topics:
        ends = reader.end_offsets(topic)
        starts = reader.beginning_offsets(topic)
        known = committed.get(topic, {})
        positions: dict[str, int] = {}
        for partition, end in ends.items():
            key = str(partition)
            if key in known:
                positions[key] = min(max(known[key], starts[partition]), end)
            elif reset == "earliest":
                positions[key] = starts[partition]
            elif reset == "latest":
                positions[key] = end
            else:
                raise OffsetOutOfRangeError(
                    f"no committed offset for {topic}-{partition} and auto.offset.reset=none; "
                    "commit a position first (streams-eos groups --reset-offsets) or set "
                    "auto.offset.reset to earliest or latest"
                )
        out[topic] = positions
    return out


class TopicStreamReader(DataSourceStreamReader):
    """Plans micro-batches over Delta topics (runs on the driver)."""

    def __init__(self, options: dict[str, str]) -> None:
        try:
            self.root = options["root"]
            self.topics: list[str] = json.loads(options["topics"])
        except (KeyError, ValueError) as exc:
            raise ConfigError(
                f"the {SOURCE_NAME} source needs the options root and topics (a JSON list): {exc}"
            ) from None
        self.starting: Offsets = json.loads(options.get("starting_offsets", "{}"))
        self.reset = options.get("auto_offset_reset", "earliest")
        self.max_poll_records = int(options.get("max_poll_records", "1000"))
        self.plan_only = options.get("plan_only", "false").lower() == "true"
        only = options.get("partitions")
        self.only: frozenset[int] | None = frozenset(json.loads(only)) if only else None
        self._reader: TopicReader | None = None

    @property
    def reader(self) -> TopicReader:
        if self._reader is None:
            self._reader = TopicReader(self.root)
        return self._reader

    def initialOffset(self) -> Offsets:  # noqa: N802 - Spark's name
        return resolve_positions(self.reader, self.topics, self.starting, self.reset)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        return ReadMaxRows(self.max_poll_records)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:  # noqa: N802
        cap = None if isinstance(limit, ReadAllAvailable) else self.max_poll_records
        out: Offsets = {}
        for topic in self.topics:
            begun = start.get(topic, {})
            positions: dict[str, int] = {}
            for partition, end in self.reader.end_offsets(topic).items():
                if self.only is not None and partition not in self.only:
                    continue
                key = str(partition)
                at = begun.get(key, 0)
                positions[key] = end if cap is None else min(end, at + cap)
            out[topic] = positions
        return out

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        grouped: dict[int, list[TopicSlices]] = {}
        for topic in self.topics:
            for key, stop in end.get(topic, {}).items():
                partition = int(key)
                begin = start.get(topic, {}).get(key, 0)
                if stop <= begin:
                    continue
                slices = self.reader.plan(topic, partition, begin, stop - begin)
                grouped.setdefault(partition, []).append(
                    TopicSlices(topic, partition, begin, stop, tuple(slices))
                )
        return [TaskInput(self.root, p, grouped[p]) for p in sorted(grouped)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TaskInput)
        if self.plan_only:
            yield pa.RecordBatch.from_pylist(
                [{"partition": partition.partition, "task_input": pickle.dumps(partition)}],
                schema=pa.schema([("partition", pa.int32()), ("task_input", pa.binary())]),
            )
            return
        yield from read_task_input(partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: positions are committed in the application's transaction."""


def read_task_input(task_input: TaskInput) -> Iterator[pa.RecordBatch]:
    """Yield the records of a task input as Arrow batches of ``SOURCE_SCHEMA`` (executor)."""
    return read_topic_slices(task_input.root, task_input.topics)


class TopicSource(DataSource):
    """The ``streams-topic`` streaming source (register with ``spark.dataSource.register``)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        """Record rows, or with the option ``plan_only=true`` one row per input partition
        naming what to read (:data:`PLAN_SCHEMA`)."""
        plan_only = str(self.options.get("plan_only", "false")).lower() == "true"
        return PLAN_SCHEMA if plan_only else SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> TopicStreamReader:  # noqa: N802
        return TopicStreamReader(dict(self.options))


def offsets_to_json(offsets: dict[str, dict[int, int]]) -> str:
    """Render ``{topic: {partition: offset}}`` as the source's JSON offsets."""
    return json.dumps({t: {str(p): o for p, o in ps.items()} for t, ps in offsets.items()})


def offsets_from_json(data: Any) -> dict[str, dict[int, int]]:
    """Parse the source's offsets (a dict or its JSON text) into int partitions."""
    raw = json.loads(data) if isinstance(data, str) else data
    return {t: {int(p): int(o) for p, o in ps.items()} for t, ps in raw.items()}
