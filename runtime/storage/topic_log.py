"""Keep one topic's offset index in step with its Delta log (see
:mod:`runtime.storage.offset_index`), with snapshots of the index under
``<table>/_streams_index/``."""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

import pyarrow.parquet as pq

from common.errors import StorageError, UnknownTopicError
from common.pools import shared_pool
from runtime.storage.delta_log import LogDamageError, LogEntry, log_path, read_entry, unreadable
from runtime.storage.fs import StorageRoot
from runtime.storage.offset_index import (
    GAP_CHECK_AFTER_S,
    INDEX_DIR,
    SNAPSHOT_EVERY,
    SNAPSHOTS_KEPT,
    OffsetIndex,
)
from runtime.storage.torn_commit import NotCompletableError, complete_newest

log = logging.getLogger(__name__)


class TopicLog:
    """Keeps one topic's offset index in step with its Delta log (thread-safe: the stream
    threads of one application share it).

    Args:
        recover: complete a torn newest commit from its commitInfo when every file it
            lists is there (:mod:`runtime.storage.torn_commit`), as Kafka's broker recovers
            a torn segment tail on opening a log; False (the doctor's check) only reports it.
    """

    def __init__(
        self, root: StorageRoot, topic: str, table_path: str, *, recover: bool = True
    ) -> None:
        self.root = root
        self.topic = topic
        self.table_path = table_path
        self.recover = recover
        self._index: OffsetIndex | None = None
        self._snapshot_version = -1
        self._lock = threading.RLock()
        self.last_entries: list[LogEntry] = []
        self._refreshed_at = 0.0

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    @property
    def index(self) -> OffsetIndex:
        """Return the index as of the last refresh (refreshing once if never read)."""
        if self._index is None:
            return self.refresh()
        return self._index

    def refresh(self, upto: int | None = None) -> OffsetIndex:
        """Read the versions committed since the last refresh (at most up to ``upto``).

        Returns:
            The index; the entries just applied are in :attr:`last_entries`.

        Raises:
            UnknownTopicError: the topic table does not exist.
            LogDamageError: the log is damaged (a missing, torn or unparsable commit,
                offsets that do not follow, a lowered partition count) or unreadable.
            StorageError: the log cannot be interpreted otherwise.
        """
        with self._lock:
            try:
                return self._refresh(upto)
            except LogDamageError:
                raise
            except StorageError as exc:
                if self._log_unreadable():
                    raise unreadable(self.table_path, exc) from exc
                raise

    def _log_unreadable(self) -> bool:
        """Whether the log's directory is there but cannot be listed (a file in its place,
        no permission)."""
        try:
            self.root.list_dir(f"{self.table_path}/_delta_log")
        except StorageError:
            return True
        return False

    def _refresh(self, upto: int | None) -> OffsetIndex:
        if self._index is None:
            self._index = self._load_snapshot()
        index = self._index
        self.last_entries = []
        stale = time.monotonic() - self._refreshed_at > GAP_CHECK_AFTER_S
        ahead = ReadAhead(self.root, self.table_path, upto)
        try:
            index = self._apply_all(index, ahead, stale)
        finally:
            ahead.close()
        if index.version < 0 and self.root.exists(f"{self.table_path}/_delta_log"):
            raise StorageError(
                f"topic {self.topic}: the Delta log has no version 0 and no offset index "
                f"snapshot under {self._snapshot_dir()}; offsets cannot be derived"
            )
        if index.version < 0:
            raise UnknownTopicError(
                f"topic {self.topic!r} does not exist under {self.root.uri}; create it with "
                "'streams-eos topics --create'"
            )
        if upto is not None and index.version < upto:
            raise StorageError(
                f"topic {self.topic}: version {index.version + 1} of the Delta log is missing"
            )
        index.check_partitions()
        if index.version - self._snapshot_version >= SNAPSHOT_EVERY:
            self._write_snapshot(index)
        self._refreshed_at = time.monotonic()
        return index

    def _apply_all(self, index: OffsetIndex, ahead: ReadAhead, stale: bool) -> OffsetIndex:
        """Apply every version after the index's (up to ``ahead.upto``); return the
        index (a new one when the log was cleaned past it)."""
        while ahead.upto is None or index.version < ahead.upto:
            entry = self._apply_next(index, ahead)
            if entry is None:
                if stale and self._cleaned_past(index.version):
                    ahead.close()
                    index = self._index = self._reload(index.version)
                    stale = False
                    continue
                if stale:
                    self._check_no_gap(index.version)
                break
            self.last_entries.append(entry)
        return index

    def _apply_next(self, index: OffsetIndex, ahead: ReadAhead) -> LogEntry | None:
        """Read the next version and apply it to ``index`` (None: there is none yet),
        completing it first if it is a torn newest commit that can be completed.

        A damaged commit leaves ``index`` as it was (it is checked before it is applied).
        """
        version = index.version + 1
        try:
            entry = ahead.read(version)
            if entry is not None:
                index.apply(entry, self._count_rows)
            return entry
        except LogDamageError as exc:
            if not self.recover or exc.kind not in ("torn", "unparsable"):
                raise
            self._complete(exc)
        entry = read_entry(self.root, self.table_path, version)
        if entry is not None:
            index.apply(entry, self._count_rows)
        return entry

    def _complete(self, damage: LogDamageError) -> None:
        """Complete the torn commit ``damage`` names, or raise it saying why it cannot be."""
        try:
            complete_newest(self.root, self.table_path, damage.version)
        except NotCompletableError as why:
            reason = f"it cannot be completed from its commitInfo: {why}"
        except StorageError as exc:
            reason = f"completing it from its commitInfo failed: {exc}"
        else:
            return
        raise LogDamageError(
            f"{damage} ({reason})", kind=damage.kind, path=damage.path, version=damage.version
        ) from damage

    def write_snapshot(self) -> OffsetIndex:
        """Refresh, and snapshot the index at the latest version unless one exists (the
        log cleaner calls this before Delta may delete old log files)."""
        with self._lock:
            index = self._refresh(None)
            if index.version > self._snapshot_version:
                self._write_snapshot(index)
            return index

    def forget_removed(self, paths: Iterable[str]) -> None:
        """Forget removed files the vacuum deleted (see :attr:`OffsetIndex.removed`)."""
        with self._lock:
            if self._index is not None:
                self._index.vacuumed(paths)

    def _cleaned_past(self, version: int) -> bool:
        """Whether Delta's log cleanup removed commits after ``version`` (its newest
        checkpoint is past it; cleanup only removes versions before a checkpoint)."""
        raw = self.root.read_bytes(f"{self.table_path}/_delta_log/_last_checkpoint")
        try:
            return raw is not None and int(json.loads(raw)["version"]) > version
        except (ValueError, KeyError, TypeError):
            return False

    def _check_no_gap(self, version: int) -> None:
        """Raise StorageError if the log holds a commit after the missing ``version + 1``.

        Delta's versions are dense, so a later commit means ``version + 1`` was lost (a
        deleted or misplaced file), not that it is still to come: reading on would skip its
        records and those after it. Checked by a new reader at its first refresh and by a
        running one every :data:`GAP_CHECK_AFTER_S` seconds at the log end (a listing of
        the log directory). A missing version that the listing shows is no gap: its
        read answered before the writer's commit, and later ones followed meanwhile (more
        likely the slower the store)."""
        later = [
            int(info.base_name[:20])
            for info in self.root.list_dir(f"{self.table_path}/_delta_log")
            if info.base_name.endswith(".json") and info.base_name[:20].isdigit()
        ]
        if version + 1 in later:
            return  # written since it was read as absent (a slow read raced the writer)
        newer = [v for v in later if v > version + 1]
        if newer:
            missing = version + 1
            path = log_path(self.root, self.table_path, missing)
            raise LogDamageError(
                f"topic {self.topic}: commit {missing} of the Delta log is missing "
                f"({path}), but commits up to "
                f"{max(newer)} exist: the records of version {missing} and after cannot be "
                "read in order. Restore the file from a backup or a copy of the table, then "
                "read again; no offset past the gap is served meanwhile",
                kind="gap",
                path=path,
                version=missing,
            )

    def _reload(self, version: int) -> OffsetIndex:
        newer = self._load_snapshot()
        if newer.version <= version:
            raise StorageError(
                f"topic {self.topic}: the Delta log's commits after version {version} were "
                "cleaned up (delta.logRetentionDuration) and no offset index snapshot "
                f"under {self._snapshot_dir()} covers them; offsets cannot be derived. "
                "Keep readers of this topic running or lengthen delta.logRetentionDuration"
            )
        log.info(
            "[topic %s] log cleaned past version %d: reloaded index at %d",
            self.topic,
            version,
            newer.version,
        )
        return newer

    def _count_rows(self, path: str) -> int:
        full = path if "://" in path else f"{self.table_path}/{path}"
        with self.root.fs.open_input_file(full) as f:
            return int(pq.ParquetFile(f).metadata.num_rows)

    def _snapshot_dir(self) -> str:
        return f"{self.table_path}/{INDEX_DIR}"

    def _load_snapshot(self) -> OffsetIndex:
        names = sorted(
            (info.base_name for info in self.root.list_dir(self._snapshot_dir())),
            reverse=True,
        )
        for name in names:
            if not name.endswith(".json.gz"):
                continue
            raw = self.root.read_bytes(f"{self._snapshot_dir()}/{name}")
            try:
                index = OffsetIndex.from_json(json.loads(gzip.decompress(raw or b"")))
            except (OSError, ValueError, KeyError, StorageError) as exc:
                log.warning(
                    "[topic %s] skipping unreadable index snapshot %s: %s", self.topic, name, exc
                )
                continue
            self._snapshot_version = index.version
            return index
        return OffsetIndex(self.topic)

    def _write_snapshot(self, index: OffsetIndex) -> None:
        # The snapshot is derived from immutable commits, so writing it twice (two
        # processes at once) is harmless; a torn write is skipped by _load_snapshot.
        data = gzip.compress(json.dumps(index.to_json()).encode(), compresslevel=1)
        self.root.write_bytes(f"{self._snapshot_dir()}/{index.version:020d}.json.gz", data)
        self._snapshot_version = index.version
        old = sorted(
            info.path
            for info in self.root.list_dir(self._snapshot_dir())
            if info.base_name.endswith(".json.gz")
        )
        for path in old[:-SNAPSHOTS_KEPT]:
            self.root.delete_file(path)


#: The most versions read at once by a refresh that is catching up.
READ_AHEAD_MAX = 16


class ReadAhead:
    """Reads a log's next versions before they are applied, several at once once a
    refresh found two in a row: each read is a round trip to the store (two requests on
    an object store), and a restart or a reader that fell behind by a hundred versions
    catches up in a dozen round trips rather than a hundred. A refresh that finds one new
    version or none reads exactly what it did one at a time.

    Args:
        upto: read no version past this one (None: to the end of the log).
    """

    def __init__(self, root: StorageRoot, table_path: str, upto: int | None) -> None:
        self.root = root
        self.table_path = table_path
        self.upto = upto
        self._pending: dict[int, Future[LogEntry | None]] = {}
        self._found = 0
        self._window = 1

    def read(self, version: int) -> LogEntry | None:
        """Return ``version``'s entry, None when it does not exist (yet); raises as
        :func:`read_entry` does."""
        pending = self._pending.pop(version, None)
        entry = (
            read_entry(self.root, self.table_path, version) if pending is None else pending.result()
        )
        if entry is None:
            self.close()
            return None
        self._found += 1
        if self._found >= 2 and not self._pending:
            self._window = min(2 * self._window, READ_AHEAD_MAX)
            last = version + self._window
            if self.upto is not None:
                last = min(last, self.upto)
            pool = shared_pool("log-read-ahead", READ_AHEAD_MAX)
            for v in range(version + 1, last + 1):
                self._pending[v] = pool.submit(read_entry, self.root, self.table_path, v)
        return entry

    def close(self) -> None:
        """Drop what was read ahead (a read still running ends on its own)."""
        for pending in self._pending.values():
            pending.cancel()
        self._pending.clear()
        self._found = 0
        self._window = 1
