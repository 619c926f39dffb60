"""A stream thread: the driver side of every micro-batch (Kafka's ``StreamThread`` plus its
``TaskManager`` commit), one Spark ``foreachBatch`` call per batch.

Under ``exactly_once_v2`` one batch is one transaction of the thread's transactional id
``<application.id>-<processId>-<threadIndex>``:

1. begin; register every topic the tasks may write (sinks, changelogs) so the staged
   files have their transaction's directory;
2. run the tasks in one Spark job (``mapInArrow`` per level of sub-topologies, a shuffle
   between levels for the repartitioned records; see :mod:`runtime.task_runner`); only
   their metadata comes back;
3. add the staged files and the consumed positions to the transaction;
4. commit (PrepareCommit by CAS is the fencing point: a zombie gets ProducerFencedError,
   raised here as TaskMigratedError), then remember the outcome so the stores apply
   their prepared batches when they next open.

What a batch reads is planned here, not by Spark's offsets: each source partition of the
thread's tasks from its committed position on, at most ``max.poll.records`` records. Spark's
source only triggers the batch; a batch Spark replays after a crash, or a Spark checkpoint
that lags the offsets table, therefore never counts twice, and records a task held back
(``max.task.idle.ms``) or a partition it was just given are read again from the committed
position. When a batch leaves records behind, the thread changes the source's wake token so
the next trigger runs a batch even if nothing new arrives.
``at_least_once``: the same without a transaction; outputs and changelogs are committed
first, then the positions (a crash in between gives duplicates, never a loss).

``exactly_once`` (alpha): one transaction per task, of the task's own transactional id
``<application.id>-<task id>``; each task's outputs commit with its own positions. A
repartition then cannot be a shuffle inside the batch (the upstream and downstream tasks
commit separately), so its records go through the repartition topic, as in Kafka; the
same holds with ``num.stream.threads`` > 1, where the downstream task may belong to
another thread.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from runtime.changelog_compaction import compact_changelogs
from runtime.collector import OutputTopic
from runtime.global_state import plan_globals
from runtime.membership import GenerationFencedError, ThreadMembership
from runtime.read_plan import BatchReads, ReadPlanner
from runtime.spark.source import TopicSlices
from runtime.storage.committer import StagedFile, TopicCommitter
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.task_runner import (
    FILE,
    METRIC,
    POSITION,
    RECORD,
    ROW_DDL,
    BatchPlan,
    guarded,
    run_inner_level,
    run_source_level,
    shuffle_keys,
    task_error,
)
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OffsetsStore, UnstableOffsetCommitError
from runtime.txn.producer import ProducerState, TransactionalProducer
from runtime.txn.state import TransactionState
from streams.config import StreamsConfig
from streams.errors import ProducerFencedError, StreamsError
from topology.graph import SinkSpec
from topology.topology import Topology

log = logging.getLogger(__name__)

ALOS_STAGING = "alos-staging"
COMMIT_TIMEOUT_MS = 60_000


class TaskMigratedError(StreamsError):
    """This instance lost its tasks: a newer instance with the same transactional id (or a
    newer group generation) took over, so its commit was refused. Nothing it staged
    becomes visible. Close the zombie; the newer instance carries on."""


@dataclass(frozen=True)
class BatchLevels:
    """How a batch runs its sub-topologies: ``inline`` repartition topic -> the level
    reading it, ``levels`` sub-topology -> level, ``partitions`` level -> its task count,
    ``shuffle`` task count -> the shuffle value of each partition."""

    inline: dict[str, int]
    levels: dict[int, int]
    partitions: dict[int, int]
    shuffle: dict[int, list[int]]

    @property
    def depth(self) -> int:
        """The number of levels."""
        return max(self.levels.values(), default=0) + 1


def plan_levels(
    topology: Topology,
    sources: Mapping[str, int],
    tasks: Mapping[int, int],
    application_id: str,
    *,
    in_batch: bool,
) -> BatchLevels:
    """Level each sub-topology: 0 when it reads no repartition topic, else one more than
    the deepest sub-topology writing one it reads. Without ``in_batch`` every
    sub-topology is level 0 and repartitions go through their topics."""
    inline_topics = set(topology.repartition_topic_names(application_id)) if in_batch else set()
    writers: dict[str, set[int]] = {}
    for sub in topology.task_subtopologies():
        for name in sub.nodes:
            spec = topology.nodes[name]
            if isinstance(spec, SinkSpec) and spec.internal and spec.topic is not None:
                runtime = topology.topic_name(spec.topic, application_id, internal=True)
                if runtime in inline_topics:
                    writers.setdefault(runtime, set()).add(sub.id)
    levels = {sub.id: 0 for sub in topology.task_subtopologies()}
    for _ in range(len(levels) + 1):
        changed = False
        for topic, reader in sources.items():
            if topic in inline_topics:
                want = 1 + max(levels[w] for w in writers.get(topic, {0}) if w in levels)
                if levels.get(reader, 0) < want:
                    levels[reader] = want
                    changed = True
        if not changed:
            break
    inline = {t: levels[r] for t, r in sources.items() if t in inline_topics}
    partitions: dict[int, int] = {}
    for sub_id, level in levels.items():
        partitions[level] = max(partitions.get(level, 0), tasks.get(sub_id, 0))
    shuffle = {n: shuffle_keys(n) for n in set(partitions.values()) if n > 0}
    return BatchLevels(inline, levels, partitions, shuffle)


class ApplicationShutdownError(StreamsError):
    """Another instance of the application asked every instance to stop
    (SHUTDOWN_APPLICATION from its uncaught exception handler)."""


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
            shutdown request written there after that time stops the thread before its
            next batch (another instance asked the whole application to shut down).
        internal_sources: source topics this application writes itself (repartition
            topics): read from their beginning when no position is committed.
        wake: a file under the storage root the source reads its wake token from; the
            thread writes a new token when a batch leaves records behind.
        membership: the thread's member of the application's consumer group; it then
            runs the tasks the group assigns it (``partitions`` is ignored).
        shuffle_levels: levels that shuffle repartitioned records inside the batch, used
            for a batch when this thread owns every task and the repartition topics hold
            nothing unread (``levels`` pass them through the topics).
        global_topics: the topics of the global stores, planned whole for every batch
            (:func:`runtime.global_state.plan_globals`).
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
        wake: str | None = None,
        membership: ThreadMembership | None = None,
        shuffle_levels: BatchLevels | None = None,
        global_topics: tuple[str, ...] = (),
    ) -> None:
        self.topology = topology
        self.config = config
        self.admin = admin
        self.outputs = dict(outputs)
        self.sources = dict(sources)
        self.transactional_id = transactional_id
        self.tasks = dict(tasks or {})
        self.partitions = partitions
        self.levels = levels or BatchLevels({}, {}, {}, {})
        self.topic_levels = self.levels
        self.shuffle_levels = shuffle_levels
        self.membership = membership
        if membership is not None:
            membership.on_rebalance = self.wake_now
        #: The tasks this thread runs when it is a group member (None: by ``partitions``).
        self.owned: frozenset[str] | None = None
        self.shutdown_marker = shutdown_marker
        self.internal_sources = internal_sources
        self.wake = wake
        self.reader = TopicReader(admin)
        self.reads_planner = ReadPlanner(
            self.reader, config, self.sources, internal_sources, transactional_id
        )
        #: This batch's reads, and the global topics' slices up to their ends.
        self.reads = BatchReads()
        self.global_topics = global_topics
        self.globals: tuple[TopicSlices, ...] = ()
        self._draining = False
        #: The error that stopped the thread (the original, not Spark's wrapper of it).
        self.failure: BaseException | None = None
        self.group = config.application_id
        self.guarantee = config.processing_guarantee
        self.eos = self.guarantee != "at_least_once"
        self.alpha = self.guarantee == "exactly_once"
        self.producer: TransactionalProducer | None = None
        self.task_producers: dict[str, TransactionalProducer] = {}
        self._committers: dict[str, TopicCommitter] = {}
        self.offsets = OffsetsStore(admin)
        self.positions: dict[tuple[str, int], int] = {}
        self.outcomes: dict[tuple[str, int], bool] = {}
        self.metrics: dict[str, int] = {}
        self.batch_times: list[float] = []
        self.records_in = 0
        self.batches = 0
        #: Whether this thread compacts the changelogs (one thread of the app does).
        self.compacts = transactional_id.endswith("-1")
        self._compactor: ThreadPoolExecutor | None = None
        self._compaction: Future[Any] | None = None

    @property
    def subscribed(self) -> list[str]:
        """The topics this thread's source reads (not the repartition topics shuffled
        inside the batch)."""
        return sorted(t for t in self.sources if t not in self.levels.inline)

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
        """Join the group (when a member), initialise the producers (fencing any older
        instance); return the positions."""
        if self.membership is not None:
            self.owned = self.membership.join()
        if not self.eos:
            self.positions = self.offsets.fetch(self.group)
            return dict(self.positions)
        ids = (
            {task: f"{self.group}-{task}" for task in self.task_ids()}
            if self.alpha
            else {"": self.transactional_id}
        )
        producers = self._init_producers(ids)
        if self.alpha:
            self.task_producers = producers
        else:
            self.producer = producers[""]
        coordinator = next(iter(producers.values())).coordinator if producers else None
        self.offsets = OffsetsStore(self.admin, coordinator=coordinator)
        self.positions = self._fetch_stable() if coordinator is not None else {}
        return dict(self.positions)

    def _fetch_stable(self) -> dict[tuple[str, int], int]:
        """Fetch the group's positions once no transaction holds offsets of it (Kafka's
        ``require_stable``); a transaction past its timeout (its producer gone) is
        aborted meanwhile, as Kafka's coordinator does."""
        deadline = time.monotonic() + self.config.transaction_max_timeout_ms / 1000
        coordinator = self.offsets.coordinator
        while True:
            try:
                return self.offsets.fetch(self.group, require_stable=True)
            except UnstableOffsetCommitError:
                if time.monotonic() > deadline or coordinator is None:
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

    def _init_producers(self, ids: Mapping[str, str]) -> dict[str, TransactionalProducer]:
        producers: dict[str, TransactionalProducer] = {}
        shared_from = self.producer or next(iter(self.task_producers.values()), None)
        for task, tid in ids.items():
            shared = next(iter(producers.values())).coordinator if producers else None
            if shared is None and shared_from is not None:
                shared = shared_from.coordinator
            producer = TransactionalProducer(
                self.admin,
                tid,
                transaction_timeout_ms=self.config.transaction_timeout_ms,
                transaction_max_timeout_ms=self.config.transaction_max_timeout_ms,
                coordinator=shared,
            )
            producer.init_transactions()
            snap = producer.coordinator.load(tid)
            if snap is not None and snap.meta.txn_sequence > 0:
                done = snap.meta.state is TransactionState.COMPLETE_COMMIT
                self.outcomes[(tid, snap.meta.txn_sequence)] = done
            producers[task] = producer
        return producers

    def _poll_group(self) -> None:
        """Between batches: follow a rebalance; on new tasks, take the positions again
        (stable: a previous owner's transaction completes first)."""
        if self.membership is None:
            return
        owned = self.membership.poll()
        if owned is None:
            return
        self.owned = owned
        if self.alpha:
            mine = set(self.task_ids())
            for task in sorted(set(self.task_producers) - mine):
                self.task_producers.pop(task).close()
            new = {t: f"{self.group}-{t}" for t in sorted(mine - set(self.task_producers))}
            self.task_producers.update(self._init_producers(new))
        self.positions = self._fetch_stable() if self.eos else self.offsets.fetch(self.group)

    def _validate_generation(self) -> None:
        if self.membership is not None:
            self.membership.validate()

    def run_batch(self, df: DataFrame, batch_id: int) -> None:
        """Process and commit one micro-batch (the ``foreachBatch`` function)."""
        started = time.perf_counter()
        try:
            self._check_shutdown(batch_id)
            self._poll_group()
            if not self._plan_reads():
                return  # nothing to read for this thread's tasks (another's partitions)
            if self.membership is not None:
                self.membership.batch_started()
            if self.alpha:
                self._run_per_task(df, batch_id)
            elif self.eos:
                self._run_transactional(df, batch_id)
            else:
                self._run_at_least_once(df, batch_id)
        except ProducerFencedError as exc:
            self.failure = TaskMigratedError(
                f"[thread {self.transactional_id}] batch {batch_id}: fenced by a newer "
                f"instance ({exc}); this instance stops, nothing it staged is visible"
            )
            raise self.failure from exc
        except GenerationFencedError as exc:
            self.failure = TaskMigratedError(
                f"[thread {self.transactional_id}] batch {batch_id}: {exc}; the batch was "
                "aborted and this instance stops (its tasks belong to another member now)"
            )
            raise self.failure from exc
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            if self.membership is not None:
                self.membership.batch_finished()
        self.batch_times.append(time.perf_counter() - started)
        self.batches += 1
        self._maybe_wake()
        self._maybe_compact()

    def _plan_reads(self) -> bool:
        """Choose the batch's levels and plan its reads from the committed positions;
        return whether there is anything to read."""
        self.reads = self.reads_planner.plan(self._choose_levels(), self._owns, self.positions)
        # Planned after the reads: a global record committed before a stream record the
        # batch reads is then always seen by that record.
        self.globals = plan_globals(self.reader, self.global_topics) if self.reads.inputs else ()
        log.debug(
            "[thread %s] %s batch reads %s",
            self.transactional_id,
            "shuffling" if self.levels is self.shuffle_levels else "topic",
            {
                (i.topic, i.partition): (i.start, i.end)
                for r in self.reads.inputs.values()
                for i in r
            },
        )
        return bool(self.reads.inputs)

    def _choose_levels(self) -> list[str]:
        """Pick this batch's levels; return the topics it reads.

        Repartitioned records are shuffled inside the batch only while this thread owns
        every task (one instance, one thread) and the repartition topics hold nothing
        unread; otherwise they go through the topics, as in Kafka. Coming back to one
        owner, a batch first reads only the repartition topics' remaining records (the
        upstream tasks write nothing then), and the next batch shuffles.
        """
        self.levels = self.topic_levels
        self._draining = False
        shuffle = self.shuffle_levels
        if shuffle is None or self.owned is None or self.task_ids() != self._all_tasks():
            return self.subscribed
        unread = self.reads_planner.unread(sorted(shuffle.inline), self.positions)
        if unread:
            self._draining = True  # the source topics wait: wake up for them afterwards
            return unread
        self.levels = shuffle
        return self.subscribed

    def _all_tasks(self) -> list[str]:
        return [f"{sub}_{p}" for sub, count in sorted(self.tasks.items()) for p in range(count)]

    def _maybe_wake(self) -> None:
        """After a batch that left records behind (capped by ``max.poll.records`` or held
        back), write a new wake token so Spark runs the next batch without new data."""
        if self.wake is not None and (self.reads.behind(self.positions) or self._draining):
            self.wake_now()

    def caught_up(self) -> bool:
        """Whether the thread has no rejoin pending and has read every record of its tasks'
        input partitions that exists now."""
        if self.membership is not None and self.membership.rejoin_pending:
            return False
        return self.reads_planner.caught_up(self.source_topics, self._owns, self.positions)

    def wake_now(self) -> None:
        """Make the source trigger a batch soon, even without new records."""
        if self.wake is not None:
            self.admin.root.write_bytes(self.wake, str(time.time_ns()).encode())

    def _check_shutdown(self, batch_id: int) -> None:
        if self.shutdown_marker is None:
            return
        path, started_ms = self.shutdown_marker
        data = self.admin.root.read_bytes(path)
        if data is None:
            return
        stamp, _, reason = data.decode(errors="replace").partition("\n")
        if int(stamp or 0) >= started_ms:
            raise ApplicationShutdownError(
                f"[thread {self.transactional_id}] batch {batch_id}: an instance of "
                f"{self.group} asked the whole application to shut down "
                f"(SHUTDOWN_APPLICATION) after: {reason}; "
                "fix the cause and start the instances again"
            )

    def _maybe_compact(self) -> None:
        """Every ``statestore.snapshot.interval`` batches, compact the changelogs below
        their oldest snapshots, in the background (Kafka's log cleaner)."""
        interval = self.config.statestore_snapshot_interval
        if not self.compacts or interval == 0 or self.batches % interval:
            return
        if not self.topology.changelog_topics(self.group):
            return
        if self._compaction is not None and not self._compaction.done():
            return
        if self._compactor is None:
            self._compactor = ThreadPoolExecutor(1, thread_name_prefix="changelog-compaction")
        self._compaction = self._compactor.submit(self._compact)

    def _compact(self) -> None:
        try:
            for result in compact_changelogs(self.admin, self.group, self.config):
                log.info("[thread %s] compacted %s", self.transactional_id, result)
        except Exception:  # the next run tries again; processing goes on
            log.warning(
                "[thread %s] changelog compaction failed", self.transactional_id, exc_info=True
            )

    def close(self) -> None:
        """Abort open transactions, wait for a running compaction, release the producers,
        leave the group."""
        if self.membership is not None:
            self.membership.close(leave=True)
        if self._compactor is not None:
            self._compactor.shutdown(wait=True)
            self._compactor = None
        if self.producer is not None:
            self.producer.close()
        for producer in self.task_producers.values():
            producer.close()

    # -- exactly_once_v2 -------------------------------------------------------------------

    def _run_transactional(self, df: DataFrame, batch_id: int) -> None:
        producer = self.producer
        assert producer is not None
        producer.begin_transaction()
        staging = producer.staging_dir_for(self.written)
        txn = (self.transactional_id, producer.transaction_sequence)
        try:
            files, positions = self._run_tasks(df, staging, txn)
            if not positions and not files:
                producer.abort_transaction()
                self.outcomes[txn] = False
                return
            for topic, staged in files.items():
                producer.add_staged_files(topic, staged)
            if positions:
                producer.send_offsets_to_transaction(positions, self.group)
        except ProducerFencedError:
            raise
        except BaseException:
            producer.abort_transaction()
            self.outcomes[txn] = False
            raise
        try:
            producer.commit_transaction(before_prepare=self._validate_generation)
        except GenerationFencedError:
            producer.abort_transaction()  # releases the offsets a new owner waits for
            self.outcomes[txn] = False
            raise
        self._remember(txn, committed=True)
        self.positions.update(positions)
        log.debug(
            "[thread %s] batch=%d txn=%d committed files=%d positions=%d",
            self.transactional_id,
            batch_id,
            txn[1],
            sum(len(v) for v in files.values()),
            len(positions),
        )

    def _remember(self, txn: tuple[str, int], *, committed: bool) -> None:
        tid, seq = txn
        self.outcomes = {k: v for k, v in self.outcomes.items() if k[0] != tid or k[1] >= seq - 8}
        self.outcomes[txn] = committed

    # -- exactly_once (alpha) ---------------------------------------------------------------

    def _run_per_task(self, df: DataFrame, batch_id: int) -> None:
        txns: dict[str, tuple[str, int, str]] = {}
        for task, producer in self.task_producers.items():
            producer.begin_transaction()
            staging = producer.staging_dir_for(self.written)
            txns[task] = (producer.transactional_id, producer.transaction_sequence, staging)
        try:
            by_task = self._run_tasks_by_task(df, txns)
        except ProducerFencedError:
            raise
        except BaseException:
            for task, producer in self.task_producers.items():
                producer.abort_transaction()
                self._remember((txns[task][0], txns[task][1]), committed=False)
            raise
        for task, producer in sorted(self.task_producers.items()):
            txn = (txns[task][0], txns[task][1])
            files, positions = by_task.get(task, ({}, {}))
            if not files and not positions:
                producer.abort_transaction()
                self._remember(txn, committed=False)
                continue
            for topic, staged in files.items():
                producer.add_staged_files(topic, staged)
            if positions:
                producer.send_offsets_to_transaction(positions, self.group)
            try:
                producer.commit_transaction(before_prepare=self._validate_generation)
            except GenerationFencedError:
                for other in self.task_producers.values():
                    if other.state in (
                        ProducerState.IN_TRANSACTION,
                        ProducerState.ABORTABLE_ERROR,
                    ):
                        other.abort_transaction()
                raise
            self._remember(txn, committed=True)
            self.positions.update(positions)
        log.debug(
            "[thread %s] batch=%d committed %d tasks", self.transactional_id, batch_id, len(by_task)
        )

    # -- at_least_once ---------------------------------------------------------------------

    def _run_at_least_once(self, df: DataFrame, batch_id: int) -> None:
        staging = f"{ALOS_STAGING}/{uuid.uuid4().hex}"
        files, positions = self._run_tasks(df, staging, None)
        for topic in sorted(files):
            committer = self._committers.get(topic)
            if committer is None:
                committer = self._committers[topic] = TopicCommitter(self.admin, topic)
            committer.commit(files[topic], timeout_ms=COMMIT_TIMEOUT_MS)
        if positions:
            self._validate_generation()  # a plain commit is checked too (CommitFailed)
            self.offsets.commit(self.group, positions)
            self.positions.update(positions)

    # -- shared ------------------------------------------------------------------------------

    def _plan(
        self,
        staging: str,
        txn: tuple[str, int] | None,
        task_txns: Mapping[str, tuple[str, int, str]] | None = None,
    ) -> BatchPlan:
        return BatchPlan(
            topology=self.topology,
            config=self.config,
            root=self.admin.root.uri_of(),
            outputs=self.outputs,
            staging_dir=staging,
            sources=self.sources,
            positions=dict(self.positions),
            transaction=txn,
            outcomes=dict(self.outcomes),
            task_transactions=dict(task_txns or {}),
            inline=self.levels.inline,
            levels=self.levels.levels,
            shuffle=self.levels.shuffle,
            level_partitions=self.levels.partitions,
            snapshot=self._snapshot_due(),
            inputs=self.reads.inputs,
            truncated=self.reads.truncated,
            globals=self.globals,
        )

    def _snapshot_due(self) -> bool:
        """Whether this batch uploads store snapshots: every
        ``statestore.snapshot.interval`` batches, the first one after a start included
        (so a restart soon has a recent snapshot)."""
        interval = self.config.statestore_snapshot_interval
        return interval > 0 and self.batches % interval == 0

    def _collect_rows(self, df: DataFrame, plan: BatchPlan) -> list[Any]:
        """Run the batch's levels as one Spark job; return its metadata rows."""
        out = df.mapInArrow(functools.partial(_source_level, plan), ROW_DDL)
        for level in range(1, self.levels.depth):
            out = out.repartition(self.levels.partitions[level], "shuffle").mapInArrow(
                functools.partial(_inner_level, plan, level), ROW_DDL
            )
        try:
            rows = out.select(*_META).collect()
        except Exception as exc:
            original = task_error(exc)
            if original is None:
                raise
            raise original from exc
        stray = [r for r in rows if r["kind"] == RECORD]
        if stray:
            raise StreamsError(
                f"[thread {self.transactional_id}] {len(stray)} repartitioned records of "
                f"{sorted({r['topic'] for r in stray})} reached no task; this is a bug"
            )
        for row in rows:
            if row["kind"] == METRIC:
                self.metrics[row["topic"]] = self.metrics.get(row["topic"], 0) + row["count"]
        return rows

    def _run_tasks(
        self, df: DataFrame, staging: str, txn: tuple[str, int] | None
    ) -> tuple[dict[str, list[StagedFile]], dict[tuple[str, int], int]]:
        files: dict[str, list[StagedFile]] = {}
        positions: dict[tuple[str, int], int] = {}
        for row in self._collect_rows(df, self._plan(staging, txn)):
            _add(row, files, positions)
        return files, positions

    def _run_tasks_by_task(
        self, df: DataFrame, txns: Mapping[str, tuple[str, int, str]]
    ) -> dict[str, tuple[dict[str, list[StagedFile]], dict[tuple[str, int], int]]]:
        out: dict[str, tuple[dict[str, list[StagedFile]], dict[tuple[str, int], int]]] = {}
        for row in self._collect_rows(df, self._plan("", None, txns)):
            files, positions = out.setdefault(row["task"], ({}, {}))
            _add(row, files, positions)
        return out


_META = (
    "kind",
    "task",
    "topic",
    "partition",
    "path",
    "count",
    "size",
    "min_timestamp",
    "max_timestamp",
    "offset",
)


def _add(
    row: Any, files: dict[str, list[StagedFile]], positions: dict[tuple[str, int], int]
) -> None:
    if row["kind"] == FILE:
        files.setdefault(row["topic"], []).append(_staged(row))
    elif row["kind"] == POSITION:
        positions[(row["topic"], row["partition"])] = row["offset"]


def _source_level(plan: BatchPlan, batches: Any) -> Any:
    return guarded(run_source_level(plan, batches))


def _inner_level(plan: BatchPlan, level: int, batches: Any) -> Any:
    return guarded(run_inner_level(plan, level, batches))


def _staged(row: Any) -> StagedFile:
    # Row is a tuple: its "count" field must be read by name, not as an attribute.
    return StagedFile(
        path=row["path"],
        partition=row["partition"],
        count=row["count"],
        size=row["size"],
        min_timestamp=row["min_timestamp"],
        max_timestamp=row["max_timestamp"],
    )
