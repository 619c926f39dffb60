"""Savepoints: a consistent cut of an application's positions, stores and outputs, taken
while it runs, kept apart from retention, to rewind to, fork from, or read.

A savepoint lives under ``<root>/savepoints/<application.id>/<name>/``; its
``savepoint.json`` (written last: a directory without it is an unfinished savepoint) holds:

* the cut: the committed positions of the application's consumer group, and for every
  topic it writes (output, repartition, changelog and dead-letter topics) the Delta
  version and the offset index at the cut; for every Delta sink its version;
* a snapshot of every partition of every persistent store, restored to the changelog
  offsets of the cut (``stores/``, the layout of the application's own snapshots);
* the topology record of the application's last start (its tables, stores and
  description: :mod:`runtime.app.topology_record`).

The cut lies between two transactions. Every write of an exactly-once application reaches
its tables in a transaction's commit phase, between its PrepareCommit and CompleteCommit;
so the tables are read while the coordinator shows no transaction of the application in
PrepareCommit, and read again when a transaction reached PrepareCommit in the meantime.
The files of each topic's cut are pinned (:mod:`runtime.storage.pins`): retention,
compaction and merges go on, the vacuum keeps what the savepoint needs until it is deleted.
"""

from __future__ import annotations

import builtins
import datetime
import logging
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.app.cut_reads import CutReader, SavepointSnapshots, replica_of
from runtime.app.store_queries import StoreCatalog
from runtime.app.topology_record import TopologyRecord, read_record
from runtime.group.reset import committed_offsets
from runtime.state.adapters import TopicChangelogReader
from runtime.storage.pins import pin, pin_table, unpin, unpin_table
from runtime.storage.table_rewind import table_version
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.metadata import TransactionMetadata
from runtime.txn.state import TransactionState
from statestores.snapshots import SnapshotManager

log = logging.getLogger(__name__)

MANIFEST = "savepoint.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_COMMITTING = (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
_ENDED = (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


class SavepointError(StreamsError):
    """A savepoint cannot be taken, found, used or deleted as asked; the message says why
    and what to do."""


class TopicCut(BaseModel):
    """A topic at the cut: its Delta version and its offset index's JSON there."""

    version: int
    index: dict[str, Any]

    @property
    def ends(self) -> dict[int, int]:
        """Each partition's log-end offset at the cut."""
        logs = self.index.get("logs", {})
        return {p: int(logs.get(str(p), {}).get("end", 0)) for p in range(self.index["partitions"])}


class SinkCut(BaseModel):
    """A Delta sink at the cut: its version (None: not created yet)."""

    path: str
    version: int | None


class StoreCut(BaseModel):
    """A store at the cut: each partition's changelog offset, and the offset of the
    savepoint's snapshot of it (absent: an empty partition, or a store kept in memory)."""

    changelog: str
    kind: str
    subtopology: int
    ends: dict[int, int]
    snapshots: dict[int, int]


class Savepoint(BaseModel):
    """A savepoint's manifest (see the module)."""

    name: str
    application_id: str
    created_ms: int
    positions: dict[str, dict[int, int]]
    topics: dict[str, TopicCut]
    sinks: dict[str, SinkCut]
    stores: dict[str, StoreCut]
    record: TopologyRecord

    @property
    def owner(self) -> str:
        """The owner name of the savepoint's pins."""
        return pin_owner(self.application_id, self.name)


def pin_owner(application_id: str, name: str) -> str:
    """The owner of savepoint ``name``'s pins."""
    return f"{application_id}@{name}"


def savepoint_dir(admin: TopicAdmin, application_id: str, name: str) -> str:
    """Where savepoint ``name`` of ``application_id`` lives."""
    return admin.root.path("savepoints", application_id, name)


def stores_prefix(application_id: str, name: str) -> str:
    """The snapshot-storage key prefix of a savepoint's store snapshots."""
    return f"savepoints/{application_id}/{name}/stores"


def create_savepoint(
    admin: TopicAdmin,
    application_id: str,
    name: str,
    *,
    config: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
) -> Savepoint:
    """Take savepoint ``name`` of ``application_id`` (running or stopped).

    Args:
        config: more configuration for the store snapshots (e.g. ``state.dir``).
        timeout_s: how long to wait for a moment between two transactions.

    Raises:
        SavepointError: a bad or taken name, an application that is not exactly-once, no
            quiet moment within ``timeout_s``, or a cut file vacuumed before it was pinned.
    """
    _check_name(name)
    if admin.root.exists(f"{savepoint_dir(admin, application_id, name)}/{MANIFEST}"):
        raise SavepointError(
            f"application {application_id!r} already has a savepoint {name!r}: choose "
            "another name, or delete it first (streams-eos savepoint delete)"
        )
    record = read_record(admin, application_id)
    if not record.guarantee.startswith("exactly_once"):
        raise SavepointError(
            f"application {application_id!r} runs {record.guarantee}: a savepoint is a cut "
            "between two transactions and needs processing.guarantee=exactly_once_v2"
        )
    started = time.monotonic()
    positions, topics, sinks = _take_cut(admin, record, timeout_s)
    owner = pin_owner(application_id, name)
    try:  # a savepoint not finished leaves no pin behind
        for topic, cut in topics.items():
            _pin_cut(admin, topic, owner, cut)
        for sink in sinks.values():
            if sink.version is not None:
                pin_table(admin.root, sink.path, owner)
        stores = _snapshot_stores(admin, record, name, topics, config or {})
    except BaseException:
        _unpin_all(admin, owner, topics, sinks)
        raise
    savepoint = Savepoint(
        name=name,
        application_id=application_id,
        created_ms=int(time.time() * 1000),
        positions=positions,
        topics=topics,
        sinks=sinks,
        stores=stores,
        record=record,
    )
    path = f"{savepoint_dir(admin, application_id, name)}/{MANIFEST}"
    admin.root.write_bytes(path, savepoint.model_dump_json().encode())
    log.info(
        "[savepoint %s] taken in %.1f s: %d topics, %d sinks, %d stores",
        owner,
        time.monotonic() - started,
        len(topics),
        len(sinks),
        len(stores),
    )
    return savepoint


def list_savepoints(admin: TopicAdmin, application_id: str) -> builtins.list[Savepoint]:
    """The complete savepoints of ``application_id``, oldest first."""
    base = admin.root.path("savepoints", application_id)
    if not admin.root.exists(base):
        return []
    found = []
    for info in admin.root.list_subdirs(base):
        if admin.root.exists(f"{info.path}/{MANIFEST}"):
            found.append(load_savepoint(admin, application_id, info.base_name))
    return sorted(found, key=lambda s: (s.created_ms, s.name))


def load_savepoint(admin: TopicAdmin, application_id: str, name: str) -> Savepoint:
    """Savepoint ``name`` of ``application_id``.

    Raises:
        SavepointError: there is none (the message lists the ones there are), or its
            manifest is unreadable.
    """
    _check_name(name)
    path = f"{savepoint_dir(admin, application_id, name)}/{MANIFEST}"
    raw = admin.root.read_bytes(path)
    if raw is None:
        base = admin.root.path("savepoints", application_id)
        names = (
            sorted(i.base_name for i in admin.root.list_subdirs(base))
            if admin.root.exists(base)
            else []
        )
        raise SavepointError(
            f"application {application_id!r} has no savepoint {name!r} under "
            f"{admin.root.uri} (its savepoints: {', '.join(names) or 'none'})"
        )
    try:
        return Savepoint.model_validate_json(raw)
    except ValidationError as exc:
        raise SavepointError(f"savepoint manifest {path} is unreadable: {exc}") from exc


def savepoint_as_of(
    admin: TopicAdmin, application_id: str, as_of: str | int | datetime.datetime
) -> Savepoint:
    """The savepoint ``as_of`` names: a name, or a time (epoch milliseconds or a
    ``datetime``; naive means UTC) for the newest savepoint taken at or before it.

    Raises:
        SavepointError: none by that name, or none taken by that time.
    """
    if isinstance(as_of, str):
        return load_savepoint(admin, application_id, as_of)
    if isinstance(as_of, datetime.datetime):
        stamp = as_of if as_of.tzinfo else as_of.replace(tzinfo=datetime.UTC)
        as_of = int(stamp.timestamp() * 1000)
    found = [s for s in list_savepoints(admin, application_id) if s.created_ms <= as_of]
    if not found:
        when = datetime.datetime.fromtimestamp(as_of / 1000, datetime.UTC).isoformat()
        raise SavepointError(
            f"application {application_id!r} has no savepoint taken at or before {when}; "
            "state is kept as data at savepoints: take one with 'streams-eos savepoint create'"
        )
    return found[-1]


def delete_savepoint(admin: TopicAdmin, application_id: str, name: str) -> None:
    """Delete savepoint ``name``: its manifest first (it is no longer listed), then its
    pins (the vacuum deletes the files only it kept) and its store snapshots."""
    savepoint = load_savepoint(admin, application_id, name)
    directory = savepoint_dir(admin, application_id, name)
    admin.root.delete_file(f"{directory}/{MANIFEST}")
    _unpin_all(admin, savepoint.owner, savepoint.topics, savepoint.sinks)
    admin.root.delete_dir(directory)


def _unpin_all(
    admin: TopicAdmin, owner: str, topics: Iterable[str], sinks: dict[str, SinkCut]
) -> None:
    for topic in topics:
        if admin.exists(topic):
            unpin(admin, topic, owner)
    for sink in sinks.values():
        unpin_table(admin.root, sink.path, owner)


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise SavepointError(
            f"savepoint name {name!r}: use letters, digits and . _ - (at most 100, "
            "starting with a letter or digit)"
        )


def _take_cut(
    admin: TopicAdmin, record: TopologyRecord, timeout_s: float
) -> tuple[dict[str, dict[int, int]], dict[str, TopicCut], dict[str, SinkCut]]:
    """Read every table of ``record`` between two transactions of its application."""
    coordinator = TransactionCoordinator(admin)
    app = record.application_id
    deadline = time.monotonic() + timeout_s
    while True:
        before = _states(coordinator, app)
        if not any(m.state is TransactionState.PREPARE_COMMIT for m in before.values()):
            topics = {}
            sinks = {}
            for table, out in record.outputs.items():
                if out.kind == "delta-sink":
                    sinks[table] = SinkCut(path=out.path, version=table_version(out.path))
                elif admin.exists(table):
                    index = admin.index(table).to_json()
                    index.pop("removed", None)
                    topics[table] = TopicCut(version=int(index["version"]), index=index)
            positions: dict[str, dict[int, int]] = {}
            for (topic, partition), offset in committed_offsets(admin, app).items():
                positions.setdefault(topic, {})[partition] = offset
            if not _moved(before, _states(coordinator, app)):
                return positions, topics, sinks
        if time.monotonic() > deadline:
            raise SavepointError(
                f"no moment between two transactions of {app!r} within {timeout_s:.0f} s "
                "(a transaction stays in PrepareCommit: its instance died mid-commit). "
                "Start the application (it completes the transaction), then try again"
            )
        time.sleep(0.01)


def _states(coordinator: TransactionCoordinator, app: str) -> dict[str, TransactionMetadata]:
    prefix = f"{app}-"
    return {
        m.transactional_id: m for m in coordinator.list() if m.transactional_id.startswith(prefix)
    }


def _moved(before: dict[str, TransactionMetadata], after: dict[str, TransactionMetadata]) -> bool:
    """Whether a transaction may have reached its commit phase between the two reads."""
    for tid, now in after.items():
        was = before.get(tid)
        if was is None:
            if now.state in _COMMITTING or now.txn_sequence > 0:
                return True
            continue
        same = (now.txn_sequence, now.state) == (was.txn_sequence, was.state)
        if same:
            continue
        if now.txn_sequence == was.txn_sequence:
            if now.state in _COMMITTING:  # began committing in between
                return True
            continue
        began_next = now.txn_sequence == was.txn_sequence + 1 and was.state in _ENDED
        if began_next and now.state not in _COMMITTING:  # only began the next one
            continue
        return True
    return False


def _pin_cut(admin: TopicAdmin, topic: str, owner: str, cut: TopicCut) -> None:
    """Pin the cut's files of ``topic``; check each is still there (a file removed before
    the cut, vacuumed before the pin, would leave the savepoint unusable)."""
    paths = [
        str(segment[2]) for log in cut.index.get("logs", {}).values() for segment in log["segments"]
    ]
    pin(admin, topic, owner, paths)
    table = admin.table_path(topic)
    for path in paths:
        if not admin.root.exists(path if "://" in path else f"{table}/{path}"):
            raise SavepointError(
                f"file {path} of {topic} was vacuumed while the savepoint was taken; try again"
            )


def _snapshot_stores(
    admin: TopicAdmin,
    record: TopologyRecord,
    name: str,
    topics: dict[str, TopicCut],
    config: dict[str, Any],
) -> dict[str, StoreCut]:
    """Restore every partition of every logged store to the cut and upload its snapshot
    under the savepoint (an in-memory store keeps only its changelog cut)."""
    app = record.application_id
    stored = {n: s for n, s in record.stores.items() if s.changelog in topics}
    if not stored:
        return {}
    catalog = StoreCatalog.read(admin, app)
    properties = {**catalog.config, **config, "topics.root": admin.root.uri}
    streams_config = StreamsConfig(**properties)
    reader = TopicChangelogReader(
        CutReader(admin, {t: c.index for t, c in topics.items() if t.endswith("-changelog")})
    )
    snapshots = SavepointSnapshots(admin, app, stores_prefix(app, name))
    out = {}
    for store, meta in sorted(stored.items()):
        changelog = str(meta.changelog)
        ends = topics[changelog].ends
        done: dict[int, int] = {}
        factory = catalog.stores[store][0]
        for partition, end in sorted(ends.items()):
            if end == 0:
                continue
            directory = tempfile.mkdtemp(prefix=f"savepoint-{store}-{partition}-")
            try:
                replica = replica_of(
                    factory,
                    streams_config,
                    admin,
                    task_id=f"{meta.subtopology}_{partition}",
                    directory=directory,
                    ends={(changelog, partition): end},
                    reader=reader,
                )
                try:  # restored from the application's snapshots, kept in the savepoint
                    task = f"{meta.subtopology}_{partition}"
                    replica.manager.snapshots = SnapshotManager(snapshots, app, task)
                    if replica.manager.snapshot():
                        newest = replica.manager.snapshots.newest(store)
                        done[partition] = end if newest is None else newest.offset
                finally:
                    replica.close()
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        out[store] = StoreCut(
            changelog=changelog,
            kind=meta.kind,
            subtopology=meta.subtopology,
            ends=ends,
            snapshots=done,
        )
    return out


def new_rewind_id() -> str:
    """A fresh id for one rewind's commits."""
    return uuid.uuid4().hex
