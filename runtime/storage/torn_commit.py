"""Complete a torn newest commit from its own commitInfo (Kafka's log recovery, for Delta).

A commit of this project's writers begins with its commitInfo, whose metadata lists
every data file the commit adds (``streams.offsets``: path, partition, base offset, count,
largest timestamp; ``streams.compaction``: the same with its span, and the files it
removes) and the transaction that wrote it. A crash or a disk that cut the commit file
after that line leaves a commit the readers disagree on: delta-rs serves the add actions
that are there (or refuses a line cut in the middle), the project's readers refuse it
(:func:`runtime.storage.offset_index.check_whole`).

Kafka's broker recovers a torn segment tail when it opens the log; here whoever opens the
table first (a reader, a producer, a stream thread, ``streams-eos doctor --repair``)
completes a torn *newest* commit when every file it lists is still in the table: the
missing add and remove actions and the ``txn`` action are rebuilt from the listing and
the files themselves, a line cut in the middle (the tail of the write) is dropped and
rebuilt the same way, and the whole commit replaces the torn one (the torn file is kept
under ``<root>/_quarantine/``). Every reader then serves the whole commit: nothing
committed is lost, and no reader answers shorter than another. Delta's writers make a
commit visible by one atomic rename or PUT, so a torn commit is never a write in progress.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.errors import StorageError
from runtime.storage import quarantine
from runtime.storage.delta_log import OFFSETS_KEY, log_path, relative_file_path
from runtime.storage.fs import StorageRoot
from runtime.storage.offset_index import COMPACTION_KEY, REWIND_KEY

log = logging.getLogger(__name__)

_PARTITION_IN_PATH = re.compile(r"partition=(\d+)")


class NotCompletableError(StorageError):
    """A torn commit cannot be completed without losing a record (the message says why)."""


def complete_newest(root: StorageRoot, table: str, version: int) -> str:
    """Complete the torn commit ``version`` of ``table`` in place if it is the newest;
    return where the torn file was kept.

    Raises:
        NotCompletableError: it is not the newest commit, or its actions cannot be told.
        StorageError: the completed commit cannot be written (a read-only log).
    """
    newest = newest_version(root, table)
    if version != newest:
        raise NotCompletableError(f"commits up to {newest} follow it")
    content = completed_commit(root, table, version)
    path = log_path(root, table, version)
    kept = quarantine.copy(root, path)
    try:
        root.write_bytes(path, content)
    except StorageError:
        root.delete_file(kept)  # nothing replaced: no copy to keep
        raise
    log.warning(
        "completed the torn commit %d of %s from its commitInfo (every file it lists is "
        "there); the torn file is kept as %s",
        version,
        table,
        kept,
    )
    return kept


def newest_version(root: StorageRoot, table: str) -> int:
    """Return the newest version among a table's commit files (-1: none)."""
    return max(
        (
            int(info.base_name[:20])
            for info in root.list_dir(f"{table}/_delta_log")
            if info.base_name.endswith(".json") and info.base_name[:20].isdigit()
        ),
        default=-1,
    )


def completed_commit(root: StorageRoot, table: str, version: int) -> bytes:
    """Return the commit ``version`` of ``table`` with its lost actions rebuilt.

    Raises:
        NotCompletableError: why it cannot be (its commitInfo lost, a listed file gone, a line
            other than the last cut, nothing missing).
    """
    raw = root.read_bytes(log_path(root, table, version)) or b""
    lines = [line for line in raw.splitlines() if line.strip()]
    actions = _parse(lines)
    if len(actions) < len(lines):
        lines = lines[: len(actions)]  # the cut tail line: rebuilt below
    info = actions[0].get("commitInfo") if actions else None
    compaction = _meta(info, COMPACTION_KEY)
    rewind = _meta(info, REWIND_KEY)
    meta = compaction if compaction is not None else rewind or _meta(info, OFFSETS_KEY)
    if meta is None:
        raise NotCompletableError("its commitInfo, which lists the files it adds, is lost")
    present = {relative_file_path(a["add"]["path"]) for a in actions if "add" in a}
    gone = {relative_file_path(a["remove"]["path"]) for a in actions if "remove" in a}
    rebuilt: list[dict[str, Any]] = []
    counts = _rewind_counts(rewind)
    for listed in meta.get("files", []):
        path, partition = str(listed[0]), int(listed[1])
        if path not in present:
            if rewind is not None:
                count = counts[path]
            else:
                count = int(listed[4] if compaction is not None else listed[3])
            rebuilt.append(
                _add(root, table, path, partition, count, data_change=compaction is None)
            )
    deletes = rewind is not None or not meta.get("files")
    for path in meta.get("removed") or []:
        if path not in gone:
            rebuilt.append(_remove(str(path), deletes))
    txn = meta.get("txn")
    if txn and not any("txn" in a for a in actions):
        rebuilt.append({"txn": {"appId": txn[0], "version": int(txn[1])}})
    if not rebuilt:
        raise NotCompletableError("no action of it is missing")
    encoded = [json.dumps(a, separators=(",", ":")).encode() for a in rebuilt]
    return b"\n".join([*lines, *encoded]) + b"\n"


def _rewind_counts(rewind: dict[str, Any] | None) -> dict[str, int]:
    """A rewind's re-added files' record counts, from the cut it holds."""
    if rewind is None:
        return {}
    logs = (rewind.get("cut") or {}).get("logs") or {}
    return {str(s[2]): int(s[1]) for log in logs.values() for s in log.get("segments", [])}


def _parse(lines: list[bytes]) -> list[dict[str, Any]]:
    """Parse every line; the last may be cut (dropped), any other may not."""
    actions: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        try:
            action = json.loads(line)
        except ValueError:
            action = None
        if not isinstance(action, dict):
            if number == len(lines) and number > 1:
                return actions
            raise NotCompletableError(
                f"line {number} of it does not parse: its actions cannot be told"
            )
        actions.append(action)
    return actions


def _meta(info: Any, key: str) -> dict[str, Any] | None:
    if not isinstance(info, dict) or key not in info:
        return None
    try:
        meta = json.loads(info[key])
    except (TypeError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _add(
    root: StorageRoot, table: str, path: str, partition: int, count: int, *, data_change: bool
) -> dict[str, Any]:
    """Rebuild the add action of one listed file from the file itself."""
    full = f"{table}/{path}"
    if not root.exists(full):
        raise NotCompletableError(f"its file {path} is gone: its records cannot be served")
    with root.fs.open_input_file(full) as f:
        parquet = pq.ParquetFile(f)
        rows = parquet.metadata.num_rows
        stamps = parquet.read(columns=["timestamp"]).column("timestamp")
    if rows != count:
        raise NotCompletableError(
            f"its file {path} holds {rows} records where the commit lists {count}"
        )
    low, high = (v.as_py() for v in pc.min_max(stamps).values())
    stats = {
        "numRecords": count,
        "minValues": {"timestamp": low},
        "maxValues": {"timestamp": high},
        "nullCount": {"timestamp": 0},
    }
    return {
        "add": {
            "path": path,
            "partitionValues": {"partition": str(partition)},
            "size": root.file_size(full),
            "modificationTime": int(time.time() * 1000),
            "dataChange": data_change,
            "stats": json.dumps(stats, separators=(",", ":")),
        }
    }


def _remove(path: str, deletes: bool) -> dict[str, Any]:
    """Rebuild the remove action of a file a compaction or retention commit removes."""
    action: dict[str, Any] = {
        "path": path,
        "deletionTimestamp": int(time.time() * 1000),
        "dataChange": deletes,
    }
    found = _PARTITION_IN_PATH.search(path)
    if found:
        action["partitionValues"] = {"partition": found.group(1)}
    return {"remove": action}
