"""The at_least_once commit strategy: no transaction; each batch's outputs committed as it
ends, the positions it consumed every ``commit.interval.ms`` (Kafka's commit: a poll is not
a commit). A crash between the two gives duplicates, never a loss.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from common.config import StreamsConfig
from common.errors import GenerationFencedError
from runtime.storage.committer import ParticipantCommitter
from runtime.storage.delta_sink import participant_committer, prepare, sink_table
from runtime.storage.topics import TopicAdmin
from runtime.tasks.contract import Positions, task_results
from runtime.thread.commit import Batch, BatchCommit, CommitStrategy, now_ms

log = logging.getLogger(__name__)

#: Where at_least_once stages its files (under the storage root).
ALOS_STAGING = "alos-staging"
#: How long one topic's commit of a batch's files may retry.
COMMIT_TIMEOUT_MS = 60_000


class AtLeastOnce(CommitStrategy):
    """Each batch's outputs and changelogs committed as it ends; the positions consumed
    committed after them, every ``commit.interval.ms`` (Kafka's commit), when the thread
    rejoins its group and when it closes."""

    def __init__(self, admin: TopicAdmin, config: StreamsConfig, transactional_id: str) -> None:
        super().__init__(admin, config, transactional_id)
        self._committers: dict[str, ParticipantCommitter] = {}
        #: Positions whose batches' outputs are committed, the positions themselves not yet.
        self.pending: Positions = {}
        #: When positions were last committed (epoch ms; the thread's start counts).
        self._last_commit_ms = now_ms()
        #: A batch and a close may commit at once (a stop while a batch runs).
        self._lock = threading.RLock()

    @property
    def trigger_interval_ms(self) -> int:
        """0: batches run back to back while input waits; commits follow the clock."""
        return 0

    @property
    def batch_deadline_ms(self) -> int:
        """``max.poll.interval.ms`` (no transaction times out)."""
        return self.config.max_poll_interval_ms

    def assigned(self, tasks: list[str]) -> Positions:
        """A new assignment: positions still waiting (their commit before the rejoin
        failed) are dropped, so none is ever committed for a partition another member
        may own now; the thread reads on from the committed positions (at least once)."""
        with self._lock:
            self.pending = {}
        return super().assigned(tasks)

    def commit_due_ms(self) -> int | None:
        """``commit.interval.ms`` after the last commit, while positions wait."""
        if not self.pending:
            return None
        return self._last_commit_ms + self.config.commit_interval_ms

    def commit_pending(self, validate_generation: Callable[[], None], *, force: bool) -> bool:
        """Commit the waiting positions when due (or ``force``), after checking the
        member's generation (Kafka's CommitFailed for a stale one)."""
        with self._lock:
            waiting = dict(self.pending)
            try:
                return self._commit_due(validate_generation, force=force)
            except GenerationFencedError as exc:
                log.warning(
                    "[thread %s] positions not committed: %s; their records will be processed "
                    "again by the tasks' next owner",
                    self.transactional_id,
                    exc,
                )
            except Exception as exc:  # storage: they wait for the next commit
                self.pending = {**waiting, **self.pending}
                log.warning(
                    "[thread %s] committing positions failed (%s); trying again at the next commit",
                    self.transactional_id,
                    exc,
                )
            return False

    def _commit_due(self, validate_generation: Callable[[], None], *, force: bool) -> bool:
        due = self.commit_due_ms()
        if due is None or (not force and now_ms() < due):
            return False
        positions, self.pending = self.pending, {}
        validate_generation()
        self.offsets.commit(self.group, positions)
        self._last_commit_ms = now_ms()
        log.debug("[thread %s] committed positions=%d", self.transactional_id, len(positions))
        return True

    def commit_batch(self, batch: Batch) -> BatchCommit:
        """Commit each topic's (and Delta sink's) files; then the positions, when
        ``commit.interval.ms`` has passed since the last commit."""
        staging = f"{ALOS_STAGING}/{uuid.uuid4().hex}"
        results = task_results(batch.run_tasks(staging, None, {}))
        for topic in sorted(results.files):
            committer = self._committers.get(topic)
            if committer is None:
                committer = self._committers[topic] = participant_committer(self.admin, topic)
            files = results.files[topic]
            sink = sink_table(self.admin.root, topic)
            if sink is not None:
                files = prepare(self.admin.root, sink, files)
            committer.commit(files, timeout_ms=COMMIT_TIMEOUT_MS)
        with self._lock:
            # the batch's outputs are durable: its positions may be committed from now on
            self.pending.update(results.positions)
            # a stale generation raises here: the thread stops with TaskMigratedError
            committed = self._commit_due(batch.validate_generation, force=False)
        return BatchCommit(results.positions, committed)
