"""Streaming DataFrames as a topology's sources (``StreamsApp(..., sources={"clicks": df})``).

A DataFrame source is *ingested*, exactly once, into the topic its name gives, which the
topology then reads like any topic (Kafka Connect's source connector feeding Kafka
Streams). Each DataFrame runs as its own Spark query whose ``foreachBatch`` has the
executors turn the batch's rows into records and write them as the topic's data files
where the rows are (:mod:`runtime.app.dataframe_staging`); the driver only commits those
files, in one Delta commit carrying Delta's ``txn`` action
``(<application.id>-source-<name>-<query id>, batch id)``. Spark's own replay
contract does the rest: after a crash Spark runs the batches its offset log planned
again with the same ids and the same rows (replayable sources: files, Kafka, Delta,
``rate``); a batch whose commit landed is skipped, one that did not is appended. So every
row reaches the topic once, and from there the topology's transactions carry it to the
outputs, changelogs and stores exactly once, with everything the topic path has:
partitions and tasks, several stream threads, repartitions, replays from committed
positions, the crash harness.

The DataFrame has the columns of Spark's own Kafka source (a Kafka stream is passed as
it is; other columns are ignored):

* ``key``, ``value`` (required): binary, or string (UTF-8), decoded by the source's serdes;
* ``timestamp`` (optional): a timestamp, or epoch milliseconds; default: the time of
  ingestion (as a Kafka producer stamps records);
* ``partition`` (optional): the partition of each record; without it records are
  partitioned by key with Kafka's partitioner (murmur2), keyless ones spread;
* ``headers`` (optional): ``array<struct<key: string, value: binary>>``.

The topic is created when it does not exist (``num.partitions`` partitions). The
source's Spark checkpoint holds its read positions (the files read, the Kafka offsets):
it lives under ``checkpoint.location`` (or the storage root) and is kept across
restarts; lost, the query starts over under a new query id and re-ingests its input.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from common.errors import ConfigError, StreamsError
from runtime.app.dataframe_staging import (
    STAGED_SCHEMA,
    StagingSpec,
    raised_on_executor,
    stage_task,
    staged_files,
)
from runtime.spark.checkpoint import is_local_location, start_with_file_system_logs
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from topology.graph.graph import SourceSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from topology.graph.topology import Topology

log = logging.getLogger(__name__)

_KAFKA_COLUMNS = "key, value[, timestamp, partition, headers]"


class DataFrameSourceError(StreamsError):
    """A DataFrame source's query failed, or one of its rows cannot become a record."""


@dataclass(frozen=True, slots=True)
class SourceColumns:
    """The record columns a DataFrame source has (Spark SQL type names)."""

    key: str
    value: str
    timestamp: str | None
    partition: str | None
    headers: bool

    def names(self) -> list[str]:
        """Return the columns the ingest selects."""
        out = ["key", "value"]
        out += [
            c for c, has in (("timestamp", self.timestamp), ("partition", self.partition)) if has
        ]
        return out + (["headers"] if self.headers else [])


def check_dataframe(name: str, df: DataFrame) -> SourceColumns:
    """Return the record columns of DataFrame source ``name``.

    Raises:
        ConfigError: ``df`` is not streaming, misses ``key`` or ``value``, or a column has
            a type the source cannot take (the message names it and what to do).
    """
    where = f"sources[{name!r}]"
    if not df.isStreaming:
        raise ConfigError(
            f"{where} is a batch DataFrame; pass a streaming one (spark.readStream...), or "
            f"append its rows to the topic {name!r} with streams.Producer"
        )
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    for required in ("key", "value"):
        if required not in types:
            raise ConfigError(
                f"{where} has no column {required!r} (columns: {', '.join(types) or 'none'}); "
                f"a DataFrame source needs the columns of Spark's Kafka source: "
                f"{_KAFKA_COLUMNS} (rename with withColumnRenamed, or use lit(None) for a "
                "keyless stream)"
            )
        if types[required] not in ("binary", "string", "void"):
            raise ConfigError(
                f"{where} column {required!r} is {types[required]}; it must be binary or "
                f"string: cast it (CAST({required} AS STRING)) or serialize it "
                f"(to_json(struct(...)) AS {required})"
            )
    ts = types.get("timestamp")
    if ts is not None and ts not in ("timestamp", "timestamp_ntz", "bigint", "int", "void"):
        raise ConfigError(
            f"{where} column 'timestamp' is {ts}; it must be a timestamp or epoch "
            "milliseconds (bigint), or be dropped (records then get the time of ingestion)"
        )
    part = types.get("partition")
    if part is not None and part not in ("int", "bigint", "smallint", "tinyint", "void"):
        raise ConfigError(
            f"{where} column 'partition' is {part}; it must be an integer, or be dropped "
            "(records are then partitioned by key)"
        )
    headers = types.get("headers")
    if headers is not None and headers != "array<struct<key:string,value:binary>>":
        raise ConfigError(
            f"{where} column 'headers' is {headers}; it must be "
            "array<struct<key:string,value:binary>> (Spark's Kafka source with "
            "includeHeaders=true), or be dropped"
        )
    return SourceColumns(types["key"], types["value"], ts, part, headers is not None)


class DataFrameIngest:
    """Ingests one DataFrame source into its topic, exactly once (see the module).

    Args:
        application_id: the application's id (the ``txn`` app id's prefix).
        name: the source's topic.
        df: the streaming DataFrame.
        admin: the storage root's topic admin.
        checkpoint: the source query's Spark checkpoint location (kept across restarts).
        trigger_ms: the query's trigger interval (the stream threads', at least ``poll.ms``).
        compression: parquet codec of the topic's files.
    """

    def __init__(
        self,
        application_id: str,
        name: str,
        df: DataFrame,
        admin: TopicAdmin,
        *,
        checkpoint: str,
        trigger_ms: int,
        compression: str = "snappy",
    ) -> None:
        self.application_id = application_id
        self.name = name
        self.columns = check_dataframe(name, df)
        self.df = df
        self.admin = admin
        self.checkpoint = checkpoint
        self.trigger_ms = trigger_ms
        self.producer = Producer(admin, buffer_memory=1 << 62, compression=compression)
        self.query: StreamingQuery | None = None
        self.batches = 0
        self.skipped = 0
        self.records = 0
        self._started = threading.Event()
        self.stopped = False  # stop() was called
        self._error: BaseException | None = None  # what a batch raised (Spark wraps it)
        #: Called after each batch's records are committed to the topic (the application
        #: wakes the stream threads that read it, rather than wait for them to notice).
        self.on_commit: Callable[[], None] | None = None

    @property
    def app_id(self) -> str:
        """The ``txn`` app id of this source's commits (its query id: a new checkpoint is
        a new query, whose batch ids start again at 0)."""
        assert self.query is not None
        return f"{self.application_id}-source-{self.name}-{self.query.id}"

    def start(self, spark: SparkSession) -> StreamingQuery:
        """Start the source's query."""
        del spark  # the DataFrame's own session runs it
        writer = (
            self.df.select(*self.columns.names())
            .writeStream.foreachBatch(self._batch)
            .queryName(f"streams-{self.application_id}-source-{self.name}")
            .trigger(processingTime=f"{self.trigger_ms} milliseconds")
        )
        if is_local_location(self.checkpoint):  # an atomic rename keeps its logs safe
            self.query = start_with_file_system_logs(self.df.sparkSession, writer, self.checkpoint)
        else:
            self.query = writer.option("checkpointLocation", self.checkpoint).start()
        self._started.set()
        return self.query

    def stop(self) -> None:
        """Stop the query (a batch in flight is replayed by the next start if it did not
        commit)."""
        self.stopped = True
        if self.query is not None:
            self.query.stop()

    def failure(self) -> BaseException | None:
        """Return why the query stopped, if it failed."""
        if self.query is None or (self._error is None and (self.query.isActive or self.stopped)):
            return None
        error = None if self._error is not None else self.query.exception()
        if error is None and self._error is None:
            return None
        cause = self._error if self._error is not None else error
        assert cause is not None
        return DataFrameSourceError(
            f"DataFrame source {self.name!r} failed: {_first_line(cause)}; nothing of the "
            "failed batch was ingested: fix the input (or the DataFrame) and restart, Spark "
            "runs the batch again"
        )

    def _batch(self, batch: DataFrame, batch_id: int) -> None:
        try:
            self._ingest(batch, batch_id)
        except BaseException as exc:
            self._error = exc
            raise

    def _ingest(self, batch: DataFrame, batch_id: int) -> None:
        self._started.wait()
        version = self.producer.committer(self.name).committed_txn_version(self.app_id)
        if version >= batch_id:
            self.skipped += 1
            log.info("[source %s] batch %d committed before: skipped", self.name, batch_id)
            return
        spec = StagingSpec(
            self.admin.root.uri,
            self.name,
            batch_id,
            timestamp=self.columns.timestamp is not None,
            partition=self.columns.partition is not None,
            headers=self.columns.headers,
            compression=self.producer.compression,
        )
        try:  # written on the executors; only a row per file comes back
            rows = batch.mapInArrow(partial(stage_task, spec), STAGED_SCHEMA).collect()
        except Exception as exc:
            raised = raised_on_executor(exc)
            if raised is None:
                raise
            raise DataFrameSourceError(raised) from exc
        staged = staged_files([row.asDict() for row in rows])
        if staged:
            self.producer.commit_staged(self.name, staged, (self.app_id, batch_id))
            self.records += sum(f.count for f in staged)
            if self.on_commit is not None:
                self.on_commit()
        self.batches += 1


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "desc", None) or error)
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__


def drain_all(sources: list[DataFrameIngest]) -> bool:
    """Let every DataFrame source ingest what its input has now (a file source: every
    file present); return whether any record was added.

    Raises:
        DataFrameSourceError: a source's query failed.
    """
    before = sum(s.records for s in sources)
    for source in sources:
        assert source.query is not None
        if source.stopped:
            continue  # stopped on purpose: what it ingested is processed all the same
        try:
            source.query.processAllAvailable()
        except Exception as exc:
            failure = source.failure()
            raise failure or DataFrameSourceError(
                f"DataFrame source {source.name!r} stopped: {_first_line(exc)}"
            ) from exc
    return sum(s.records for s in sources) != before


def wake_all(threads: list[Any]) -> None:
    """Have every stream thread run a batch soon (a source committed new records)."""
    for thread in list(threads):
        thread.wake_now("records")


def first_failure(sources: list[DataFrameIngest]) -> BaseException | None:
    """Return the error of the first DataFrame source whose query failed."""
    for source in sources:
        failure = source.failure()
        if failure is not None:
            return failure
    return None


def topology_source_topics(topology: Topology) -> frozenset[str]:
    """Return the topics the topology's sources name (not patterns, not internal ones):
    the names a DataFrame source may take."""
    return frozenset(
        topic
        for spec in topology.nodes.values()
        if isinstance(spec, SourceSpec) and not spec.internal and spec.pattern is None
        for topic in spec.topics
    )


def check_sources(topology: Topology, sources: Mapping[str, DataFrame]) -> None:
    """Check that every DataFrame source names a source topic of ``topology`` and has the
    columns a source takes.

    Raises:
        ConfigError: naming the source and what to change.
    """
    names = topology_source_topics(topology)
    for name, df in sources.items():
        if name not in names:
            raise ConfigError(
                f"sources[{name!r}]: the topology reads no topic {name!r}; its source topics "
                f"are: {', '.join(sorted(names)) or 'none'} (the key of sources= "
                "names the topic a builder.stream()/table() reads)"
            )
        check_dataframe(name, df)


def ingests(
    application_id: str,
    sources: Mapping[str, DataFrame],
    admin: TopicAdmin,
    *,
    checkpoint: str,
    trigger_ms: int,
    partitions: int,
) -> list[DataFrameIngest]:
    """Return an ingest per DataFrame source (checked by :func:`check_sources`),
    creating the topics that do not exist (``partitions`` partitions)."""
    out = []
    for name, df in sources.items():
        ingest = DataFrameIngest(
            application_id,
            name,
            df,
            admin,
            checkpoint=f"{checkpoint}/{name}",
            trigger_ms=trigger_ms,
        )
        if not admin.exists(name):
            admin.create(name, partitions)
            log.info("[source %s] created topic %s with %d partitions", name, name, partitions)
        out.append(ingest)
    return out
