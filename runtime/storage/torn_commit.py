"""Complete a torn newest commit from its own commitInfo.

A commit of this project's writers begins with its commitInfo, whose ``streams.offsets``
metadata lists every data file the commit adds (path, partition, base offset, count,
largest timestamp) and the transaction that wrote it. A crash (or a disk) that cut the
commit file after that line leaves a commit the readers disagree on: delta-rs serves the
add actions that are there, the project's readers refuse it (see
:mod:`runtime.storage.delta_log`). When every listed file is still in the table, the
missing add actions (and the ``txn`` action) are rebuilt from the listing and the files
themselves, and every reader then serves the whole commit: nothing committed is lost.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from runtime.storage.delta_log import OFFSETS_KEY, log_path
from runtime.storage.fs import StorageRoot


def completed_commit(root: StorageRoot, table: str, version: int) -> bytes | str:
    """Return the commit ``version`` of ``table`` with its lost actions rebuilt, or why it
    cannot be (a string)."""
    raw = root.read_bytes(log_path(root, table, version)) or b""
    lines = [line for line in raw.splitlines() if line.strip()]
    try:
        actions = [json.loads(line) for line in lines]
    except ValueError:
        return "a line of it does not parse (cut mid-line): its actions cannot be told"
    info = actions[0].get("commitInfo") if actions else None
    meta = _offsets_meta(info)
    if meta is None:
        return "its commitInfo, which lists the files it adds, is lost"
    present = {a["add"]["path"] for a in actions if "add" in a}
    added: list[bytes] = []
    for path, partition, _base, count, _largest in meta.get("files", []):
        if path in present:
            continue
        action = _add_action(root, table, str(path), int(partition), int(count))
        if isinstance(action, str):
            return action
        added.append(json.dumps(action, separators=(",", ":")).encode())
    txn = meta.get("txn")
    if txn and not any("txn" in a for a in actions):
        added.append(json.dumps({"txn": {"appId": txn[0], "version": int(txn[1])}}).encode())
    if not added:
        return "no action of it is missing"
    return b"\n".join([*lines, *added]) + b"\n"


def _offsets_meta(info: Any) -> dict[str, Any] | None:
    if not isinstance(info, dict) or OFFSETS_KEY not in info:
        return None
    try:
        meta = json.loads(info[OFFSETS_KEY])
    except (TypeError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _add_action(
    root: StorageRoot, table: str, path: str, partition: int, count: int
) -> dict[str, Any] | str:
    """Rebuild the add action of one listed file from the file itself."""
    full = f"{table}/{path}"
    if not root.exists(full):
        return f"its file {path} is gone: its records cannot be served"
    with root.fs.open_input_file(full) as f:
        parquet = pq.ParquetFile(f)
        rows = parquet.metadata.num_rows
        stamps = parquet.read(columns=["timestamp"]).column("timestamp")
    if rows != count:
        return f"its file {path} holds {rows} records where the commit lists {count}"
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
            "dataChange": True,
            "stats": json.dumps(stats, separators=(",", ":")),
        }
    }
