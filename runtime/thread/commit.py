"""The commit pipeline of a stream thread: one strategy per processing guarantee.

What differs between the guarantees is chosen once, when the thread is built
(:func:`runtime.thread.guarantees.commit_strategy`), as Kafka chooses its
``StreamsProducer``'s mode once; the thread keeps its loop (poll the group, plan the
reads, run the job, commit) and hands each batch to the strategy, which runs the batch's
job through :class:`Batch` and commits:

* ``exactly_once_v2`` (:mod:`runtime.thread.commit_eos`): one transaction of the thread's
  id per batch. PrepareCommit by CAS is the fencing point;
* ``exactly_once`` (alpha, same module): one transaction per task, of the task's own id;
* ``at_least_once`` (:mod:`runtime.thread.commit_alos`): no transaction: each batch's
  outputs are committed as it ends, the consumed positions every ``commit.interval.ms``
  (a crash in between gives duplicates, never a loss). A poll is not a commit.

The strategy also paces the thread (:attr:`CommitStrategy.trigger_interval_ms`): under the
exactly-once guarantees a batch is a transaction, so a batch starts at most every
``commit.interval.ms``; under at_least_once batches run back to back.

Every strategy tells the tasks how earlier transactions ended (:attr:`outcomes`), so a
task host applies or drops the writes it prepared for them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from common.config import StreamsConfig
from runtime.storage.topics import TopicAdmin
from runtime.tasks.contract import Positions, ResultRow, Txn
from runtime.txn.offsets import OffsetsStore
from runtime.txn.producer import TransactionalProducer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchCommit:
    """What committing a batch did.

    Attributes:
        positions: the next position of each partition the batch consumed (the thread
            reads on from there, committed or not).
        committed: whether positions became durable with this batch (a transaction, or
            at_least_once's commit when ``commit.interval.ms`` had passed).
    """

    positions: Positions
    committed: bool


@dataclass(frozen=True)
class Batch:
    """One batch as a strategy sees it.

    Attributes:
        batch_id: Spark's batch id.
        written: the topics the batch's transactions may write.
        run_tasks: runs the batch's job with ``(staging dir, transaction, per-task
            transactions)`` and returns its result rows.
        validate_generation: raises GenerationFencedError when the thread's group
            generation is stale (KIP-447: checked before PrepareCommit).
        cancelled: why the batch can never commit (the heartbeat found the member out of
            the group), or None: until the PrepareCommit, the commit's storage retries
            stop on it.
    """

    batch_id: int
    written: list[str]
    run_tasks: Callable[[str, Txn | None, Mapping[str, tuple[str, int, str]]], list[ResultRow]]
    validate_generation: Callable[[], None]
    cancelled: Callable[[], BaseException | None] = lambda: None


class CommitStrategy:
    """The guarantee-specific part of a stream thread.

    Args:
        admin: the storage root's topic admin.
        config: the application configuration.
        transactional_id: the thread's transactional id.
    """

    def __init__(self, admin: TopicAdmin, config: StreamsConfig, transactional_id: str) -> None:
        self.admin = admin
        self.config = config
        #: Source topic -> the sub-topology reading it (None: not known, every partition
        #: of the group is the thread's concern).
        self.sources: Mapping[str, int] | None = None
        self.group = config.application_id
        self.transactional_id = transactional_id
        self.offsets = OffsetsStore(admin)
        #: How the transactions the tasks may hold prepared writes of ended.
        self.outcomes: dict[Txn, bool] = {}

    def task_partitions(self, tasks: list[str]) -> set[tuple[str, int]] | None:
        """The source partitions of ``tasks`` (``<sub-topology>_<partition>``); None when
        the sources are not known."""
        if self.sources is None:
            return None
        out = set()
        for task in tasks:
            sub, _, partition = task.partition("_")
            if not (sub.isdigit() and partition.isdigit()):
                return None
            out |= {(t, int(partition)) for t, s in self.sources.items() if s == int(sub)}
        return out

    def prepare(self) -> None:
        """Begin what needs no tasks (fencing older instances) in the background, while
        the thread joins its group; :meth:`start` waits for it."""

    def start(self, tasks: list[str]) -> Positions:
        """Initialise (fencing older instances); return the committed positions."""
        return self.offsets.fetch(self.group)

    def assigned(self, tasks: list[str]) -> Positions:
        """Follow a new assignment of ``tasks``; return the committed positions."""
        return self.offsets.fetch(self.group)

    @property
    def trigger_interval_ms(self) -> int:
        """The least time between the starts of two batches of the thread's query: under
        the exactly-once guarantees, where a batch is a transaction, ``commit.interval.ms``
        (a backlog's batches still run back to back once a batch takes longer)."""
        return self.config.commit_interval_ms

    @property
    def batch_deadline_ms(self) -> int:
        """The longest a batch may run before the thread loses its tasks: its member's
        ``max.poll.interval.ms`` and, when a batch is a transaction,
        ``transaction.timeout.ms`` (the coordinator aborts an older transaction)."""
        return min(self.config.max_poll_interval_ms, self.config.transaction_timeout_ms)

    def commit_batch(self, batch: Batch) -> BatchCommit:
        """Run ``batch`` and commit it."""
        raise NotImplementedError

    def commit_due_ms(self) -> int | None:
        """When (epoch ms) positions consumed but not yet committed fall due (None: none
        are waiting)."""
        return None

    def commit_pending(self, validate_generation: Callable[[], None], *, force: bool) -> bool:
        """Commit the positions consumed but not yet committed, when they are due (or
        ``force``: before a rejoin, at close); return whether a commit was made. Never
        raises: a stale generation drops the positions (their records are processed again
        by the tasks' next owner, at least once), another failure keeps them waiting.
        Under the exactly-once guarantees every batch commits its own: nothing waits."""
        return False

    def all_producers(self) -> list[TransactionalProducer]:
        """The strategy's transactional producers (none under at_least_once)."""
        return []

    def recover(self) -> None:
        """Make the producers usable again after a batch whose failure the thread
        absorbed (a storage outage waited out): none under at_least_once."""

    def close(self) -> None:
        """Abort what is open, release the producers."""

    def _remember(self, txn: Txn, *, committed: bool) -> None:
        tid, seq = txn
        self.outcomes = {k: v for k, v in self.outcomes.items() if k[0] != tid or k[1] >= seq - 8}
        self.outcomes[txn] = committed


def now_ms() -> int:
    """The wall clock in epoch ms."""
    return time.time_ns() // 1_000_000
