"""Write record files and commit them to a topic's Delta log by compare-and-swap.

Shared by the plain producer (files under ``partition=<p>/``, committed at once) and the
transactional producer (files staged as ``txn-staging/<id>/<txn>/partition=<p>/<uuid>``,
committed in the commit phase where they were staged). A commit is a compare-and-swap on
the table version its offsets were computed from; after a lost race the offsets are
recomputed and the *same* files are committed again, so files are never rewritten. Each
commit carries an id (and, for transactions, Delta's ``txn(appId, version)`` action), so a
commit whose answer was lost is recognised instead of being repeated.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, RemoveAction, Transaction

from common.errors import (
    CommitOutcomeUnknownError,
    CommitTimeoutError,
    StorageError,
    StreamsError,
)
from common.pools import shared_pool
from runtime.storage.delta_log import OFFSETS_KEY, LogDamageError, LogEntry, read_entry
from runtime.storage.fs import StorageRoot, storage_message, storage_options
from runtime.storage.offset_index import OffsetIndex
from runtime.storage.records import FILE_SCHEMA, TABLE_SCHEMA, AppendResult
from runtime.storage.retries import ATTEMPTS, retried
from runtime.storage.topics import TopicAdmin

log = logging.getLogger(__name__)

#: Rows per parquet row group: readers fetch only the row groups an offset range needs.
ROW_GROUP_SIZE = 65_536


@dataclass(frozen=True, slots=True)
class StagedFile:
    """A data file written for one partition, not yet (or already) in the Delta log."""

    path: str  # relative to the topic table
    partition: int
    count: int
    size: int
    min_timestamp: int
    max_timestamp: int


def split_by_partition(table: pa.Table, parts: np.ndarray) -> Iterator[tuple[int, pa.Table]]:
    """Yield ``(partition, records)`` groups of ``table``, keeping record order per group."""
    if len(parts) and parts.min() == parts.max():  # one partition (a task's changelog)
        yield int(parts[0]), table
        return
    order = np.argsort(parts, kind="stable")
    sorted_parts = parts[order]
    table = table.take(pa.array(order))
    bounds = np.flatnonzero(np.diff(sorted_parts)) + 1
    starts = np.concatenate([[0], bounds]).tolist()
    ends = np.concatenate([bounds, [len(sorted_parts)]]).tolist()
    for start, end in zip(starts, ends, strict=True):
        yield int(sorted_parts[start]), table.slice(start, end - start)


def write_file(
    root: StorageRoot,
    table_path: str,
    rel_dir: str,
    partition: int,
    chunk: pa.Table,
    *,
    compression: str,
) -> StagedFile:
    """Write one partition's records as a parquet file under ``table_path/rel_dir``.

    Raises:
        StorageError: the file could not be written (e.g. the disk is full).
    """
    name = f"{uuid.uuid4().hex}.{compression}.parquet"
    # Hive-style partition directories, staged files too (below their transaction's
    # directory): readers that take a partition's value from the path (polars) read the
    # same rows as those that take it from the Delta log.
    rel = (
        f"{rel_dir}/partition={partition}/{name}"
        if rel_dir
        else f"partition={partition}/part-{name}"
    )
    full = f"{table_path}/{rel}"
    size = write_data_file(
        root, full, chunk.select(FILE_SCHEMA.names).cast(FILE_SCHEMA), compression, ["timestamp"]
    )
    lo, hi = pc.min_max(chunk.column("timestamp")).values()
    return StagedFile(rel, partition, chunk.num_rows, size, lo.as_py(), hi.as_py())


def write_data_file(
    root: StorageRoot, full: str, records: pa.Table, compression: str, statistics: list[str]
) -> int:
    """Write ``records`` as the parquet data file ``full`` in one write (its size known
    without a stat); return its size. A failed write leaves nothing behind.

    Raises:
        StorageError: the file could not be written (e.g. the disk is full).
    """
    buf = pa.BufferOutputStream()
    try:
        pq.write_table(
            records,
            buf,
            compression=None if compression == "none" else compression,
            row_group_size=ROW_GROUP_SIZE,
            use_dictionary=False,
            write_statistics=statistics,
        )
        return root.write_file_bytes(full, buf.getvalue())
    except StorageError:  # root.write_file_bytes wraps the filesystem's errors
        root.delete_file(full)
        raise
    except (OSError, pa.ArrowException) as exc:
        root.delete_file(full)
        raise StorageError(f"cannot write data file {full}: {exc}") from exc


class ParticipantCommitter(Protocol):
    """Commits a transaction participant's staged files (a topic's, a Delta sink's):
    idempotent under ``app_txn`` (a roll-forward after a crash commits nothing twice)."""

    def committed_txn_version(self, app_id: str) -> int:
        """Return the highest ``txn`` version committed for ``app_id`` (-1 when none)."""
        ...

    def commit(
        self,
        files: list[StagedFile],
        *,
        timeout_ms: int,
        app_txn: tuple[str, int] | None = None,
        recovering: bool = True,
    ) -> Sequence[object]:
        """Commit ``files`` in one commit (see :meth:`TopicCommitter.commit`)."""
        ...


class TopicCommitter:
    """Commits files to one topic's Delta log; keeps the table handle between commits.

    After each commit the handle reads its own new version on a background thread (a
    delta-rs handle does not move with its commits), so that the next commit of a
    transaction's commit phase finds it current without waiting for that read.
    """

    def __init__(self, admin: TopicAdmin, topic: str) -> None:
        self.admin = admin
        self.topic = topic
        self.table_path = admin.table_path(topic)
        self.log = admin.topic_log(topic)
        self.conflicts = 0
        self._table: DeltaTable | None = None
        self._refreshing: Future[None] | None = None

    def table(self) -> DeltaTable:
        """Return the topic's Delta table, brought up to date (a read: retried on a
        transient error, inside the caller's batch, before the batch fails)."""
        self._await_refresh()
        return retried(self._open, what=f"open topic {self.topic}")

    def _open(self) -> DeltaTable:
        try:
            if self._table is None:
                uri = self.admin.table_uri(self.topic)
                self._table = DeltaTable(uri, storage_options=storage_options(uri))
            else:
                self._table.update_incremental()
        except (DeltaError, OSError) as exc:
            self._table = None  # opened anew by the next attempt
            raise StorageError(f"cannot open topic {self.topic}: {storage_message(exc)}") from exc
        return self._table

    def committed_txn_version(self, app_id: str) -> int:
        """Return the highest ``txn`` version committed for ``app_id`` (-1 when none)."""
        version = self.table().transaction_version(app_id)
        return -1 if version is None else int(version)

    def _refreshed(self) -> DeltaTable:
        """The handle as the background read after the last commit left it: current
        unless another writer committed since, in which case the commit's
        compare-and-swap fails and is retried on a handle brought up to date."""
        if self._table is None or not self._await_refresh():
            return self.table()
        return self._table

    def _refresh_soon(self) -> None:
        """Read the commit just made into the handle, off the caller's path."""
        table = self._table
        if table is not None:
            self._refreshing = shared_pool("delta-refresh", 4).submit(table.update_incremental)

    def _await_refresh(self) -> bool:
        """Wait for the background read; return whether one ran and succeeded (a failed
        one leaves the handle to be brought up to date, or opened, again)."""
        pending, self._refreshing = self._refreshing, None
        if pending is None:
            return False
        try:
            pending.result()
        except (DeltaError, OSError) as exc:
            log.debug("[topic %s] background refresh failed: %s", self.topic, exc)
            self._table = None
            return False
        return True

    def commit(
        self,
        files: list[StagedFile],
        *,
        timeout_ms: int,
        app_txn: tuple[str, int] | None = None,
        recovering: bool = True,
    ) -> list[AppendResult]:
        """Add ``files`` to the log in one commit; return where each file's records landed.

        Args:
            app_txn: ``(transactional id, transaction sequence)``: written as Delta's ``txn``
                action; when the table already holds that version, nothing is committed
                again and ``[]`` is returned: a roll-forward after a crash, or by another
                instance while this producer was paused past its PrepareCommit, commits
                nothing twice. The check is the offset index's (no log replay) and is
                made against the very version the commit is tried on.
            recovering: read the table's latest version first; a live producer that has
                just written PrepareCommit starts from the handle its last commit left
                (a commit from a stale handle fails its compare-and-swap and is planned
                again, checked again, on the current version).

        Raises:
            CommitTimeoutError: other writers kept winning past ``timeout_ms``.
            CommitOutcomeUnknownError: a commit failed and its outcome could not be read.
            StorageError: the storage refused the commit (nothing committed).
        """
        # a producer in its commit phase knows its handle holds its last commit (read in
        # the background); every other caller reads the table's latest version first
        table = self.table() if recovering else self._refreshed()
        commit_id = uuid.uuid4().hex
        deadline = time.monotonic() + timeout_ms / 1000
        adds: list[AddAction | RemoveAction] = [_add_action(f) for f in files]
        attempt = failures = 0
        while True:
            index, results, meta = self._plan(table, files, commit_id, app_txn)
            base_version = index.version
            if app_txn is not None and self._holds(index, table, app_txn):
                # committed already (a roll-forward by another process: this producer was
                # paused past its PrepareCommit): committing again would duplicate it
                return []
            try:
                table.create_write_transaction(
                    adds,
                    "append",
                    TABLE_SCHEMA,
                    partition_by=["partition"],
                    commit_properties=CommitProperties(
                        custom_metadata={OFFSETS_KEY: meta},
                        max_commit_retries=0,
                        app_transactions=[Transaction(*app_txn)] if app_txn else None,
                    ),
                )
                self._refresh_soon()
                return results
            except (DeltaError, OSError) as exc:
                # read back (the commit carries its id): a lost answer is not a failure
                landed = self._landed(table, base_version, commit_id, app_txn)
                if landed is not None:
                    return landed
                attempt += 1
                lost_race = isinstance(exc, CommitFailedError)
                if not lost_race:  # the store failed and the commit did not land: again
                    failures += 1
                    if failures >= ATTEMPTS:
                        raise StorageError(
                            f"cannot commit to topic {self.topic} ({failures} attempts): "
                            f"{storage_message(exc)}"
                        ) from exc
                else:
                    self.conflicts += 1
                if time.monotonic() > deadline:
                    raise CommitTimeoutError(
                        f"topic {self.topic}: gave up after {attempt} attempts in "
                        f"{timeout_ms} ms; nothing was committed"
                    ) from exc
                pause = 0.002 * 2 ** min(attempt, 7) if lost_race else 0.05 * 2**failures
                time.sleep(random.uniform(0, min(0.2 if lost_race else 2.0, pause)))

    def _plan(
        self,
        table: DeltaTable,
        files: list[StagedFile],
        commit_id: str,
        app_txn: tuple[str, int] | None,
    ) -> tuple[OffsetIndex, list[AppendResult], str]:
        """Compute offsets from the version the table is at; return the commit metadata."""
        index = self.log.refresh(upto=table.version())
        while index.version > table.version():  # the index ran ahead of the table
            table.update_incremental()
            index = self.log.refresh(upto=table.version())
        ends = index.end_offsets()
        results, entries = [], []
        for f in files:
            base = ends[f.partition]
            entries.append([f.path, f.partition, base, f.count, f.max_timestamp])
            results.append(AppendResult(self.topic, f.partition, base, f.count))
            ends[f.partition] = base + f.count
        meta: dict[str, object] = {
            "v": 1,
            "id": commit_id,
            "files": entries,
            "end": [ends[p] for p in range(index.num_partitions)],
        }
        if app_txn is not None:
            meta["txn"] = list(app_txn)
        return index, results, json.dumps(meta, separators=(",", ":"))

    @staticmethod
    def _holds(index: OffsetIndex, table: DeltaTable, app_txn: tuple[str, int]) -> bool:
        """Whether the table, at the index's version, holds transaction ``app_txn``: the
        commit about to be tried lands on that version or not at all, so nothing can
        commit the transaction in between."""
        done = index.txn_committed(app_txn[0])
        if done is None and index.txns_from >= 0:  # before the index kept transactions
            done = table.transaction_version(app_txn[0])
        return done is not None and done >= app_txn[1]

    def _landed(
        self,
        table: DeltaTable,
        base_version: int,
        commit_id: str,
        app_txn: tuple[str, int] | None,
    ) -> list[AppendResult] | None:
        """Return the results if a commit that reported failure was in fact written."""

        def read_back() -> list[LogEntry | None]:
            table.update_incremental()
            return [
                read_entry(self.admin.root, self.table_path, v)
                for v in range(base_version + 1, table.version() + 1)
            ]

        try:
            entries = retried(
                read_back, what=f"read back a commit of {self.topic}", never=(LogDamageError,)
            )
        except (DeltaError, OSError, StreamsError) as exc:
            raise CommitOutcomeUnknownError(
                f"topic {self.topic}: a commit failed and the log could not be read back to "
                f"see whether it landed: {storage_message(exc)}"
            ) from exc
        for entry in entries:
            if entry is not None and _is_ours(entry, commit_id, app_txn):
                meta = entry.offsets_metadata or {}
                return [
                    AppendResult(self.topic, p, base, count)
                    for _path, p, base, count, _ts in meta.get("files", [])
                ]
        return None


def _is_ours(entry: LogEntry, commit_id: str, app_txn: tuple[str, int] | None) -> bool:
    meta = entry.offsets_metadata
    if not meta:
        return False
    return bool(meta.get("id") == commit_id or (app_txn and meta.get("txn") == list(app_txn)))


def _add_action(f: StagedFile) -> AddAction:
    stats = {
        "numRecords": f.count,
        "minValues": {"timestamp": f.min_timestamp},
        "maxValues": {"timestamp": f.max_timestamp},
        "nullCount": {"timestamp": 0},
    }
    return AddAction(
        f.path,
        f.size,
        {"partition": str(f.partition)},
        int(time.time() * 1000),
        True,
        json.dumps(stats, separators=(",", ":")),
    )
