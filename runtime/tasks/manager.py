"""Kafka's ``TaskManager`` inside a task host: tasks built once, reused by every batch.

A task (its :class:`~topology.engine.task.StreamTask`, stores, caches, stream time, punctuation
schedules) is built by the :class:`~topology.engine.task_creator.ActiveTaskCreator` at its first
batch and kept; it is built and restored in the background (:mod:`runtime.tasks.opening`), and
a restoration that outlasts the visit leaves the task restoring: its batches run nothing of it
until it is restored. Each later batch first settles the previous one:

1. the batch comes from another owner (a new instance, another thread), or the task came
   back to its owner after a rebalance took it (its incarnation changed), or on a cluster
   another executor's host committed the task's last batch: close the task dirty and
   build it again from its committed state;
2. the previous batch left a prepared transaction (KIP-892): if the driver's outcomes say
   it committed, apply the stores' prepared writes and go on with the same task;
   otherwise (aborted, retried by Spark, unknown) close the task dirty: its stores drop
   what is not committed, and the task is rebuilt from committed state.

Then the batch runs: snapshot (when the driver asks), the task's records in Kafka's
``PartitionGroup`` order, the wall-clock punctuators that are due, flush, staged files,
and the stores' writes prepared under the batch's transaction (applied at once under
at_least_once). A batch that fails closes the task dirty.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from common.errors import BatchRetryError, StoreCorruptedError, StreamsError
from runtime.storage.committer import StagedFile
from runtime.tasks.bundle import inline_rows
from runtime.tasks.collector import StagingCollector
from runtime.tasks.contract import (
    PREPARED,
    RESTORING,
    STATS,
    WAKE,
    BatchPlan,
    PlanOutcomes,
    Row,
    encode_stats,
    file_row,
    metric_row,
    open_row,
    position_rows,
)
from runtime.tasks.executor import executor_id
from runtime.tasks.global_state import GlobalStores
from runtime.tasks.opening import LiveTask, Opening, build_task, close_task
from runtime.tasks.partition_group import Processed, process_records
from statestores.api import StateStore

log = logging.getLogger(__name__)

#: Task counters reported with each batch's rows (summed by the driver).
TASK_CREATED = "task-created-total"
TASK_CLOSED_DIRTY = "task-closed-dirty-total"
STORE_OPENED = "store-open-total"
STORE_RESTORED = "store-restore-total"
RESTORED_RECORDS = "restore-records-total"


class TaskManager:
    """The tasks of one host process, by task id."""

    def __init__(self) -> None:
        self.live: dict[str, LiveTask] = {}
        #: Tasks being built and restored in the background (:mod:`runtime.tasks.opening`).
        self.opening: dict[str, Opening] = {}
        self.outcomes = PlanOutcomes({})
        #: (owner, batch) -> when (monotonic) its visits stop waiting for restorations.
        self._restore_deadline: tuple[tuple[str, int], float] = (("", -1), 0.0)
        self.counters: dict[str, int] = {}
        self._reported_counters: dict[str, int] = {}

    def run(  # noqa: PLR0917 - one visit of one task
        self,
        plan: BatchPlan,
        subtopology_id: int,
        partition: int,
        records: Mapping[str, pa.Table],
        topics: list[str],
        level: int = 0,
        earlier: list[int] | None = None,
    ) -> list[Row]:
        """Run the visit at ``level`` of task ``<subtopology_id>_<partition>`` in a batch;
        return its result rows (staged files, positions, counters, and records for the next
        level). A task runs its batch at its last level; a visit at an earlier one (a
        foreign-key join's left side, before the responses come back) processes its
        records and hands on what they repartition, and the batch stays open.

        Raises:
            BatchRetryError: the task ran ``earlier`` levels of this batch, but not in this
                host (it was replaced meanwhile): the job must run again.
        """
        task_id = f"{subtopology_id}_{partition}"
        self.outcomes.outcomes = plan.outcomes
        # the global stores of this process, brought up to the batch's planned ends
        global_stores = GlobalStores.for_plan(plan)
        live = self.live.get(task_id)
        continuing = (
            live is not None
            and live.open_batch == (plan.thread.owner, plan.batch)
            and level > max(live.open_levels, default=-1)
            and set(earlier or ()) <= set(live.open_levels)
        )
        if live is not None and live.open_batch is not None and not continuing:
            # a batch visited before did not reach its last level (a retried Spark job)
            log.info("[task %s] an unfinished batch: rebuilding from committed state", task_id)
            self.close(task_id, dirty=True)
            live = None
        if earlier and not continuing:
            raise BatchRetryError(
                f"[task {task_id}] what levels {earlier} of this batch did is gone (its task "
                "host was replaced): the batch's Spark job runs again"
            )
        if not continuing:
            if live is not None and not self._settle(live, plan):
                live = None
            if live is None:
                live = self._opened(plan, subtopology_id, partition, global_stores)
            if live is None:  # restoring in the background: nothing runs in this batch
                return self._restoring(plan, task_id, partition, records)
            own = plan.task_transactions.get(task_id)
            live.collector.begin(own[2] if own is not None else plan.staging_dir, plan.outputs)
        assert live is not None
        # what its sinks may combine in this visit (processing, flushes) and no other
        live.task.combine_windows_in(plan.combine_windows)
        try:
            if level < plan.levels.get(subtopology_id, 0):
                return self._visit(plan, live, partition, records, topics, level)
            own = plan.task_transactions.get(task_id)
            transaction = (own[0], own[1]) if own is not None else plan.transaction
            return self._run_batch(plan, live, partition, records, topics, transaction)
        except BaseException as exc:
            live.collector.discard()
            corrupt = corruption_of(exc)
            self.close(task_id, dirty=True, wipe=corrupt is not None)
            if corrupt is not None:  # Kafka's TaskCorruptedException: wipe, revive, retry
                log.warning(
                    "[task %s] a store is corrupt (%s): its directory was wiped; the batch "
                    "runs again and the task rebuilds its stores from their snapshot and "
                    "changelog",
                    task_id,
                    corrupt,
                )
                raise BatchRetryError(f"[task {task_id}] a store is corrupt: {corrupt}") from exc
            raise

    def _visit(  # noqa: PLR0917 - one visit of one task
        self,
        plan: BatchPlan,
        live: LiveTask,
        partition: int,
        records: Mapping[str, pa.Table],
        topics: list[str],
        level: int,
    ) -> list[Row]:
        """A visit before the task's last level: process, flush the caches (what they
        forward repartitions too), hand on the repartitioned records; commit nothing."""
        if any(t.num_rows for t in records.values()):
            done = self._process(plan, live, partition, records, topics)
            live.open_consumed.update(done.consumed)
            live.open_held_back += done.held_back
        live.task.prepare_commit()
        inline = self._drain(plan, live, level)
        if live.open_batch != (plan.thread.owner, plan.batch):
            live.open_levels = []
        live.open_batch = (plan.thread.owner, plan.batch)
        live.open_levels.append(level)
        task_id = live.task.task_id
        return [open_row(plan, task_id, partition, level), *inline_rows(plan, partition, inline)]

    def _process(
        self,
        plan: BatchPlan,
        live: LiveTask,
        partition: int,
        records: Mapping[str, pa.Table],
        topics: list[str],
    ) -> Processed:
        """Process the records; spill the shuffled ones that wait to their topic."""
        done = process_records(
            live.task,
            partition,
            records,
            topics,
            positions=plan.positions,
            truncated=plan.truncated,
            wait=plan.thread.config.max_task_idle_ms >= 0,
        )
        for topic, rows in done.spilled:
            live.collector.spill(topic, partition, rows)
        return done

    def _drain(
        self, plan: BatchPlan, live: LiveTask, level: int
    ) -> list[tuple[str, int, pa.Table]]:
        """The records the visit repartitioned inside the batch, to later levels only."""
        inline = live.collector.drain(plan.inline)
        late = sorted({topic for topic, _, _ in inline if plan.inline[topic] <= level})
        if late:
            raise StreamsError(
                f"[task {live.task.task_id}] records for {late} were written at level {level} "
                "of the batch, which their readers have passed; this is a bug"
            )
        return inline

    def _run_batch(  # noqa: PLR0917 - one batch of one task
        self,
        plan: BatchPlan,
        live: LiveTask,
        partition: int,
        records: Mapping[str, pa.Table],
        topics: list[str],
        transaction: tuple[str, int] | None,
    ) -> list[Row]:
        task, manager = live.task, live.manager
        if manager is not None and plan.snapshot:
            manager.snapshot()  # the committed state: this batch's writes are not in it
        consumed: dict[tuple[str, int], int] = live.open_consumed
        held_back = live.open_held_back
        live.open_batch, live.open_consumed, live.open_held_back = None, {}, 0
        live.open_levels = []
        if any(t.num_rows for t in records.values()):
            done = self._process(plan, live, partition, records, topics)
            consumed.update(done.consumed)
            held_back += done.held_back
        punctuated = task.punctuate_wall_clock()
        task.prepare_commit()
        inline = self._drain(plan, live, plan.levels.get(task.subtopology.id, 0))
        files = live.collector.flush()
        pending = manager is not None and any(
            e.bottom.pending_changes() for e in manager.stores.values()
        )
        worked = bool(consumed or files or inline or punctuated or pending)
        live.prepared = live.commit.end_batch(task, transaction, worked=worked)
        return self._rows(plan, live, partition, files, consumed, held_back, inline, worked)

    def _rows(  # noqa: PLR0917 - the parts of one result
        self,
        plan: BatchPlan,
        live: LiveTask,
        partition: int,
        files: list[tuple[str, StagedFile]],
        consumed: dict[tuple[str, int], int],
        held_back: int,
        inline: list[tuple[str, int, pa.Table]],
        worked: bool,
    ) -> list[Row]:
        task = live.task
        task_id = task.task_id
        rows = [file_row(task_id, topic, f) for topic, f in files]
        rows.extend(position_rows(task_id, consumed))
        figures, gauges = task.take_stats()
        if figures or gauges:
            rows.append({"kind": STATS, "task": task_id, "value": encode_stats(figures, gauges)})
        if held_back:
            rows.append(metric_row("held-back-records-total", held_back, task_id))
        for name, total in self.counters.items():
            delta = total - self._reported_counters.get(name, 0)
            if delta:
                rows.append(metric_row(name, delta, task_id))
        self._reported_counters = dict(self.counters)
        if worked and live.prepared is not None:
            rows.append({"kind": PREPARED, "task": task_id})
        due = task.next_wall_clock_punctuation()
        if due is not None:
            rows.append({"kind": WAKE, "task": task_id, "timestamp": due})
        rows.extend(inline_rows(plan, partition, inline))
        return rows

    # -- lifecycle ---------------------------------------------------------------------------

    def _settle(self, live: LiveTask, plan: BatchPlan) -> bool:
        """Settle the previous batch of ``live``; return whether the task carries on."""
        task_id = live.task.task_id
        if live.owner != plan.thread.owner:
            log.info(
                "[task %s] new owner %s: rebuilding from committed state",
                task_id,
                plan.thread.owner,
            )
            self.close(task_id, dirty=True)
            return False
        if live.incarnation != plan.incarnations.get(task_id, 0):
            log.info(
                "[task %s] came back to its owner after a rebalance (others may have "
                "committed it meanwhile): rebuilding from committed state",
                task_id,
            )
            self.close(task_id, dirty=True)
            return False
        placed = plan.placement.get(task_id)
        if placed is not None and placed[0] != executor_id():
            log.info(
                "[task %s] executor %s committed its last batch: rebuilding from committed state",
                task_id,
                placed[0],
            )
            self.close(task_id, dirty=True)
            return False
        if live.prepared is None:
            return True
        outcome = plan.outcomes.get(live.prepared)
        if not live.commit.settle(live.task, live.prepared, outcome):
            log.info(
                "[task %s] transaction %s/%s %s: rebuilding from committed state",
                task_id,
                *live.prepared,
                "aborted" if outcome is False else "has no known outcome",
            )
            self.close(task_id, dirty=True)
            return False
        live.prepared = None
        return True

    def _opened(
        self,
        plan: BatchPlan,
        subtopology_id: int,
        partition: int,
        global_stores: Mapping[str, StateStore],
    ) -> LiveTask | None:
        """The task built and restored for this visit, or None while it restores (for
        the rest of the batch too, once a visit of it was told so)."""
        task_id = f"{subtopology_id}_{partition}"
        owner, incarnation = plan.thread.owner, plan.incarnations.get(task_id, 0)
        opening = self.opening.get(task_id)
        if opening is not None and opening.answered != (owner, plan.batch):
            placed = plan.placement.get(task_id)
            elsewhere = placed is not None and placed[0] != executor_id()
            if (opening.owner, opening.incarnation) != (owner, incarnation) or (
                opening.answered is not None and elsewhere
            ):
                log.info("[task %s] left this host while it restored: cancelled", task_id)
                self._cancel(task_id)
                opening = None
        build = functools.partial(
            build_task, plan, subtopology_id, partition, global_stores, self.outcomes
        )
        if opening is None and not plan.thread.topology.subtopology(subtopology_id).stores:
            live = build(lambda: False)  # nothing to restore (Kafka: RUNNING at once)
        else:
            if opening is None:
                opening = self.opening[task_id] = Opening(task_id, owner, incarnation, build)
            if opening.answered == (owner, plan.batch) or not opening.wait(self._wait_s(plan)):
                if opening.answered is None:
                    log.info("[task %s] restoring in the background", task_id)
                opening.answered = (owner, plan.batch)
                return None
            del self.opening[task_id]
            live = opening.result()  # what the build raised, if it failed
        self.live[task_id] = live
        self._count_opened(live)
        return live

    def _wait_s(self, plan: BatchPlan) -> float:
        """How long a visit may still wait for its task's restoration: the batch's wait
        counts from its first visit here (restorations run side by side; one visit after
        another each waiting in full would add up)."""
        key = (plan.thread.owner, plan.batch)
        if self._restore_deadline[0] != key:
            wait_ms = plan.restore_wait_ms
            if wait_ms < 0:
                wait_ms = plan.thread.config.restore_wait_ms
            self._restore_deadline = (key, time.monotonic() + wait_ms / 1000)
        return max(0.0, self._restore_deadline[1] - time.monotonic())

    def _restoring(
        self, plan: BatchPlan, task_id: str, partition: int, records: Mapping[str, pa.Table]
    ) -> list[Row]:
        """A visit of a task that restores: the records shuffled to it inside the batch
        exist nowhere else and are spilled to their topic (the stored ones stay unconsumed);
        the rows say it restores."""
        collector = StagingCollector(plan.thread.root, plan.outputs, plan.staging_dir)
        own = plan.task_transactions.get(task_id)
        collector.begin(own[2] if own is not None else plan.staging_dir, plan.outputs)
        for topic, rows in records.items():
            shuffled = rows.filter(pc.less(rows.column("offset"), 0))
            if shuffled.num_rows:
                collector.spill(topic, partition, shuffled)
        rows_out = [file_row(task_id, topic, f) for topic, f in collector.flush()]
        return [*rows_out, {"kind": RESTORING, "task": task_id}]

    def _cancel(self, task_id: str) -> None:
        opening = self.opening.pop(task_id)
        opening.cancel()
        try:
            live = opening.result()
        except Exception:  # cancelled, or failed: the build closed what it opened
            return
        self._close_live(live, dirty=True)

    def _count_opened(self, live: LiveTask) -> None:
        self._count(TASK_CREATED)
        manager = live.task.state_manager
        if manager is not None:
            self._count(STORE_OPENED, len(manager.stores))
            # an in-memory store is restored at every open; a persistent one when its
            # changelog had a tail to replay
            restored = [
                name
                for name, entry in manager.stores.items()
                if entry.logged and (not entry.bottom.persistent() or manager.restored.get(name))
            ]
            self._count(STORE_RESTORED, len(restored))
            self._count(RESTORED_RECORDS, sum(manager.restored.values()))

    def close(self, task_id: str, *, dirty: bool, wipe: bool = False) -> None:
        """Close ``task_id`` (dirty: drop what is not committed; wipe: delete its local
        state too, before the lock is released) and release its lock."""
        if task_id in self.opening:
            self._cancel(task_id)
        live = self.live.pop(task_id, None)
        if live is not None:
            self._close_live(live, dirty=dirty, wipe=wipe)

    def _close_live(self, live: LiveTask, *, dirty: bool, wipe: bool = False) -> None:
        close_task(live, dirty=dirty, wipe=wipe)
        if dirty:
            self._count(TASK_CLOSED_DIRTY)

    def close_all(self) -> None:
        """Close every task, keeping prepared batches (their outcome settles at reopen)."""
        for task_id in list(self.opening):
            self._cancel(task_id)
        for task_id in list(self.live):
            self.close(task_id, dirty=False)

    def _count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n


def corruption_of(error: BaseException) -> StoreCorruptedError | None:
    """The :class:`StoreCorruptedError` behind ``error`` (itself, or what caused it: a
    processor's error wraps the store's), if any."""
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None or isinstance(seen, StoreCorruptedError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
