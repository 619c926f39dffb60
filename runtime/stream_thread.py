"""A stream thread: the driver side of every micro-batch (Kafka's ``StreamThread`` plus its
``TaskManager`` commit), one Spark ``foreachBatch`` call per batch.

Under ``exactly_once_v2`` one batch is one transaction of the thread's transactional id
``<application.id>-<processId>-<threadIndex>``:

1. begin; register every topic the tasks may write (sinks, repartition topics,
   changelogs) so the staged files have their transaction's directory;
2. run the tasks in one Spark job (``mapInArrow`` over the batch; see
   :mod:`runtime.task_runner`); only their metadata comes back;
3. add the staged files and the consumed positions to the transaction;
4. commit (PrepareCommit by CAS is the fencing point: a zombie gets ProducerFencedError,
   raised here as TaskMigratedError), then remember the outcome so the stores apply
   their prepared batches when they next open.

Records below the committed positions are skipped by the tasks, so a batch Spark replays
after a crash, or a Spark checkpoint that lags the offsets table, never counts twice.
``at_least_once``: the same without a transaction; outputs and changelogs are committed
first, then the positions (a crash in between gives duplicates, never a loss).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame

from runtime.collector import OutputTopic
from runtime.storage.committer import StagedFile, TopicCommitter
from runtime.storage.topics import TopicAdmin
from runtime.task_runner import RESULT_DDL, BatchPlan, run_partition
from runtime.txn.offsets import OffsetsStore
from runtime.txn.producer import TransactionalProducer
from runtime.txn.state import TransactionState
from streams.config import StreamsConfig
from streams.errors import ProducerFencedError, StreamsError
from topology.topology import Topology

log = logging.getLogger(__name__)

ALOS_STAGING = "alos-staging"
COMMIT_TIMEOUT_MS = 60_000


class TaskMigratedError(StreamsError):
    """This instance lost its tasks: a newer instance with the same transactional id (or a
    newer group generation) took over, so its commit was refused. Nothing it staged
    becomes visible. Close the zombie; the newer instance carries on."""


class StreamThread:
    """Runs micro-batches of a topology for one thread's tasks.

    Args:
        topology: the topology.
        config: the application configuration.
        admin: the storage root's topic admin.
        outputs: every topic the tasks may write, with table path and partition count.
        sources: runtime source topic -> the sub-topology reading it.
        transactional_id: the thread's transactional id (exactly_once_v2).
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
    ) -> None:
        self.topology = topology
        self.config = config
        self.admin = admin
        self.outputs = dict(outputs)
        self.sources = dict(sources)
        self.transactional_id = transactional_id
        self.group = config.application_id
        self.eos = config.processing_guarantee != "at_least_once"
        self.producer: TransactionalProducer | None = None
        self._committers: dict[str, TopicCommitter] = {}
        self.offsets = OffsetsStore(admin)
        self.positions: dict[tuple[str, int], int] = {}
        self.outcomes: dict[tuple[str, int], bool] = {}
        self.batch_times: list[float] = []
        self.records_in = 0
        self.batches = 0

    def start(self) -> dict[tuple[str, int], int]:
        """Initialise the producer (fencing any older instance); return the positions."""
        if self.eos:
            self.producer = TransactionalProducer(
                self.admin,
                self.transactional_id,
                transaction_timeout_ms=self.config.transaction_timeout_ms,
                transaction_max_timeout_ms=self.config.transaction_max_timeout_ms,
            )
            self.producer.init_transactions()
            snap = self.producer.coordinator.load(self.transactional_id)
            if snap is not None and snap.meta.txn_sequence > 0:
                done = snap.meta.state is TransactionState.COMPLETE_COMMIT
                self.outcomes[(self.transactional_id, snap.meta.txn_sequence)] = done
            self.offsets = OffsetsStore(self.admin, coordinator=self.producer.coordinator)
            self.positions = self.offsets.fetch(self.group, require_stable=True)
        else:
            self.positions = self.offsets.fetch(self.group)
        return dict(self.positions)

    def run_batch(self, df: DataFrame, batch_id: int) -> None:
        """Process and commit one micro-batch (the ``foreachBatch`` function)."""
        started = time.perf_counter()
        try:
            if self.eos:
                self._run_transactional(df, batch_id)
            else:
                self._run_at_least_once(df, batch_id)
        except ProducerFencedError as exc:
            raise TaskMigratedError(
                f"[thread {self.transactional_id}] batch {batch_id}: fenced by a newer "
                f"instance ({exc}); this instance stops, nothing it staged is visible"
            ) from exc
        self.batch_times.append(time.perf_counter() - started)
        self.batches += 1

    def close(self) -> None:
        """Abort an open transaction and release the producer."""
        if self.producer is not None:
            self.producer.close()

    # -- exactly_once_v2 -------------------------------------------------------------------

    def _run_transactional(self, df: DataFrame, batch_id: int) -> None:
        producer = self.producer
        assert producer is not None
        producer.begin_transaction()
        staging = producer.staging_dir_for(sorted(self.outputs))
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
        producer.commit_transaction()
        self.outcomes = {k: v for k, v in self.outcomes.items() if k[1] >= txn[1] - 8}
        self.outcomes[txn] = True
        self.positions.update(positions)
        log.debug(
            "[thread %s] batch=%d txn=%d committed files=%d positions=%d",
            self.transactional_id,
            batch_id,
            txn[1],
            sum(len(v) for v in files.values()),
            len(positions),
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
            self.offsets.commit(self.group, positions)
            self.positions.update(positions)

    # -- shared ------------------------------------------------------------------------------

    def _run_tasks(
        self, df: DataFrame, staging: str, txn: tuple[str, int] | None
    ) -> tuple[dict[str, list[StagedFile]], dict[tuple[str, int], int]]:
        plan = BatchPlan(
            topology=self.topology,
            config=self.config,
            root=self.admin.root.uri_of(),
            outputs=self.outputs,
            staging_dir=staging,
            sources=self.sources,
            positions=dict(self.positions),
            transaction=txn,
            outcomes=dict(self.outcomes),
        )
        rows = df.mapInArrow(functools.partial(_run_partition_iter, plan), RESULT_DDL).collect()
        files: dict[str, list[StagedFile]] = {}
        positions: dict[tuple[str, int], int] = {}
        for row in rows:
            if row.kind == "file":
                files.setdefault(row.topic, []).append(_staged(row))
            else:
                positions[(row.topic, row.partition)] = row.offset
        return files, positions


def _run_partition_iter(plan: BatchPlan, batches: Any) -> Any:
    return run_partition(plan, batches)


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
