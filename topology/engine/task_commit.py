"""The task's half of a commit strategy, chosen once from the processing guarantee.

The driver's commit strategy (:mod:`runtime.thread.commit`) decides when a batch's outputs
and positions become durable; a task's stores follow it with one of these:

* :class:`AtLeastOnceTaskCommit`: the stores commit as the task goes. At the end of each
  batch they apply their writes at once (and write the checkpoint file); after a crash a
  store may be ahead of its changelog, and is then rebuilt from it.
* :class:`TransactionalTaskCommit` (``exactly_once``, ``exactly_once_v2``): at the end of a
  batch that did something, the stores persist their writes as a prepared batch of the
  batch's transaction (KIP-892). When the transaction's outcome is known they apply it
  (committed) or the task is rebuilt from committed state (aborted, or no outcome known).

The :class:`~topology.engine.task_creator.ActiveTaskCreator` chooses it with the task, so
the Spark task hosts (:mod:`runtime.tasks.manager`) and the
:class:`~streams.testkit.driver.TopologyTestDriver` commit through this same code. In
every case the task has flushed first (:meth:`StreamTask.prepare_commit`), so the
changelog records of its caches are in the batch's output.
"""

from __future__ import annotations

from typing import Protocol

from common.errors import StreamsError
from statestores.state_manager import ProcessorStateManager

Txn = tuple[str, int]


class CommittingTask(Protocol):
    """What a task commit needs of the task."""

    task_id: str
    state_manager: ProcessorStateManager | None

    def post_commit(self) -> None: ...


class TaskCommit:
    """How a task's stores end a batch and settle it; see the module docstring."""

    #: Whether the stores' writes wait for a transaction's outcome.
    transactional = False

    def end_batch(
        self, task: CommittingTask, transaction: Txn | None, *, worked: bool
    ) -> Txn | None:
        """End the task's batch (the task has flushed): commit the stores, or prepare
        their writes under ``transaction``. Return the transaction the stores hold
        prepared writes of (None: nothing waits for an outcome).

        Args:
            task: the task.
            transaction: the batch's (transactional id, sequence); None under
                at_least_once.
            worked: whether the batch did anything (records, punctuation, pending writes).
        """
        raise NotImplementedError

    def settle(self, task: CommittingTask, prepared: Txn, committed: bool | None) -> bool:
        """Settle the writes the stores hold prepared for ``prepared``, whose outcome is
        ``committed`` (None: unknown); return whether the task carries on (False: close
        it dirty and build it again from committed state)."""
        raise NotImplementedError


class AtLeastOnceTaskCommit(TaskCommit):
    """at_least_once: the stores apply their writes at the end of every batch."""

    def end_batch(
        self, task: CommittingTask, transaction: Txn | None, *, worked: bool
    ) -> Txn | None:
        manager = task.state_manager
        if manager is not None:
            manager.prepare_commit(None)
            manager.commit()
        task.post_commit()
        return None

    def settle(self, task: CommittingTask, prepared: Txn, committed: bool | None) -> bool:
        raise StreamsError(
            f"[task {task.task_id}] prepared writes of transaction {prepared} under "
            "at_least_once, which prepares none; this is a bug"
        )


class TransactionalTaskCommit(TaskCommit):
    """exactly_once and exactly_once_v2: prepare under the batch's transaction, apply on
    its commit."""

    transactional = True

    def end_batch(
        self, task: CommittingTask, transaction: Txn | None, *, worked: bool
    ) -> Txn | None:
        if not worked:
            return None
        if transaction is None:
            raise StreamsError(
                f"[task {task.task_id}] a batch under an exactly-once guarantee came without "
                "a transaction; this is a bug"
            )
        manager = task.state_manager
        if manager is not None:
            manager.prepare_commit(*transaction)
        return transaction

    def settle(self, task: CommittingTask, prepared: Txn, committed: bool | None) -> bool:
        if committed is not True:
            return False
        manager = task.state_manager
        if manager is not None:
            manager.commit()
        task.post_commit()
        return True


def task_commit(eos: bool) -> TaskCommit:
    """The task commit of a guarantee: transactional under exactly-once (``eos``)."""
    return TransactionalTaskCommit() if eos else AtLeastOnceTaskCommit()
