"""Kafka's ``ProcessorStateManager``: a task's stores, their restoration and their commits.

The runtime creates one per task and passes it as the context of ``store.init``; the store
registers itself and is brought up to date right there:

1. A prepared batch left by a crash is applied if its transaction committed
   (:class:`~statestores.protocols.TransactionOutcomes`), else dropped.
2. The committed changelog offset kept inside the store is compared with the changelog:
   equal to its end → ready; behind → replay only ``[offset, end)``; ahead, below its
   start, missing with data under exactly-once, or unreadable → the task is corrupted: the
   store is wiped and rebuilt from the newest snapshot plus the changelog tail.

Commits run in the task's phases: :meth:`ProcessorStateManager.prepare_commit` (flush
caches so the changelog records join the transaction, then persist each store's prepared
batch), the producer's commit, then :meth:`~ProcessorStateManager.commit` (apply each batch
with its new offset). :meth:`~ProcessorStateManager.abort` discards everything uncommitted.
Under at_least_once a ``.checkpoint`` file holds the persistent stores' changelog offsets,
rewritten after a commit that moved them (an in-memory store starts empty: it has none).
Every ``statestore.snapshot.interval`` commits the persistent stores are snapshotted.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from common.errors import (
    RestorationCancelledError,
    StoreIOError,
    StreamsError,
    TaskCorruptedError,
)
from statestores.api import ChangelogCollector, StateStore
from statestores.bytes_layer import bottom
from statestores.checkpoint import OffsetCheckpoint
from statestores.logging_layer import ChangeLoggingBytesStore
from statestores.metered import changelog_topic
from statestores.protocols import (
    ChangelogReader,
    SnapshotStorage,
    StateRestoreListener,
    TransactionOutcomes,
)
from statestores.snapshots import DEFAULT_KEEP, SnapshotManager
from statestores.transactional import PreparedBatchError, TransactionalBytesStore

log = logging.getLogger(__name__)

SNAPSHOT_INTERVAL_KEY = "statestore.snapshot.interval"
SNAPSHOTS_KEPT_KEY = "statestore.snapshots.kept"
DEFAULT_SNAPSHOT_INTERVAL = 100
RESTORE_BATCH = 10_000


@dataclass
class _Registered:
    store: Any
    bottom: TransactionalBytesStore
    topic: str
    logged: bool


class ProcessorStateManager:
    """The stores of one task; a :class:`~statestores.api.StateStoreContext`.

    Args:
        application_id: the application id.
        task_id: the task id (``<sub-topology>_<partition>``).
        partition: the task's partition (also its changelog partition).
        state_dir: the task's locked directory, or None (in-memory only).
        app_config: configuration keys (dotted).
        changelog: where change-logging layers send changes (in the transaction).
        changelog_reader: reads changelogs for restoration (None: no restoration).
        transaction_outcomes: resolves prepared batches left by a crash.
        snapshots: where snapshots are uploaded (None: no snapshots).
        timestamp: returns the timestamp of the record being processed.
        restore_listener: told about restore progress.
        commit_requester: called when a store's uncommitted bytes pass the limit.
        transactional: the stores commit in transactions (an exactly-once guarantee):
            no checkpoint file, a store with data but no committed offset is corrupted.
    """

    def __init__(
        self,
        *,
        application_id: str,
        task_id: str,
        partition: int,
        state_dir: str | None,
        app_config: Mapping[str, Any],
        changelog: ChangelogCollector | None = None,
        changelog_reader: ChangelogReader | None = None,
        transaction_outcomes: TransactionOutcomes | None = None,
        snapshots: SnapshotStorage | None = None,
        timestamp: Callable[[], int] | None = None,
        restore_listener: StateRestoreListener | None = None,
        commit_requester: Callable[[], None] | None = None,
        transactional: bool = False,
    ) -> None:
        self._application_id = application_id
        self._task_id = task_id
        self._partition = partition
        self._state_dir = state_dir
        self._app_config = app_config
        self._changelog = changelog
        self.reader = changelog_reader
        self.outcomes = transaction_outcomes
        kept = int(app_config.get(SNAPSHOTS_KEPT_KEY) or DEFAULT_KEEP)
        self.snapshots = (
            None
            if snapshots is None
            else SnapshotManager(snapshots, application_id, task_id, keep=kept)
        )
        self._timestamp = timestamp or (lambda: 0)
        self.listener = restore_listener
        self._commit_requester = commit_requester
        self.transactional = transactional
        self.snapshot_interval = int(
            app_config.get(SNAPSHOT_INTERVAL_KEY, DEFAULT_SNAPSHOT_INTERVAL)
        )
        self.checkpoint = None if state_dir is None else OffsetCheckpoint(state_dir)
        self._checkpointed = self._load_checkpoint()
        self._written: dict[tuple[str, int], int] | None = None  # the file's, once written
        self.stores: dict[str, _Registered] = {}
        self.restored: dict[str, int] = {}
        self.corrupted: set[str] = set()
        #: Store name -> what its restoration started from (a snapshot, the changelog).
        self.sources: dict[str, str] = {}
        self.commit_requested = False
        self._commits = 0
        #: Whether the restoration must stop (the task left its host while it restored):
        #: checked before each store and between changelog reads.
        self.cancelled: Callable[[], bool] = lambda: False

    # -- StateStoreContext ---------------------------------------------------------------

    @property
    def application_id(self) -> str:
        """The application id."""
        return self._application_id

    @property
    def task_id(self) -> str:
        """The task id."""
        return self._task_id

    @property
    def partition(self) -> int:
        """The task's partition."""
        return self._partition

    @property
    def state_dir(self) -> str | None:
        """The task directory."""
        return self._state_dir

    @property
    def app_config(self) -> Mapping[str, Any]:
        """The configuration."""
        return self._app_config

    @property
    def changelog(self) -> ChangelogCollector | None:
        """The changelog collector."""
        return self._changelog

    def timestamp(self) -> int:
        """Return the timestamp of the record being processed."""
        return self._timestamp()

    def manages_transactions(self) -> bool:
        """Return True: stores commit when this manager says so."""
        return True

    def register(self, store: StateStore) -> None:
        """Register ``store`` and bring it up to date (resolve, restore or rebuild).

        Raises:
            TaskCorruptedError: the store is corrupted and cannot be rebuilt.
        """
        entry = _Registered(
            store,
            bottom(store),
            changelog_topic(self._application_id, store.name),
            _is_logged(store),
        )
        entry.bottom.set_commit_requester(self._request_commit)
        if entry.bottom.wiped_on_open:
            self.corrupted.add(store.name)
        self.stores[store.name] = entry
        self._restore(entry)

    def catch_up(self) -> None:
        """Bring every registered store up to its changelog's committed end (a standby
        replica's update, Kafka's ``StandbyTask.update``)."""
        for entry in self.stores.values():
            self._catch_up(entry)

    # -- commits -------------------------------------------------------------------------

    def flush(self) -> None:
        """Flush every store's caches down (their changes reach the changelog)."""
        for entry in self.stores.values():
            entry.store.flush()

    def prepare_commit(self, transactional_id: str | None = None, sequence: int = 0) -> None:
        """Flush, then persist each store's uncommitted writes as a prepared batch of the
        transaction ``(transactional_id, sequence)`` (none under at_least_once)."""
        self.flush()
        if transactional_id is not None:
            for entry in self.stores.values():
                entry.bottom.prepare(transactional_id, sequence)

    def commit(self, changelog_offsets: Mapping[str, int] | None = None) -> None:
        """Apply every store's writes with its new changelog offset (after the producer
        committed); write the checkpoint (at_least_once) and maybe a snapshot.

        Args:
            changelog_offsets: the changelog end offset per store name, when the runtime
                knows it; otherwise each store computes it from the changes it logged.
        """
        offsets = changelog_offsets or {}
        for name, entry in self.stores.items():
            entry.bottom.commit(offsets.get(name))
        self.commit_requested = False
        self._commits += 1
        if not self.transactional and self.checkpoint is not None:
            current = self._offsets()
            if current != self._written:  # nothing new: the file already says it
                self.checkpoint.write(current)
                self._written = current
        if self.snapshot_interval > 0 and self._commits % self.snapshot_interval == 0:
            self.snapshot()

    def abort(self) -> None:
        """Discard every store's uncommitted writes and prepared batch."""
        for entry in self.stores.values():
            entry.store.abort()
        self.commit_requested = False

    def close(self) -> None:
        """Close every store; uncommitted writes are dropped."""
        for entry in self.stores.values():
            entry.store.close()
        self.stores.clear()

    def snapshot(self) -> int:
        """Upload a snapshot of every persistent logged store; prune old ones.

        Returns:
            The number of stores snapshotted.
        """
        if self.snapshots is None or self._state_dir is None:
            return 0
        done = 0
        for name, entry in self.stores.items():
            offset = entry.bottom.committed_offset()
            if not (entry.logged and entry.bottom.persistent()) or offset is None:
                continue
            tmp = os.path.join(self._state_dir, ".snapshot-tmp", name)
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(os.path.dirname(tmp), exist_ok=True)
            try:
                entry.bottom.checkpoint(tmp)
                self.snapshots.upload(name, tmp, offset)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            self.snapshots.prune(name)
            done += 1
        return done

    # -- restoration ---------------------------------------------------------------------

    def _restore(self, entry: _Registered) -> None:
        name = entry.store.name
        self._check_cancelled(name)
        reason = entry.bottom.wipe_reason if name in self.corrupted else None
        try:
            self._resolve_prepared(entry)
            self._catch_up(entry)
        except TaskCorruptedError as exc:
            if self.reader is None:
                raise
            reason = str(exc)
            self.corrupted.add(name)
            entry.bottom.wipe()
            self._catch_up(entry)
        if reason is not None:
            # one line says what happened and what was done about it
            log.warning(
                "[task %s] store %s was unusable (%s): wiped and rebuilt from %s and %d "
                "changelog records",
                self._task_id,
                name,
                reason,
                self.sources.get(name, "the changelog"),
                self.restored.get(name, 0),
            )
        entry.store.on_restored()

    def _resolve_prepared(self, entry: _Registered) -> None:
        try:
            prepared = entry.bottom.prepared_transaction()
        except PreparedBatchError as exc:
            raise self._corrupted(str(exc)) from exc
        if prepared is None:
            return
        outcome = None if self.outcomes is None else self.outcomes.committed(*prepared)
        # Dropping is always safe: a committed transaction's changes are in the changelog.
        entry.bottom.resolve_prepared(committed=outcome is True)

    def _catch_up(self, entry: _Registered) -> None:
        if self.reader is None or not entry.logged:
            return
        b, topic = entry.bottom, entry.topic
        try:
            offsets = self.reader.offsets(topic, self._partition)
        except StreamsError as exc:
            raise self._corrupted(f"changelog {topic} is unreadable ({exc})") from exc
        local = b.committed_offset()
        if offsets is None:
            if local or not _is_empty(b):
                raise self._corrupted(f"changelog {topic} is missing but the store has data")
            return
        start, end = offsets
        if local is None:
            local = self._starting_offset(entry, start, end)
        if local > end:
            raise self._corrupted(f"store offset {local} is ahead of {topic} end {end}")
        if local < start:
            raise self._corrupted(f"store offset {local} is below {topic} log-start {start}")
        self._replay(entry, local, end)

    def _starting_offset(self, entry: _Registered, start: int, end: int) -> int:
        """Return where a store without a committed offset restores from."""
        b = entry.bottom
        if not _is_empty(b):
            checkpointed = self._checkpointed.get((entry.topic, self._partition))
            if self.transactional or checkpointed is None:
                # under EOS it may hold uncommitted data; under ALOS replay from the start
                if self.transactional:
                    raise self._corrupted(f"store {b.name} has data but no committed offset")
                return start
            return checkpointed
        if self.snapshots is None or not b.persistent():
            self.sources[b.name] = f"the changelog from offset {start}"
            return start
        manager = self.snapshots
        usable = [s for s in manager.list(b.name) if start <= s.offset <= end]
        for info in reversed(usable):  # the newest first; an older one if it is damaged
            try:
                b.install(functools.partial(manager.download, info))
            except StoreIOError as exc:
                log.warning(
                    "[task %s] store %s: snapshot at offset %d is unusable (%s): trying an "
                    "older one, else the changelog",
                    self._task_id,
                    b.name,
                    info.offset,
                    exc,
                )
                b.wipe()
                continue
            log.info(
                "[task %s] store %s from snapshot offset=%d", self._task_id, b.name, info.offset
            )
            self.sources[b.name] = f"snapshot at offset {info.offset}"
            return b.committed_offset() or info.offset
        self.sources[b.name] = f"the changelog from offset {start}"
        return start

    def _replay(self, entry: _Registered, offset: int, end: int) -> None:
        b, topic, name = entry.bottom, entry.topic, entry.store.name
        began, total = time.monotonic(), 0
        if offset == end:
            if b.committed_offset() != end:
                b.set_committed_offset(end)
            self.restored[name] = 0
            return
        if self.listener is not None:
            self.listener.on_restore_start(name, offset, end)
        assert self.reader is not None
        while offset < end:
            self._check_cancelled(name)
            try:
                batch = self.reader.read(
                    topic, self._partition, offset, min(RESTORE_BATCH, end - offset)
                )
            except StreamsError as exc:
                raise self._corrupted(f"changelog {topic} unreadable at {offset} ({exc})") from exc
            if not batch:
                raise self._corrupted(f"changelog {topic} ends at {offset}, expected {end}")
            offset += b.restore_batch(batch, offset + len(batch))
            total += len(batch)
            if self.listener is not None:
                self.listener.on_batch_restored(name, offset, len(batch))
        elapsed = time.monotonic() - began
        self.restored[name] = total
        log.info(
            "[task %s] restored store=%s records=%d elapsed_s=%.3f",
            self._task_id,
            name,
            total,
            elapsed,
        )
        if self.listener is not None:
            self.listener.on_restore_end(name, total, elapsed)

    # -- internals -----------------------------------------------------------------------

    def _check_cancelled(self, name: str) -> None:
        if self.cancelled():
            raise RestorationCancelledError(
                f"[task {self._task_id}] the restoration of store {name} was cancelled: "
                "the task left this host"
            )

    def _corrupted(self, message: str) -> TaskCorruptedError:
        return TaskCorruptedError(f"[task {self._task_id}] {message}", task_id=self._task_id)

    def _request_commit(self) -> None:
        self.commit_requested = True
        if self._commit_requester is not None:
            self._commit_requester()

    def _offsets(self) -> dict[tuple[str, int], int]:
        out = {}
        for entry in self.stores.values():
            if not entry.bottom.persistent():  # starts empty anyway: restored in full
                continue
            offset = entry.bottom.committed_offset()
            if entry.logged and offset is not None:
                out[(entry.topic, self._partition)] = offset
        return out

    def _load_checkpoint(self) -> dict[tuple[str, int], int]:
        if self.checkpoint is None:
            return {}
        try:
            offsets = self.checkpoint.read()
        except StreamsError as exc:
            log.warning("[task %s] ignoring checkpoint: %s", self._task_id, exc)
            offsets = {}
        if self.transactional:  # Kafka deletes it under EOS; offsets live in the stores
            self.checkpoint.delete()
        return offsets


def _is_logged(store: object) -> bool:
    layer = store
    while layer is not None:
        if isinstance(layer, ChangeLoggingBytesStore):
            return True
        layer = getattr(layer, "wrapped", None)
    return False


def _is_empty(store: TransactionalBytesStore) -> bool:
    return next(iter(store.items(None, None)), None) is None
