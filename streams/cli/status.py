"""``streams-eos status --application-id X``: an application, from storage alone.

Read while the application runs or after it stopped, from what it keeps under the root:
its instances' records (state, threads, batches, tasks and where they run, store sizes; see
:mod:`runtime.app.instance_status`), its group (members and their heartbeats), the
committed positions and the topics' ends (lag per partition), the transaction log (last
commit and open transactions of each transactional id) and the changelogs and snapshots of
its stores. ``--json`` prints it all as one JSON document.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from common.errors import StreamsError
from runtime.app.instance_status import read_instances
from runtime.group.coordinator import GroupCoordinator
from runtime.group.reset import committed_offsets
from runtime.state.adapters import RootSnapshotStorage
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from statestores.snapshots import SnapshotManager
from streams.cli import COMMANDS
from streams.cli.transactions import format_table, is_open

NONE = "-"
CHANGELOG_SUFFIX = "-changelog"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``status`` subcommand."""
    parser = sub.add_parser(
        "status",
        parents=[common],
        help=COMMANDS["status"][1],
        description=(
            "Show an application from what it keeps in storage: each instance and thread "
            "(state, batches, tasks and where they run), lag per partition, last commits "
            "and open transactions, store sizes. Works while it runs and after it stopped."
        ),
    )
    parser.add_argument(
        "--application-id", required=True, metavar="ID", help="the application to show"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the status of ``--application-id``."""
    status = collect(TopicAdmin(args.root), args.application_id)
    if args.json:
        print(json.dumps(status, indent=2, default=str))
    else:
        print(render(status))
    return 0


def collect(admin: TopicAdmin, app: str) -> dict[str, Any]:
    """Everything ``status`` shows, as plain data.

    Raises:
        StreamsError: nothing of application ``app`` is under the root.
    """
    now = int(time.time() * 1000)
    instances = read_instances(admin, app)
    group = GroupCoordinator(admin).describe(app)
    committed = committed_offsets(admin, app)
    coordinator = TransactionCoordinator(admin)
    txns = [m for m in coordinator.list() if m.transactional_id.startswith(f"{app}-")]
    if not instances and not committed and not txns and not group.members:
        raise StreamsError(
            f"no application {app!r} under {admin.root.uri}: no instance, group, offsets or "
            "transactions of it (check --application-id and --root / STREAMS_ROOT)"
        )
    alive = {m.instance_id for m in group.members if m.instance_id}
    for record in instances:
        pid = record.get("process.id", "")
        record["heartbeating"] = any(i.startswith(f"{pid}-") for i in alive)
        record["updated_ago_s"] = (now - int(record.get("updated_ms", now))) / 1000
    return {
        "application.id": app,
        "root": admin.root.uri,
        "group": {
            "state": group.state.value,
            "generation": group.generation,
            "members": [
                {
                    "member": m.member_id,
                    "instance": m.instance_id,
                    "client": m.client_id,
                    "host": m.host,
                    "heartbeat_ago_s": (now - m.last_heartbeat_ms) / 1000,
                    "tasks": (m.assignment.user_data or {}).get("tasks", []),
                }
                for m in group.members
            ],
        },
        "instances": instances,
        "lag": _lag(admin, committed, group),
        "transactions": [
            {
                "transactional.id": m.transactional_id,
                "state": m.state.state_name,
                "open": is_open(m),
                "open_for_ms": now - m.txn_start_timestamp if is_open(m) else None,
                "sequence": m.txn_sequence,
                "last_update_ago_s": (now - m.txn_last_update_timestamp) / 1000,
            }
            for m in txns
        ],
        "stores": _stores(admin, app, instances),
    }


def _lag(admin: TopicAdmin, committed: dict[tuple[str, int], int], group: Any) -> list[Any]:
    owners = {tp: m.client_id for m in group.members for tp in m.assignment.partitions}
    reader = TopicReader(admin)
    rows = []
    for topic in sorted({t for t, _ in committed} | {t for t, _ in owners}):
        ends = reader.end_offsets(topic) if admin.exists(topic) else {}
        for partition in sorted(set(ends) | {p for t, p in (*committed, *owners) if t == topic}):
            current, end = committed.get((topic, partition)), ends.get(partition)
            rows.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "committed": current,
                    "end": end,
                    "lag": None if current is None or end is None else max(end - current, 0),
                    "owner": owners.get((topic, partition)),
                }
            )
    return rows


def _stores(admin: TopicAdmin, app: str, instances: list[dict[str, Any]]) -> list[Any]:
    """Per store and partition: its changelog's live records and bytes, its newest
    snapshot, and the size and keys its task last measured (from the instance records)."""
    measured = {
        (row["task"], row["store"]): row for record in instances for row in record.get("stores", [])
    }
    snapshots = RootSnapshotStorage(admin.root)
    rows = []
    for topic in admin.list():
        if not (topic.startswith(f"{app}-") and topic.endswith(CHANGELOG_SUFFIX)):
            continue
        store = topic[len(app) + 1 : -len(CHANGELOG_SUFFIX)]
        description = admin.describe(topic)
        for part in description.partitions:
            task = next(
                (t for (t, s) in measured if s == store and t.endswith(f"_{part.partition}")), None
            )
            snap = None
            if task is not None:
                found = SnapshotManager(snapshots, app, task).list(store)
                snap = found[-1] if found else None
            seen = measured.get((task, store), {}) if task else {}
            rows.append(
                {
                    "store": store,
                    "partition": part.partition,
                    "task": task,
                    "changelog_records": part.records,
                    "changelog_bytes": part.bytes,
                    "snapshot_offset": None if snap is None else snap.offset,
                    "sst_bytes": seen.get("bytes"),
                    "keys": seen.get("keys"),
                }
            )
    return rows


def render(status: dict[str, Any]) -> str:
    """The status as tables a person reads."""
    group = status["group"]
    out = [
        f"Application {status['application.id']} (root {status['root']}): group "
        f"{group['state']}, generation {group['generation']}, {len(group['members'])} "
        "member(s)",
        "",
    ]
    rows = [
        [
            r.get("process.id", NONE),
            r.get("host", NONE),
            str(r.get("pid", NONE)),
            _instance_state(r),
            _clock(r.get("started_ms")),
            f"{r['updated_ago_s']:.0f} s ago",
            r.get("error") or NONE,
        ]
        for r in status["instances"]
    ]
    out += _table(
        ["INSTANCE", "HOST", "PID", "STATE", "STARTED", "UPDATED", "ERROR"], rows, "instances"
    )
    rows = []
    for r in status["instances"]:
        for t in r.get("threads", []):
            executors = t.get("executors") or {}
            where = ",".join(sorted(executors)) if executors else "driver"
            restoring = set(t.get("restoring") or ())
            tasks = [f"{x} (restoring)" if x in restoring else x for x in t.get("tasks", [])]
            rows.append(
                [
                    t["thread.id"],
                    _thread_state(t, r),
                    str(t.get("batches", 0)),
                    _clock(t.get("last_batch_ms")),
                    _num(t.get("commit_latency_avg_ms")),
                    ",".join(tasks) or NONE,
                    where,
                ]
            )
    out += _table(
        ["THREAD", "STATE", "BATCHES", "LAST BATCH", "COMMIT MS", "TASKS", "RUNS ON"],
        rows,
        "threads",
    )
    rows = [
        [
            x["topic"],
            str(x["partition"]),
            _num(x["committed"]),
            _num(x["end"]),
            _num(x["lag"]),
            x["owner"] or NONE,
        ]
        for x in status["lag"]
    ]
    out += _table(["TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "OWNER"], rows, "offsets")
    rows = [
        [
            x["transactional.id"],
            x["state"],
            str(x["sequence"]),
            f"{x['last_update_ago_s']:.0f} s ago",
            NONE if x["open_for_ms"] is None else f"{x['open_for_ms']} ms",
        ]
        for x in status["transactions"]
    ]
    out += _table(
        ["TRANSACTIONAL ID", "STATE", "SEQUENCE", "LAST UPDATE", "OPEN FOR"], rows, "transactions"
    )
    rows = [
        [
            x["store"],
            str(x["partition"]),
            x["task"] or NONE,
            _num(x["keys"]),
            _num(x["sst_bytes"]),
            str(x["changelog_records"]),
            str(x["changelog_bytes"]),
            _num(x["snapshot_offset"]),
        ]
        for x in status["stores"]
    ]
    out += _table(
        [
            "STORE",
            "PARTITION",
            "TASK",
            "KEYS",
            "SST BYTES",
            "CHANGELOG RECORDS",
            "CHANGELOG BYTES",
            "SNAPSHOT AT",
        ],
        rows,
        "stores",
    )
    return "\n".join(out).rstrip()


def _instance_state(record: dict[str, Any]) -> str:
    state = str(record.get("state", NONE))
    if state in ("RUNNING", "REBALANCING", "CREATED") and not record.get("heartbeating"):
        return f"{state}? (no heartbeat: process gone)"
    return state


def _table(headers: list[str], rows: list[list[str]], what: str) -> list[str]:
    if not rows:
        return [f"(no {what})", ""]
    return [format_table(headers, rows), ""]


def _num(value: Any) -> str:
    if value is None:
        return NONE
    if isinstance(value, float):
        return f"{value:.0f}" if value >= 10 else f"{value:.1f}"
    return str(value)


def _clock(ms: Any) -> str:
    if not ms:
        return NONE
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(ms) / 1000))


def _thread_state(thread: dict[str, Any], instance: dict[str, Any]) -> str:
    """RUNNING, STALLED (input waits and no batch runs: see runtime.thread.watchdog) or
    DEAD (its query stopped, or its instance did)."""
    if not thread.get("alive") or instance.get("state") == "NOT_RUNNING":
        return "DEAD"
    return "STALLED" if thread.get("stalled") else "RUNNING"
