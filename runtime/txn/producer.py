"""The transactional producer: Kafka's transactional KafkaProducer over Delta topics.

::

    producer = TransactionalProducer(root, "app-1-0", transaction_timeout_ms=60_000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", b"k", b"v")
    producer.send_offsets_to_transaction({("in", 0): 42}, "app")
    producer.commit_transaction()

Records are buffered and, when a buffer grows past ``buffer_memory`` or at commit, written
as *staged* files under ``txn-staging/`` of each participant table: no Delta reader sees
them. Participants are registered (Ongoing) before their first staged file is written.
``commit_transaction()`` writes PrepareCommit with the staged file list, commits each
participant table (Delta's ``txn`` action makes that idempotent), then CompleteCommit; it
returns once every participant commit is durable. The CompleteCommit record is appended
on a background thread while the caller goes on (:mod:`runtime.txn.completion`).

Fencing: every send and every transition checks that the log has not moved past this
producer's last write; a newer epoch (another ``init_transactions()`` with the same id, or
the timeout sweep) means :class:`ProducerFencedError`, and nothing this producer staged
becomes visible.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType

import pyarrow as pa

from common.errors import (
    InvalidTxnStateError,
    ProducerFencedError,
    StreamsError,
    TransactionAbortedError,
)
from runtime.storage.accumulator import RecordAccumulator
from runtime.storage.committer import StagedFile, write_file
from runtime.storage.delta_sink import prepare, sink_table
from runtime.storage.fs import StorageRoot
from runtime.storage.record_checks import MAX_REQUEST_SIZE, check_batch, check_record
from runtime.storage.records import Headers
from runtime.storage.topics import TopicAdmin
from runtime.txn import faults
from runtime.txn.completion import BackgroundCompletion
from runtime.txn.coordinator import Snapshot, TransactionCoordinator
from runtime.txn.metadata import OffsetEntry
from runtime.txn.offsets import OFFSETS_TOPIC, OffsetsStore
from runtime.txn.state import TransactionState

log = logging.getLogger(__name__)


class ProducerState(enum.Enum):
    """The client side of the protocol (Kafka's TransactionManager states)."""

    UNINITIALIZED = "UNINITIALIZED"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING_TRANSACTION"
    ABORTING = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TransactionalProducer:
    """Writes to several topics and commits consumed positions atomically.

    Args:
        root: the storage root (path, URI, ``StorageRoot`` or ``TopicAdmin``).
        transactional_id: stable across restarts; one live producer per id.
        transaction_timeout_ms: an Ongoing transaction older than this is aborted.
        transaction_max_timeout_ms: the coordinator's cap on the timeout.
        buffer_memory: buffered bytes per topic that are staged before the commit.
        max_request_size: the largest record ``send`` accepts, in bytes (Kafka's
            ``max.request.size``, 1 MiB by default).
    """

    def __init__(
        self,
        root: str | StorageRoot | TopicAdmin,
        transactional_id: str,
        *,
        transaction_timeout_ms: int = 60_000,
        transaction_max_timeout_ms: int = 900_000,
        batch_size: int = 16_384,
        buffer_memory: int = 32 * 1024 * 1024,
        compression: str = "snappy",
        max_request_size: int = MAX_REQUEST_SIZE,
        coordinator: TransactionCoordinator | None = None,
    ) -> None:
        if not transactional_id:
            raise InvalidTxnStateError("transactional.id must not be empty")
        self.admin = root if isinstance(root, TopicAdmin) else TopicAdmin(root)
        self.root = self.admin.root
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.coordinator = coordinator or TransactionCoordinator(
            self.admin, max_timeout_ms=transaction_max_timeout_ms
        )
        self.offsets = OffsetsStore(self.admin, coordinator=self.coordinator)
        self.buffer_memory = buffer_memory
        self.compression = compression
        self.max_request_size = max_request_size
        self.accumulator = RecordAccumulator(self.admin, batch_size=batch_size)
        self.state = ProducerState.UNINITIALIZED
        self._snap: Snapshot | None = None
        self._completion = BackgroundCompletion(self.coordinator, transactional_id)
        self._staged: dict[str, list[StagedFile]] = {}
        self._offsets: dict[str, list[OffsetEntry]] = {}
        self._pending_groups: set[str] = set()
        self.metrics = {
            "commits": 0,
            "aborts": 0,
            "records": 0,
            "files": 0,
            "commit-time-ns": 0,
            "abort-time-ns": 0,
        }

    # -- lifecycle ----------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Register the id, finish what a previous instance left open, fence it.

        Raises:
            InvalidTransactionTimeoutError: the timeout exceeds the coordinator's maximum.
        """
        # A fenced background CompleteCommit is settled by the epoch bump below.
        with contextlib.suppress(ProducerFencedError):
            self._await_complete()
        self._snap = self.coordinator.init_producer_id(
            self.transactional_id, self.transaction_timeout_ms
        )
        self.state = ProducerState.READY
        log.info(
            "[txn %s] initialised producer_id=%d epoch=%d",
            self.transactional_id,
            self._snap.meta.producer_id,
            self._snap.meta.producer_epoch,
        )

    def begin_transaction(self) -> None:
        """Start a transaction (local only: the coordinator hears of it at the first write)."""
        self._require(ProducerState.READY, "begin_transaction")
        self.state = ProducerState.IN_TRANSACTION

    def send(
        self,
        topic: str,
        key: bytes | None = None,
        value: bytes | None = None,
        *,
        timestamp: int | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        """Add a record to the transaction (staged; invisible until the commit).

        Raises:
            ProducerFencedError: a newer producer with this id took over.
            InvalidTxnStateError: no transaction is open.
            SerializationError, InvalidRecordError: a field of the record cannot be stored
                (the record is refused alone; the transaction stays open).
        """
        self._check_sendable("send")
        check_record(topic, key, value, timestamp, headers, max_request_size=self.max_request_size)
        size = self.accumulator.append(
            topic, key, value, timestamp=timestamp, headers=headers, partition=partition
        )
        if size >= self.buffer_memory:
            self._stage([topic])

    def send_batch(
        self,
        topic: str,
        keys: pa.Array | Sequence[bytes | None] | None,
        values: pa.Array | Sequence[bytes | None],
        *,
        timestamps: pa.Array | Sequence[int] | int | None = None,
        partitions: pa.Array | Sequence[int] | None = None,
        headers: pa.Array | None = None,
    ) -> None:
        """Add many records at once from Arrow arrays or sequences (the fast path)."""
        self._check_sendable("send_batch")
        check_batch(topic, timestamps, headers)
        size = self.accumulator.append_batch(
            topic, keys, values, timestamps=timestamps, partitions=partitions, headers=headers
        )
        if size >= self.buffer_memory:
            self._stage([topic])

    @property
    def transaction_sequence(self) -> int:
        """Return the sequence number of the current (or, when none is open, the last)
        transaction of this id: Delta's ``txn`` version of its participant commits."""
        return self._current().meta.txn_sequence

    def staging_dir_for(self, topics: Iterable[str]) -> str:
        """Register ``topics`` as participants and return where their files are staged.

        For writers outside this process (Spark tasks): they write staged files with
        :func:`runtime.storage.committer.write_file` under each topic's table at the
        returned relative directory, and the caller hands the results back with
        :meth:`add_staged_files` before the commit.

        Raises:
            ProducerFencedError: a newer producer with this id took over.
        """
        self._check_sendable("staging_dir_for")
        snap = self._register(topics)
        return self.coordinator.staging_dir(snap.meta)

    def add_staged_files(self, topic: str, files: Iterable[StagedFile]) -> None:
        """Add files staged by another writer under :meth:`staging_dir_for`'s directory.

        Raises:
            InvalidTxnStateError: ``topic`` was not registered, or a file lies elsewhere.
        """
        self._check_sendable("add_staged_files")
        snap = self._current()
        if topic not in snap.meta.participants:
            raise InvalidTxnStateError(
                f"[txn {self.transactional_id}] topic {topic!r} is not a participant; "
                "call staging_dir_for([topic]) before its files are written"
            )
        prefix = self.coordinator.staging_dir(snap.meta) + "/"
        files = list(files)
        for f in files:
            if not f.path.startswith(prefix):
                raise InvalidTxnStateError(
                    f"[txn {self.transactional_id}] staged file {f.path} of {topic!r} is not "
                    f"under this transaction's staging directory {prefix}"
                )
        sink = sink_table(self.admin.root, topic)
        if sink is not None:  # typed rows: made to fit the table now, before PrepareCommit
            earlier = self._staged.pop(topic, [])
            self.metrics["records"] -= sum(f.count for f in earlier)
            self.metrics["files"] -= len(earlier)
            files = prepare(self.admin.root, sink, [*earlier, *files])
        for f in files:
            self._staged.setdefault(topic, []).append(f)
            self.metrics["records"] += f.count
            self.metrics["files"] += 1

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], int],
        group_id: str,
        *,
        metadata: str = "",
    ) -> None:
        """Commit the consumed positions ``{(topic, partition): next offset}`` of ``group_id``
        with this transaction (Kafka's AddOffsetsToTxn + TxnOffsetCommit)."""
        self._check_sendable("send_offsets_to_transaction")
        entries = [OffsetEntry(group_id, t, p, o, metadata) for (t, p), o in offsets.items()]
        self._offsets.setdefault(group_id, []).extend(entries)
        for key, value in self.offsets.records(group_id, entries):
            self.accumulator.append(
                OFFSETS_TOPIC,
                key,
                value,
                timestamp=None,
                headers=None,
                partition=self.offsets.partition_for(group_id),
            )

    def commit_transaction(self, *, before_prepare: Callable[[], None] | None = None) -> None:
        """Commit: stage the rest, PrepareCommit, commit every participant, CompleteCommit.

        Returns only when every participant table and the offsets are durable.

        Args:
            before_prepare: called once the offsets are registered with the transaction
                (a new owner's stable offset fetch now waits for it) and before the
                PrepareCommit: the group generation check of KIP-447. If it raises, nothing
                is decided and the transaction must be aborted.

        Raises:
            ProducerFencedError: this producer was fenced; nothing of it becomes visible.
            TransactionAbortedError: an earlier error made the transaction abort-only.
        """
        if self.state is ProducerState.ABORTABLE_ERROR:
            raise TransactionAbortedError(
                f"[txn {self.transactional_id}] an earlier error made this transaction "
                "abort-only; call abort_transaction()"
            )
        self._require(ProducerState.IN_TRANSACTION, "commit_transaction")
        self.state = ProducerState.COMMITTING
        started = time.perf_counter_ns()
        try:
            self._stage(self.accumulator.topics())
            snap = self._current()
            if snap.meta.state is not TransactionState.ONGOING:  # nothing was sent
                self._finish_local(committed=True)
                return
            if faults.broken(faults.BREAK_COMMIT_BEFORE_PREPARE):  # tests only
                faults.commit_before_prepare(
                    self.admin, self.coordinator, self._staged, keep=(OFFSETS_TOPIC,)
                )
            faults.reached("before_prepare")
            if before_prepare is not None:
                before_prepare()
            staged = {topic: self._staged.get(topic, []) for topic in snap.meta.participants}
            snap = self.coordinator.transit(
                snap, snap.meta.prepare_commit(staged, now_ms=self.coordinator.clock())
            )
            self._snap = snap
            faults.reached("after_prepare")
            self.coordinator.commit_phase(snap.meta, recovering=False)
            self._completion.submit(snap)
        except ProducerFencedError:
            self.state = ProducerState.FATAL_ERROR
            raise
        except BaseException:
            # Past PrepareCommit the outcome is decided; a restart rolls it forward.
            if self._snap is not None and self._snap.meta.state is TransactionState.PREPARE_COMMIT:
                self.state = ProducerState.FATAL_ERROR
            else:
                self.state = ProducerState.ABORTABLE_ERROR
            raise
        self.metrics["commits"] += 1
        self.metrics["commit-time-ns"] += time.perf_counter_ns() - started
        self._finish_local(committed=True)

    def abort_transaction(self) -> None:
        """Abort: drop buffered records, delete staged files, record CompleteAbort."""
        if self.state not in (ProducerState.IN_TRANSACTION, ProducerState.ABORTABLE_ERROR):
            raise InvalidTxnStateError(
                f"[txn {self.transactional_id}] cannot abort in state {self.state.value}"
            )
        self.state = ProducerState.ABORTING
        self.accumulator.clear()
        started = time.perf_counter_ns()
        try:
            snap = self._current()
            if snap.meta.state is TransactionState.ONGOING:
                snap = self.coordinator.transit(
                    snap, snap.meta.prepare_abort(now_ms=self.coordinator.clock())
                )
                self._snap = self.coordinator.finish(snap)
        except ProducerFencedError:
            self.state = ProducerState.FATAL_ERROR
            raise
        self.metrics["aborts"] += 1
        self.metrics["abort-time-ns"] += time.perf_counter_ns() - started
        self._finish_local(committed=False)

    def close(self) -> None:
        """Abort an open transaction (if still ours) and release the producer."""
        if self.state in (ProducerState.IN_TRANSACTION, ProducerState.ABORTABLE_ERROR):
            try:
                self.abort_transaction()
            except StreamsError as exc:
                log.warning("[txn %s] abort on close failed: %s", self.transactional_id, exc)
        try:
            self._await_complete()
        except StreamsError as exc:
            log.warning("[txn %s] CompleteCommit on close failed: %s", self.transactional_id, exc)
        self._completion.shutdown()
        self.state = ProducerState.UNINITIALIZED

    def __enter__(self) -> TransactionalProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------

    def _require(self, state: ProducerState, what: str) -> None:
        if self.state is ProducerState.FATAL_ERROR:
            raise ProducerFencedError(
                f"[txn {self.transactional_id}] {what}: this producer was fenced or failed "
                "fatally; close it and create a new one"
            )
        if self.state is not state:
            raise InvalidTxnStateError(
                f"[txn {self.transactional_id}] {what} is not allowed in state "
                f"{self.state.value} (needs {state.value})"
            )

    def _await_complete(self) -> None:
        """Wait for the previous transaction's CompleteCommit; adopt its snapshot.

        Raises:
            ProducerFencedError: the log moved on meanwhile (a newer epoch took over).
        """
        try:
            done = self._completion.wait()
        except ProducerFencedError:
            self.state = ProducerState.FATAL_ERROR
            raise
        if done is not None:
            self._snap = done

    def _check_sendable(self, what: str) -> None:
        self._require(ProducerState.IN_TRANSACTION, what)
        self._await_complete()
        snap = self._snap
        if snap is not None and self.coordinator.cas_log(self.transactional_id).has_after(
            snap.version
        ):
            self.state = ProducerState.FATAL_ERROR
            current = self.coordinator.load(self.transactional_id)
            raise ProducerFencedError(
                f"[txn {self.transactional_id}] {what}: producer {snap.meta.producer_id} "
                f"epoch {snap.meta.producer_epoch} was fenced (the log is now at epoch "
                f"{current.meta.producer_epoch if current else '?'})"
            )

    def _current(self) -> Snapshot:
        self._await_complete()
        if self._snap is None:
            raise InvalidTxnStateError("init_transactions() was not called")
        return self._snap

    def _register(self, topics: Iterable[str]) -> Snapshot:
        """Add participants and offsets to the transaction before anything is staged."""
        snap = self._current()
        new_topics = set(topics)
        groups = set(self._offsets) - self._pending_groups
        fresh = snap.meta.state is not TransactionState.ONGOING
        if not fresh and new_topics <= set(snap.meta.participants) and not groups:
            return snap
        now = self.coordinator.clock()
        meta = snap.meta.prepare_add_participants(new_topics, now_ms=now)
        for group in sorted(groups):
            meta = meta.prepare_add_offsets(group, self._offsets[group], now_ms=now)
        self._snap = self.coordinator.transit(snap, meta)
        self._pending_groups |= groups
        return self._snap

    def _stage(self, topics: Iterable[str]) -> None:
        """Write the buffered records of ``topics`` as staged files (after registering)."""
        topics = [t for t in topics if t in self.accumulator.topics()]
        if not topics:
            return
        snap = self._register(topics)
        rel_dir = self.coordinator.staging_dir(snap.meta)
        for topic in topics:
            table_path = self.admin.table_path(topic)
            for partition, chunk in self.accumulator.drain(topic):
                f = write_file(
                    self.root, table_path, rel_dir, partition, chunk, compression=self.compression
                )
                self._staged.setdefault(topic, []).append(f)
                self.metrics["records"] += f.count
                self.metrics["files"] += 1

    def _finish_local(self, *, committed: bool) -> None:
        self._staged.clear()
        self._offsets.clear()
        self._pending_groups.clear()
        self.state = ProducerState.READY
        log.debug("[txn %s] %s", self.transactional_id, "committed" if committed else "aborted")
