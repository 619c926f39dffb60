"""Where transactions stage their files, and the sweep of staged files nobody owns.

A transaction writes its files into ``txn-staging/<id>/<sequence>-<producer id>-<epoch>/``
of each participant table, one ``partition=<p>/`` directory a partition (Hive-style, as
every reader of a partitioned Delta table expects; older releases staged them flat as
``partition=<p>-<uuid>...``, still read). The commit phase adds them to the Delta log
where they are; an abort deletes the directories of its sequence; :meth:`StagingArea.
delete_orphans` deletes staged files no commit references and no open transaction owns (a
zombie's late writes, a crash before PrepareCommit).
"""

from __future__ import annotations

import hashlib
import logging
import re
from urllib.parse import unquote

import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from common.errors import UnknownTopicError
from runtime.storage.delta_log import LogDamageError
from runtime.storage.delta_sink import participant_path
from runtime.storage.fs import StorageRoot, storage_options
from runtime.storage.topics import TopicAdmin
from runtime.txn.metadata import TransactionMetadata

log = logging.getLogger(__name__)

STAGING_DIR = "txn-staging"
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def id_dir(transactional_id: str) -> str:
    """Return a directory name for ``transactional_id`` (safe characters, unique)."""
    safe = _SAFE.sub("_", transactional_id)
    if safe == transactional_id and safe not in (".", ".."):
        return safe
    return f"{safe}-{hashlib.sha1(transactional_id.encode()).hexdigest()[:10]}"


def staging_dir(meta: TransactionMetadata) -> str:
    """Return where ``meta``'s current producer stages files (relative to a table)."""
    return (
        f"{STAGING_DIR}/{id_dir(meta.transactional_id)}/"
        f"{meta.txn_sequence}-{meta.producer_id}-{meta.producer_epoch}"
    )


class StagingArea:
    """The staged files of every participant table under one storage root."""

    def __init__(self, admin: TopicAdmin) -> None:
        self.admin = admin
        self.root = admin.root

    def dirs(self, topic: str, tid: str, sequence: int | None) -> list[str]:
        """Return the staging directories of ``tid`` in ``topic`` (of one sequence, or all)."""
        table = participant_path(self.admin, topic)
        if table is None:
            return []
        base = f"{table}/{STAGING_DIR}/{id_dir(tid)}"
        return [
            info.path
            for info in self.root.list_subdirs(base)
            if sequence is None or info.base_name.split("-", 1)[0] == str(sequence)
        ]

    def staged_paths(self, topic: str, tid: str, sequence: int) -> list[str]:
        """Return the staged data files of ``tid``'s transaction ``sequence`` in ``topic``."""
        return [
            path
            for directory in self.dirs(topic, tid, sequence)
            for path in _files(self.root, directory)
        ]

    def delete_orphans(self, open_dirs: set[tuple[str, int]], *, cutoff_ms: int) -> int:
        """Delete staged files older than ``cutoff_ms`` that no commit references, outside
        the ``(transactional id, sequence)`` of open transactions; return how many."""
        deleted = 0
        for topic in self.admin.list():
            deleted += self._delete_topic_orphans(topic, open_dirs, cutoff_ms)
        return deleted

    def _delete_topic_orphans(
        self, topic: str, open_dirs: set[tuple[str, int]], cutoff_ms: int
    ) -> int:
        base = f"{self.admin.table_path(topic)}/{STAGING_DIR}"
        ids = self.root.list_subdirs(base)
        if not ids:
            return 0
        try:
            # first, so a damaged log (whose commits delta-rs may read short) deletes
            # nothing and a torn newest commit is completed before delta-rs reads it
            self.admin.topic_log(topic).refresh()
            uri = self.admin.table_uri(topic)
            table = DeltaTable(uri, storage_options=storage_options(uri))
            actions = table.get_add_actions(flatten=True)
        except (DeltaError, UnknownTopicError):
            return 0
        except LogDamageError as exc:
            log.warning("not sweeping the staged files of %s, its log is damaged: %s", topic, exc)
            return 0
        table_path = self.admin.table_path(topic)
        referenced = {f"{table_path}/{unquote(p)}" for p in actions.column("path").to_pylist()}
        # files removed from the log (retention, merges) are the vacuum's, after their
        # delay: a reader may still need them (read after the table, so none is missed)
        pending = self.admin.topic_log(topic).refresh().removed
        referenced |= {f"{table_path}/{p}" for p in pending}
        open_names = {(id_dir(tid), str(seq)) for tid, seq in open_dirs}
        deleted = 0
        for id_info in ids:
            for seq_info in self.root.list_subdirs(id_info.path):
                if (id_info.base_name, seq_info.base_name.split("-", 1)[0]) in open_names:
                    continue
                deleted += self._delete_unreferenced(seq_info.path, referenced, cutoff_ms)
        return deleted

    def _delete_unreferenced(self, directory: str, referenced: set[str], cutoff_ms: int) -> int:
        deleted = 0
        for info in self.root.list_dir(directory):
            if info.type == pafs.FileType.Directory:
                deleted += self._delete_unreferenced(info.path, referenced, cutoff_ms)
                continue
            mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
            if info.path.endswith(".parquet") and info.path not in referenced and mtime < cutoff_ms:
                self.root.delete_file(info.path)
                deleted += 1
        return deleted


def _files(root: StorageRoot, directory: str) -> list[str]:
    """The parquet files of one transaction's staging directory: in its ``partition=N``
    directories, and flat in it (as older releases staged them)."""
    found: list[str] = []
    for info in root.list_dir(directory):
        if info.type == pafs.FileType.Directory:
            found.extend(f.path for f in root.list_dir(info.path) if f.path.endswith(".parquet"))
        elif info.path.endswith(".parquet"):
            found.append(info.path)
    return found
