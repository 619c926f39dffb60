"""What runs inside a Spark task: the stream tasks of one partition number, for one batch.

The driver pickles a :class:`BatchPlan` into the ``mapInArrow`` function; each Spark task
receives the records of partition ``p`` of every subscribed topic (see
:mod:`runtime.spark.source`) and, for each sub-topology reading them:

1. opens the task ``<sub-topology>_<p>`` (its stores restore what they miss; a batch
   prepared by an earlier attempt is applied if the plan says its transaction committed,
   otherwise dropped and replayed from the changelog);
2. skips records below the committed positions (a replayed batch, or a Spark checkpoint
   older than the offsets table), processes the rest in offset order;
3. flushes the task (caches forward, changelog records reach the collector), writes every
   output and changelog record as staged files of the batch's transaction, and persists
   the stores' writes as a prepared batch of that transaction (KIP-892);
4. closes the task (its stores and the task-directory lock), and returns only metadata:
   the staged files and the consumed positions. The driver commits them.

A Spark task that fails or is retried leaves at most orphan staged files (deleted by the
coordinator's sweep) and a prepared batch that is never confirmed: exactly-once holds
because only the result that reached the driver is committed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from runtime.collector import OutputTopic, StagingCollector
from runtime.state_adapters import TopicChangelogReader
from statestores.state_directory import StateDirectory
from statestores.state_manager import ProcessorStateManager
from streams.config import StreamsConfig
from topology.collector import CollectorChangelog
from topology.task import StreamTask
from topology.topology import Topology

log = logging.getLogger(__name__)

#: One row per staged file (kind "file") or consumed position (kind "position").
RESULT_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("task", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("path", pa.string()),
        ("count", pa.int64()),
        ("size", pa.int64()),
        ("min_timestamp", pa.int64()),
        ("max_timestamp", pa.int64()),
        ("offset", pa.int64()),
    ]
)
RESULT_DDL = (
    "kind string, task string, topic string, partition int, path string, count long, "
    "size long, min_timestamp long, max_timestamp long, offset long"
)


@dataclass(frozen=True)
class BatchPlan:
    """Everything a Spark task needs for one batch (pickled by the driver).

    ``positions`` are the committed next offsets; records below them were processed by a
    committed batch already. ``transaction`` is ``(transactional id, sequence)`` of the
    batch (None under at_least_once). ``outcomes`` tells stores how earlier transactions
    ended, so a prepared batch left by the previous batch is applied or dropped.
    """

    topology: Topology
    config: StreamsConfig
    root: str
    outputs: Mapping[str, OutputTopic]
    staging_dir: str
    sources: Mapping[str, int]  # runtime topic name -> sub-topology reading it
    positions: Mapping[tuple[str, int], int]
    transaction: tuple[str, int] | None
    outcomes: Mapping[tuple[str, int], bool] = field(default_factory=dict)


class PlanOutcomes:
    """Answers "did transaction (id, sequence) commit?" from the driver's plan."""

    def __init__(self, outcomes: Mapping[tuple[str, int], bool]) -> None:
        self.outcomes = outcomes

    def committed(self, transactional_id: str, sequence: int) -> bool | None:
        """Return True, False, or None when the driver did not say (drop and replay)."""
        return self.outcomes.get((transactional_id, sequence))


def run_partition(plan: BatchPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Run the batch's tasks for the records of one partition number; yield result rows."""
    table = _collect(batches)
    if table is None:
        return
    partition = int(table.column("partition")[0].as_py())
    by_sub: dict[int, list[str]] = {}
    for topic in table.column("topic").unique().to_pylist():
        by_sub.setdefault(plan.sources[topic], []).append(topic)
    rows: list[dict[str, Any]] = []
    for sub_id in sorted(by_sub):
        rows.extend(_run_task(plan, sub_id, partition, table, by_sub[sub_id]))
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=RESULT_SCHEMA)


def _collect(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    got = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(got) if got else None


def _run_task(
    plan: BatchPlan, sub_id: int, partition: int, table: pa.Table, topics: list[str]
) -> list[dict[str, Any]]:
    config, topology = plan.config, plan.topology
    task_id = f"{sub_id}_{partition}"
    collector = StagingCollector(plan.root, plan.outputs, plan.staging_dir)
    changelog = CollectorChangelog(
        collector, topology.changelog_topics(config.application_id), partition
    )
    has_stores = bool(topology.subtopology(sub_id).stores)
    directory = StateDirectory(config.state_dir, config.application_id) if has_stores else None
    state_dir = directory.lock(task_id) if directory is not None else None
    try:
        holder: list[StreamTask] = []
        manager = None
        if has_stores:
            manager = ProcessorStateManager(
                application_id=config.application_id,
                task_id=task_id,
                partition=partition,
                state_dir=state_dir,
                app_config=config.model_dump(by_alias=True),
                changelog=changelog,
                changelog_reader=TopicChangelogReader(plan.root),
                transaction_outcomes=PlanOutcomes(plan.outcomes),
                timestamp=lambda: holder[0].current_timestamp if holder else 0,
            )
        task = StreamTask(
            topology,
            sub_id,
            partition,
            config,
            collector,
            state_dir=state_dir,
            changelog=changelog,
            manages_transactions=plan.transaction is not None,
            store_context=manager,
        )
        holder.append(task)
        task.initialize()
        try:
            consumed = _process(plan, task, partition, table, topics)
            task.prepare_commit()
            files = collector.flush()
            if manager is not None and plan.transaction is None:
                # at_least_once: state may run ahead of the outputs after a crash; the
                # store then finds itself ahead of its changelog and is rebuilt from it.
                manager.prepare_commit(None)
                manager.commit()
            elif manager is not None and plan.transaction is not None:
                manager.prepare_commit(*plan.transaction)
        except BaseException:
            collector.discard()
            if manager is not None:
                manager.abort()
            raise
        finally:
            task.close()
    finally:
        if directory is not None:
            directory.unlock(task_id)
    rows = [_file_row(task_id, topic, f) for topic, f in files]
    rows.extend(
        {"kind": "position", "task": task_id, "topic": t, "partition": p, "offset": o}
        for (t, p), o in consumed.items()
    )
    return rows


def _process(
    plan: BatchPlan, task: StreamTask, partition: int, table: pa.Table, topics: list[str]
) -> dict[tuple[str, int], int]:
    """Process the records of ``topics`` not yet committed; return the next positions."""
    consumed: dict[tuple[str, int], int] = {}
    topic_col = table.column("topic")
    for topic in topics:
        rows = table.filter(pc.equal(topic_col, topic))
        start = plan.positions.get((topic, partition), 0)
        rows = rows.filter(pc.greater_equal(rows.column("offset"), start))
        if rows.num_rows == 0:
            continue
        offs = rows.column("offset").to_pylist()
        task.process_columns(
            topic,
            partition,
            rows.column("key").to_pylist(),
            rows.column("value").to_pylist(),
            rows.column("timestamp").to_pylist(),
            offs,
            _headers(rows.column("headers")),
        )
        consumed[(topic, partition)] = offs[-1] + 1
    return consumed


def _headers(column: pa.ChunkedArray) -> list[tuple[tuple[str, bytes | None], ...]] | None:
    """Return per-record header tuples, or None when no record has headers (the usual
    case, which then costs no per-record work)."""
    if len(pc.list_flatten(column)) == 0:
        return None
    return [tuple((h["key"], h["value"]) for h in hs) if hs else () for hs in column.to_pylist()]


def _file_row(task_id: str, topic: str, f: Any) -> dict[str, Any]:
    return {
        "kind": "file",
        "task": task_id,
        "topic": topic,
        "partition": f.partition,
        "path": f.path,
        "count": f.count,
        "size": f.size,
        "min_timestamp": f.min_timestamp,
        "max_timestamp": f.max_timestamp,
    }
