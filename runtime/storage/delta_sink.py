"""Delta table sinks: typed rows staged by tasks, committed in the batch's transaction.

A Delta sink (:mod:`common.delta_rows`) is a transaction participant like a topic, named
``delta+<mode>:<table>``. Its table is a name under the storage root
(``<root>/tables/<name>``), a local path, or a URI on the root's object store.

* A task stages one parquet file of typed rows per sink and batch, in the transaction's
  staging directory inside the table (:func:`write_rows`): no Delta reader sees it.
* Before the transaction's PrepareCommit (:func:`prepare`, on the driver) the staged rows
  are made to fit the table: the table is created on first use, new value fields become
  new nullable columns, and every column is cast to the table's type; a row that cannot
  fit fails the batch (its transaction aborts) with the column named, so nothing that
  can fail is left for the commit phase.
* The commit phase (:class:`DeltaSinkCommitter`): ``append`` adds the staged file in one
  Delta commit; ``upsert`` MERGEs the staged rows on the key columns (a tombstone
  deletes the key's row). Both carry Delta's ``txn(transactional.id, sequence)``
  action and check it first, so a roll-forward after a crash commits nothing twice.

The table is an ordinary Delta table: Spark, pandas, polars and DuckDB read it.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from common.delta_rows import DELETED, KEYS_KEY, MODE_KEY, parse_sink
from common.errors import CommitTimeoutError, SerializationError, StorageError, StreamsError
from runtime.storage.committer import ParticipantCommitter, StagedFile, TopicCommitter
from runtime.storage.fs import StorageRoot, storage_options
from runtime.storage.names import validate_topic_name
from runtime.storage.pins import is_pinned
from runtime.storage.topics import TopicAdmin

T = TypeVar("T")

#: Where tables named by a bare name live, under the storage root.
TABLES_DIR = "tables"
#: Set on the tables the sinks create: removed files' tombstones (and their files, for a
#: vacuum) kept an hour, commits a day (Delta's defaults: a week and 30 days, far too
#: much for a table written at every batch).
TABLE_PROPERTIES = {
    "delta.deletedFileRetentionDuration": "interval 1 hour",
    "delta.logRetentionDuration": "interval 1 day",
}
#: How many small files a sink's table gathers before the log manager compacts them.
SMALL_FILES = 8


@dataclass(frozen=True, slots=True)
class SinkTable:
    """Where a Delta sink writes."""

    participant: str  # the sink's "topic": delta+<mode>:<table>
    mode: str
    table: str  # as the topology names it
    uri: str  # what delta-rs opens
    path: str  # its path in the storage root's filesystem (staged files go there)


def sink_table(root: StorageRoot, participant: str) -> SinkTable | None:
    """Return the table of Delta sink ``participant`` (None: a topic).

    Raises:
        StreamsError: the table is a bad name, or lies outside the root's kind of storage.
    """
    parsed = parse_sink(participant)
    if parsed is None:
        return None
    mode, table = parsed
    if "://" in table and not table.startswith("file://"):
        if root.is_local:
            raise StreamsError(
                f"Delta sink table {table!r} is on an object store but topics.root is a "
                "local path; put the table where topics.root is (or name it without a "
                "scheme: it then lives under <topics.root>/tables/)"
            )
        other = StorageRoot(table)
        return SinkTable(participant, mode, table, other.uri, other.base)
    if "/" in table or table.startswith((".", "file://")):
        if not root.is_local:
            raise StreamsError(
                f"Delta sink table {table!r} is a local path but topics.root is "
                f"{root.uri}; name the table by a URI on that store, or by a bare name"
            )
        path = os.path.abspath(table.removeprefix("file://"))
        return SinkTable(participant, mode, table, path, path)
    validate_topic_name(table)
    return SinkTable(
        participant, mode, table, root.uri_of(TABLES_DIR, table), root.path(TABLES_DIR, table)
    )


def write_rows(
    root: StorageRoot,
    table_path: str,
    staging_dir: str,
    rows: pa.Table,
    *,
    mode: str,
    keys: list[str],
    compression: str = "snappy",
) -> StagedFile:
    """Write a batch's typed rows as one staged file of the sink's table.

    Raises:
        StorageError: the file could not be written.
    """
    rel = f"{staging_dir}/rows-{uuid.uuid4().hex}.{compression}.parquet"
    full = f"{table_path}/{rel}"
    meta = {MODE_KEY: mode.encode(), KEYS_KEY: json.dumps(keys).encode()}
    try:
        with root.output(full) as out:
            pq.write_table(
                rows.replace_schema_metadata({**(rows.schema.metadata or {}), **meta}),
                out,
                compression=None if compression == "none" else compression,
            )
    except (OSError, pa.ArrowException) as exc:
        root.delete_file(full)
        raise StorageError(f"cannot write staged rows {full}: {exc}") from exc
    lo = hi = 0
    if "timestamp" in rows.column_names and rows.num_rows:
        low, high = pc.min_max(rows.column("timestamp").cast(pa.int64())).values()
        lo, hi = low.as_py() // 1000, high.as_py() // 1000  # microseconds -> ms
    return StagedFile(rel, 0, rows.num_rows, root.file_size(full), lo, hi)


def _open(uri: str) -> DeltaTable | None:
    try:
        return DeltaTable(uri, storage_options=storage_options(uri))
    except TableNotFoundError:
        return None


def prepare(root: StorageRoot, sink: SinkTable, files: list[StagedFile]) -> list[StagedFile]:
    """Make a transaction's staged rows of ``sink`` fit its table (before PrepareCommit):
    create the table, add new columns, cast to the table's types; return the staged file
    to commit (one).

    Raises:
        SerializationError: a column's values cannot take the table's type for it.
    """
    if not files:
        return files
    table = _open(sink.uri)
    if table is not None and len(files) == 1:  # the common case: one task wrote the sink
        schema = _read(root, f"{sink.path}/{files[0].path}", pq.read_schema)
        fields = [f for f in schema if f.name != DELETED]
        target = pa.schema(table.schema().to_arrow())
        if [(f.name, f.type) for f in fields] == [(f.name, f.type) for f in target]:
            return files  # fits as written: nothing to rewrite
    parts = [_read(root, f"{sink.path}/{f.path}", pq.read_table) for f in files]
    meta = parts[0].schema.metadata or {}
    rows = pa.concat_tables(parts, promote_options="permissive")
    rows = _upsert_last(rows, json.loads(meta[KEYS_KEY])) if sink.mode == "upsert" else rows
    data = rows.drop_columns([DELETED]) if DELETED in rows.column_names else rows
    if table is None:
        DeltaTable.create(
            sink.uri,
            data.schema,
            mode="ignore",
            configuration=TABLE_PROPERTIES,
            storage_options=storage_options(sink.uri),
        )
        table = _open(sink.uri)
        assert table is not None
    target = pa.schema(table.schema().to_arrow())
    new = [f for f in data.schema if f.name not in target.names]
    if new:
        empty = pa.schema([*target, *(pa.field(f.name, f.type, nullable=True) for f in new)])
        write_deltalake(
            sink.uri,
            empty.empty_table(),
            mode="append",
            schema_mode="merge",
            storage_options=storage_options(sink.uri),
        )
        target = empty
    rows = _cast(sink.table, rows, target)
    staging = files[0].path.rsplit("/", 1)[0]
    staged = write_rows(
        root,
        sink.path,
        staging,
        rows.replace_schema_metadata(meta),
        mode=sink.mode,
        keys=json.loads(meta[KEYS_KEY]),
    )
    for f in files:
        root.delete_file(f"{sink.path}/{f.path}")
    return [staged]


def _upsert_last(rows: pa.Table, keys: list[str]) -> pa.Table:
    """Keep the last row per key (several tasks' files, or several of one)."""
    if rows.num_rows <= 1:
        return rows
    indexed = rows.select(keys).append_column("__i", pa.array(range(rows.num_rows)))
    last = indexed.group_by(keys, use_threads=False).aggregate([("__i", "max")])
    order = np.sort(last.column("__i_max").to_numpy())  # the rows kept, in their order
    return rows.take(pa.array(order))


def _read(root: StorageRoot, path: str, reader: Callable[[Any], T]) -> T:
    """Read a staged file with ``reader`` (its rows; ``pq.read_schema``: its schema)."""
    try:
        with root.fs.open_input_file(path) as f:
            return reader(f)
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"cannot read staged rows {path}: {exc}") from exc


def _cast(table: str, rows: pa.Table, target: pa.Schema) -> pa.Table:
    columns = []
    for field in target:
        if field.name not in rows.column_names:
            columns.append(pa.nulls(rows.num_rows, field.type))
            continue
        column = rows.column(field.name)
        try:
            columns.append(column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SerializationError(
                f"Delta sink {table}: column {field.name!r} is {field.type} in the table, "
                f"but this batch's values are {column.type} ({exc}); write values of the "
                "table's type, or write to a new table"
            ) from exc
    out = pa.table(columns, schema=target)
    if DELETED in rows.column_names:
        out = out.append_column(DELETED, rows.column(DELETED))
    return out


class DeltaSinkCommitter:
    """Commits a transaction's staged rows to a Delta sink's table (idempotent)."""

    def __init__(self, root: StorageRoot, sink: SinkTable) -> None:
        self.root = root
        self.sink = sink
        self.conflicts = 0
        self._table: DeltaTable | None = None  # kept between commits, brought up to date

    def table(self) -> DeltaTable | None:
        """Return the sink's table at its latest version (None: not created yet)."""
        if self._table is None:
            self._table = _open(self.sink.uri)
        else:
            self._table.update_incremental()
        return self._table

    def committed_txn_version(self, app_id: str) -> int:
        """Return the highest ``txn`` version committed for ``app_id`` (-1 when none)."""
        table = self.table()
        version = None if table is None else table.transaction_version(app_id)
        return -1 if version is None else int(version)

    def commit(
        self,
        files: list[StagedFile],
        *,
        timeout_ms: int,
        app_txn: tuple[str, int] | None = None,
        recovering: bool = True,
    ) -> list[object]:
        """Commit ``files`` (prepared by :func:`prepare`) in one Delta commit.

        Raises:
            CommitTimeoutError: concurrent writers kept winning past ``timeout_ms``.
            StorageError: the table could not be written.
        """
        del recovering  # a MERGE is not idempotent: the txn version is always checked
        deadline = time.monotonic() + timeout_ms / 1000
        attempt = 0
        while True:
            table = self.table()
            if table is None:
                raise StorageError(f"Delta sink table {self.sink.table} vanished before its commit")
            done = table.transaction_version(app_txn[0]) if app_txn is not None else None
            if app_txn is not None and done is not None and done >= app_txn[1]:
                return []  # committed before: a roll-forward commits nothing again
            try:
                self._commit_once(table, files, app_txn)
                return []
            except CommitFailedError as exc:
                attempt += 1
                self.conflicts += 1
                if time.monotonic() > deadline:
                    raise CommitTimeoutError(
                        f"Delta sink {self.sink.table}: gave up after {attempt} conflicting "
                        f"commits in {timeout_ms} ms"
                    ) from exc
                time.sleep(random.uniform(0, min(0.2, 0.002 * 2 ** min(attempt, 7))))
            except DeltaError as exc:
                raise StorageError(f"cannot commit to Delta sink {self.sink.table}: {exc}") from exc

    def _commit_once(
        self, table: DeltaTable, files: list[StagedFile], app_txn: tuple[str, int] | None
    ) -> None:
        props = CommitProperties(
            app_transactions=[Transaction(*app_txn)] if app_txn else None, max_commit_retries=0
        )
        if self.sink.mode == "append":
            schema = pa.schema(table.schema().to_arrow())
            adds: list[AddAction | RemoveAction] = [self._add(f) for f in files]
            table.create_write_transaction(
                adds, "append", schema, partition_by=[], commit_properties=props
            )
            return
        rows = pa.concat_tables(
            [_read(self.root, f"{self.sink.path}/{f.path}", pq.read_table) for f in files]
        )
        keys = json.loads((rows.schema.metadata or {})[KEYS_KEY])
        columns = [c for c in rows.column_names if c != DELETED]
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
        updates = {f"`{c}`": f"s.`{c}`" for c in columns}
        (
            table.merge(rows, on, source_alias="s", target_alias="t", commit_properties=props)
            .when_matched_delete(predicate=f"s.`{DELETED}`")
            .when_matched_update(updates, predicate=f"NOT s.`{DELETED}`")
            .when_not_matched_insert(updates, predicate=f"NOT s.`{DELETED}`")
            .execute()
        )

    def _add(self, f: StagedFile) -> AddAction:
        stats = {"numRecords": f.count}
        return AddAction(f.path, f.size, {}, int(time.time() * 1000), True, json.dumps(stats))


@dataclass(frozen=True, slots=True)
class Maintenance:
    """What one maintenance of a sink's table did."""

    compacted_files: int = 0
    vacuumed_files: int = 0


def maintain(
    sink: SinkTable,
    *,
    target_bytes: int,
    vacuum_hours: int = 1,
    root: StorageRoot | None = None,
) -> Maintenance:
    """Keep a sink's table readable: compact its small files (one per batch) into files of
    up to ``target_bytes`` once :data:`SMALL_FILES` gathered (Delta's OPTIMIZE, which
    changes no row), delete the files removed more than ``vacuum_hours`` ago (VACUUM) and
    the commits past the table's log retention. A compaction that loses a race with the
    application's own commit is left for the next run. A table a savepoint pins (found
    under ``root``) is compacted but neither vacuumed nor cleaned: its pinned version
    stays restorable."""
    table = _open(sink.uri)
    if table is None:
        return Maintenance()
    sizes = pa.table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist()
    compacted = 0
    if sum(1 for size in sizes if size < target_bytes // 8) >= SMALL_FILES:
        try:
            done = table.optimize.compact(target_size=target_bytes, max_concurrent_tasks=1)
            compacted = int(done.get("numFilesRemoved", 0))
        except CommitFailedError:
            pass  # a batch committed meanwhile: the next run compacts
    if root is not None and is_pinned(root, sink.path):
        return Maintenance(compacted, 0)
    removed = table.vacuum(
        retention_hours=vacuum_hours, dry_run=False, enforce_retention_duration=False
    )
    table.cleanup_metadata()
    return Maintenance(compacted, len(removed))


def participant_committer(admin: TopicAdmin, name: str) -> ParticipantCommitter:
    """Return the committer of transaction participant ``name`` (a topic or a sink)."""
    sink = sink_table(admin.root, name)
    if sink is None:
        return TopicCommitter(admin, name)
    return DeltaSinkCommitter(admin.root, sink)


def participant_path(admin: TopicAdmin, name: str) -> str | None:
    """Return the table path of participant ``name`` (None: a topic that does not exist)."""
    sink = sink_table(admin.root, name)
    if sink is not None:
        return sink.path
    return admin.table_path(name) if admin.exists(name) else None
