"""What runs inside a Spark task: the stream tasks of one partition number, for one batch.

The driver pickles a :class:`BatchPlan` into the ``mapInArrow`` functions of the batch.
Sub-topologies are run in *levels*: level 0 reads the source topics; a sub-topology that
reads a repartition topic runs one level after every sub-topology writing it. Between two
levels the repartitioned records travel as rows through a Spark shuffle, inside the same
batch and the same transaction, not through storage (``BatchPlan.inline``; those that must
wait for a table's next records are spilled to their topic, see
:mod:`runtime.tasks.partition_group`). Each Spark
task receives the rows of one or more partition numbers and, for each sub-topology of its
level with records of partition ``p``:

1. opens the task ``<sub-topology>_<p>`` (its stores restore what they miss; a batch
   prepared by an earlier attempt is applied if the plan says its transaction committed,
   otherwise dropped and replayed from the changelog);
2. skips source records below the committed positions (a replayed batch, or a Spark
   checkpoint older than the offsets table), processes the rest: the records of several
   topics interleaved by timestamp, as Kafka's ``PartitionGroup`` picks the queue whose
   head has the smallest timestamp;
3. flushes the task (caches forward, changelog records reach the collector), writes every
   output and changelog record as staged files of the batch's transaction, returns the
   repartitioned records as rows for the next level, and persists the stores' writes as a
   prepared batch of that transaction (KIP-892);
4. closes the task (its stores and the task-directory lock), and returns metadata rows:
   the staged files and the consumed positions. The driver commits them.

Rows of other levels and metadata rows pass through a level untouched. Inside a Spark task
the rows are Python dicts (:data:`~runtime.tasks.contract.Row`: the hosts send them
pickled); they become Arrow record batches only where they leave it (:func:`arrow_rows`).
In a fused batch (every level in one Spark task) a visit's repartitioned records travel as
one bundle per topic, split per target partition here (:mod:`runtime.tasks.bundle`).

A Spark task that fails or is retried leaves at most orphan staged files (deleted by the
coordinator's sweep) and a prepared batch that is never confirmed: exactly-once holds
because only the result that reached the driver is committed.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from runtime.storage.fs import register_storage_options
from runtime.storage.records import rows_where
from runtime.storage.slices import TopicSlices, read_topic_slices
from runtime.tasks.bundle import BUNDLE, bundle_inputs
from runtime.tasks.client import Visit, run_on_hosts
from runtime.tasks.contract import (
    OPEN,
    RECORD,
    REMOTE_VISITS,
    SOURCE_SCHEMA,
    VISIT,
    BatchPlan,
    Row,
    metric_row,
    pack_row,
    placed_row,
    record_batch,
    visit_row,
)
from runtime.tasks.executor import executor_id
from runtime.tasks.protocol import InputPiece

log = logging.getLogger(__name__)

#: The most rows in one record batch a Spark task returns.
ARROW_BATCH_ROWS = 4096
#: The most source records of a fused batch whose visits bundle their repartitioned
#: records: bundles save the many small streams of a small batch over many partitions,
#: but this worker splits and writes them again, which a large batch would feel.
BUNDLE_RECORDS_MAX = 50_000


# -- the level functions ------------------------------------------------------------------


def run_source_level(plan: BatchPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[Row]:
    """Level 0: run the tasks of the partition numbers of one Spark partition.

    The input is either the records themselves or (the source's ``plan_only`` option)
    one row per partition number naming the file slices to read: each task's host reads
    its own slices (the records never pass through this worker); a topic read at a later
    level (a co-partitioned source of a later sub-topology) is read here and packed for
    it. Every task of ``plan.visit`` at level 0 runs, with or without records; the Spark
    partition of partition number 0 also sends a visit to each task of a later level.
    """
    register_storage_options(plan.thread.root, plan.thread.config.storage_options)
    table = _collect(batches)
    if table is None:
        return
    partitions = sorted(set(table.column("partition").to_pylist()))
    inputs: dict[int, list[InputPiece]] = {}
    later: list[tuple[str, TopicSlices]] = []
    if "task_input" in table.column_names:
        if plan.inputs is not None:  # the driver planned the reads
            wanted = [(plan.thread.root, plan.inputs[p]) for p in partitions if plan.inputs.get(p)]
        else:  # the source's own plans (a TaskInput each)
            items = [pickle.loads(blob) for blob in table.column("task_input").to_pylist()]
            wanted = [(item.root, item.topics) for item in items]
        for root, slices in wanted:
            for piece in slices:
                if not piece.slices:
                    continue
                if plan.level_of(piece.topic) != 0 or root != plan.thread.root:
                    later.append((root, piece))
                else:
                    inputs.setdefault(piece.partition, []).append((piece.topic, piece))
        records = pa.concat_tables(
            [
                pa.Table.from_batches(list(read_topic_slices(root, [piece])), schema=SOURCE_SCHEMA)
                for root, piece in later
            ]
            or [SOURCE_SCHEMA.empty_table()]
        )
    else:
        records = table.select(SOURCE_SCHEMA.names)
    for topic, partition, chunk in _groups(records):
        if plan.level_of(topic) != 0:
            # for a later sub-topology's co-partitioned source topic: shuffled to its level
            yield pack_row(plan, topic, partition, -1, chunk)
        else:
            inputs.setdefault(partition, []).append((topic, chunk))
    if 0 in partitions:
        yield from _visits_of_later_levels(plan)
    yield from _run_level(plan, 0, inputs, partitions)


def run_inner_level(plan: BatchPlan, level: int, rows: Iterable[Row]) -> Iterator[Row]:
    """Level ``level`` > 0: run the tasks over the packs (or bundles) of records shuffled
    to this Spark task, handed to their hosts as they arrived (and the tasks visited
    without records); pass every other row through."""
    register_storage_options(plan.thread.root, plan.thread.config.storage_options)
    mine_topics = {t for t in plan.sources if plan.level_of(t) == level}
    bundles: list[tuple[str, int, bytes]] = []
    packs: list[Row] = []
    visits: list[Row] = []
    for row in rows:
        kind = row["kind"]
        if kind == BUNDLE and row["topic"] in mine_topics:
            bundles.append((row["topic"], row["origin"], row["value"]))
        elif kind == RECORD and row["topic"] in mine_topics:
            packs.append(row)
        elif kind in (VISIT, OPEN) and row["count"] == level:
            visits.append(row)
        else:
            yield row
    earlier: dict[str, list[int]] = {}
    for row in visits:
        if row["kind"] == OPEN:
            earlier.setdefault(row["task"], []).append(row["offset"])
    inputs: dict[int, list[InputPiece]] = dict(bundle_inputs(bundles)) if bundles else {}
    for row in sorted(packs, key=lambda r: (r["partition"], r["origin"], r["topic"])):
        inputs.setdefault(row["partition"], []).append((row["topic"], row["value"]))
    partitions = sorted({row["partition"] for row in visits} | set(inputs))
    yield from _run_level(plan, level, inputs, partitions, earlier)


def run_all_levels(plan: BatchPlan, depth: int, batches: Iterator[pa.RecordBatch]) -> Iterator[Row]:
    """Every level of a batch that runs in one Spark partition (``plan.fused``): level 0
    over ``batches``, then each later level over the rows of the one before, as a shuffle
    into one Spark partition would hand them on (it would move nothing: a small batch
    saves its stages' cost). Each level's visits finish before the next level starts."""
    if _planned_records(plan) <= BUNDLE_RECORDS_MAX:  # no shuffle to place packs
        plan = dataclasses.replace(plan, bundles=True)
    rows = run_source_level(plan, batches)
    for level in range(1, depth):
        rows = run_inner_level(plan, level, list(rows))
    yield from rows


def _planned_records(plan: BatchPlan) -> int:
    """How many source records the batch reads (its planned slices)."""
    if plan.inputs is None:
        return 0
    return sum(ts.end - ts.start for pieces in plan.inputs.values() for ts in pieces)


def shuffled_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[Row]:
    """The rows a Spark shuffle hands to a later level, as :data:`Row` dicts."""
    for batch in batches:
        yield from batch.to_pylist()


def arrow_rows(rows: Iterable[Row], size: int = ARROW_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """``rows`` as record batches of :data:`ROW_SCHEMA`, ``size`` rows at most each: rows
    become Arrow only where they leave the Spark task."""
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield from record_batch(chunk)
            chunk = []
    yield from record_batch(chunk)


def _visits_of_later_levels(plan: BatchPlan) -> Iterator[Row]:
    """One row per task of ``plan.visit`` above level 0, shuffled to its Spark task."""
    for task_id in sorted(plan.visit):
        if plan.level_of_task(task_id):
            yield visit_row(plan, task_id)


def _run_level(
    plan: BatchPlan,
    level: int,
    inputs: Mapping[int, list[InputPiece]],
    partitions: list[int],
    earlier: Mapping[str, list[int]] | None = None,
) -> Iterator[Row]:
    """Run each task of ``level`` that has input pieces here (partition -> its pieces of
    every topic, in order) or is visited in every batch."""
    tasks: dict[int, dict[int, set[str]]] = {}  # partition -> sub-topology -> its topics
    for partition, pieces in inputs.items():
        for topic, _piece in pieces:
            tasks.setdefault(partition, {}).setdefault(plan.sources[topic], set()).add(topic)
    wanted = set(partitions)
    for task_id in plan.visit:
        sub, partition = (int(x) for x in task_id.split("_"))
        if partition in wanted and plan.levels.get(sub, 0) == level:
            tasks.setdefault(partition, {}).setdefault(sub, set())
    visits = [
        Visit(
            sub_id,
            partition,
            [(topic, piece) for topic, piece in inputs.get(partition, []) if topic in topics],
            sorted(topics),
            level,
            sorted((earlier or {}).get(f"{sub_id}_{partition}", ())),
        )
        for partition in sorted(tasks)
        for sub_id, topics in sorted(tasks[partition].items())
    ]
    for visit, (rows, placed) in zip(visits, run_on_hosts(plan, visits), strict=True):
        yield from rows
        if placed is not None:
            yield placed_row(visit.task_id, placed)
            if placed[0] != executor_id():
                yield metric_row(REMOTE_VISITS, 1)


def _groups(records: pa.Table) -> Iterator[tuple[str, int, pa.Table]]:
    """Yield the records of each (topic, partition), in their order."""
    for topic in sorted(pc.unique(records.column("topic")).to_pylist()):
        of_topic = rows_where(records, "topic", topic)
        for partition in sorted(pc.unique(of_topic.column("partition")).to_pylist()):
            yield topic, partition, rows_where(of_topic, "partition", partition)


def _collect(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    got = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(got) if got else None
