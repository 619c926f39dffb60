"""Read the commits of a Delta table's log, one version at a time.

The offset index needs, for every version, the order of the files it added and removed and
the commit metadata our producer wrote; delta-rs does not expose a version's actions, so
they are read here from the Delta protocol's own files (``_delta_log/<version>.json``, one
JSON action per line). Only commits are read; checkpoints are not needed because the offset
index keeps its own snapshots (:mod:`runtime.storage.offset_index`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from common.errors import StorageError
from runtime.storage.fs import StorageRoot, storage_message

#: Key of the commit metadata our producer writes into each commitInfo.
OFFSETS_KEY = "streams.offsets"

#: Table property holding a topic's partition count.
PARTITIONS_PROPERTY = "streams.partitions"


class LogDamageError(StorageError):
    """A table's Delta log holds something no reader can serve in full: a missing or
    unparsable commit, a commit cut short, offsets that do not follow, a partition count
    that shrank, a log that cannot be read. Raised by every reader instead of a shorter
    answer; the message names the table, the version or file, and what to do
    (``streams-eos doctor`` lists every such damage and repairs what it can without losing
    a committed record).

    Attributes:
        kind: ``gap``, ``torn``, ``unparsable``, ``offsets``, ``partitions`` or
            ``unreadable``.
        path: the damaged file (a commit) or the table.
        version: the damaged version (-1: none in particular).
    """

    def __init__(self, message: str, *, kind: str, path: str, version: int = -1) -> None:
        super().__init__(message)
        self.kind = kind
        self.path = path
        self.version = version


class PartitionCountError(LogDamageError):
    """The table property ``streams.partitions`` was lowered by hand: a topic's partitions
    only grow (Kafka's too); set it back with ``streams-eos topics --alter --partitions``.

    Attributes:
        old: the count before the change (the largest the log had).
        new: the count the property holds now.
    """

    def __init__(self, message: str, *, path: str, version: int, old: int, new: int) -> None:
        super().__init__(message, kind="partitions", path=path, version=version)
        self.old = old
        self.new = new


@dataclass(slots=True)
class LogEntry:
    """The actions of one committed version of a Delta table."""

    version: int
    commit_info: dict[str, Any] = field(default_factory=dict)
    adds: list[dict[str, Any]] = field(default_factory=list)
    removes: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    txns: list[dict[str, Any]] = field(default_factory=list)
    path: str = ""  # the commit file

    @property
    def offsets_metadata(self) -> dict[str, Any] | None:
        """Return the producer's offset metadata of this commit, or None (foreign commit)."""
        raw = self.commit_info.get(OFFSETS_KEY)
        if raw is None:
            return None
        try:
            data = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise LogDamageError(
                f"{self.path or f'version {self.version}'}: commit metadata {OFFSETS_KEY!r} "
                "is not a JSON object: the commit is damaged; restore the file from a backup",
                kind="unparsable",
                path=self.path,
                version=self.version,
            )
        return data

    @property
    def partitions(self) -> int | None:
        """Return the partition count set by this version's metaData action, if any.

        Raises:
            LogDamageError: the property is not a positive whole number.
        """
        if self.metadata is None:
            return None
        value = (self.metadata.get("configuration") or {}).get(PARTITIONS_PROPERTY)
        if value is None:
            return None
        if not str(value).isdigit() or int(value) < 1:
            raise LogDamageError(
                f"{self.path}: the table property {PARTITIONS_PROPERTY}={value!r} is not a "
                "partition count; set it back to the topic's count with 'streams-eos topics "
                "--alter --partitions N' (partitions only grow)",
                kind="partitions",
                path=self.path,
                version=self.version,
            )
        return int(value)

    def txn_version(self, app_id: str) -> int | None:
        """Return the version of this commit's ``txn`` action of ``app_id`` (None: none)."""
        for txn in self.txns:
            if txn.get("appId") == app_id:
                return int(txn.get("version", -1))
        return None


def log_path(root: StorageRoot, table: str, version: int) -> str:
    """Return the path of the commit file of ``version`` of the table at ``table``."""
    return f"{table}/_delta_log/{version:020d}.json"


def read_entry(root: StorageRoot, table: str, version: int) -> LogEntry | None:
    """Read one version's commit; None when that version does not exist (yet).

    Raises:
        LogDamageError: the commit file cannot be read, does not parse, or is empty (a
            write cut short: Delta writers never write a commit without actions).
    """
    path = log_path(root, table, version)
    try:
        raw = root.read_bytes(path)  # retried on an object store
    except StorageError as exc:
        raise unreadable(table, exc) from exc
    if raw is None:
        return None
    entry = LogEntry(version, path=path)
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError as exc:
            raise LogDamageError(
                f"commit {version} of the Delta log of {table} does not parse ({path} line "
                f"{lineno} is not JSON: {exc}): every Delta reader refuses this table. "
                "Restore the file from a backup or a copy of the table",
                kind="unparsable",
                path=path,
                version=version,
            ) from exc
        if not isinstance(action, dict):
            raise LogDamageError(
                f"commit {version} of the Delta log of {table} does not parse ({path} line "
                f"{lineno} is not a Delta action): restore the file from a backup",
                kind="unparsable",
                path=path,
                version=version,
            )
        _collect(entry, action)
    if not raw.strip():
        raise LogDamageError(
            f"commit {version} of the Delta log of {table} is empty ({path}): a write cut "
            "short, whose actions are lost. Restore the file from a backup or a copy of the "
            "table ('streams-eos doctor' shows what else is damaged)",
            kind="torn",
            path=path,
            version=version,
        )
    return entry


def unreadable(table: str, exc: BaseException) -> LogDamageError:
    """Return the error that the Delta log of ``table`` cannot be read (one plain line)."""
    return LogDamageError(
        f"cannot read the Delta log of {table}: {storage_message(exc)}; check that "
        f"{table}/_delta_log is a directory this process may read (and write, to produce)",
        kind="unreadable",
        path=f"{table}/_delta_log",
    )


def _collect(entry: LogEntry, action: dict[str, Any]) -> None:
    if "txn" in action:
        entry.txns.append(action["txn"])
    elif "add" in action:
        entry.adds.append(action["add"])
    elif "remove" in action:
        entry.removes.append(action["remove"])
    elif "commitInfo" in action:
        entry.commit_info = action["commitInfo"]
    elif "metaData" in action:
        entry.metadata = action["metaData"]


def relative_file_path(action_path: str) -> str:
    """Decode an add/remove action's path (URI-encoded, relative or absolute)."""
    return unquote(action_path)
