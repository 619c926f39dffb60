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
from runtime.storage.fs import StorageRoot

#: Key of the commit metadata our producer writes into each commitInfo.
OFFSETS_KEY = "streams.offsets"

#: Table property holding a topic's partition count.
PARTITIONS_PROPERTY = "streams.partitions"


@dataclass(slots=True)
class LogEntry:
    """The actions of one committed version of a Delta table."""

    version: int
    commit_info: dict[str, Any] = field(default_factory=dict)
    adds: list[dict[str, Any]] = field(default_factory=list)
    removes: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] | None = None

    @property
    def offsets_metadata(self) -> dict[str, Any] | None:
        """Return the producer's offset metadata of this commit, or None (foreign commit)."""
        raw = self.commit_info.get(OFFSETS_KEY)
        if raw is None:
            return None
        try:
            data = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError as exc:
            raise StorageError(
                f"version {self.version}: commit metadata {OFFSETS_KEY!r} is not JSON: {exc}"
            ) from exc
        if not isinstance(data, dict):
            raise StorageError(f"version {self.version}: {OFFSETS_KEY!r} is not an object")
        return data

    @property
    def partitions(self) -> int | None:
        """Return the partition count set by this version's metaData action, if any."""
        if self.metadata is None:
            return None
        value = (self.metadata.get("configuration") or {}).get(PARTITIONS_PROPERTY)
        return int(value) if value is not None else None


def log_path(root: StorageRoot, table: str, version: int) -> str:
    """Return the path of the commit file of ``version`` of the table at ``table``."""
    return f"{table}/_delta_log/{version:020d}.json"


def read_entry(root: StorageRoot, table: str, version: int) -> LogEntry | None:
    """Read one version's commit; None when that version does not exist (yet).

    Raises:
        StorageError: the commit file exists but cannot be parsed.
    """
    raw = root.read_bytes(log_path(root, table, version))
    if raw is None:
        return None
    entry = LogEntry(version)
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError as exc:
            raise StorageError(
                f"{log_path(root, table, version)} line {lineno} is not JSON: {exc}"
            ) from exc
        _collect(entry, action)
    return entry


def _collect(entry: LogEntry, action: dict[str, Any]) -> None:
    if "add" in action:
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
