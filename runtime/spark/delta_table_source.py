"""An existing Delta table of any schema as a streaming DataFrame of records, read as it
grows (a Spark 4 Python streaming data source that needs no delta-spark jars).

::

    df = delta_table_stream(spark, "/lake/orders", key="order_id",
                            value=["customer", "amount"], timestamp="created_at")
    app = StreamsApp(topology, config, sources={"orders": df})

Each row becomes a record (the columns of Spark's Kafka source: ``key``, ``value``,
``timestamp``): a string column as its UTF-8 bytes, a binary one as it is, anything else
as JSON text; several value columns (or ``value="*"``: every column) as one JSON object
per row, for a JSON serde. ``timestamp`` (a timestamp or epoch milliseconds) is optional.

Offsets are table versions: the first batch reads the table as it is at the version it
plans (its files), later batches read the files each new version *added* with
``dataChange`` (appends; a version that rewrote or deleted rows is read for what it added
only, as Delta's own streaming source with ``ignoreChanges``). Planning reads the Delta
log on the driver; executors only open the parquet files a batch names. Exactly once
comes with the DataFrame source's ingest (:mod:`runtime.app.dataframe_sources`): a batch
Spark replays covers the same versions, hence the same files and records.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from common.columns import epoch_millis
from common.errors import ConfigError, StorageError
from runtime.storage.fs import StorageRoot, storage_options

SOURCE_NAME = "streams-delta-table"
SCHEMA = "key binary, value binary, timestamp bigint"
#: Files per Spark input partition of a batch.
FILES_PER_PARTITION = 8


class FilesInput(InputPartition):
    """Parquet files of the table a Spark task reads (absolute URIs)."""

    def __init__(self, index: int, files: Sequence[str]) -> None:
        super().__init__(index)
        self.files = tuple(files)


class DeltaTableStreamReader(DataSourceStreamReader):
    """Plans batches over a Delta table's versions (driver); reads its files (executors)."""

    def __init__(self, options: dict[str, str]) -> None:
        try:
            self.path = options["path"]
            self.key = options["key"]
            self.values: list[str] = json.loads(options["value"])
        except (KeyError, ValueError) as exc:
            raise ConfigError(
                f"the {SOURCE_NAME} source needs the options path, key and value: {exc}"
            ) from None
        self.timestamp = options.get("timestamp") or None
        self.starting = int(options.get("starting_version", "-1"))

    def _table(self, version: int | None = None) -> DeltaTable:
        try:
            return DeltaTable(
                self.path, version=version, storage_options=storage_options(self.path)
            )
        except Exception as exc:
            raise StorageError(f"cannot open the Delta table {self.path}: {exc}") from exc

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's name
        return {"version": self.starting}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        return {"version": self._table().version()}  # every version there is now

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        first, last = int(start["version"]), int(end["version"])
        if last <= first:
            return []
        if first < 0:  # the table as it is at the batch's version
            files = list(self._table(last).file_uris())
        else:
            files = [f for v in range(first + 1, last + 1) for f in self._added(v)]
        return [
            FilesInput(i, files[at : at + FILES_PER_PARTITION])
            for i, at in enumerate(range(0, len(files), FILES_PER_PARTITION))
        ]

    def _added(self, version: int) -> list[str]:
        """The data files ``version`` added with ``dataChange`` (its commit file)."""
        root = StorageRoot(self.path)
        text = root.read_bytes(root.path("_delta_log", f"{version:020d}.json"))
        if text is None:
            raise StorageError(
                f"Delta table {self.path}: the commit of version {version} is gone (its log "
                "was cleaned up before it was read); restart the source from the table as "
                "it is now (a new checkpoint location)"
            )
        out = []
        for line in text.decode().splitlines():
            action = json.loads(line) if line.strip() else {}
            add = action.get("add")
            if add and add.get("dataChange", True):
                out.append(_absolute(self.path, add["path"]))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilesInput)
        wanted = [self.key, *self.values] + ([self.timestamp] if self.timestamp else [])
        for uri in partition.files:
            root = StorageRoot(uri.rsplit("/", 1)[0])
            with root.fs.open_input_file(root.path(uri.rsplit("/", 1)[1])) as f:
                table = pq.read_table(f, columns=sorted(set(wanted)))
            yield from _records(table, self.key, self.values, self.timestamp).to_batches()

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the ingest's commit records what was read."""


def _absolute(table: str, path: str) -> str:
    if "://" in path or path.startswith("/"):
        return path
    return f"{table.rstrip('/')}/{unquote(path)}"


def _records(table: pa.Table, key: str, values: list[str], timestamp: str | None) -> pa.Table:
    ts = (
        pa.nulls(table.num_rows, pa.int64())
        if timestamp is None
        else epoch_millis(table.column(timestamp))
    )
    return pa.table(
        {
            "key": _bytes(table.select([key])),
            "value": _bytes(table.select(values)),
            "timestamp": ts,
        }
    )


def _bytes(columns: pa.Table) -> pa.Array:
    """One column's values as bytes (string: UTF-8, binary: as is, else JSON); several
    columns as a JSON object per row."""
    if columns.num_columns == 1:
        column = columns.column(0).combine_chunks()
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            return column.cast(pa.binary())
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            return column.cast(pa.binary())
        return pa.array([None if v is None else _json(v) for v in column.to_pylist()], pa.binary())
    return pa.array([_json(row) for row in columns.to_pylist()], pa.binary())


def _json(value: Any) -> bytes:
    return json.dumps(value, default=str, separators=(",", ":")).encode()


class DeltaTableSource(DataSource):
    """The ``streams-delta-table`` streaming source (see :func:`delta_table_stream`)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DeltaTableStreamReader:  # noqa: N802
        return DeltaTableStreamReader(dict(self.options))


def delta_table_stream(
    spark: SparkSession,
    path: str,
    *,
    key: str,
    value: str | Sequence[str],
    timestamp: str | None = None,
    starting_version: int | None = None,
) -> DataFrame:
    """Return a streaming DataFrame of the records of the Delta table at ``path``.

    Args:
        key: the column that becomes the record key.
        value: the column that becomes the value, several (a JSON object per row), or
            ``"*"`` (every column, as a JSON object).
        timestamp: the column of the record timestamps (default: the time of ingestion).
        starting_version: read what versions after this one added (default: the whole
            table, then what it adds).

    Raises:
        ConfigError: the table lacks a named column (the message lists its columns).
    """
    try:
        table = DeltaTable(path, storage_options=storage_options(path))
    except Exception as exc:
        raise ConfigError(f"cannot read the Delta table {path!r} as a source: {exc}") from exc
    names = [f.name for f in table.schema().fields]
    partitioned = set(table.metadata().partition_columns)
    values = names if value == "*" else [value] if isinstance(value, str) else list(value)
    for role, name in [("key", key), *(("value", v) for v in values), ("timestamp", timestamp)]:
        if name is not None and name not in names:
            raise ConfigError(
                f"the Delta table {path!r} has no column {name!r} for the records' {role}; "
                f"its columns: {', '.join(names)}"
            )
        if name in partitioned:
            raise ConfigError(
                f"the Delta table {path!r} is partitioned by {name!r}, which the records' "
                f"{role} cannot come from (partition values are not in its data files); "
                "name another column"
            )
    spark.dataSource.register(DeltaTableSource)
    reader = (
        spark.readStream.format(SOURCE_NAME)
        .option("path", path)
        .option("key", key)
        .option("value", json.dumps(values))
    )
    if timestamp:
        reader = reader.option("timestamp", timestamp)
    if starting_version is not None:
        reader = reader.option("starting_version", str(starting_version))
    return reader.load()
