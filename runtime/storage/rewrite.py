"""One Delta commit that replaces files of a topic while every kept record keeps its offset.

The log cleaner's commits are all of this shape (:class:`Rewrite`): retention and purges
remove whole files from the head of partitions; a merge replaces a run of small files with
one file holding the same records; a compaction replaces the head of a partition with one
file holding the latest record per key. Added files carry each record's offset in an
``offset`` column and the commit carries ``streams.compaction`` metadata
(:data:`~runtime.storage.offset_index.COMPACTION_KEY`), so the offset index places them
where their offsets belong.

Invariants kept here:

* The commit is a compare-and-swap on the version it checked the removed files against:
  a concurrent append only makes it check again and retry; a removed file already gone
  (another cleaner was first) aborts it with :class:`RewriteConflictError`.
* Files are only removed from the log here; their bytes stay until the vacuum deletes them
  ``file.delete.delay.ms`` later, so a reader that planned them still reads them.
* A rewrite that adds files changes nothing a reader sees (``dataChange = false``); one
  that only removes files (retention, purge) deletes records (``dataChange = true``, as
  Delta marks a delete: Delta streaming readers of the table need ``ignoreDeletes``).
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, RemoveAction

from common.errors import CommitOutcomeUnknownError, CommitTimeoutError, StorageError, StreamsError
from runtime.storage.committer import TopicCommitter, write_data_file
from runtime.storage.delta_log import read_entry
from runtime.storage.offset_index import (
    COMPACTION_KEY,
    OFFSET_COLUMN,
    Segment,
    compaction_metadata,
)
from runtime.storage.records import FILE_SCHEMA, TABLE_SCHEMA
from runtime.storage.topics import TopicAdmin

log = logging.getLogger(__name__)

#: Columns of a rewritten data file: a topic file's columns plus each record's offset.
REWRITTEN_FILE_SCHEMA = pa.schema([*FILE_SCHEMA, pa.field(OFFSET_COLUMN, pa.int64())])


class RewriteConflictError(StorageError):
    """A file a rewrite was replacing was removed by another writer (another cleaner)
    first. Nothing was committed and the files it wrote were deleted; run it again."""


@dataclass(frozen=True, slots=True)
class NewFile:
    """A file a rewrite adds: its segment (offsets, records, bytes) and partition."""

    partition: int
    segment: Segment
    min_timestamp: int | None


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A prepared rewrite of one topic: files removed, files added (already written).

    ``kind`` names it in the log and the commit (``retention``, ``purge``, ``merge``,
    ``compaction``); ``details`` go into the commit metadata.
    """

    topic: str
    kind: str
    removed: tuple[tuple[int, Segment], ...]
    added: tuple[NewFile, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    commit_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def bytes_removed(self) -> int:
        """Return the bytes of the removed files (those whose size is known)."""
        return sum(s.size or 0 for _, s in self.removed)


def write_file(
    admin: TopicAdmin,
    topic: str,
    partition: int,
    records: pa.Table,
    *,
    prefix: str,
    span_end: int,
    codec: str = "zstd",
) -> NewFile:
    """Write ``records`` (a ``READ_SCHEMA`` table of one partition, offset order) as one
    data file with an ``offset`` column, covering offsets up to ``span_end``.

    Raises:
        StorageError: the file cannot be written (nothing is left behind).
    """
    rel = f"partition={partition}/{prefix}-{uuid.uuid4().hex}.{codec}.parquet"
    full = f"{admin.table_path(topic)}/{rel}"
    size = write_data_file(
        admin.root,
        full,
        records.select(REWRITTEN_FILE_SCHEMA.names).cast(REWRITTEN_FILE_SCHEMA),
        codec,
        ["timestamp", OFFSET_COLUMN],
    )
    first = int(records.column(OFFSET_COLUMN)[0].as_py())
    lo, hi = pc.min_max(records.column("timestamp")).values()
    segment = Segment(first, records.num_rows, rel, hi.as_py(), span_end - first, size)
    return NewFile(partition, segment, lo.as_py())


def abort(admin: TopicAdmin, rewrite: Rewrite) -> None:
    """Delete the files ``rewrite`` wrote (nothing was committed)."""
    for new in rewrite.added:
        admin.root.delete_file(f"{admin.table_path(rewrite.topic)}/{new.segment.path}")


def commit(admin: TopicAdmin, rewrite: Rewrite, *, timeout_ms: int = 60_000) -> int:
    """Commit ``rewrite`` in one Delta commit; return its version.

    Raises:
        RewriteConflictError: a file being removed was removed meanwhile (aborted).
        CommitTimeoutError: other writers kept winning past ``timeout_ms`` (aborted).
        CommitOutcomeUnknownError: a failed commit's outcome could not be read.
    """
    committer = admin.kept(rewrite.topic, "rewrites", lambda: TopicCommitter(admin, rewrite.topic))
    deadline = time.monotonic() + timeout_ms / 1000
    attempt = 0
    while True:
        table, version = _check_live(committer, rewrite, admin)
        try:
            # a compare-and-swap on the version just checked: no update in between
            table.create_write_transaction(
                _actions(rewrite),
                "append",
                TABLE_SCHEMA,
                partition_by=["partition"],
                commit_properties=CommitProperties(
                    custom_metadata={COMPACTION_KEY: _metadata(rewrite)},
                    max_commit_retries=0,
                ),
            )
            return _committed(rewrite, version + 1)
        except DeltaError as exc:
            landed = _landed(admin, committer, version, rewrite)
            if landed is not None:
                return _committed(rewrite, landed)
            if not isinstance(exc, CommitFailedError):
                abort(admin, rewrite)
                raise StorageError(
                    f"cannot commit the {rewrite.kind} of {rewrite.topic}: {exc}"
                ) from exc
            attempt += 1
            if time.monotonic() > deadline:
                abort(admin, rewrite)
                raise CommitTimeoutError(
                    f"{rewrite.kind} of {rewrite.topic}: gave up after {attempt} lost "
                    "compare-and-swaps; nothing was committed"
                ) from exc
            time.sleep(random.uniform(0, min(0.2, 0.002 * 2 ** min(attempt, 7))))


def _check_live(
    committer: TopicCommitter, rewrite: Rewrite, admin: TopicAdmin
) -> tuple[DeltaTable, int]:
    """Bring the table and the index to the latest version; return both if every file
    being removed is still live there, else abort and raise RewriteConflictError."""
    table = committer.table()
    index = committer.log.refresh(upto=table.version())
    while index.version > table.version():  # the index ran ahead of the table
        table.update_incremental()
        index = committer.log.refresh(upto=table.version())
    live = {s.path for p in {p for p, _ in rewrite.removed} for s in index.log(p).segments}
    missing = [s.path for _, s in rewrite.removed if s.path not in live]
    if missing:
        abort(admin, rewrite)
        raise RewriteConflictError(
            f"{rewrite.kind} of {rewrite.topic}: {len(missing)} of the files it replaces "
            f"(e.g. {missing[0]}) were removed by another writer at or before version "
            f"{index.version}; nothing was committed, run it again"
        )
    return table, index.version


def _actions(rewrite: Rewrite) -> list[AddAction | RemoveAction]:
    now = int(time.time() * 1000)
    deletes = not rewrite.added  # retention and purges delete records; rewrites keep them
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(s.path, deletes, now, s.size, {"partition": str(p)})
        for p, s in rewrite.removed
    ]
    for new in rewrite.added:
        segment = new.segment
        stats = {
            "numRecords": segment.count,
            "minValues": {"timestamp": new.min_timestamp},
            "maxValues": {"timestamp": segment.max_timestamp},
            "nullCount": {"timestamp": 0},
        }
        actions.append(
            AddAction(
                segment.path,
                segment.size or 0,
                {"partition": str(new.partition)},
                now,
                False,
                json.dumps(stats, separators=(",", ":")),
            )
        )
    return actions


def _metadata(rewrite: Rewrite) -> str:
    """Return the commitInfo metadata the offset index reads (``streams.compaction``)."""
    files = [
        [
            n.segment.path,
            n.partition,
            n.segment.base,
            n.segment.end - n.segment.base,
            n.segment.count,
            n.segment.max_timestamp,
        ]
        for n in rewrite.added
    ]
    meta = {
        "v": 1,
        "id": rewrite.commit_id,
        "kind": rewrite.kind,
        **rewrite.details,
        "files": files,
        "removed": [s.path for _, s in rewrite.removed],
    }
    return json.dumps(meta, separators=(",", ":"))


def _landed(
    admin: TopicAdmin, committer: TopicCommitter, version: int, rewrite: Rewrite
) -> int | None:
    """Return the version of a commit that reported failure but was written."""
    try:
        table = committer.table()
        for v in range(version + 1, table.version() + 1):
            entry = read_entry(admin.root, committer.table_path, v)
            meta = None if entry is None else compaction_metadata(entry)
            if meta is not None and meta.get("id") == rewrite.commit_id:
                return v
    except (DeltaError, StreamsError) as exc:
        raise CommitOutcomeUnknownError(
            f"{rewrite.kind} of {rewrite.topic}: a commit failed and the log could not be "
            f"read back to see whether it landed: {exc}"
        ) from exc
    return None


def _committed(rewrite: Rewrite, version: int) -> int:
    log.info(
        "[cleaner %s] %s committed version=%d files_removed=%d bytes_removed=%d files_added=%d",
        rewrite.topic,
        rewrite.kind,
        version,
        len(rewrite.removed),
        rewrite.bytes_removed,
        len(rewrite.added),
    )
    return version
