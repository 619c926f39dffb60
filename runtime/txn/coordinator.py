"""The transaction coordinator: Kafka's TransactionCoordinator over compare-and-swap logs.

Each transactional id has its own compare-and-swap log (``<root>/_transactions/<id>``,
:mod:`runtime.txn.cas_log`) whose newest document is the id's
:class:`~runtime.txn.metadata.TransactionMetadata`. Every state transition is one append
against the version it was computed from, so of two writers of one id (a producer and its
zombie, or a producer and the timeout sweep) exactly one wins; the loser re-reads, and if
the epoch moved it is fenced. There is no coordinator process: any process holding the
storage root can run these steps, and each step is safe to repeat after a crash.

Exactly-once invariants kept here:

- PrepareCommit is written only after every staged file is durable, and it lists them:
  it is the point of no return; after it the transaction is rolled forward, never back.
- The commit phase adds each participant's files with Delta's ``txn(transactional.id,
  sequence)`` action and skips a table that already holds that version, so rolling forward
  twice never commits twice.
- An Ongoing transaction found at InitProducerId or past its timeout is fenced first (epoch
  bump, PrepareEpochFence) and only then aborted, so its producer can never commit it.
- Staged files live in ``txn-staging/<id>/<sequence>-<producer id>-<epoch>/partition=<p>/``
  of each participant table (:mod:`runtime.txn.staging`); an abort deletes every staging
  directory of that sequence, and the sweep deletes staging files no commit references (a
  zombie's late writes).
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import wait
from dataclasses import dataclass

from common.errors import (
    ConcurrentTransactionsError,
    CoordinatorError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    StreamsError,
)
from common.pools import shared_pool
from runtime.storage.committer import ParticipantCommitter
from runtime.storage.delta_sink import participant_committer
from runtime.storage.topics import TopicAdmin
from runtime.txn import faults
from runtime.txn.cas_log import CasLog
from runtime.txn.metadata import TransactionMetadata
from runtime.txn.producer_ids import ProducerIdManager
from runtime.txn.staging import StagingArea, id_dir, staging_dir
from runtime.txn.state import EpochExhausted, TransactionState

log = logging.getLogger(__name__)

TRANSACTIONS_DIR = "_transactions"
DEFAULT_MAX_TIMEOUT_MS = 900_000
DEFAULT_EXPIRATION_MS = 7 * 24 * 3600 * 1000
COMPACT_EVERY = 64
#: How many transaction logs a listing of them reads at once.
LOG_READERS = 8
#: A decided transaction (Prepare*) still not complete this long after its decision lost
#: its producer, or its commit phase failed: the sweep completes it (Kafka's coordinator
#: resends its markers until they land).
DECIDED_GRACE_MS = 10_000
_REDERIVABLE = frozenset(
    {TransactionState.ONGOING, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}
)


def now_ms() -> int:
    """Return the wall clock in epoch milliseconds."""
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A transactional id's metadata as of one version of its log."""

    version: int
    meta: TransactionMetadata


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one coordinator sweep did."""

    aborted: list[str]
    expired: list[str]
    orphan_files_deleted: int
    completed: list[str] = dataclasses.field(default_factory=list)
    #: transactional id -> why its decided transaction could not complete (retried next)
    stuck: dict[str, str] = dataclasses.field(default_factory=dict)


class TransactionCoordinator:
    """Runs transaction state transitions, commit/abort phases, recovery and the sweep.

    Args:
        admin: the topic admin of the storage root.
        max_timeout_ms: ``transaction.max.timeout.ms``; longer producer timeouts are refused.
        expiration_ms: ``transactional.id.expiration.ms``; idle ids are removed after it.
        commit_timeout_ms: how long one participant commit may retry lost races.
    """

    def __init__(
        self,
        admin: TopicAdmin,
        *,
        max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
        expiration_ms: int = DEFAULT_EXPIRATION_MS,
        commit_timeout_ms: int = 120_000,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.admin = admin
        self.root = admin.root
        self.max_timeout_ms = max_timeout_ms
        self.expiration_ms = expiration_ms
        self.commit_timeout_ms = commit_timeout_ms
        self.clock = clock
        self.producer_ids = ProducerIdManager(self.root)
        self._logs: dict[str, CasLog] = {}
        self._committers: dict[str, ParticipantCommitter] = {}
        self.staging = StagingArea(admin)

    # -- reading -----------------------------------------------------------------------

    def cas_log(self, transactional_id: str) -> CasLog:
        """Return the compare-and-swap log of ``transactional_id``."""
        found = self._logs.get(transactional_id)
        if found is None:
            found = CasLog(self.root, (TRANSACTIONS_DIR, id_dir(transactional_id)))
            self._logs[transactional_id] = found
        return found

    def load(self, transactional_id: str) -> Snapshot | None:
        """Return the newest metadata of ``transactional_id`` (None if it has none)."""
        latest = self.cas_log(transactional_id).read_latest()
        if latest is None:
            return None
        version, document = latest
        return Snapshot(version, TransactionMetadata.from_json(document))

    def transactional_ids(self) -> builtins.list[str]:
        """Return every transactional id with a log under the root."""
        return [snap.meta.transactional_id for snap in self._snapshots()]

    def _snapshots(self) -> builtins.list[Snapshot]:
        """The newest metadata of every transactional id, in the order of the ids: each
        log read once, several at a time (each read is a listing, a HEAD and a GET: on an
        object store, the stable offset fetch of a restart spent 5 s here)."""
        names = [i.base_name for i in self.root.list_subdirs(self.root.path(TRANSACTIONS_DIR))]
        pool = shared_pool("txn-logs", LOG_READERS)
        found = [snap for snap in pool.map(self._load_dir, names) if snap is not None]
        return sorted(found, key=lambda snap: snap.meta.transactional_id)

    def _load_dir(self, name: str) -> Snapshot | None:
        latest = CasLog(self.root, (TRANSACTIONS_DIR, name)).read_latest()
        return (
            None
            if latest is None
            else Snapshot(latest[0], TransactionMetadata.from_json(latest[1]))
        )

    def list(self) -> builtins.list[TransactionMetadata]:
        """Return the metadata of every transactional id."""
        return [snap.meta for snap in self._snapshots()]

    def groups_with_pending_offsets(self) -> set[str]:
        """Return the groups whose offsets sit in a transaction not yet completed."""
        return {
            group
            for meta in self.list()
            if meta.state in (TransactionState.ONGOING, TransactionState.PREPARE_COMMIT)
            for group in meta.group_ids
        }

    def pending_offsets(self, group: str) -> set[tuple[str, int]]:
        """Return the partitions whose offsets of ``group`` sit in a transaction not yet
        completed (Kafka's pending transactional offset commits)."""
        return {
            (entry.topic, entry.partition)
            for meta in self.list()
            if meta.state in (TransactionState.ONGOING, TransactionState.PREPARE_COMMIT)
            for entry in meta.pending_offsets
            if entry.group == group
        }

    # -- writing -----------------------------------------------------------------------

    def transit(self, snap: Snapshot, new: TransactionMetadata) -> Snapshot:
        """Append ``new`` over ``snap``; raise ProducerFencedError if someone else moved it.

        Decisions (Prepare*, fences, epoch bumps) are made durable before this returns.
        Ongoing and Complete* need not survive a power loss: recovery re-derives them
        (rolling a PrepareCommit forward or a PrepareAbort back is idempotent, and staged
        files of a forgotten Ongoing transaction are orphans the sweep deletes).

        Raises:
            ProducerFencedError: the log moved on (a newer epoch or the timeout sweep).
        """
        tid = new.transactional_id
        durable = new.state not in _REDERIVABLE or new.producer_epoch != snap.meta.producer_epoch
        if self.cas_log(tid).append(snap.version, new.to_json(), durable=durable):
            if (snap.version + 1) % COMPACT_EVERY == 0:
                self.cas_log(tid).compact()
            return Snapshot(snap.version + 1, new)
        current = self.load(tid)
        raise ProducerFencedError(
            f"transactional id {tid!r}: producer {new.producer_id} epoch {new.producer_epoch} "
            f"was fenced; the log is now at producer "
            f"{current.meta.producer_id if current else '?'} epoch "
            f"{current.meta.producer_epoch if current else '?'} "
            f"({current.meta.state.state_name if current else 'gone'})"
        )

    def init_producer_id(self, transactional_id: str, timeout_ms: int) -> Snapshot:
        """Run InitProducerId: finish any open transaction, then bump the epoch.

        A PrepareCommit is rolled forward, a PrepareAbort finished, and an Ongoing
        transaction fenced and aborted, before the new epoch is handed out.

        Raises:
            InvalidTransactionTimeoutError: ``timeout_ms`` is not in 1..max_timeout_ms.
        """
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={timeout_ms} is not allowed: it must be > 0 and <= "
                f"transaction.max.timeout.ms={self.max_timeout_ms}"
            )
        for _ in range(1000):
            snap = self.load(transactional_id)
            try:
                if snap is None or snap.meta.state is TransactionState.DEAD:
                    return self._create(transactional_id, snap, timeout_ms)
                if snap.meta.state.is_complete_or_empty:
                    return self._bump(snap, timeout_ms)
                self.finish(snap)
            except ProducerFencedError:
                continue  # someone else moved the log: look again
        raise CoordinatorError(
            f"transactional id {transactional_id!r}: InitProducerId kept losing races"
        )

    def _create(self, tid: str, snap: Snapshot | None, timeout_ms: int) -> Snapshot:
        """Register a new (or expired) id; an expired one keeps its transaction sequence."""
        meta = TransactionMetadata.new(
            tid, self.producer_ids.generate(), timeout_ms, now_ms=self.clock()
        )
        if snap is not None:  # a Dead id comes back with a fresh producer id
            meta = dataclasses.replace(meta, txn_sequence=snap.meta.txn_sequence)
        bumped = meta.prepare_increment_producer_epoch(timeout_ms, None, now_ms=self.clock())
        return self.transit(Snapshot(-1 if snap is None else snap.version, meta), bumped)

    def _bump(self, snap: Snapshot, timeout_ms: int) -> Snapshot:
        try:
            new = snap.meta.prepare_increment_producer_epoch(
                timeout_ms, snap.meta.producer_epoch, now_ms=self.clock()
            )
        except EpochExhausted:
            new = snap.meta.prepare_producer_id_rotation(
                self.producer_ids.generate(), timeout_ms, now_ms=self.clock()
            )
        return self.transit(snap, new)

    def finish(self, snap: Snapshot, *, recovering: bool = True) -> Snapshot:
        """Drive an unfinished transaction to CompleteCommit or CompleteAbort.

        ``recovering=False`` is for the producer that wrote PrepareCommit a moment ago: no
        participant can hold the transaction yet, so the commit phase skips that check.
        """
        meta, clock = snap.meta, self.clock
        state = meta.state
        if state is TransactionState.ONGOING:  # fenced and aborted in one write, as Kafka's
            # coordinator does (PrepareEpochFence is its pending state, never logged)
            fenced = meta.prepare_fence_producer_epoch(now_ms=clock())
            snap = self.transit(snap, fenced.prepare_abort(now_ms=clock()))
            state, meta = snap.meta.state, snap.meta
        if state is TransactionState.PREPARE_EPOCH_FENCE:  # logged by earlier versions
            snap = self.transit(snap, meta.prepare_abort(now_ms=clock()))
            state, meta = snap.meta.state, snap.meta
        if state is TransactionState.PREPARE_ABORT:
            self.abort_phase(meta)
            return self.transit(snap, meta.complete_abort(now_ms=clock()))
        if state is TransactionState.PREPARE_COMMIT:
            self.commit_phase(meta, recovering=recovering)
            faults.reached("before_complete")
            done = self.transit(snap, meta.complete_commit(now_ms=clock()))
            faults.reached("after_complete")
            return done
        return snap

    # -- phases ------------------------------------------------------------------------

    def commit_phase(self, meta: TransactionMetadata, *, recovering: bool = True) -> None:
        """Add every participant's staged files to its table (idempotent: the markers).

        The participants commit at once: each is a table of its own, the outcome is
        already decided (PrepareCommit), and on an object store a commit is a chain of a
        dozen requests, which one participant after another made most of a batch's
        commit time. A crash leaves any subset committed, which the next InitProducerId
        completes as it would a crash between two participants; the fault points
        ``after_participant_<k>`` are met as the k-th participant finishes.
        """
        app_txn = (meta.transactional_id, meta.txn_sequence)
        count = len(meta.staged)
        finished = [0]
        lock = threading.Lock()

        def commit(topic: str) -> None:
            files = list(meta.staged[topic])
            if files:
                self.committer(topic).commit(
                    files,
                    timeout_ms=self.commit_timeout_ms,
                    app_txn=app_txn,
                    recovering=recovering,
                )
            with lock:
                finished[0] += 1
                faults.reached_participant(finished[0], last=finished[0] == count)

        topics = sorted(meta.staged)
        if len(topics) <= 1:
            for topic in topics:
                commit(topic)
            return
        futures = [shared_pool("txn-commit", 8).submit(commit, topic) for topic in topics]
        wait(futures)  # every commit ended before the phase raises or returns
        for future in futures:
            future.result()

    def abort_phase(self, meta: TransactionMetadata) -> None:
        """Delete every staged file of the transaction's sequence in every participant."""
        for topic in meta.participants:
            for path in self.staging.dirs(topic, meta.transactional_id, meta.txn_sequence):
                self.root.delete_dir(path)

    def staging_dir(self, meta: TransactionMetadata) -> str:
        """Return where the current producer stages files (relative to a topic table)."""
        return staging_dir(meta)

    def staged_paths(self, topic: str, meta: TransactionMetadata) -> builtins.list[str]:
        """Return the staged data files of ``meta``'s current transaction in ``topic``."""
        return self.staging.staged_paths(topic, meta.transactional_id, meta.txn_sequence)

    def committer(self, topic: str) -> ParticipantCommitter:
        """Return the (cached) committer of a participant (a topic or a Delta sink)."""
        found = self._committers.get(topic)
        if found is None:
            found = self._committers[topic] = participant_committer(self.admin, topic)
        return found

    # -- administration ----------------------------------------------------------------

    def abort(self, transactional_id: str) -> Snapshot:
        """Abort a hanging transaction (the ``transactions --abort`` tool).

        Raises:
            ConcurrentTransactionsError: it is in PrepareCommit/PrepareAbort: its outcome
                is decided; the next InitProducerId or sweep completes it.
            InvalidTxnStateError: it has no open transaction.
        """
        snap = self.load(transactional_id)
        if snap is None:
            raise InvalidTxnStateError(f"transactional id {transactional_id!r} does not exist")
        state = snap.meta.state
        if state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            raise ConcurrentTransactionsError(
                f"transactional id {transactional_id!r} is in {state.state_name}: its outcome is "
                "already decided and cannot be changed; it completes at the producer's next "
                f"init_transactions() or the first sweep {DECIDED_GRACE_MS // 1000} s after "
                "its decision (streams-eos transactions --sweep)"
            )
        if (
            state is not TransactionState.ONGOING
            and state is not TransactionState.PREPARE_EPOCH_FENCE
        ):
            raise InvalidTxnStateError(
                f"transactional id {transactional_id!r} has no open transaction "
                f"({state.state_name})"
            )
        return self.finish(snap)

    def hanging(self) -> builtins.list[TransactionMetadata]:
        """Return the Ongoing transactions older than their timeout."""
        now = self.clock()
        return [m for m in self.list() if m.is_timed_out(now)]

    def sweep(self, *, orphans: bool = True) -> SweepResult:
        """Abort timed-out transactions, complete decided ones, expire idle ids, delete
        orphaned staged files.

        A transaction in Prepare* keeps its outcome: one still not complete
        :data:`DECIDED_GRACE_MS` after its decision is driven to it (its commit phase
        retried; idempotent). One whose phase fails again is reported in ``stuck`` and
        retried by the next sweep.
        """
        aborted, expired, completed, stuck = [], [], [], {}
        now = self.clock()
        for tid in self.transactional_ids():
            snap = self.load(tid)
            if snap is None:
                continue
            try:
                if snap.meta.state.is_prepare and (
                    snap.meta.txn_last_update_timestamp + DECIDED_GRACE_MS < now
                ):
                    why = self._complete_decided(snap)
                    if why is None:
                        completed.append(tid)
                    else:
                        stuck[tid] = why
                elif snap.meta.is_timed_out(now):
                    self.finish(snap)
                    aborted.append(tid)
                    log.warning(
                        "[txn %s] aborted after its timeout of %d ms", tid, snap.meta.txn_timeout_ms
                    )
                elif snap.meta.is_expired(now, self.expiration_ms):
                    # A Dead record stays (compacted to a few versions): the id's sequence
                    # must never restart, since staging directories and Delta txn
                    # versions of committed transactions are keyed by it.
                    self.transit(snap, snap.meta.prepare_dead(now_ms=now))
                    self.cas_log(tid).compact()
                    expired.append(tid)
            except ProducerFencedError:
                continue  # the producer moved first; look again next sweep
        deleted = self.delete_orphans() if orphans else 0
        return SweepResult(aborted, expired, deleted, completed, stuck)

    def _complete_decided(self, snap: Snapshot) -> str | None:
        """Drive a decided transaction to its outcome; return why it could not (None: it
        completed). A fence (its producer completed it first) propagates."""
        try:
            self.finish(snap)
        except ProducerFencedError:
            raise
        except StreamsError as exc:
            log.warning(
                "[txn %s] decided transaction not completed: %s",
                snap.meta.transactional_id,
                exc,
            )
            return str(exc)
        return None

    def delete_orphans(self, *, min_age_ms: int = 60_000) -> int:
        """Delete staged files that no commit references and no open transaction owns."""
        open_dirs = {
            (meta.transactional_id, meta.txn_sequence)
            for meta in self.list()
            if not meta.state.is_complete_or_empty
        }
        return self.staging.delete_orphans(open_dirs, cutoff_ms=self.clock() - min_age_ms)
