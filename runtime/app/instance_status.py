"""What each running instance tells about itself, kept under the storage root.

Every instance of an application writes ``_apps/<application.id>/instances/<process id>.json``
when its state changes and, while it runs, at most every ``STATUS_INTERVAL_S`` seconds after
a batch: its host and pid, state, threads (batches run, last batch and commit, tasks, those
restoring, and the executors they live on), and the store sizes its tasks last measured.
With the group, the offsets and the transaction logs, that is what ``streams-eos status``
reads: from storage alone, while the application runs and after it stopped (a stopped
instance's last record says so; one whose updates stopped without a stop was killed, or
lost its storage).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from common.metrics import MetricsSnapshot
from runtime.storage.topics import TopicAdmin

#: The longest a running instance goes without rewriting its record (seconds).
STATUS_INTERVAL_S = 5.0


def instances_dir(admin: TopicAdmin, application_id: str) -> str:
    """Where an application's instance records live."""
    return admin.root.path("_apps", application_id, "instances")


class InstanceStatus:
    """Writes one instance's record (see the module).

    Args:
        admin: the storage root.
        application_id: the application.
        process_id: the instance's process id.
        describe: returns the record's ``state``, ``threads`` and ``stores`` now.
    """

    def __init__(
        self,
        admin: TopicAdmin,
        application_id: str,
        process_id: str,
        describe: Callable[[], dict[str, Any]],
    ) -> None:
        self.admin = admin
        self.path = f"{instances_dir(admin, application_id)}/{process_id}.json"
        self.base = {
            "application.id": application_id,
            "process.id": process_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_ms": _now_ms(),
        }
        self._describe = describe
        self._last = 0.0
        self._lock = threading.Lock()

    def write(self, *, force: bool = True) -> None:
        """Write the record (unless ``force`` is False and one was written less than
        ``STATUS_INTERVAL_S`` ago). A failure to write is logged by the caller's logger
        only: the record is for people watching, never a reason to stop processing."""
        now = time.monotonic()
        if not force and now - self._last < STATUS_INTERVAL_S:
            return
        with self._lock:
            self._last = now
            record = {**self.base, **self._describe(), "updated_ms": _now_ms()}
            self.admin.root.write_bytes(self.path, json.dumps(record, default=str).encode())


def store_rows(metrics: MetricsSnapshot) -> list[dict[str, Any]]:
    """Each task's store with its last measured bytes on disk and keys (estimate)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for name in ("total-sst-files-size", "estimate-num-keys"):
        for metric in metrics.select(name, "stream-state-metrics"):
            tags = metric.tags
            store = next((v for k, v in tags.items() if k.endswith("-state-id")), "")
            row = rows.setdefault(
                (tags.get("task-id", ""), store),
                {"store": store, "task": tags.get("task-id", ""), "bytes": None, "keys": None},
            )
            row["bytes" if name == "total-sst-files-size" else "keys"] = metric.value
    return [rows[k] for k in sorted(rows)]


def read_instances(admin: TopicAdmin, application_id: str) -> list[dict[str, Any]]:
    """Every instance record of the application (oldest start first)."""
    out = []
    for info in admin.root.list_dir(instances_dir(admin, application_id)):
        if not info.path.endswith(".json"):
            continue
        data = admin.root.read_bytes(info.path)
        if data:
            try:
                out.append(json.loads(data))
            except ValueError:  # a record being replaced on a store without renames
                continue
    return sorted(out, key=lambda r: r.get("started_ms", 0))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
