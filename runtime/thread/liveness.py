"""When a stream thread's next batch runs and how much it reads: its liveness.

Kafka's stream thread polls continuously and commits every ``commit.interval.ms``; a poll
is not a commit. Here a batch is a poll (and, under exactly-once, a transaction), so:

* the thread's query is paced by its commit strategy
  (:attr:`~runtime.thread.commit.CommitStrategy.trigger_interval_ms`): back to back under
  at_least_once, at most every ``commit.interval.ms`` under exactly-once;
* a batch reads what the thread measured it can process well inside its deadline
  (:mod:`runtime.thread.batch_size`), at most ``max.poll.records`` per partition;
* the trigger's alarm runs a batch when a wall-clock punctuator or a commit of waiting
  positions falls due, even when no record arrives;
* a watchdog (:mod:`runtime.thread.watchdog`) wakes a thread that sits with input waiting.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable

from common.config import StreamsConfig
from runtime.spark.trigger import BatchTrigger
from runtime.thread.batch_size import BatchSizer
from runtime.thread.commit import CommitStrategy
from runtime.thread.placement import TaskPlacement
from runtime.thread.progress import BatchReporter
from runtime.thread.read_plan import BatchReads, Owns, Positions, ReadPlanner
from runtime.thread.watchdog import Overdue, StallWatch

#: The counter of stalls the watchdog found.
STALLED_TOTAL = "stalled-total"


class ThreadLiveness:
    """One stream thread's pacing, batch sizes, alarms and watchdog (see the module).

    Args:
        name: the thread's name (its transactional id).
        config: the application configuration.
        commit: the thread's commit strategy (its pacing, deadline and due commits).
        planner: the thread's read planner (its lag, for the watchdog).
        reporter: where a stall is told (metrics, the instance record).
        counters: the thread's runtime counters (``stalled-total`` is one).
    """

    def __init__(  # noqa: PLR0917 - the thread's parts it paces
        self,
        name: str,
        config: StreamsConfig,
        commit: CommitStrategy,
        planner: ReadPlanner,
        reporter: BatchReporter,
        counters: dict[str, int],
    ) -> None:
        self.name = name
        self.config = config
        self.commit = commit
        self.planner = planner
        self.reporter = reporter
        self.counters = counters
        counters.setdefault(STALLED_TOTAL, 0)  # a metric from the start, 0 until a stall
        self.sizer = BatchSizer(
            config.max_poll_records,
            commit.batch_deadline_ms,
            name=name,
            memory=os.path.join(
                config.state_dir, config.application_id, f"batch-sizes-{name}.json"
            ),
        )
        #: The cap of the batch planned last (records per partition).
        self.cap = config.max_poll_records
        #: The topics the batch was planned to read: the kind its cap is of (it may read
        #: fewer: a thread owning no partition of a source reads none of it). Measured as
        #: the topics read, a thread of the counts' tasks alone took caps of one kind and
        #: sized another: 80 records a batch through a drain of 139,000.
        self.kind: frozenset[str] = frozenset()
        #: When the earliest wall-clock punctuator of the thread's tasks is due (epoch ms).
        self.next_punctuation: int | None = None
        self.trigger: BatchTrigger | None = None
        self.watch: StallWatch | None = None

    @property
    def trigger_interval_ms(self) -> int:
        """The least time between two batch starts of the thread's query."""
        return self.commit.trigger_interval_ms

    @property
    def stall_timeout_ms(self) -> int:
        """How long without a batch, with input waiting, is a stall (``stall.timeout.ms``,
        by default ten times the larger of ``poll.ms`` and the trigger interval)."""
        configured = self.config.stall_timeout_ms
        if configured > 0:
            return configured
        return 10 * max(self.config.poll_ms, self.trigger_interval_ms)

    def start(
        self, trigger: BatchTrigger | None, owns: Owns, positions: Callable[[], Positions]
    ) -> None:
        """Start watching the thread (nothing to watch without a trigger)."""
        self.trigger = trigger
        if trigger is None or self.watch is not None:
            return
        self.watch = StallWatch(
            self.name,
            self.stall_timeout_ms,
            overdue=functools.partial(self._overdue, owns, positions),
            wake=functools.partial(trigger.wake, "watchdog"),
            on_stall=self._stalled,
        )
        self.watch.start()

    def plan_cap(self, topics: Iterable[str], *, opening: bool = False) -> int:
        """The records per partition the batch about to read ``topics`` may read
        (``opening``: it opens tasks)."""
        self.kind = frozenset(topics)
        self.cap = self.sizer.cap(self.kind, opening=opening)
        return self.cap

    def batch_started(self) -> None:
        """A batch starts."""
        if self.watch is not None:
            self.watch.batch_started()

    def batch_ended(self, *, worked: bool) -> None:
        """A batch ended (``worked``: it read records or ran its tasks)."""
        if self.watch is not None:
            self.watch.batch_ended(worked=worked)

    def measured(self, reads: BatchReads, seconds: float, placement: TaskPlacement) -> None:
        """A batch that read ``reads`` took ``seconds`` (and opened ``placement.opened``
        tasks, or waited for tasks that restore): size the next one."""
        opened = placement.opened > 0 or bool(placement.restoring)
        self.sizer.measured(self.kind, self.cap, reads.fullest, seconds, opened=opened)

    def schedule_alarm(self, *, restoring: bool = False) -> None:
        """Have the trigger run a batch when the next wall-clock punctuator or the next
        commit of waiting positions is due, even when no record arrives; with tasks
        ``restoring``, at the latest one ``poll.ms`` from now (Kafka's loop polls as its
        state updater restores: a restored task runs at the next batch)."""
        if self.trigger is None:
            return
        due = self.next_due()
        if restoring:
            soon = time.time_ns() // 1_000_000 + self.config.poll_ms
            due = soon if due is None else min(due, soon)
        self.trigger.wake_at(due)

    def next_due(self) -> int | None:
        """When (epoch ms) the tasks' next wall-clock punctuator or the next commit is due."""
        dues = (self.next_punctuation, self.commit.commit_due_ms())
        return min((d for d in dues if d is not None), default=None)

    def close(self) -> None:
        """Stop watching."""
        if self.watch is not None:
            self.watch.close()

    def _overdue(self, owns: Owns, positions: Callable[[], Positions], timeout_ms: int) -> Overdue:
        """What the thread should be doing now, by ``timeout_ms`` or more (the watchdog
        asks between batches): records unread, a punctuator or commit overdue."""
        records = 0
        if self.trigger is not None:
            records = self.planner.lag(self.trigger.latest_ends(), owns, positions())
        due = self.next_due()
        late = time.time_ns() // 1_000_000 - due if due is not None else 0
        return Overdue(records, late if late >= timeout_ms else 0)

    def _stalled(self, stalled: bool) -> None:
        """The watchdog found the thread stalled (True), or running again (False)."""
        if stalled:
            self.counters[STALLED_TOTAL] = self.counters.get(STALLED_TOTAL, 0) + 1
        self.reporter.stalled(stalled, self.counters)
