"""Put a topic, or a Delta sink table, back to an earlier cut in one Delta commit.

A topic's cut is its offset index at that version (a savepoint keeps it, and pins its
files: :mod:`runtime.storage.pins`). :func:`rewind_topic` commits one version that removes
every live file the cut does not hold (what was written since) and adds back every file of
the cut removed since (by retention, a merge or a compaction); its ``streams.rewind``
metadata holds the cut's segments and ends, which the offset index takes as they are. So
every reader sees a history without what came after the cut, and the next append gets the
offsets after the cut's end again.

A Delta sink is an ordinary Delta table: :func:`rewind_sink` restores it to the cut's
version (Delta's ``RESTORE``), or empties it when the cut came before its first commit.

Both carry the rewind's id in their commit metadata and look for it first, so running a
rewind again after a crash commits nothing twice.
"""

from __future__ import annotations

import json
import logging
import random
import time
from typing import Any

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, RemoveAction

from common.errors import CommitTimeoutError, StorageError
from runtime.storage.committer import TopicCommitter
from runtime.storage.delta_log import read_entry
from runtime.storage.fs import storage_options
from runtime.storage.offset_index import REWIND_KEY, OffsetIndex, Segment, compaction_metadata
from runtime.storage.records import TABLE_SCHEMA
from runtime.storage.topics import TopicAdmin

log = logging.getLogger(__name__)

#: Commit metadata of a Delta sink's rewind (the id, to find it again).
SINK_REWIND_KEY = "streams.sinkRewind"


def rewind_topic(
    admin: TopicAdmin,
    topic: str,
    cut: dict[str, Any],
    rewind_id: str,
    *,
    since: int,
    timeout_ms: int = 60_000,
) -> int | None:
    """Put ``topic`` back to ``cut`` (an offset index's JSON); return the version committed,
    or None when the topic already is at the cut (or this rewind landed before).

    Args:
        since: a version before this rewind began: a commit of ``rewind_id`` after it means
            the rewind landed already.

    Raises:
        StorageError: a file of the cut is gone (its savepoint's pin was removed).
        CommitTimeoutError: other writers kept winning past ``timeout_ms``.
    """
    committer = TopicCommitter(admin, topic)
    wanted = OffsetIndex.from_json({**cut, "removed": {}})
    deadline = time.monotonic() + timeout_ms / 1000
    attempt = 0
    while True:
        table = committer.table()
        index = committer.log.refresh(upto=table.version())
        if _landed(
            admin, committer.table_path, since, table.version(), key=REWIND_KEY, rewind_id=rewind_id
        ):
            return None
        actions, added = _actions(admin, topic, index, wanted)
        if not actions and index.end_offsets() == _ends(wanted, index.num_partitions):
            return None
        removed = [a.path for a in actions if isinstance(a, RemoveAction)]
        meta = {"v": 1, "id": rewind_id, "cut": _cut_json(wanted), "files": added}
        meta["removed"] = removed
        try:
            table.create_write_transaction(
                actions,
                "append",
                TABLE_SCHEMA,
                partition_by=["partition"],
                commit_properties=CommitProperties(
                    custom_metadata={REWIND_KEY: json.dumps(meta, separators=(",", ":"))},
                    max_commit_retries=0,
                ),
            )
        except CommitFailedError as exc:
            attempt += 1
            if time.monotonic() > deadline:
                raise CommitTimeoutError(
                    f"rewind of {topic}: gave up after {attempt} lost compare-and-swaps; "
                    "nothing was committed, run it again"
                ) from exc
            time.sleep(random.uniform(0, min(0.2, 0.002 * 2 ** min(attempt, 7))))
            continue
        except DeltaError as exc:
            raise StorageError(f"cannot commit the rewind of {topic}: {exc}") from exc
        log.info(
            "[rewind %s] %s back to the cut at version %d: %d files removed, %d added back",
            rewind_id,
            topic,
            wanted.version,
            len(removed),
            len(added),
        )
        return table.version() + 1


def _actions(
    admin: TopicAdmin, topic: str, index: OffsetIndex, wanted: OffsetIndex
) -> tuple[list[AddAction | RemoveAction], list[list[Any]]]:
    """The removes of the files written since the cut and the adds of the cut's files
    removed since; and the added files as ``[path, partition]``."""
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    added: list[list[Any]] = []
    for p in range(index.num_partitions):
        keep = {s.path for s in wanted.log(p).segments}
        live = {s.path for s in index.log(p).segments}
        for segment in index.log(p).segments:
            if segment.path not in keep:
                actions.append(RemoveAction(segment.path, True, now, segment.size, _part(p)))
        for segment in wanted.log(p).segments:
            if segment.path in live:
                continue
            full = f"{admin.table_path(topic)}/{segment.path}"
            if not admin.root.exists(full):
                raise StorageError(
                    f"rewind of {topic}: file {segment.path} of the cut is gone (vacuumed: "
                    "was the savepoint deleted, or its pin?); the topic cannot be put back"
                )
            size = segment.size if segment.size is not None else admin.root.file_size(full)
            actions.append(AddAction(segment.path, size, _part(p), now, True, _stats(segment)))
            added.append([segment.path, p])
    return actions, added


def _part(partition: int) -> dict[str, str | None]:
    return {"partition": str(partition)}


def _stats(segment: Segment) -> str:
    stats = {"numRecords": segment.count, "maxValues": {"timestamp": segment.max_timestamp}}
    return json.dumps(stats, separators=(",", ":"))


def _ends(index: OffsetIndex, partitions: int) -> dict[int, int]:
    return {p: index.log(p).end for p in range(partitions)}


def _cut_json(index: OffsetIndex) -> dict[str, Any]:
    data = index.to_json()
    data.pop("removed", None)
    return data


def _landed(
    admin: TopicAdmin, table_path: str, since: int, upto: int, *, key: str, rewind_id: str
) -> bool:
    """Whether a commit after ``since`` up to ``upto`` carries ``rewind_id``."""
    for version in range(since + 1, upto + 1):
        entry = read_entry(admin.root, table_path, version)
        meta = None if entry is None else compaction_metadata(entry, key)
        if meta is not None and meta.get("id") == rewind_id:
            return True
    return False


def table_version(uri: str) -> int | None:
    """The newest version of the Delta table at ``uri`` (None: no table yet)."""
    try:
        return int(DeltaTable(uri, storage_options=storage_options(uri)).version())
    except DeltaError:
        return None


def rewind_sink(
    admin: TopicAdmin, uri: str, version: int | None, rewind_id: str, *, since: int | None
) -> int | None:
    """Restore the Delta sink table at ``uri`` to ``version`` (None: the cut came before
    its first commit, so it is emptied); return the version committed, or None when there
    was nothing to do or this rewind landed before."""
    current = table_version(uri)
    if current is None or current == version:
        return None
    table = DeltaTable(uri, storage_options=storage_options(uri))
    start = -1 if since is None else since
    if any(info.get(SINK_REWIND_KEY) == rewind_id for info in table.history(current - start)):
        return None
    props = CommitProperties(custom_metadata={SINK_REWIND_KEY: rewind_id})
    try:
        if version is None:
            table.delete(commit_properties=props)
        else:
            table.restore(version, commit_properties=props)
    except DeltaError as exc:
        raise StorageError(f"cannot rewind the Delta sink table {uri}: {exc}") from exc
    return table_version(uri)
