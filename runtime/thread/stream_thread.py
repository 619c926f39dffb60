"""A stream thread: the driver side of every micro-batch (Kafka's ``StreamThread``), one
Spark ``foreachBatch`` call per batch. It keeps only its loop:

1. poll the group (follow a rebalance, committing waiting positions first: the commit
   strategy takes the new positions);
2. plan the batch's reads from the thread's positions (:mod:`runtime.thread.read_plan`):
   each source partition of the thread's tasks, at most what the thread measured it can
   process inside its deadline (:mod:`runtime.thread.liveness`). Spark's source only
   triggers the batch, so a batch Spark replays after a crash never counts twice, and
   records a task held back are read again;
3. run the job (:mod:`runtime.thread.batch_job`): every task of the thread, on its long-lived
   task host (:mod:`runtime.tasks`), with or without records;
4. commit, through the strategy of the processing guarantee chosen once
   (:mod:`runtime.thread.commit`): one transaction per batch under ``exactly_once_v2``; the
   outputs of each batch and the positions every ``commit.interval.ms`` under
   at_least_once (a poll is not a commit).

Its query's batches start when its trigger (:mod:`runtime.spark.trigger`) sees new
records, a batch leaves records behind, a punctuator or a commit falls due or the group
rebalances; a watchdog wakes a thread that sits with input waiting. Under
``exactly_once`` (alpha) or with ``num.stream.threads`` > 1 a repartition cannot be a
shuffle inside the batch (its upstream and downstream tasks commit separately): its
records go through the repartition topic, as in Kafka.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame

from common.config import StreamsConfig
from common.errors import GenerationFencedError, ProducerFencedError, TaskMigratedError
from runtime.metrics import ThreadMetrics
from runtime.spark import trigger_faults
from runtime.spark.source_topics import PatternFollower
from runtime.spark.trigger import BatchTrigger
from runtime.storage.reader import TopicReader
from runtime.storage.slices import TopicSlices
from runtime.storage.topics import TopicAdmin
from runtime.tasks.collector import OutputTopic
from runtime.tasks.contract import FILE, BatchPlan, thread_plan
from runtime.tasks.global_state import plan_globals
from runtime.tasks.plan_files import remove_plans
from runtime.thread.batch_job import run_batch_job
from runtime.thread.batch_levels import BatchLevels, WindowCombining, choose_levels
from runtime.thread.commit import Batch, BatchCommit, CommitStrategy
from runtime.thread.disk_full import DiskFullBackoff
from runtime.thread.guarantees import commit_strategy
from runtime.thread.liveness import ThreadLiveness
from runtime.thread.membership import ThreadMembership
from runtime.thread.output_topics import OutputCatalog, has_topic_extractors
from runtime.thread.placement import TaskPlacement
from runtime.thread.progress import BatchReporter
from runtime.thread.read_plan import BatchReads, ReadPlanner
from runtime.thread.shutdown import check_shutdown, migrated
from topology.graph.topology import Topology

log = logging.getLogger(__name__)

#: How many of the latest batch durations a thread keeps (StreamThread.batch_times).
BATCH_TIMES_KEPT = 10_000


class StreamThread:
    """Runs micro-batches of a topology for one thread's tasks.

    Args:
        topology: the topology.
        config: the application configuration.
        admin: the storage root's topic admin.
        outputs: every topic the tasks may write, with table path and partition count.
        sources: runtime source topic -> the sub-topology reading it.
        transactional_id: the thread's transactional id (exactly_once_v2).
        tasks: sub-topology -> its number of tasks.
        partitions: the partition numbers of this thread's tasks (None: all).
        levels: how sub-topologies are levelled (default: all level 0).
        shutdown_marker: a file under the storage root, and the instance's start time: a
            shutdown request written there since stops the thread before its next batch.
        internal_sources: source topics this application writes itself (repartition
            topics): read from their beginning when no position is committed.
        membership: the thread's member of the application's consumer group; it then
            runs the tasks the group assigns it (``partitions`` is ignored).
        shuffle_levels: levels that shuffle repartitioned records inside the batch, for a
            batch when this thread owns every task and the repartition topics hold nothing
            unread (``levels`` pass them through the topics).
        global_topics: the global stores' topics, planned whole for every batch.
        offset_resets: source topic -> its source's own reset policy.
    """

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        admin: TopicAdmin,
        *,
        outputs: Mapping[str, OutputTopic],
        sources: Mapping[str, int],
        transactional_id: str,
        tasks: Mapping[int, int] | None = None,
        partitions: list[int] | None = None,
        levels: BatchLevels | None = None,
        shutdown_marker: tuple[str, int] | None = None,
        internal_sources: frozenset[str] = frozenset(),
        membership: ThreadMembership | None = None,
        shuffle_levels: BatchLevels | None = None,
        global_topics: tuple[str, ...] = (),
        offset_resets: Mapping[str, str] | None = None,
        metrics: ThreadMetrics | None = None,
    ) -> None:
        self.topology = topology
        self.config = config
        self.admin = admin
        self.outputs = dict(outputs)
        self.catalog = OutputCatalog(admin, self.outputs, dynamic=has_topic_extractors(topology))
        self.sources = dict(sources)
        self.transactional_id = transactional_id
        self.tasks = dict(tasks or {})
        self.partitions = partitions
        self.levels = levels or BatchLevels({}, {}, {})
        self.topic_levels = self.levels
        self.shuffle_levels = shuffle_levels
        #: Spark partitions per level, and on a cluster the executor each task lives on.
        self.placement = TaskPlacement(config)
        self.window_combining = WindowCombining(topology, config)
        self.membership = membership
        if membership is not None:
            membership.on_rebalance = self._rebalance_noted
        #: Told True when the thread's group starts a rebalance, False once it rejoined
        #: (the application's state follows: RUNNING -> REBALANCING -> RUNNING).
        self.on_rebalancing: Callable[[bool], None] | None = None
        self._rebalancing = False  # what it was told last
        #: The tasks this thread runs when it is a group member (None: by ``partitions``).
        self.owned: frozenset[str] | None = None
        self.shutdown_marker = shutdown_marker
        self.internal_sources = internal_sources
        #: Tells Spark when to run the next batch (set by the application before it
        #: starts the thread's query; None: batches run only when called).
        self.trigger: BatchTrigger | None = None
        self.reader = TopicReader(admin)
        self.reads_planner = ReadPlanner(
            self.reader,
            config,
            self.sources,
            internal_sources,
            transactional_id,
            offset_resets=offset_resets,
        )
        self.patterns = PatternFollower(
            topology, config.application_id, admin, self._subscribed, self.tasks
        )
        #: This batch's reads, and the global topics' slices up to their ends.
        self.reads = BatchReads()
        self.global_topics = global_topics
        self.globals: tuple[TopicSlices, ...] = ()
        self._draining = False
        #: Whether the batch wrote records to a topic this thread reads (a cycle).
        self._fed_back = False
        #: The error that stopped the thread (the original, not Spark's wrapper of it).
        self.failure: BaseException | None = None
        self.group = config.application_id
        #: The guarantee-specific part of every commit, chosen once.
        self.commit: CommitStrategy = commit_strategy(admin, config, transactional_id, self.sources)
        self.positions: dict[tuple[str, int], int] = {}
        self.metrics: dict[str, int] = {}
        #: The latest batches' durations in seconds (bounded: a thread runs for months).
        self.batch_times: collections.deque[float] = collections.deque(maxlen=BATCH_TIMES_KEPT)
        self.batches = 0
        #: Its metrics and the listeners of its batches' progress.
        self.reporter = BatchReporter(topology, config.application_id, transactional_id, metrics)
        #: This thread instance, as its tasks' hosts know it: a host holding a task for
        #: another owner (an earlier instance) rebuilds it from committed state.
        self.owner = f"{transactional_id}-{uuid.uuid4().hex[:12]}"
        #: What every batch's tasks share (topology, configuration): hosts receive it once.
        self.thread_plan = thread_plan(topology, config, self.admin.root.uri_of(), self.owner)
        #: Its pacing, batch sizes, alarms and stall watchdog.
        #: Batches a full disk fails are waited out (:mod:`runtime.thread.disk_full`).
        self.disk_full = DiskFullBackoff.of(transactional_id)
        self.liveness = ThreadLiveness(
            transactional_id, config, self.commit, self.reads_planner, self.reporter, self.metrics
        )
        #: Whether the thread's tasks ran once since start (built on their hosts).
        self._tasks_started = False
        #: The running batch's lease on the files it reads, and its commit phase's seconds.
        self._lease = 0
        self._commit_seconds: float | None = None

    @property
    def subscribed(self) -> list[str]:
        """The topics this thread's batches read from storage (not the repartition topics
        shuffled inside the batch, unless their records may be spilled there)."""
        shuffled = self.levels.inline.keys() - self.levels.spill
        return sorted(t for t in self.sources if t not in shuffled)

    @property
    def written(self) -> list[str]:
        """The topics this thread's transactions write."""
        return sorted(t for t in self.outputs if t not in self.levels.inline)

    @property
    def source_topics(self) -> list[str]:
        """Every topic the thread's batches may read (what its source watches)."""
        return sorted(t for t in self.sources if t not in self.topic_levels.inline)

    def task_ids(self) -> list[str]:
        """The ids of this thread's tasks."""
        return [
            f"{sub}_{p}"
            for sub, count in sorted(self.tasks.items())
            for p in range(count)
            if self._owns(f"{sub}_{p}", p)
        ]

    def _owns(self, task: str, partition: int) -> bool:
        if self.owned is not None:
            return task in self.owned
        return self.partitions is None or partition in self.partitions

    def start(self) -> dict[tuple[str, int], int]:
        """Join the group (when a member), fence older instances; return the positions."""
        self.commit.prepare()  # exactly_once_v2's producer fences while the thread joins
        if self.membership is not None:
            self.owned = self.membership.join()
            self.reporter.joined(self.membership)
        self.positions = self.commit.start(self.task_ids())
        self.liveness.start(self.trigger, self._owns, lambda: dict(self.positions))
        return dict(self.positions)

    @property
    def trigger_interval_ms(self) -> int:
        """The least time between two batch starts of the thread's query."""
        return self.liveness.trigger_interval_ms

    def _poll_group(self) -> None:
        """Between batches: follow a rebalance; on new tasks, take the positions again
        (stable: a previous owner's transaction completes first)."""
        if self.membership is None:
            return
        rejoins = self.membership.rebalances
        if self.membership.rejoin_pending:
            self._tell_rebalancing(True)
            # commit before tasks may be revoked (at_least_once's waiting positions)
            self.commit.commit_pending(self._validate_generation, force=True)
        owned = self.membership.poll()
        # (a heartbeat may have said "rebalancing" after the last poll had rejoined already)
        stale = self._rebalancing and not self.membership.rejoin_pending
        if self.membership.rebalances != rejoins or stale:
            self._tell_rebalancing(False)
        self.reporter.joined(self.membership)
        if owned is None:
            return
        self.owned = owned
        self.positions = self.commit.assigned(self.task_ids())
        self.reporter.reassigned(self.task_ids())

    def _rebalance_noted(self) -> None:
        """The group rebalances: say so; run a batch soon (its start rejoins)."""
        self._tell_rebalancing(True)
        self.wake_now("rebalance")

    def _tell_rebalancing(self, rebalancing: bool) -> None:
        self._rebalancing = rebalancing
        if self.on_rebalancing is not None:
            self.on_rebalancing(rebalancing)

    def _validate_generation(self) -> None:
        if self.membership is not None:
            self.membership.validate()

    def run_batch(self, df: DataFrame, batch_id: int) -> None:
        """Process and commit one micro-batch (the ``foreachBatch`` function)."""
        trigger_faults.delay()
        started = time.perf_counter()
        self.liveness.batch_started()
        done: BatchCommit | None = None
        try:
            done = self._run_batch(df, batch_id, started)
        except (ProducerFencedError, GenerationFencedError) as exc:
            self.failure = migrated(exc, self.transactional_id, batch_id)
            raise self.failure from exc
        except BaseException as exc:
            if not self.disk_full.absorbed(exc, batch_id, self.commit.all_producers()):
                self.failure = exc
                raise
            self.commit.recover()  # then the batch's records again, from what is committed
            self.positions = self.commit.assigned(self.task_ids())
            self.wake_now("behind")
        finally:
            self.admin.leases.release(self._lease)
            if self.membership is not None:
                self.membership.batch_finished()
            self.liveness.batch_ended(worked=done is not None)
        if done is not None:
            self.disk_full.committed(batch_id)
            self._batch_done(batch_id, time.perf_counter() - started, done)
        self.liveness.schedule_alarm(restoring=bool(self.placement.restoring_of(self.task_ids())))
        trigger_faults.delay()

    def _run_batch(self, df: DataFrame, batch_id: int, started: float) -> BatchCommit | None:
        """Plan, run and commit the batch; return what it committed (None: the thread had
        nothing to read and nothing due, and ran no task)."""
        self._lease = 0
        check_shutdown(
            self.admin, self.shutdown_marker, self.transactional_id, self.group, batch_id
        )
        self._poll_group()
        planned = self._plan_reads()
        # the files the batch's plan reads are leased until the batch is over
        self._lease = self.admin.leases.hold(self.reads.files(self.globals))
        self.reporter.polled(self.reads, time.perf_counter() - started)
        if not planned and not self._tasks_due():
            self.reporter.lags(self.reads, self.positions)
            # nothing to read or punctuate; at_least_once's waiting positions may be due
            if self.commit.commit_pending(self._validate_generation, force=False):
                self.reporter.committed(time.perf_counter() - started)
            return None
        if self.membership is not None:
            self.membership.batch_started()
        run, member = functools.partial(self._run_job, df), self.membership
        cancelled = (lambda: member.cancelled) if member is not None else (lambda: None)
        batch = Batch(batch_id, self.written, run, self._validate_generation, cancelled)
        self.reporter.committing()
        committing = time.perf_counter()
        done = self.commit.commit_batch(batch)
        self.positions.update(done.positions)
        self._commit_seconds = time.perf_counter() - committing - self.reporter.job_seconds
        self.placement.committed(self.metrics)
        return done

    def _batch_done(self, batch_id: int, seconds: float, done: BatchCommit) -> None:
        """Tell the batch's figures; size the next batch; wake up for what is left."""
        self.batch_times.append(seconds)
        self.batches += 1
        # the commit's time is the store's, not the records': sizing by it, a slow object
        # store would cut batches to a record each
        self.liveness.measured(self.reads, seconds - (self._commit_seconds or 0.0), self.placement)
        self.reporter.batch_done(
            batch_id,
            self.batches,
            self.reads,
            self.positions,
            seconds,
            self._commit_seconds,
            self.commit.all_producers(),
            self.metrics,
            committed=done.committed,
        )
        self._tasks_started = True
        self._maybe_wake()

    def _plan_reads(self) -> bool:
        """Choose the batch's levels and plan its reads from the thread's positions;
        return whether there is anything to read."""
        # read the new topics the trigger's pattern watch found, from now on
        self.patterns.follow(self.sources, self.reads_planner.add_sources)
        topics = self._choose_levels()
        cap = self.liveness.plan_cap(topics, opening=self.placement.opens(self.task_ids()))
        owns = self.placement.running(self._owns)  # nothing read for restoring tasks
        self.reads = self.reads_planner.plan(topics, owns, self.positions, cap=cap)
        # Planned after the reads: a global record committed before a stream record the
        # batch reads is then always seen by that record.
        self.globals = plan_globals(self.reader, self.global_topics)
        kind = "shuffling" if self.levels is self.shuffle_levels else "topic"
        log.debug("[thread %s] %s batch reads %s", self.transactional_id, kind, self.reads.ranges())
        return bool(self.reads.inputs)

    def _choose_levels(self) -> list[str]:
        """Pick this batch's levels (:func:`choose_levels`); return the topics it reads."""
        self._fed_back = False
        owns_all = self.owned is not None and self.task_ids() == [
            f"{sub}_{p}" for sub, count in sorted(self.tasks.items()) for p in range(count)
        ]
        self.levels, draining = choose_levels(
            self.topic_levels,
            self.shuffle_levels,
            owns_every_task=owns_all,
            unread=lambda topics: self.reads_planner.unread(topics, self.positions),
        )
        # draining: the source topics wait, the thread wakes up for them afterwards
        self._draining = bool(draining)
        return draining or self.subscribed

    def _tasks_due(self) -> bool:
        """Whether the tasks must run without records: their first batch, if it has any
        (Kafka builds assigned tasks at once), tasks restoring, or a wall-clock punctuator
        that is due."""
        if not self._tasks_started or self.placement.restoring_of(self.task_ids()):
            return bool(self.task_ids())
        due = self.liveness.next_punctuation
        return due is not None and due <= time.time_ns() // 1_000_000

    def _maybe_wake(self) -> None:
        """After a batch that left records behind (capped by ``max.poll.records`` or held
        back), or wrote records its own tasks read (a cycle of repartition topics, e.g. a
        foreign-key join's), wake the trigger so Spark runs the next batch without new
        data: the cycle drains without waiting for new input."""
        if self.reads.behind(self.positions) or self._draining or self._fed_back:
            self.wake_now("behind")

    def caught_up(self) -> bool:
        """Whether the thread has no rejoin pending, no task restoring, and has read every
        record of its tasks' input partitions that exists now."""
        if self.membership is not None and self.membership.rejoin_pending:
            return False
        if self.placement.restoring_of(self.task_ids()):
            return False
        return self.reads_planner.caught_up(self.source_topics, self._owns, self.positions)

    def wake_now(self, reason: str = "behind") -> None:
        """Make the trigger run a batch soon, even without new records (why: ``reason``)."""
        if self.trigger is not None:
            self.trigger.wake(reason)

    def _subscribed(self) -> list[str]:
        """The topics the trigger watches (with those its pattern sources found)."""
        return self.trigger.subscribed() if self.trigger is not None else []

    def close(self, *, leave: bool = True) -> None:
        """Commit the positions waiting for a commit (at_least_once), abort open
        transactions, release the producers, leave the group (unless ``leave`` is False: a
        thread replaced by one with its ``group.instance.id`` takes its place without a
        rebalance, as a restarted static member does)."""
        self.liveness.close()
        if self.trigger is not None:
            self.trigger.close()
        if not isinstance(self.failure, TaskMigratedError):  # a zombie commits nothing
            self.commit.commit_pending(self._validate_generation, force=True)
        if self.membership is not None:
            self.membership.close(leave=leave)
        self.commit.close()
        remove_plans(self.thread_plan)

    # -- shared ------------------------------------------------------------------------------

    def _plan(
        self,
        staging: str,
        txn: tuple[str, int] | None,
        task_txns: Mapping[str, tuple[str, int, str]] | None = None,
    ) -> BatchPlan:
        interval = self.config.statestore_snapshot_interval
        return BatchPlan(
            thread=self.thread_plan,
            outputs=self.catalog.for_batch(),
            staging_dir=staging,
            sources=self.sources,
            positions=dict(self.positions),
            transaction=txn,
            outcomes=dict(self.commit.outcomes),
            task_transactions=dict(task_txns or {}),
            inline=self.levels.inline,
            levels=self.levels.levels,
            topic_levels=self.levels.topics,
            batch=self.batches,
            level_partitions=self.levels.partitions,
            # every statestore.snapshot.interval batches from the second after a start
            snapshot=interval > 0 and self.batches > 0 and (self.batches - 1) % interval == 0,
            inputs=self.reads.inputs,
            truncated=self.reads.truncated,
            visit=frozenset(self.task_ids()),
            incarnations=self.membership.incarnations if self.membership else {},
            globals=self.globals,
            combine_windows=self.window_combining.topics(self.levels, self.batches),
            **self.placement.for_plan(
                reading=bool(self.reads.inputs), target_s=self.liveness.sizer.target_s
            ),
        )

    def _collect_rows(self, df: DataFrame, plan: BatchPlan) -> list[Any]:
        """Run the batch's levels as one Spark job; return its metadata rows."""
        started = time.perf_counter()
        result = run_batch_job(df, plan, self.levels.depth, self.levels.partitions)
        self.reporter.job_done(result.rows, time.perf_counter() - started)
        for name, value in result.metrics.items():
            self.metrics[name] = self.metrics.get(name, 0) + value
        self.liveness.next_punctuation = result.next_punctuation
        self.window_combining.after(self.batches, result.metrics)
        return result.rows

    def _run_job(
        self,
        df: DataFrame,
        staging: str,
        txn: tuple[str, int] | None,
        task_txns: Mapping[str, tuple[str, int, str]],
    ) -> list[Any]:
        """Run the batch's job for the commit strategy; return its rows."""
        self.placement.prepare(df.sparkSession)
        self.placement.assign(self.task_ids())
        rows = self._collect_rows(df, self._plan(staging, txn, task_txns))
        self.placement.noted(rows)
        self._fed_back |= any(r["kind"] == FILE and r["topic"] in self.sources for r in rows)
        return rows
