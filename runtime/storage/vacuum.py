"""Delete what a topic's Delta log no longer needs: removed files, old log commits.

* :func:`vacuum` deletes the data files that retention, purges, merges and compactions
  removed from the log, once ``file.delete.delay.ms`` has passed since their removal (a
  reader that planned a file before it was removed still finds it: Kafka's
  ``file.delete.delay.ms``) and unless a savepoint pins them (:mod:`runtime.storage.pins`),
  then the staging directories left empty. Files a rewrite wrote but never committed (a
  cleaner that died between writing and committing) are deleted once they are an hour old.
* :func:`clean_delta_log` deletes the commits of the Delta log that a checkpoint covers
  and that are older than the log's retention (the table's ``delta.logRetentionDuration``,
  else the configured default), after snapshotting the offset index at the latest version
  so that offsets never need the deleted commits. Delta-rs's own post-commit cleanup is off
  for topics this project creates (``delta.enableExpiredLogCleanup=false``), so commits
  are only ever deleted here, behind an index snapshot.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass

from common.errors import StorageError
from runtime.storage.fs import StorageRoot
from runtime.storage.pins import pinned
from runtime.storage.topics import TopicAdmin

log = logging.getLogger(__name__)

#: A rewrite's file not committed after this long was left by a cleaner that died.
UNCOMMITTED_REWRITE_AGE_MS = 3_600_000

#: Where writers stage files before a commit adds them to the log (a transaction's,
#: an at-least-once batch's): their directories are removed once vacuumed empty.
STAGING_ROOTS = ("txn-staging", "alos-staging")
_REWRITTEN = re.compile(r"^(compacted|merged)-[0-9a-f]{32}\.")
_LOG_FILE = re.compile(r"^(\d{20})\.(json|checkpoint\.parquet|checkpoint\.\d+\.\d+\.parquet|crc)$")


@dataclass(frozen=True, slots=True)
class VacuumResult:
    """What one vacuum of a topic deleted."""

    files: int = 0
    bytes: int = 0
    directories: int = 0


def vacuum(admin: TopicAdmin, topic: str, *, delay_ms: int, now_ms: int) -> VacuumResult:
    """Delete ``topic``'s files removed from its log at least ``delay_ms`` ago that no
    reader of this process has leased, and the staging directories they leave empty."""
    topic_log = admin.topic_log(topic)
    index = topic_log.refresh()
    table = admin.table_path(topic)
    leased = admin.leases.held()  # planned by a batch of this process not over yet
    kept = pinned(admin, topic)  # a savepoint's cut needs them
    due = [
        path
        for path, when in index.removed.items()
        if now_ms - when >= delay_ms and f"{table}/{path}" not in leased and path not in kept
    ]
    files = size = 0
    parents: set[str] = set()
    for path in due:
        full = path if "://" in path else f"{table}/{path}"
        try:
            size += admin.root.file_size(full)
        except StorageError:
            continue  # deleted already (another vacuum, or the orphan sweep)
        admin.root.delete_file(full)
        files += 1
        parents.add(full.rpartition("/")[0])
    topic_log.forget_removed(due)
    files += _uncommitted_rewrites(admin, topic, now_ms)
    dirs = sum(_remove_if_empty(admin.root, d, table) for d in sorted(parents, reverse=True))
    if files:
        log.info("[cleaner %s] vacuumed files=%d bytes=%d dirs=%d", topic, files, size, dirs)
    return VacuumResult(files, size, dirs)


def _uncommitted_rewrites(admin: TopicAdmin, topic: str, now_ms: int) -> int:
    """Delete merged or compacted files that no version of the log ever added."""
    index = admin.topic_log(topic).index
    live = {s.path for p in range(index.num_partitions) for s in index.log(p).segments}
    known = live | set(index.removed)
    table = admin.table_path(topic)
    deleted = 0
    for p in range(index.num_partitions):
        for info in admin.root.list_dir(f"{table}/partition={p}"):
            rel = f"partition={p}/{info.base_name}"
            if not _REWRITTEN.match(info.base_name) or rel in known:
                continue
            age = now_ms - (info.mtime_ns or 0) // 1_000_000
            if age >= UNCOMMITTED_REWRITE_AGE_MS and rel not in _fresh_index(admin, topic):
                admin.root.delete_file(info.path)
                deleted += 1
    return deleted


def _fresh_index(admin: TopicAdmin, topic: str) -> set[str]:
    """The live and removed files after one more refresh (a rewrite may have just landed)."""
    index = admin.topic_log(topic).refresh()
    live = {s.path for p in range(index.num_partitions) for s in index.log(p).segments}
    return live | set(index.removed)


def _remove_if_empty(root: StorageRoot, directory: str, table: str) -> int:
    """Remove ``directory`` if it holds nothing, then each parent it leaves empty below the
    staging directories of ``table`` (a transaction's directory once its last
    ``partition=N`` directory went); return how many went. Object stores have no
    directories."""
    removed = 0
    stops = {table, *(f"{table}/{name}" for name in STAGING_ROOTS)}
    while root.is_local and directory.startswith(f"{table}/") and directory not in stops:
        if root.list_dir(directory):
            break
        try:
            os.rmdir(directory)  # only if still empty: a writer may be staging into it now
        except OSError:
            break
        removed += 1
        directory = directory.rpartition("/")[0]
    return removed


def clean_delta_log(admin: TopicAdmin, topic: str, *, retention_ms: int, now_ms: int) -> int:
    """Delete the Delta log's commits and checkpoints that the newest checkpoint covers and
    that are older than ``retention_ms``; return how many files went.

    The offset index is snapshotted at the latest version first: nothing deleted is ever
    needed to answer offsets.
    """
    table = admin.table_path(topic)
    directory = f"{table}/_delta_log"
    raw = admin.root.read_bytes(f"{directory}/_last_checkpoint")
    if raw is None:
        return 0
    try:
        checkpoint = int(json.loads(raw)["version"])
    except (ValueError, KeyError, TypeError):
        return 0
    index = admin.topic_log(topic).write_snapshot()
    upto = min(checkpoint, index.version)
    deleted = 0
    for info in admin.root.list_dir(directory):
        found = _LOG_FILE.match(info.base_name)
        if found is None or int(found.group(1)) >= upto:
            continue
        if now_ms - (info.mtime_ns or now_ms * 1_000_000) // 1_000_000 < retention_ms:
            continue
        admin.root.delete_file(info.path)
        deleted += 1
    if deleted:
        log.info("[cleaner %s] deleted %d Delta log files before version %d", topic, deleted, upto)
    return deleted
