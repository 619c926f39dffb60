"""The exactly-once commit strategies: a batch is a transaction.

* :class:`ExactlyOnceV2` (``exactly_once_v2``): one transaction of the thread's id per
  batch: begin, run the tasks (their staged files name the transaction), add the files and
  the consumed positions, commit. PrepareCommit by CAS is the fencing point;
* :class:`ExactlyOncePerTask` (``exactly_once``, alpha): one transaction per task, of the
  task's own id, each task's outputs committed with its own positions.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from concurrent.futures import Future

from common.config import StreamsConfig
from common.errors import (
    GenerationFencedError,
    ProducerFencedError,
    StorageError,
    StreamsError,
)
from common.pools import shared_pool
from runtime.storage.committer import StagedFile
from runtime.storage.retries import abort_when
from runtime.storage.topics import TopicAdmin
from runtime.tasks.contract import Positions, TaskResults, task_results, task_results_by_task
from runtime.thread.commit import Batch, BatchCommit, CommitStrategy
from runtime.thread.disk_full import storage_failing
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OffsetsStore, UnstableOffsetCommitError
from runtime.txn.producer import ProducerState, TransactionalProducer
from runtime.txn.state import TransactionState

log = logging.getLogger(__name__)


#: How long InitProducerId is tried again while the storage fails (Kafka's producer
#: blocks ``max.block.ms``, 60 s by default, in ``initTransactions``).
INIT_PATIENCE_S = 60.0


def _init_patiently(producer: TransactionalProducer) -> None:
    """``producer.init_transactions()``, tried again with backoff while the storage fails
    past its own retries (a store that stalled for half a minute; InitProducerId is safe
    to repeat: each try finishes what is open and bumps the epoch again)."""
    deadline, wait = time.monotonic() + INIT_PATIENCE_S, 1.0
    while True:
        try:
            producer.init_transactions()
            return
        except StorageError as exc:
            if not storage_failing(exc) or time.monotonic() + wait > deadline:
                raise
            log.warning(
                "[txn %s] InitProducerId failed on the storage (%s); again in %.0f s",
                producer.transactional_id,
                str(exc).splitlines()[0][:300],
                wait,
            )
        time.sleep(wait)
        wait = min(2 * wait, 8.0)


class _Transactional(CommitStrategy):
    """What both exactly-once strategies share: producers and stable positions."""

    def _init_producers(self, ids: Mapping[str, str]) -> dict[str, TransactionalProducer]:
        producers: dict[str, TransactionalProducer] = {}
        for key, tid in ids.items():
            shared = self.offsets.coordinator
            producer = TransactionalProducer(
                self.admin,
                tid,
                transaction_timeout_ms=self.config.transaction_timeout_ms,
                transaction_max_timeout_ms=self.config.transaction_max_timeout_ms,
                coordinator=shared,
            )
            _init_patiently(producer)
            if shared is None:
                self.offsets = OffsetsStore(self.admin, coordinator=producer.coordinator)
            snap = producer.coordinator.load(tid)
            if snap is not None and snap.meta.txn_sequence > 0:
                done = snap.meta.state is TransactionState.COMPLETE_COMMIT
                self.outcomes[(tid, snap.meta.txn_sequence)] = done
            producers[key] = producer
        return producers

    def _fetch_stable(self, tasks: list[str]) -> Positions:
        """Fetch the group's positions once no transaction holds offsets of the tasks'
        partitions (Kafka's ``require_stable``); a transaction past its timeout (its
        producer gone) is aborted meanwhile, as Kafka's coordinator does."""
        partitions = self.task_partitions(tasks)
        coordinator = self.offsets.coordinator
        if coordinator is None:
            return {}
        deadline = time.monotonic() + self.config.transaction_max_timeout_ms / 1000
        while True:
            try:
                return self.offsets.fetch(self.group, require_stable=True, partitions=partitions)
            except UnstableOffsetCommitError:
                if time.monotonic() > deadline:
                    raise
                self._complete_decided(coordinator)
                coordinator.sweep(orphans=False)
                time.sleep(0.2)

    def _complete_decided(self, coordinator: TransactionCoordinator) -> None:
        """Finish the group's transactions whose outcome is decided (Prepare*) but whose
        producer is gone (a killed instance): Kafka's coordinator writes their markers
        itself. Finishing is idempotent; if the producer is alive and finishes first, the
        lost race is harmless."""
        for meta in coordinator.list():
            if self.group not in meta.group_ids or not meta.state.is_prepare:
                continue
            snap = coordinator.load(meta.transactional_id)
            if snap is None or not snap.meta.state.is_prepare:
                continue
            try:
                coordinator.finish(snap)
                log.info(
                    "[thread %s] completed %s's decided transaction %d",
                    self.transactional_id,
                    meta.transactional_id,
                    meta.txn_sequence,
                )
            except StreamsError as exc:  # its producer moved first: look again
                log.debug("[thread %s] %s", self.transactional_id, exc)

    def assigned(self, tasks: list[str]) -> Positions:
        """Take the positions again, stable: a previous owner's transaction completes
        first."""
        return self._fetch_stable(tasks)

    def _usable(
        self, producers: Mapping[str, TransactionalProducer], ids: Mapping[str, str]
    ) -> dict[str, TransactionalProducer]:
        """``producers`` with each one a failure left outside READY (an abort the store
        refused, a commit cut off after its PrepareCommit) closed and replaced, as Kafka
        Streams resets its producer after a failed commit: the new one's InitProducerId
        finishes what the old one left open (aborts it, or rolls a decided one forward)."""
        broken = {k: p for k, p in producers.items() if p.state is not ProducerState.READY}
        for producer in broken.values():
            log.warning(
                "[thread %s] producer %s was left %s by the failed batch: initialising it again",
                self.transactional_id,
                producer.transactional_id,
                producer.state.value,
            )
            producer.close()
        return {**producers, **self._init_producers({k: ids[k] for k in broken})}


class ExactlyOnceV2(_Transactional):
    """One transaction of the thread's transactional id per batch."""

    def __init__(self, admin: TopicAdmin, config: StreamsConfig, transactional_id: str) -> None:
        super().__init__(admin, config, transactional_id)
        self.producer: TransactionalProducer | None = None
        self._preparing: Future[TransactionalProducer] | None = None

    def all_producers(self) -> list[TransactionalProducer]:
        """The thread's producer."""
        return [] if self.producer is None else [self.producer]

    def recover(self) -> None:
        """Make the producer usable again after a failed batch (see :meth:`_usable`)."""
        if self.producer is not None:
            self.producer = self._usable({"": self.producer}, {"": self.transactional_id})[""]

    def prepare(self) -> None:
        """Initialise the thread's producer in the background (InitProducerId: an older
        instance of it is fenced, what it left open finished): a few round trips to the
        store, which need not wait for the group's assignment."""
        if self.producer is None and self._preparing is None:
            self._preparing = shared_pool("producer-init", 4).submit(self._new_producer)

    def _new_producer(self) -> TransactionalProducer:
        return self._init_producers({"": self.transactional_id})[""]

    def start(self, tasks: list[str]) -> Positions:
        """Initialise the thread's producer (fencing an older instance of it), unless
        :meth:`prepare` did; return the stable positions."""
        preparing, self._preparing = self._preparing, None
        self.producer = preparing.result() if preparing is not None else self._new_producer()
        return self._fetch_stable(tasks)

    def commit_batch(self, batch: Batch) -> BatchCommit:
        """Begin, run the tasks, add their files and positions, commit."""
        producer = self.producer
        assert producer is not None, "start() first"
        producer.begin_transaction()
        txn: tuple[str, int] | None = None
        undecided = _Undecided(batch)
        try:  # registering the participants is a write of the store's: it may fail too
            with abort_when(undecided.fenced):
                staging = producer.staging_dir_for(batch.written)
                txn = (self.transactional_id, producer.transaction_sequence)
                results = task_results(batch.run_tasks(staging, txn, {}))
                if not results.empty():
                    join_extracted(producer, results.files, batch.written, staging)
                    for topic, staged in results.files.items():
                        producer.add_staged_files(topic, staged)
                    if results.positions:
                        producer.send_offsets_to_transaction(results.positions, self.group)
        except ProducerFencedError:
            raise
        except BaseException as exc:
            if isinstance(exc, GenerationFencedError):  # the fencing is what must show
                abort_fenced(producer)  # (else the next producer's init aborts it)
            else:
                producer.abort_transaction()
            if txn is not None:
                self.outcomes[txn] = False
            raise
        if results.empty():
            producer.abort_transaction()
            self.outcomes[txn] = False
            return BatchCommit({}, False)
        try:
            with abort_when(undecided.fenced):
                producer.commit_transaction(before_prepare=undecided.validate)
        except GenerationFencedError:
            abort_fenced(producer)  # releases the offsets a new owner waits for
            self.outcomes[txn] = False
            raise
        except BaseException:
            if abort_undecided(producer):  # failed before PrepareCommit: nothing decided
                self.outcomes[txn] = False
            raise
        self._remember(txn, committed=True)
        log.debug(
            "[thread %s] batch=%d txn=%d committed files=%d positions=%d",
            self.transactional_id,
            batch.batch_id,
            txn[1],
            sum(len(v) for v in results.files.values()),
            len(results.positions),
        )
        return BatchCommit(results.positions, True)

    def close(self) -> None:
        """Release the producer (an open transaction is aborted), also one still being
        prepared when the thread's start failed."""
        preparing, self._preparing = self._preparing, None
        if preparing is not None:
            with contextlib.suppress(Exception):  # its failure was not this close's
                self.producer = preparing.result()
        if self.producer is not None:
            self.producer.close()


class ExactlyOncePerTask(_Transactional):
    """One transaction per task, of the task's own transactional id (deprecated)."""

    def __init__(self, admin: TopicAdmin, config: StreamsConfig, transactional_id: str) -> None:
        super().__init__(admin, config, transactional_id)
        self.producers: dict[str, TransactionalProducer] = {}

    def start(self, tasks: list[str]) -> Positions:
        """Initialise a producer per task (fencing older instances of each)."""
        self.producers = self._init_producers({t: f"{self.group}-{t}" for t in tasks})
        return self._fetch_stable(tasks)

    def all_producers(self) -> list[TransactionalProducer]:
        """A producer per task."""
        return list(self.producers.values())

    def recover(self) -> None:
        """Make every task's producer usable again after a failed batch."""
        self.producers = self._usable(
            self.producers, {t: f"{self.group}-{t}" for t in self.producers}
        )

    def assigned(self, tasks: list[str]) -> Positions:
        """Close the producers of revoked tasks, initialise those of new ones."""
        mine = set(tasks)
        for task in sorted(set(self.producers) - mine):
            self.producers.pop(task).close()
        new = {t: f"{self.group}-{t}" for t in sorted(mine - set(self.producers))}
        self.producers.update(self._init_producers(new))
        return self._fetch_stable(tasks)

    def commit_batch(self, batch: Batch) -> BatchCommit:
        """Begin every task's transaction, run the tasks, commit each task's."""
        txns: dict[str, tuple[str, int, str]] = {}
        try:
            for task, producer in self.producers.items():
                producer.begin_transaction()
                staging = producer.staging_dir_for(batch.written)
                txns[task] = (producer.transactional_id, producer.transaction_sequence, staging)
            by_task = task_results_by_task(batch.run_tasks("", None, txns))
        except ProducerFencedError:
            raise
        except BaseException:
            for task, producer in self.producers.items():
                if abort_undecided(producer) and task in txns:
                    self._remember((txns[task][0], txns[task][1]), committed=False)
            raise
        committed: Positions = {}
        any_committed = False
        for task, producer in sorted(self.producers.items()):
            txn = (txns[task][0], txns[task][1])
            results = by_task.get(task, TaskResults())
            if results.empty():
                producer.abort_transaction()
                self._remember(txn, committed=False)
                continue
            join_extracted(producer, results.files, batch.written, txns[task][2])
            self._commit_task(producer, results, batch)
            self._remember(txn, committed=True)
            committed.update(results.positions)
            any_committed = True
        log.debug(
            "[thread %s] batch=%d committed %d tasks",
            self.transactional_id,
            batch.batch_id,
            len(by_task),
        )
        return BatchCommit(committed, any_committed)

    def _commit_task(
        self, producer: TransactionalProducer, results: TaskResults, batch: Batch
    ) -> None:
        for topic, staged in results.files.items():
            producer.add_staged_files(topic, staged)
        if results.positions:
            producer.send_offsets_to_transaction(results.positions, self.group)
        try:
            producer.commit_transaction(before_prepare=batch.validate_generation)
        except GenerationFencedError:
            for other in self.producers.values():
                if other.state in (ProducerState.IN_TRANSACTION, ProducerState.ABORTABLE_ERROR):
                    other.abort_transaction()
            raise
        except BaseException:
            for other in self.producers.values():
                abort_undecided(other)
            raise

    def close(self) -> None:
        """Release every task's producer."""
        for producer in self.producers.values():
            producer.close()


def join_extracted(
    producer: TransactionalProducer,
    files: Mapping[str, list[StagedFile]],
    written: list[str],
    staging: str,
) -> None:
    """Add the topics a topic-name extractor wrote to the transaction (AddPartitionsToTxn
    once their records exist; their files are in the transaction's directory already).
    Before that a crash leaves them as orphans, which the coordinator's sweep deletes.

    Raises:
        StreamsError: the transaction's staging directory changed meanwhile (a bug).
    """
    extra = sorted(set(files) - set(written))
    if extra and producer.staging_dir_for(extra) != staging:
        raise StreamsError(
            f"[txn {producer.transactional_id}] the staging directory changed while the "
            f"tasks ran; {extra} cannot join the transaction (this is a bug)"
        )


def abort_undecided(producer: TransactionalProducer) -> bool:
    """Abort ``producer``'s transaction if an error left it abort-only (it failed before
    its PrepareCommit: nothing of it is decided), so that the thread's next batch can
    begin one; return whether it did. An abort that fails is logged: the error that
    stopped the commit is the one raised."""
    if producer.state not in (ProducerState.IN_TRANSACTION, ProducerState.ABORTABLE_ERROR):
        return False
    try:
        producer.abort_transaction()
    except StreamsError as exc:
        log.warning("[txn %s] could not abort: %s", producer.transactional_id, exc)
        return False
    return True


def abort_fenced(producer: TransactionalProducer) -> None:
    """Abort the transaction of a batch whose member is out of the group. An abort the
    store refuses is logged, not raised: the fencing is what the thread must see (its
    next producer's initialisation aborts the transaction); a producer fenced by a newer
    instance is, though: that is the stronger news (a zombie)."""
    try:
        producer.abort_transaction()
    except ProducerFencedError:
        raise
    except StreamsError as exc:
        log.warning("[txn %s] could not abort: %s", producer.transactional_id, exc)


class _Undecided:
    """A batch's transaction until its PrepareCommit: the storage retries of its commit
    stop as soon as the batch is cancelled (its member is out of the group: it can never
    commit; a paused instance's batch retried its writes for 16 s under a storage fault
    before the generation check refused it). From the PrepareCommit on nothing stops them:
    the outcome is being decided."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.deciding = False

    def fenced(self) -> BaseException | None:
        reason = None if self.deciding else self.batch.cancelled()
        if reason is None:
            return None
        return GenerationFencedError(f"batch {self.batch.batch_id} cannot commit: {reason}")

    def validate(self) -> None:
        """The generation check before the PrepareCommit; from here on, no stop."""
        self.deciding = True
        self.batch.validate_generation()
