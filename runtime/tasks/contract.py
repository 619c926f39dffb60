"""The batch contract: what the driver sends a batch's Spark tasks and what they send back.

The driver (:mod:`runtime.thread`) and the executors (:mod:`runtime.tasks`) both import
this module, and it imports neither:

* :class:`ThreadPlan`: what stays the same for every batch of one stream thread instance
  (the topology, the configuration, the storage root, the thread's owner name). It travels
  to each task host once, named by :attr:`ThreadPlan.key`.
* :class:`BatchPlan`: one batch's facts (positions, transactions, reads, levels,
  placement), with the thread plan it belongs to.
* The result rows: one Arrow schema (:data:`ROW_SCHEMA`) for every row a task returns,
  its kinds, the functions that build each kind, and :class:`TaskResults`, which gathers
  a batch's rows on the driver.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
from pyspark import cloudpickle

from common.config import StreamsConfig
from runtime.storage.committer import StagedFile
from runtime.storage.records import HEADERS_TYPE
from runtime.storage.slices import TopicSlices
from runtime.tasks.collector import OutputTopic
from runtime.tasks.shuffle import shuffle_keys_of
from topology.graph.topology import Topology

#: Row kinds: a staged file, a consumed position, a metric, records on their way to a
#: later level (packed: see :func:`pack_row`; a fused batch's bundles are in
#: :mod:`runtime.tasks.bundle`), a task that prepared writes in the batch's
#: transaction, when a task's next wall-clock punctuation is due (``timestamp``), and a
#: task of a later level to visit even without records, and a task that ran an earlier
#: level of the batch (``offset``) and must find it open at its last level (``count``),
#: and on a cluster the executor a task ran on (see :func:`placed_row`).
FILE, POSITION, METRIC, RECORD = "file", "position", "metric", "record"
PREPARED, WAKE, VISIT, OPEN, PLACED = "prepared", "wake", "visit", "open", "placed"
#: A task's measurements of the batch (``value``: see :func:`encode_stats`).
STATS = "stats"
#: A task that restores in the background of its host and ran nothing in the batch
#: (:mod:`runtime.tasks.opening`).
RESTORING = "restoring"

#: The metric counting visits a worker sent to a task's host on another executor.
REMOTE_VISITS = "remote-visit-total"

#: One row per staged file, consumed position, metric, or pack of records in flight
#: between levels: ``value`` holds the records (an Arrow IPC stream), ``count`` how many,
#: ``origin`` the upstream task's partition (which orders the packs of one partition) and
#: ``shuffle`` places the row (see :func:`shuffle_of`).
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

#: A source record's columns, as a level reads them.
SOURCE_SCHEMA = pa.schema(
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

#: The records inside one packed row (an Arrow IPC stream in its ``value``; the row
#: names their topic and partition).
PACKED_SCHEMA = pa.schema([f for f in SOURCE_SCHEMA if f.name not in {"topic", "partition"}])

#: Packs are LZ4-compressed: shuffled records repeat (timestamps, offsets -1, keys), and
#: every copy between the Python workers and the JVM's shuffle shrinks with them. A pack
#: of fewer bytes than ``_PACK_COMPRESS_BYTES`` is not: compressing costs a fixed tenth of
#: a millisecond per pack, and a batch of many partitions sends many small packs.
_PACK_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
_PACK_PLAIN = pa.ipc.IpcWriteOptions()
_PACK_COMPRESS_BYTES = 64 * 1024

Txn = tuple[str, int]
Positions = dict[tuple[str, int], int]
#: A result row on its way through a Spark task: its :data:`ROW_SCHEMA` fields by name
#: (those left out are null). Rows become Arrow only where they leave the Spark task.
Row = dict[str, Any]


@dataclass(frozen=True)
class ThreadPlan:
    """What every batch of one stream thread instance shares; a task host receives it once.

    ``owner`` names the stream thread instance: a task host that held a task for another
    owner rebuilds it from committed state. ``key`` names the whole plan (see
    :func:`thread_plan`): a host that knows the key does not receive the plan again.
    """

    topology: Topology
    config: StreamsConfig
    root: str
    owner: str
    key: str = ""

    def pickled(self) -> bytes:
        """The plan, pickled with its functions (a topology's lambdas) by value."""
        return cloud_dumps(self)


def thread_plan(topology: Topology, config: StreamsConfig, root: str, owner: str) -> ThreadPlan:
    """The thread plan of ``owner``, named by a digest of its pickled contents (the driver
    builds it once per thread instance)."""
    plan = ThreadPlan(topology, config, root, owner)
    return dataclasses.replace(plan, key=hashlib.sha1(plan.pickled()).hexdigest())


@dataclass(frozen=True)
class BatchPlan:
    """Everything a Spark task needs for one batch besides its thread's plan.

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

    ``visit`` lists the thread's tasks: each runs in every batch, with or without records
    (Kafka's loop punctuates and commits every task), so wall-clock punctuators fire and
    prepared writes settle. ``incarnations`` numbers each task's current stay with the
    thread (:attr:`runtime.thread.membership.ThreadMembership.incarnations`): a host
    holding a task of an earlier stay rebuilds it from committed state.

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

    ``restore_wait_ms``: how long, from its first visit of the batch, a host waits for the
    tasks that restore in its background (-1: ``restore.wait.ms``).

    ``bundles``: the worker visiting the tasks runs every level itself (a fused batch), so
    a visit hands its repartitioned records on as bundles (:mod:`runtime.tasks.bundle`).
    """

    thread: ThreadPlan
    outputs: Mapping[str, OutputTopic]
    staging_dir: str
    sources: Mapping[str, int]  # runtime topic -> sub-topology reading it
    positions: Mapping[tuple[str, int], int]
    transaction: Txn | None
    outcomes: Mapping[Txn, bool] = field(default_factory=dict)
    task_transactions: Mapping[str, tuple[str, int, str]] = field(default_factory=dict)
    inline: Mapping[str, int] = field(default_factory=dict)
    levels: Mapping[int, int] = field(default_factory=dict)
    level_partitions: Mapping[int, int] = field(default_factory=dict)
    snapshot: bool = False
    inputs: Mapping[int, tuple[TopicSlices, ...]] | None = None
    truncated: frozenset[tuple[str, int]] = frozenset()
    visit: frozenset[str] = frozenset()
    incarnations: Mapping[str, int] = field(default_factory=dict)
    globals: tuple[TopicSlices, ...] = ()
    topic_levels: Mapping[str, int] = field(default_factory=dict)
    batch: int = 0
    spark_partitions: int = 0
    combine_windows: frozenset[str] = frozenset()
    placement: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    host_secret: str = ""
    driver_host: str = ""
    bundles: bool = False
    restore_wait_ms: int = -1

    def spark_partitions_of(self, tasks: int) -> int:
        """How many Spark partitions run a level of ``tasks`` tasks: at most
        ``spark_partitions`` (0: one per task); tasks beyond share one."""
        limit = self.spark_partitions
        return min(tasks, limit) if limit > 0 else tasks

    def host_of(self, task_id: str) -> str:
        """The name of the host process ``task_id`` lives in on its executor. Tasks are
        numbered partition by partition, sub-topology by sub-topology (``0_0``, ``1_0``,
        ``0_1``, ...); with ``task.hosts.max`` = N > 0, task ``i`` lives in the host of
        task ``i mod N``, named by that task's id: the first N tasks each have a host of
        their own (0: every task does)."""
        limit = self.thread.config.task_hosts_max
        if limit <= 0:
            return task_id
        subs = [sub.id for sub in self.thread.topology.task_subtopologies()]
        sub, _, partition = task_id.partition("_")
        index = int(partition) * len(subs) + subs.index(int(sub))
        if index < limit:
            return task_id
        first = index % limit
        return f"{subs[first % len(subs)]}_{first // len(subs)}"

    @property
    def fused(self) -> bool:
        """Whether the batch's levels run one after another in one Spark task (its planned
        reads all in one Spark partition, so a shuffle between levels would move
        nothing)."""
        return self.spark_partitions == 1 and self.inputs is not None

    def level_of(self, topic: str) -> int:
        """The level at which ``topic``'s records are processed."""
        level = self.topic_levels.get(topic)
        return level if level is not None else self.levels.get(self.sources[topic], 0)

    def level_of_task(self, task_id: str) -> int:
        """The last level at which task ``task_id`` runs in the batch."""
        return self.levels.get(int(task_id.split("_", maxsplit=1)[0]), 0)

    def batch_fields(self) -> dict[str, Any]:
        """The plan's own fields that a task host receives with every visit: its thread
        plan left out, and what only the Spark tasks use (the reads of every partition,
        each visit bringing its own, and the tasks to visit), which would make every
        visit's plan as large as the partitions are many."""
        fields = dataclasses.fields(self)
        return {f.name: getattr(self, f.name) for f in fields if f.name not in _WORKERS_ONLY}


#: The fields of a :class:`BatchPlan` that a task host never reads (see
#: :meth:`BatchPlan.batch_fields`).
_WORKERS_ONLY = frozenset({"thread", "inputs", "visit"})


def cloud_dumps(obj: object) -> bytes:
    """Pickle ``obj`` with its functions (a topology's lambdas) by value."""
    data: bytes = cloudpickle.dumps(obj)  # type: ignore[no-untyped-call]
    return data


class PlanOutcomes:
    """Answers "did transaction (id, sequence) commit?" from the driver's plan."""

    def __init__(self, outcomes: Mapping[Txn, bool]) -> None:
        self.outcomes = outcomes

    def committed(self, transactional_id: str, sequence: int) -> bool | None:
        """Return True, False, or None when the driver did not say (drop and replay)."""
        return self.outcomes.get((transactional_id, sequence))


# -- the rows a task returns --------------------------------------------------------------


def shuffle_of(plan: BatchPlan, level: int, partition: int) -> int:
    """The shuffle value sending ``partition``'s records of ``level`` to its Spark
    partition: partition ``p`` of ``n`` Spark partitions runs the tasks ``p``, ``p + n``,
    ``p + 2n``, ..."""
    tasks = plan.level_partitions.get(level, 0)
    if tasks <= 0:
        return partition
    spark = plan.spark_partitions_of(tasks)
    return shuffle_keys_of(spark)[partition % spark]


def pack_row(
    plan: BatchPlan, topic: str, partition: int, origin: int, records: pa.Table
) -> dict[str, Any]:
    """The row carrying ``records`` of ``topic``/``partition`` to the level reading them.

    Records travel in bulk, as one Arrow IPC blob per (upstream task, topic, partition):
    the shuffle moves a few large rows instead of one JVM row per record. ``origin`` (the
    upstream task's partition, -1 for a source topic) orders the blobs at arrival.
    """
    sink = pa.BufferOutputStream()
    table = records.select(PACKED_SCHEMA.names)
    if not table.schema.equals(PACKED_SCHEMA):
        table = table.cast(PACKED_SCHEMA)
    options = _PACK_OPTIONS if table.nbytes >= _PACK_COMPRESS_BYTES else _PACK_PLAIN
    with pa.ipc.RecordBatchStreamWriter(sink, PACKED_SCHEMA, options=options) as writer:
        writer.write_table(table)
    return {
        "kind": RECORD,
        "topic": topic,
        "partition": partition,
        "count": records.num_rows,
        "origin": origin,
        "shuffle": shuffle_of(plan, plan.level_of(topic), partition),
        "value": sink.getvalue().to_pybytes(),
    }


def visit_row(plan: BatchPlan, task_id: str) -> dict[str, Any]:
    """The row visiting ``task_id`` at its level (above 0), with or without records."""
    partition = int(task_id.split("_")[1])
    level = plan.level_of_task(task_id)
    return {
        "kind": VISIT,
        "task": task_id,
        "partition": partition,
        "count": level,
        "shuffle": shuffle_of(plan, level, partition),
    }


def open_row(plan: BatchPlan, task_id: str, partition: int, level: int) -> dict[str, Any]:
    """The row telling the last level of task ``task_id`` that it ran ``level``."""
    last = plan.level_of_task(task_id)
    return {
        "kind": OPEN,
        "task": task_id,
        "partition": partition,
        "count": last,
        "offset": level,
        "shuffle": shuffle_of(plan, last, partition),
    }


def file_row(task_id: str, topic: str, f: StagedFile) -> dict[str, Any]:
    """The row of a file the task staged for ``topic``."""
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


def position_rows(task_id: str, consumed: Mapping[tuple[str, int], int]) -> list[dict[str, Any]]:
    """The rows of the next positions the task consumed up to."""
    return [
        {"kind": POSITION, "task": task_id, "topic": t, "partition": p, "offset": o}
        for (t, p), o in consumed.items()
    ]


def metric_row(name: str, count: int, task_id: str | None = None) -> dict[str, Any]:
    """The row adding ``count`` to the driver's metric ``name``."""
    return {"kind": METRIC, "task": task_id, "topic": name, "count": count}


def placed_row(task_id: str, placed: tuple[str, str]) -> Row:
    """The row telling the driver where ``task_id`` ran: ``path`` its executor's id,
    ``topic`` the TCP address of that executor's host server."""
    return {"kind": PLACED, "task": task_id, "path": placed[0], "topic": placed[1]}


def encode_stats(figures: list[Any], gauges: dict[str, float]) -> bytes:
    """A task's figures and gauges as a stats row's value (JSON)."""
    return json.dumps([figures, gauges], separators=(",", ":")).encode()


def decode_stats(value: bytes) -> tuple[list[Any], dict[str, float]]:
    """The figures and gauges of a stats row's value."""
    figures, gauges = json.loads(value)
    return figures, gauges


def record_batch(rows: list[dict[str, Any]]) -> list[pa.RecordBatch]:
    """``rows`` as one record batch of :data:`ROW_SCHEMA` (none for no rows), built a
    column at a time (half the cost of a row at a time)."""
    if not rows:
        return []
    columns = {name: [row.get(name) for row in rows] for name in ROW_SCHEMA.names}
    return [pa.RecordBatch.from_pydict(columns, schema=ROW_SCHEMA)]


# -- the driver's side ----------------------------------------------------------------


class ResultRow(Protocol):
    """A result row as the driver collects it (a Spark ``Row``): fields by name."""

    def __getitem__(self, name: str, /) -> Any: ...


@dataclass
class TaskResults:
    """What a batch's tasks returned: staged files per topic, consumed positions, and
    the tasks that prepared writes in the transaction."""

    files: dict[str, list[StagedFile]] = field(default_factory=dict)
    positions: Positions = field(default_factory=dict)
    prepared: set[str] = field(default_factory=set)

    def empty(self) -> bool:
        """Whether there is nothing to commit."""
        return not self.files and not self.positions and not self.prepared

    def add(self, row: ResultRow) -> None:
        """Add one result row of the job."""
        kind = row["kind"]
        if kind == FILE:
            self.files.setdefault(row["topic"], []).append(staged_file(row))
        elif kind == POSITION:
            self.positions[(row["topic"], row["partition"])] = row["offset"]
        elif kind == PREPARED:
            self.prepared.add(row["task"])


def staged_file(row: ResultRow) -> StagedFile:
    """The staged file a :data:`FILE` row names (a Spark ``Row`` is a tuple: its fields
    are read by name, ``count`` is no attribute)."""
    return StagedFile(
        path=row["path"],
        partition=row["partition"],
        count=row["count"],
        size=row["size"],
        min_timestamp=row["min_timestamp"],
        max_timestamp=row["max_timestamp"],
    )


def task_results(rows: Iterable[ResultRow]) -> TaskResults:
    """Gather a batch's result rows."""
    results = TaskResults()
    for row in rows:
        results.add(row)
    return results


def task_results_by_task(rows: Iterable[ResultRow]) -> dict[str, TaskResults]:
    """Gather a batch's result rows per task."""
    out: dict[str, TaskResults] = {}
    for row in rows:
        if row["task"] is not None:
            out.setdefault(row["task"], TaskResults()).add(row)
    return out
