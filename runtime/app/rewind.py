"""A consistent rewind: an application's positions, stores and outputs put back to a
savepoint's cut, the application stopped.

:func:`plan_rewind` checks and names what a rewind would do; :func:`apply_rewind` does it:

1. an intent is kept first (``_apps/<application.id>/rewind.json``: the rewind's id, the
   savepoint, each table's version before it); a rewind cut short is completed by running
   it again, and the application refuses to start while one is unfinished;
2. every topic the savepoint covers (outputs, repartition topics, changelogs, the
   dead-letter topic) gets one Delta commit putting it back to its cut
   (:func:`~runtime.storage.table_rewind.rewind_topic`): what was written after the cut is
   removed, the cut's files removed since are added back; every Delta sink is restored to
   its version;
3. the application's consumer group gets the positions of the cut, in one commit; with
   ``reset_groups``, every other group that read an output past the cut is moved back to
   the cut's end offsets;
4. store snapshots taken after the cut are deleted and the savepoint's are installed;
   ``_apps/<application.id>/rewound.json`` tells every instance, at its next start, to
   drop the local state it kept from before the rewind (:mod:`runtime.app.local_state`);
5. the intent is deleted.

Each commit carries the rewind's id and looks for it first, so step 2 run again (after a
crash) commits nothing twice; steps 3 and 4 write the same thing again.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from common.errors import StreamsError
from runtime.app.cut_reads import SavepointSnapshots
from runtime.app.savepoints import (
    Savepoint,
    SavepointError,
    new_rewind_id,
    savepoint_as_of,
    stores_prefix,
)
from runtime.group.coordinator import GroupCoordinator
from runtime.group.reset import (
    ResetPlanEntry,
    TopicScope,
    apply_reset,
    committed_offsets,
    groups_with_offsets,
)
from runtime.state.adapters import RootSnapshotStorage
from runtime.storage.delta_log import read_entry
from runtime.storage.offset_index import REWIND_KEY, compaction_metadata
from runtime.storage.table_rewind import rewind_sink, rewind_topic, table_version
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.state import TransactionState
from statestores.snapshots import SnapshotManager

log = logging.getLogger(__name__)

INTENT = "rewind.json"
REWOUND = "rewound.json"


class RewindRefusedError(SavepointError):
    """The rewind would harm someone: the message names them and the flag that goes on."""


@dataclass
class RewindPlan:
    """What a rewind to ``savepoint`` does, and whom it concerns.

    ``past_cut``: group -> the ``(topic, partition, committed, cut end)`` it read past the
    cut (those records are taken back; the offsets after the cut are written again).
    """

    savepoint: Savepoint
    past_cut: dict[str, list[tuple[str, int, int, int]]] = field(default_factory=dict)
    #: output topic -> the other writers that appended to it after the cut (a rewind
    #: takes their records back too)
    foreign: dict[str, list[str]] = field(default_factory=dict)

    def describe(self) -> list[str]:
        """The plan as lines a person reads."""
        sp = self.savepoint
        lines = [
            f"rewind {sp.application_id} to savepoint {sp.name} "
            f"(taken {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(sp.created_ms / 1000))} "
            "UTC)"
        ]
        for topic, cut in sorted(sp.topics.items()):
            ends = ", ".join(f"{p}:{e}" for p, e in sorted(cut.ends.items()))
            lines.append(f"  topic {topic}: back to version {cut.version} (ends {ends})")
        for name, sink in sorted(sp.sinks.items()):
            lines.append(f"  Delta sink {name}: back to version {sink.version}")
        for topic, parts in sorted(sp.positions.items()):
            where = ", ".join(f"{p}:{o}" for p, o in sorted(parts.items()))
            lines.append(f"  position {topic}: {where}")
        for group, rows in sorted(self.past_cut.items()):
            for topic, p, committed, end in rows:
                lines.append(
                    f"  group {group} read {topic}-{p} to {committed}, past the cut's end {end}"
                )
        for topic, writers in sorted(self.foreign.items()):
            lines.append(f"  {topic} was also written after the cut by {', '.join(writers)}")
        return lines


def plan_rewind(
    admin: TopicAdmin, application_id: str, savepoint: str | int | datetime.datetime
) -> RewindPlan:
    """Plan a rewind of ``application_id`` to ``savepoint`` (a name, or a time: the newest
    savepoint taken at or before it); write nothing.

    Raises:
        SavepointError: no such savepoint.
        RewindRefusedError: the application still has active members, a transaction of it
            is between its commit decision and its last commit, or a topic of the cut is
            gone.
    """
    sp = savepoint_as_of(admin, application_id, savepoint)
    missing = sorted(t for t in sp.topics if not admin.exists(t))
    if missing:
        raise RewindRefusedError(
            f"topics of savepoint {sp.name} no longer exist: {', '.join(missing)} (deleted, "
            "or by application-reset): the cut cannot be put back; delete the savepoint"
        )
    members = GroupCoordinator(admin).describe(application_id).members
    if members:
        ids = ", ".join(m.member_id for m in members)
        raise RewindRefusedError(
            f"application {application_id!r} is running (members of its group: {ids}); stop "
            "every instance first: a rewind works on a stopped application"
        )
    prefix = f"{application_id}-"
    for meta in TransactionCoordinator(admin).list():
        if meta.transactional_id.startswith(prefix) and meta.state in (
            TransactionState.PREPARE_COMMIT,
        ):
            raise RewindRefusedError(
                f"transaction {meta.transactional_id} of {application_id!r} decided to "
                "commit and has not finished (its instance died mid-commit): start the "
                "application once so that it completes, stop it, then rewind"
            )
    plan = RewindPlan(sp, foreign=_other_writers(admin, sp))
    outputs = {t: c.ends for t, c in sp.topics.items()}
    for group in groups_with_offsets(admin):
        if group == application_id:
            continue
        for (topic, partition), offset in sorted(committed_offsets(admin, group).items()):
            end = outputs.get(topic, {}).get(partition)
            if end is not None and offset > end:
                plan.past_cut.setdefault(group, []).append((topic, partition, offset, end))
    return plan


def apply_rewind(
    admin: TopicAdmin, plan: RewindPlan, *, force: bool = False, reset_groups: bool = False
) -> str:
    """Rewind as ``plan`` says (see the module); return the rewind's id.

    Raises:
        RewindRefusedError: groups read past the cut and neither ``force`` nor
            ``reset_groups`` was given; another rewind is unfinished.
    """
    sp = plan.savepoint
    app = sp.application_id
    if plan.foreign and not force:
        names = "; ".join(f"{t} ({', '.join(w)})" for t, w in sorted(plan.foreign.items()))
        raise RewindRefusedError(
            f"other writers appended to {app}'s output topics after the cut of savepoint "
            f"{sp.name}: {names}. A rewind would take their records back too; --force "
            "rewinds anyway"
        )
    if plan.past_cut and not (force or reset_groups):
        names = "; ".join(
            f"{g} ({', '.join(f'{t}-{p} at {c}' for t, p, c, _ in rows)})"
            for g, rows in sorted(plan.past_cut.items())
        )
        raise RewindRefusedError(
            f"consumer groups read {app}'s outputs past the cut of savepoint {sp.name}: "
            f"{names}. A rewind takes those records back and writes their offsets again; "
            "--force rewinds anyway, --reset-groups also moves those groups back to the cut"
        )
    intent = _intent(admin, sp)
    rid = str(intent["id"])
    for topic, cut in sorted(sp.topics.items()):
        rewind_topic(admin, topic, cut.index, rid, since=int(intent["topics"].get(topic, -1)))
    for name, sink in sorted(sp.sinks.items()):
        rewind_sink(admin, sink.path, sink.version, rid, since=intent["sinks"].get(name))
    _rewind_positions(admin, sp)
    if reset_groups:
        for group, rows in sorted(plan.past_cut.items()):
            entries = [ResetPlanEntry(t, p, c, end) for t, p, c, end in rows]
            apply_reset(admin, group, entries)
    _rewind_snapshots(admin, sp)
    marker = {"id": rid, "savepoint": sp.name, "at_ms": int(time.time() * 1000)}
    admin.root.write_bytes(admin.root.path("_apps", app, REWOUND), json.dumps(marker).encode())
    admin.root.delete_file(admin.root.path("_apps", app, INTENT))
    log.info("[rewind %s] %s is back at savepoint %s", rid, app, sp.name)
    return rid


def _other_writers(admin: TopicAdmin, sp: Savepoint) -> dict[str, list[str]]:
    """Per output topic (not the application's own internal ones), the writers other than
    the application that appended to it after the cut: their transactional ids, or "a
    writer without a transaction"."""
    app = sp.application_id
    found: dict[str, list[str]] = {}
    for topic, cut in sorted(sp.topics.items()):
        if topic.startswith(f"{app}-"):
            continue
        table = admin.table_path(topic)
        writers: set[str] = set()
        for version in range(cut.version + 1, admin.index(topic).version + 1):
            entry = read_entry(admin.root, table, version)
            if (
                entry is None
                or not entry.adds
                or not any(a.get("dataChange", True) for a in entry.adds)
            ):
                continue  # gone from the log, or a merge or compaction of the cleaner
            if compaction_metadata(entry, REWIND_KEY) is not None:
                continue
            ids = [str(t.get("appId")) for t in entry.txns]
            if not any(i.startswith(f"{app}-") for i in ids):
                writers.update(ids or ["a writer without a transaction"])
        if writers:
            found[topic] = sorted(writers)
    return found


def unfinished_rewind(admin: TopicAdmin, application_id: str) -> dict[str, Any] | None:
    """The intent of a rewind of ``application_id`` cut short, if there is one."""
    raw = admin.root.read_bytes(admin.root.path("_apps", application_id, INTENT))
    return None if raw is None else dict(json.loads(raw))


def _intent(admin: TopicAdmin, sp: Savepoint) -> dict[str, Any]:
    """The intent of this rewind: a new one, or the unfinished one to complete."""
    found = unfinished_rewind(admin, sp.application_id)
    if found is not None:
        if found.get("savepoint") != sp.name:
            raise RewindRefusedError(
                f"a rewind of {sp.application_id!r} to savepoint {found.get('savepoint')} is "
                "unfinished: run that rewind again first"
            )
        return found
    intent = {
        "id": new_rewind_id(),
        "savepoint": sp.name,
        "topics": {t: admin.index(t).version for t in sp.topics if admin.exists(t)},
        "sinks": {n: table_version(s.path) for n, s in sp.sinks.items()},
    }
    path = admin.root.path("_apps", sp.application_id, INTENT)
    admin.root.write_bytes(path, json.dumps(intent).encode())
    return intent


def _rewind_positions(admin: TopicAdmin, sp: Savepoint) -> None:
    """The application's group: the cut's positions; a position it has now and had not at
    the cut is deleted (the group starts there by its reset policy, as it did then)."""
    app = sp.application_id
    entries = []
    gone: dict[str, list[int]] = {}
    now = committed_offsets(admin, app)
    for topic, parts in sp.positions.items():
        for partition, offset in parts.items():
            entries.append(ResetPlanEntry(topic, partition, now.get((topic, partition)), offset))
    for topic, partition in now:
        if partition not in sp.positions.get(topic, {}):
            gone.setdefault(topic, []).append(partition)
    scopes = [TopicScope(t, tuple(sorted(ps))) for t, ps in sorted(gone.items())]
    apply_reset(admin, app, entries, delete=scopes)


def _rewind_snapshots(admin: TopicAdmin, sp: Savepoint) -> None:
    """Delete the application's store snapshots past the cut; install the savepoint's."""
    app = sp.application_id
    storage = RootSnapshotStorage(admin.root)
    saved = SavepointSnapshots(admin, app, stores_prefix(app, sp.name))
    for store, cut in sp.stores.items():
        for partition, end in cut.ends.items():
            task = f"{cut.subtopology}_{partition}"
            manager = SnapshotManager(storage, app, task)
            manager.drop_after(store, end)
            offset = cut.snapshots.get(partition)
            info = None if offset is None else SnapshotManager(saved, app, task).newest(store)
            if info is None or any(s.offset == info.offset for s in manager.list(store)):
                continue
            directory = tempfile.mkdtemp(prefix="rewind-snapshot-")
            try:
                target = os.path.join(directory, "db")
                SnapshotManager(saved, app, task).download(info, target)
                manager.upload(store, target, info.offset)
            finally:
                shutil.rmtree(directory, ignore_errors=True)


def check_no_unfinished_rewind(admin: TopicAdmin, application_id: str) -> None:
    """Raise when a rewind of the application was cut short (it must not start then).

    Raises:
        StreamsError: naming the savepoint and the command that completes it.
    """
    found = unfinished_rewind(admin, application_id)
    if found is not None:
        raise StreamsError(
            f"a rewind of {application_id!r} to savepoint {found.get('savepoint')} was cut "
            f"short: run 'streams-eos rewind --application-id {application_id} "
            f"--to-savepoint {found.get('savepoint')}' again to complete it, then start"
        )
