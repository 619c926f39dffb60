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

Rows of other levels and metadata rows pass through a level untouched.

A Spark task that fails or is retried leaves at most orphan staged files (deleted by the
coordinator's sweep) and a prepared batch that is never confirmed: exactly-once holds
because only the result that reached the driver is committed.
"""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common.config import StreamsConfig
from runtime.storage.fs import register_storage_options
from runtime.storage.records import HEADERS_TYPE, rows_where
from runtime.storage.slices import TopicSlices, read_topic_slices
from runtime.tasks.client import run_on_host
from runtime.tasks.collector import OutputTopic
from runtime.tasks.executor import executor_id
from runtime.tasks.protocol import INPUT_COLUMNS, InputPiece
from runtime.tasks.shuffle import shuffle_keys_of
from topology.graph.topology import Topology

log = logging.getLogger(__name__)

#: Row kinds: a staged file, a consumed position, a metric, records on their way to a
#: later level (packed: see :func:`pack`), a task that prepared writes in the batch's
#: transaction, when a task's next wall-clock punctuation is due (``timestamp``), and a
#: task of a later level to visit even without records, and a task that ran an earlier
#: level of the batch (``offset``) and must find it open at its last level (``count``),
#: and on a cluster the executor a task ran on (see :func:`placed_row`).
FILE, POSITION, METRIC, RECORD = "file", "position", "metric", "record"
PREPARED, WAKE, VISIT, OPEN, PLACED = "prepared", "wake", "visit", "open", "placed"
#: A task's measurements of the batch (``value``: see :func:`encode_stats`).
STATS = "stats"


def encode_stats(figures: list[Any], gauges: dict[str, float]) -> bytes:
    """A task's figures and gauges as a stats row's value (JSON)."""
    return json.dumps([figures, gauges], separators=(",", ":")).encode()


def decode_stats(value: bytes) -> tuple[list[Any], dict[str, float]]:
    """The figures and gauges of a stats row's value."""
    figures, gauges = json.loads(value)
    return figures, gauges


#: The metric counting visits a worker sent to a task's host on another executor.
REMOTE_VISITS = "remote-visit-total"

#: One row per staged file, consumed position, metric, or pack of records in flight
#: between levels: ``value`` holds the records (an Arrow IPC stream), ``count`` how many,
#: ``origin`` the upstream task's partition (which orders the packs of one partition) and
#: ``shuffle`` places the row (see :func:`shuffle_keys`).
ROW_SCHEMA = pa.schema(
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
        ("origin", pa.int32()),
        ("shuffle", pa.int32()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.int64()),
        ("headers", HEADERS_TYPE),
    ]
)
ROW_DDL = (
    "kind string, task string, topic string, partition int, path string, count long, "
    "size long, min_timestamp long, max_timestamp long, offset long, origin int, "
    "shuffle int, key binary, value binary, timestamp long, "
    "headers array<struct<key: string, value: binary>>"
)


@dataclass(frozen=True)
class BatchPlan:
    """Everything a Spark task needs for one batch (pickled by the driver).

    ``positions`` are the committed next offsets; records below them were processed by a
    committed batch already. ``transaction`` is ``(transactional id, sequence)`` of the
    batch under exactly_once_v2; ``task_transactions`` maps each task to its own
    ``(transactional id, sequence, staging dir)`` under exactly_once; both empty under
    at_least_once. ``outcomes`` tells stores how earlier transactions ended, so a prepared
    batch left by an earlier batch is applied or dropped. ``inline`` maps each repartition
    topic shuffled inside the batch to the level reading it; ``levels`` maps each
    sub-topology to its level; ``level_partitions`` each level's task count, which run in
    at most ``spark_partitions`` Spark partitions (0: one per task). ``snapshot``: upload
    a snapshot of each task's stores (their committed state, once opened) in this batch.

    ``inputs`` (a streams application's batches) names, per partition number, the file
    slices each source topic partition is read from: from the committed position on, at
    most ``max.poll.records`` of them. ``truncated`` lists the source partitions that have
    records beyond their slice; a task with several inputs holds back records once such a
    partition is drained (``max.task.idle.ms`` >= 0), as Kafka's task waits for more data
    of an empty partition that has lag, so records are processed in timestamp order
    across batches.

    ``owner`` names the stream thread instance sending the batch: a task host that held the
    task for another owner rebuilds it from committed state. ``visit`` lists the thread's
    tasks: each runs in every batch, with or without records (Kafka's loop punctuates and
    commits every task), so wall-clock punctuators fire and prepared writes settle.
    ``static_key`` names the topology and configuration (sent once to each task host).

    ``globals`` names the file slices of every partition of the global topics, from the
    log start to its end as planned for this batch: each process brings its global stores
    up to these ends before its tasks run (:mod:`runtime.tasks.global_state`).

    ``combine_windows`` names the repartition topics of windowed counts that this batch
    shuffles inside itself: their writers may combine records per key and window set
    (:mod:`topology.engine.combine`); empty when the batch runs again without combining.

    On a cluster, ``placement`` maps each task to the executor whose host committed its
    last batch: (executor id, the TCP address of its host server); a worker of another
    executor sends the task's visits there (:mod:`runtime.tasks.client`), with
    ``host_secret`` (hex), which opens those connections. ``driver_host`` is the driver's
    address (an executor listens on the interface that reaches it).
    """

    topology: Topology
    config: StreamsConfig
    root: str
    outputs: Mapping[str, OutputTopic]
    staging_dir: str
    sources: Mapping[str, int]  # runtime topic -> sub-topology reading it
    positions: Mapping[tuple[str, int], int]
    transaction: tuple[str, int] | None
    outcomes: Mapping[tuple[str, int], bool] = field(default_factory=dict)
    task_transactions: Mapping[str, tuple[str, int, str]] = field(default_factory=dict)
    inline: Mapping[str, int] = field(default_factory=dict)
    levels: Mapping[int, int] = field(default_factory=dict)
    level_partitions: Mapping[int, int] = field(default_factory=dict)
    snapshot: bool = False
    inputs: Mapping[int, tuple[TopicSlices, ...]] | None = None
    truncated: frozenset[tuple[str, int]] = frozenset()
    owner: str = ""
    visit: frozenset[str] = frozenset()
    static_key: str = ""
    globals: tuple[TopicSlices, ...] = ()
    topic_levels: Mapping[str, int] = field(default_factory=dict)
    batch: int = 0
    spark_partitions: int = 0
    combine_windows: frozenset[str] = frozenset()
    placement: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    host_secret: str = ""
    driver_host: str = ""

    def spark_partitions_of(self, tasks: int) -> int:
        """How many Spark partitions run a level of ``tasks`` tasks: at most
        ``spark_partitions`` (0: one per task); tasks beyond share one."""
        limit = self.spark_partitions
        return min(tasks, limit) if limit > 0 else tasks

    def level_of(self, topic: str) -> int:
        """The level at which ``topic``'s records are processed."""
        level = self.topic_levels.get(topic)
        return level if level is not None else self.levels.get(self.sources[topic], 0)


class PlanOutcomes:
    """Answers "did transaction (id, sequence) commit?" from the driver's plan."""

    def __init__(self, outcomes: Mapping[tuple[str, int], bool]) -> None:
        self.outcomes = outcomes

    def committed(self, transactional_id: str, sequence: int) -> bool | None:
        """Return True, False, or None when the driver did not say (drop and replay)."""
        return self.outcomes.get((transactional_id, sequence))


# -- the level functions ------------------------------------------------------------------


def run_source_level(
    plan: BatchPlan, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Level 0: run the tasks of the partition numbers of one Spark partition.

    The input is either the records themselves or (the source's ``plan_only`` option)
    one row per partition number naming the file slices to read: each task's host reads
    its own slices (the records never pass through this worker); a topic read at a later
    level (a co-partitioned source of a later sub-topology) is read here and packed for
    it. Every task of ``plan.visit`` at level 0 runs, with or without records; the Spark
    partition of partition number 0 also sends a visit to each task of a later level.
    """
    register_storage_options(plan.root, plan.config.storage_options)
    table = _collect(batches)
    if table is None:
        return
    partitions = sorted(set(table.column("partition").to_pylist()))
    inputs: dict[int, list[InputPiece]] = {}
    later: list[tuple[str, TopicSlices]] = []
    if "task_input" in table.column_names:
        if plan.inputs is not None:  # the driver planned the reads
            wanted = [(plan.root, plan.inputs[p]) for p in partitions if plan.inputs.get(p)]
        else:  # the source's own plans (a TaskInput each)
            items = [pickle.loads(blob) for blob in table.column("task_input").to_pylist()]
            wanted = [(item.root, item.topics) for item in items]
        for root, slices in wanted:
            for piece in slices:
                if not piece.slices:
                    continue
                if plan.level_of(piece.topic) != 0 or root != plan.root:
                    later.append((root, piece))
                else:
                    inputs.setdefault(piece.partition, []).append((piece.topic, piece))
        records = pa.concat_tables(
            [
                pa.Table.from_batches(list(read_topic_slices(root, [piece])), schema=_SOURCE_ARROW)
                for root, piece in later
            ]
            or [_SOURCE_ARROW.empty_table()]
        )
    else:
        records = table.select(_SOURCE_ARROW.names)
    for topic, partition, chunk in _groups(records):
        if plan.level_of(topic) != 0:
            # for a later sub-topology's co-partitioned source topic: shuffled to its level
            yield pack(plan, topic, partition, -1, chunk)
        else:
            inputs.setdefault(partition, []).append((topic, chunk))
    if 0 in partitions:
        yield from _visits_of_later_levels(plan)
    yield from _run_level(plan, 0, inputs, partitions)


def run_inner_level(
    plan: BatchPlan, level: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Level ``level`` > 0: run the tasks over the packs of records shuffled to this Spark
    task, handed to their hosts as they arrived (and the tasks visited without records);
    pass every other row through."""
    register_storage_options(plan.root, plan.config.storage_options)
    table = _collect(batches)
    if table is None:
        return
    mine_topics = {t for t in plan.sources if plan.level_of(t) == level}
    kinds = table.column("kind").to_pylist()
    topics = table.column("topic").to_pylist()
    levels = table.column("count").to_pylist()
    mine: list[int] = []
    visits: list[int] = []
    passing: list[int] = []
    for i, kind in enumerate(kinds):
        if kind == RECORD and topics[i] in mine_topics:
            mine.append(i)
        elif kind in (VISIT, OPEN) and levels[i] == level:
            visits.append(i)
        else:
            passing.append(i)
    if passing:
        yield from table.take(passing).to_batches()
    parts = table.column("partition").to_pylist()
    tasks = table.column("task").to_pylist()
    offsets = table.column("offset").to_pylist()
    origins = table.column("origin").to_pylist()
    earlier: dict[str, list[int]] = {}
    for i in visits:
        if kinds[i] == OPEN:
            earlier.setdefault(tasks[i], []).append(offsets[i])
    blobs = table.column("value")
    inputs: dict[int, list[InputPiece]] = {}
    for i in sorted(mine, key=lambda i: (parts[i], origins[i], topics[i])):
        inputs.setdefault(parts[i], []).append((topics[i], blobs[i].as_buffer()))
    partitions = sorted({parts[i] for i in visits} | set(inputs))
    yield from _run_level(plan, level, inputs, partitions, earlier)


def _visits_of_later_levels(plan: BatchPlan) -> Iterator[pa.RecordBatch]:
    """One row per task of ``plan.visit`` above level 0, shuffled to its Spark task."""
    rows = []
    for task_id in sorted(plan.visit):
        sub, partition = (int(x) for x in task_id.split("_"))
        level = plan.levels.get(sub, 0)
        if level > 0:
            shuffle = _shuffle_of(plan, level, partition)
            rows.append(
                {
                    "kind": VISIT,
                    "task": task_id,
                    "partition": partition,
                    "count": level,
                    "shuffle": shuffle,
                }
            )
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=ROW_SCHEMA)


def _run_level(
    plan: BatchPlan,
    level: int,
    inputs: Mapping[int, list[InputPiece]],
    partitions: list[int],
    earlier: Mapping[str, list[int]] | None = None,
) -> Iterator[pa.RecordBatch]:
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
    for partition in sorted(tasks):
        pieces = inputs.get(partition, [])
        for sub_id, topics in sorted(tasks[partition].items()):
            rows, placed = run_on_host(
                plan,
                sub_id,
                partition,
                [(topic, piece) for topic, piece in pieces if topic in topics],
                sorted(topics),
                level,
                sorted((earlier or {}).get(f"{sub_id}_{partition}", ())),
            )
            yield from rows
            if placed is not None:
                yield placed_row(f"{sub_id}_{partition}", placed)
                if placed[0] != executor_id():
                    yield _metric_row(REMOTE_VISITS, 1)


def _metric_row(name: str, count: int) -> pa.RecordBatch:
    row = {"kind": METRIC, "topic": name, "count": count}
    return pa.RecordBatch.from_pylist([row], schema=ROW_SCHEMA)


def placed_row(task_id: str, placed: tuple[str, str]) -> pa.RecordBatch:
    """The row telling the driver where ``task_id`` ran: ``path`` its executor's id,
    ``topic`` the TCP address of that executor's host server."""
    row = {"kind": PLACED, "task": task_id, "path": placed[0], "topic": placed[1]}
    return pa.RecordBatch.from_pylist([row], schema=ROW_SCHEMA)


def _groups(records: pa.Table) -> Iterator[tuple[str, int, pa.Table]]:
    """Yield the records of each (topic, partition), in their order."""
    for topic in sorted(pc.unique(records.column("topic")).to_pylist()):
        of_topic = rows_where(records, "topic", topic)
        for partition in sorted(pc.unique(of_topic.column("partition")).to_pylist()):
            yield topic, partition, rows_where(of_topic, "partition", partition)


_SOURCE_ARROW = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.int64()),
        ("headers", HEADERS_TYPE),
    ]
)

#: Packs are LZ4-compressed: shuffled records repeat (timestamps, offsets -1, keys), and
#: every copy between the Python workers and the JVM's shuffle shrinks with them.
_PACK_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")

#: The records inside one packed row (an Arrow IPC stream in its ``value``; the row
#: names their topic and partition).
PACKED_SCHEMA = pa.schema([f for f in _SOURCE_ARROW if f.name in INPUT_COLUMNS])


def pack(
    plan: BatchPlan, topic: str, partition: int, origin: int, records: pa.Table
) -> pa.RecordBatch:
    """One row carrying ``records`` of ``topic``/``partition`` to the level reading them.

    Records travel in bulk, as one Arrow IPC blob per (upstream task, topic, partition):
    the shuffle moves a few large rows instead of one JVM row per record. ``origin`` (the
    upstream task's partition, -1 for a source topic) orders the blobs at arrival.
    """
    sink = pa.BufferOutputStream()
    table = records.select(PACKED_SCHEMA.names).cast(PACKED_SCHEMA)
    with pa.ipc.new_stream(sink, PACKED_SCHEMA, options=_PACK_OPTIONS) as writer:
        writer.write_table(table)
    row = {
        "kind": RECORD,
        "topic": topic,
        "partition": partition,
        "count": records.num_rows,
        "origin": origin,
        "shuffle": _shuffle_of(plan, plan.level_of(topic), partition),
        "value": sink.getvalue().to_pybytes(),
    }
    return pa.RecordBatch.from_pylist([row], schema=ROW_SCHEMA)


def open_row(plan: BatchPlan, task_id: str, partition: int, level: int) -> dict[str, Any]:
    """The row telling the last level of task ``task_id`` that it ran ``level``."""
    last = plan.levels.get(int(task_id.split("_", maxsplit=1)[0]), 0)
    return {
        "kind": OPEN,
        "task": task_id,
        "partition": partition,
        "count": last,
        "offset": level,
        "shuffle": _shuffle_of(plan, last, partition),
    }


def _shuffle_of(plan: BatchPlan, level: int, partition: int) -> int:
    """The shuffle value sending ``partition``'s records of ``level`` to its Spark
    partition: partition ``p`` of ``n`` Spark partitions runs the tasks ``p``, ``p + n``,
    ``p + 2n``, ..."""
    tasks = plan.level_partitions.get(level, 0)
    if tasks <= 0:
        return partition
    spark = plan.spark_partitions_of(tasks)
    return shuffle_keys_of(spark)[partition % spark]


def _collect(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    got = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(got) if got else None


def file_row(task_id: str, topic: str, f: Any) -> dict[str, Any]:
    return {
        "kind": FILE,
        "task": task_id,
        "topic": topic,
        "partition": f.partition,
        "path": f.path,
        "count": f.count,
        "size": f.size,
        "min_timestamp": f.min_timestamp,
        "max_timestamp": f.max_timestamp,
    }
