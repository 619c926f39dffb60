"""A producer's CompleteCommit, written off the caller's path.

The CompleteCommit record is pure bookkeeping (a restart re-derives it from PrepareCommit),
so, as Kafka's coordinator writes its Complete record after answering EndTxn, the producer
appends it on a background thread and goes on; its next call that touches the log waits
for it first (:meth:`BackgroundCompletion.wait`).

A producer paused past its PrepareCommit (a stopped process, a long pause) may find the
transaction completed by another process meanwhile: an instance that took its tasks rolls
a decided transaction forward before it reads the group's positions, as Kafka's
coordinator writes the markers itself. That CompleteCommit is the producer's own (same
producer id, epoch and sequence) and is adopted; any other record past its PrepareCommit
means it was fenced.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

from common.errors import ProducerFencedError
from runtime.txn import faults
from runtime.txn.coordinator import Snapshot, TransactionCoordinator
from runtime.txn.state import TransactionState

log = logging.getLogger(__name__)


class BackgroundCompletion:
    """Appends CompleteCommit over a producer's PrepareCommit on one background thread.

    Args:
        coordinator: the producer's transaction coordinator.
        transactional_id: the producer's transactional id.
    """

    def __init__(self, coordinator: TransactionCoordinator, transactional_id: str) -> None:
        self.coordinator = coordinator
        self.transactional_id = transactional_id
        self._pending: Future[Snapshot] | None = None
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, prepared: Snapshot) -> None:
        """Start appending CompleteCommit over ``prepared``."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"txn-complete-{self.transactional_id}"
            )
        self._pending = self._executor.submit(self._complete, prepared)

    def wait(self) -> Snapshot | None:
        """Wait for the CompleteCommit started last; return its snapshot (None: none was
        pending).

        Raises:
            ProducerFencedError: the log moved past the PrepareCommit to something other
                than its CompleteCommit (a newer epoch took over).
        """
        pending, self._pending = self._pending, None
        return None if pending is None else pending.result()

    def shutdown(self) -> None:
        """Stop the background thread (after the pending append)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _complete(self, prepared: Snapshot) -> Snapshot:
        faults.reached("before_complete")
        try:
            done = self.coordinator.transit(
                prepared, prepared.meta.complete_commit(now_ms=self.coordinator.clock())
            )
        except ProducerFencedError:
            done = self._completed_elsewhere(prepared)
        faults.reached("after_complete")
        return done

    def _completed_elsewhere(self, prepared: Snapshot) -> Snapshot:
        """The log's newest record when it is ``prepared``'s CompleteCommit.

        Raises:
            ProducerFencedError: it is anything else.
        """
        current = self.coordinator.load(self.transactional_id)
        mine = prepared.meta
        if (
            current is not None
            and current.meta.state is TransactionState.COMPLETE_COMMIT
            and current.meta.producer_id == mine.producer_id
            and current.meta.producer_epoch == mine.producer_epoch
            and current.meta.txn_sequence == mine.txn_sequence
        ):
            log.info(
                "[txn %s] transaction %d was completed by another process while this "
                "producer was paused",
                self.transactional_id,
                mine.txn_sequence,
            )
            return current
        raise ProducerFencedError(
            f"[txn {self.transactional_id}] producer {mine.producer_id} epoch "
            f"{mine.producer_epoch} was fenced while completing transaction "
            f"{mine.txn_sequence}: the log is now at epoch "
            f"{current.meta.producer_epoch if current else '?'} "
            f"({current.meta.state.state_name if current else 'gone'})"
        )
