"""Where a stream thread's tasks run: Spark's parallelism here, and on a cluster the
executor each task lives on.

On a cluster a task lives on the executor whose host committed its last batch; every
batch plan names it (``BatchPlan.placement``), and a worker of another executor sends the
task's visit there (:mod:`runtime.tasks.client`). What a batch's rows say of where its
tasks ran (:data:`~runtime.tasks.contract.PLACED`) counts only once the batch has
committed: a batch that did not commit leaves the tasks where the last one put them.

The driver places the tasks no executor holds (a start, a rebalance's new tasks; with
them, those of an executor no longer registered) on the executors whose host servers the
warm-up found (:class:`~runtime.spark.executors.HostServers`) and which are registered
still: partition by partition, on the one with fewest tasks of the thread. Before, where
a first batch's Spark tasks happened to run decided, and a core still busy with a slow
executor's warm-up left every task to the other executor for good. Without a warm-up's
answers (it failed, or a local master) a task lives where its first visit ran.

One secret per driver process opens the executors' TCP connections
(:data:`~runtime.spark.executors.HOST_SECRET`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyspark.sql import SparkSession

from common.config import StreamsConfig
from runtime.spark import executors
from runtime.tasks.client import shutdown_remote_hosts
from runtime.tasks.contract import PLACED, RESTORING

log = logging.getLogger(__name__)

#: The metric counting tasks that moved to another executor.
MOVED = "task-moved-total"
#: How long a first batch waits for the warm-up's answers beyond the executors' own wait.
WARM_UP_WAIT_S = 60.0


class TaskPlacement:
    """The Spark side of a thread's batches: how many Spark partitions a level takes, the
    driver's address, and the executor each task lives on.

    Args:
        config: the application's configuration (``batch.spark.partitions``).
    """

    def __init__(self, config: StreamsConfig) -> None:
        self.config = config
        #: ``batch.spark.partitions``, else Spark's parallelism (known at the first batch).
        self.spark_partitions = 0
        #: How many tasks the last committed batch opened where they had not lived (a
        #: start, a rebalance, a lost executor: its time was theirs to open and restore).
        self.opened = 0
        self.driver_host = ""
        #: Whether the session's master is local (one executor).
        self.local = False
        #: task id -> (executor id, its host server's TCP address), as last committed.
        self.placed: dict[str, tuple[str, str]] = {}
        self._noted: dict[str, tuple[str, str]] = {}
        #: The tasks that ran a committed batch of this thread, and those of the batch
        #: being planned.
        self.ran: set[str] = set()
        self._visiting: frozenset[str] = frozenset()
        #: The tasks that restore in the background of their hosts (Kafka's RESTORING
        #: tasks, :mod:`runtime.tasks.opening`), as the last committed batch found them:
        #: the batches read nothing for them, and run until they are restored.
        self.restoring: frozenset[str] = frozenset()
        self._restoring_noted: frozenset[str] = frozenset()
        #: Executor id -> its host server's address, as the warm-up found them.
        self.warmed: dict[str, str] = {}
        #: Where the driver puts the batch's tasks that no executor holds.
        self._assigned: dict[str, tuple[str, str]] = {}
        self._context: Any = None

    def prepare(self, spark: SparkSession) -> None:
        """Learn what the first batch needs of the session (once)."""
        if self.spark_partitions:
            return
        context = spark.sparkContext
        # the first batch places the tasks for good: on the executors expected, not on
        # the first to register
        executors.wait_for_expected(context, f"thread {self.config.application_id}")
        self.spark_partitions = self.config.batch_spark_partitions or executors.slots(context)
        self.driver_host = context.getConf().get("spark.driver.host") or ""
        self.local = executors.is_local(context)  # not local-cluster
        warm_up = None if self.local else executors.warmed(self.config.application_id)
        if warm_up is not None:
            self._context = context
            self.warmed = warm_up.wait(executors.wait_limit_s(context) + WARM_UP_WAIT_S)
            if not self.warmed:
                log.info("no executor warm-up answered: tasks live where they are first run")

    def assign(self, tasks: Iterable[str]) -> None:
        """Place those of the batch's ``tasks`` that no live executor holds on the live
        executors with host servers (when some task has no place yet): partition by
        partition, a partition's tasks on the executor with fewest of the thread's tasks."""
        self._assigned = {}
        tasks = list(tasks)
        if not self.warmed or all(t in self.placed for t in tasks):
            return  # (no JVM call at every batch: a lost executor's tasks are moved by
            # the first visit that cannot reach it, :mod:`runtime.tasks.client`)
        live = set(executors.registered(self._context))
        servers = {e: a for e, a in self.warmed.items() if e in live}
        for executor, address in self.placed.values():  # committed there: live if registered
            if executor in live and address:
                servers[executor] = address
        if not servers:
            return
        homeless = [t for t in sorted(tasks) if self.placed.get(t, ("", ""))[0] not in live]
        if not homeless:
            return
        load = Counter({e: 0 for e in servers})
        load.update(e for t, (e, _) in self.placed.items() if e in servers and t not in homeless)
        by_partition: dict[int, list[str]] = {}
        for task in homeless:  # a partition's tasks together, as a Spark partition has them
            by_partition.setdefault(int(task.partition("_")[2]), []).append(task)
        for _, group in sorted(by_partition.items()):
            executor = min(load, key=lambda e: (load[e], _number(e)))
            load[executor] += len(group)
            self._assigned.update((task, (executor, servers[executor])) for task in group)

    def for_plan(self, *, reading: bool = True, target_s: float = 0.0) -> dict[str, Any]:
        """The batch plan's fields of placement (the batch ``reading`` records of running
        tasks; ``target_s``: the time a batch is sized to take).

        On a local master (one executor: every task lives there whatever Spark task visits
        it), a batch runs in one Spark partition when ``batch.spark.partitions`` is left to
        Spark (0): its levels run one after another in one Spark task, with no shuffle
        between them, and the task's visits still run side by side on their hosts
        (:func:`runtime.tasks.client.run_on_hosts`), which do the work. A stage costs tens
        of milliseconds whatever the batch (a job of two stages around nothing takes
        150 ms here, of one 85 ms): a word count's batches of 200,000 lines took 0.53 s in
        two stages, 0.41 s in one. On a cluster the batches keep their Spark partitions,
        which spread the tasks over the executors.
        """
        fused = self.local and not self.config.batch_spark_partitions
        return {
            "restore_wait_ms": self._restore_wait_ms(reading, target_s),
            "spark_partitions": 1 if fused else self.spark_partitions,
            "placement": {**self.placed, **self._assigned},
            "host_secret": executors.HOST_SECRET,
            "driver_host": self.driver_host,
        }

    def _restore_wait_ms(self, reading: bool, target_s: float) -> int:
        """How long a visit waits for its task's restoration (-1: ``restore.wait.ms``).

        While no task of the thread runs (they all open, after a start or a lost executor)
        or the batch is there only for tasks that restore (it reads nothing), no other
        task could use the batch: its visits wait up to the batch's target time, and a
        restoration done meanwhile runs its task in this batch. A batch told "restoring"
        after two seconds, then the alarm's batches every ``poll.ms`` asking again,
        competed with the restoration for a one-core executor and found it done a batch
        late (a kill's tasks ran again 28 s after the restart, 13 s of it the first
        batch's). With running tasks, a batch waits ``restore.wait.ms`` at most: theirs
        go on."""
        configured = self.config.restore_wait_ms
        if configured <= 0 or not self._visiting:
            return -1
        nothing_runs = not (self._visiting & self.ran)
        if nothing_runs or (not reading and self._visiting & self.restoring):
            return max(configured, int(target_s * 1000))
        return -1

    def opens(self, tasks: Iterable[str]) -> bool:
        """Whether the batch about to visit ``tasks`` opens some of them: tasks the
        thread has not run a batch of yet (after its start, or newly assigned by a
        rebalance), which it builds and restores before any of their records."""
        self._visiting = frozenset(tasks)
        return not self._visiting <= self.ran

    def noted(self, rows: Iterable[Any]) -> None:
        """Note where the batch's tasks ran (from its rows), until it commits."""
        self._noted = {r["task"]: (r["path"], r["topic"]) for r in rows if r["kind"] == PLACED}
        self._restoring_noted = frozenset(r["task"] for r in rows if r["kind"] == RESTORING)

    def committed(self, metrics: dict[str, int]) -> None:
        """The batch committed: its tasks live where it ran them (a task that lived on
        another executor before counts in ``metrics`` as ``task-moved-total``)."""
        self.ran |= self._visiting
        restoring = self._restoring_noted & self._visiting
        if restoring != self.restoring:
            done = sorted(self.restoring - restoring)
            log.info(
                "tasks restoring in the background: %s%s",
                ", ".join(sorted(restoring)) or "none",
                f" (restored: {', '.join(done)})" if done else "",
            )
        self.restoring = restoring
        placed = {t: p for t, p in self._noted.items() if self.placed.get(t) != p}
        moved = sum(1 for t in placed if t in self.placed)
        self.opened = len(placed)
        self.placed.update(self._noted)
        self._noted = {}
        if moved:
            metrics[MOVED] = metrics.get(MOVED, 0) + moved
        if placed:
            log.info("tasks placed on executors: %s", _by_executor(placed))

    def restoring_of(self, tasks: Iterable[str]) -> list[str]:
        """Those of ``tasks`` that restore in the background."""
        return sorted(self.restoring.intersection(tasks))

    def running(self, owns: Callable[[str, int], bool]) -> Callable[[str, int], bool]:
        """``owns`` (task id, partition -> whether the thread runs it) without the tasks
        that restore: a batch reads nothing for those."""
        if not self.restoring:
            return owns
        return lambda task, partition: task not in self.restoring and owns(task, partition)

    def by_executor(self) -> dict[str, list[str]]:
        """Executor id -> the tasks that live there."""
        return _by_executor(self.placed)

    def counts(self) -> Counter[str]:
        """Executor id -> how many tasks live there."""
        return Counter(executor for executor, _ in self.placed.values())

    def servers(self) -> set[str]:
        """The TCP addresses of the host servers of the executors the tasks live on."""
        return {address for _, address in self.placed.values() if address}


def shutdown_executor_hosts(placements: Iterable[TaskPlacement]) -> None:
    """Stop the task hosts on the executors of ``placements`` (the application closes)."""
    servers = set().union(*(p.servers() for p in placements))
    if servers:
        shutdown_remote_hosts(servers, executors.HOST_SECRET)


def _number(executor: str) -> tuple[int, str]:
    return (int(executor), "") if executor.isdigit() else (1 << 30, executor)


def _by_executor(placed: Mapping[str, tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for task, (executor, _) in sorted(placed.items()):
        out.setdefault(executor, []).append(task)
    return out
