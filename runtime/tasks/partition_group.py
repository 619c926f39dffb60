"""The order a task processes its records in: Kafka's ``PartitionGroup``.

A task with several input topics (a join, a merge) processes their records interleaved
by timestamp: always the queue whose head record has the smallest timestamp next (ties:
the earlier topic in sorted order), each queue in its own order. When a queue's partition
has records beyond this batch and the queue runs dry, the rest waits for the next batch
(``max.task.idle.ms``), so a stream record does not overtake a table update that was not
read yet. Records read from storage wait by not being consumed (the next batch reads them
again). Records shuffled inside the batch (a repartition topic read at a later level, with
offset -1) exist nowhere else: those that wait are *spilled*, returned to be written to
their repartition topic in the batch's transaction, from where the next batch reads them
after the topic's older records, as Kafka's task would find them in its topic. Records go
to the task column by column, in runs of one queue.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from topology.engine.task import StreamTask


@dataclass
class Processed:
    """What one call of :func:`process_records` did: the next position of each stored
    partition it consumed, how many records wait, and the shuffled records that wait,
    per topic (to be spilled to the topic)."""

    consumed: dict[tuple[str, int], int] = field(default_factory=dict)
    held_back: int = 0
    spilled: list[tuple[str, pa.Table]] = field(default_factory=list)


def process_records(
    task: StreamTask,
    partition: int,
    inputs: Mapping[str, pa.Table],
    topics: list[str],
    *,
    positions: Mapping[tuple[str, int], int],
    truncated: frozenset[tuple[str, int]],
    wait: bool,
) -> Processed:
    """Process the records of ``topics`` in ``inputs`` (topic -> its records, with their
    offsets) not yet consumed (``positions``; records shuffled inside the batch, offset
    -1, all count), interleaved by timestamp.

    With ``wait`` (``max.task.idle.ms`` >= 0), once a queue whose partition has records
    beyond this batch (``truncated``) is drained, the rest waits for the next batch; a
    shuffled record of a topic whose stored records are ``truncated`` always waits (it
    comes after them).
    """
    queues: list[tuple[str, pa.Table]] = []
    spilled: list[tuple[str, pa.Table]] = []
    for topic in topics:
        rows = inputs.get(topic)
        if rows is None:
            continue
        start = positions.get((topic, partition), 0)
        if rows.num_rows and _below(rows.column("offset"), start):
            offsets = rows.column("offset")
            rows = rows.filter(pc.or_(pc.less(offsets, 0), pc.greater_equal(offsets, start)))
        if wait and (topic, partition) in truncated:
            shuffled = pc.less(rows.column("offset"), 0)
            if pc.any(shuffled).as_py():
                spilled.append((topic, rows.filter(shuffled)))
                rows = rows.filter(pc.invert(shuffled))
        if rows.num_rows:
            queues.append((topic, rows))
    offered = sum(rows.num_rows for _, rows in queues) + sum(t.num_rows for _, t in spilled)
    if len(queues) == 1:
        _process_run(task, partition, *queues[0])
    elif queues:
        order = merged_order(queues)
        waits_for = [wait and (t, partition) in truncated for t, _ in queues]
        taken = hold_back(order, [rows.num_rows for _, rows in queues], waits_for)
        if taken is not None:
            order = [(q, i) for q, i in order if i < taken[q]]
            for (topic, rows), n in zip(queues, taken, strict=True):
                rest = rows.slice(n)
                shuffled = rest.filter(pc.less(rest.column("offset"), 0))
                if shuffled.num_rows:
                    spilled.append((topic, shuffled))
            queues = [(t, rows.slice(0, n)) for (t, rows), n in zip(queues, taken, strict=True)]
        for topic, rows in interleave(queues, order):
            _process_run(task, partition, topic, rows)
    consumed: dict[tuple[str, int], int] = {}
    for topic, rows in queues:
        stored = rows.filter(pc.greater_equal(rows.column("offset"), 0))
        if stored.num_rows:
            consumed[(topic, partition)] = int(stored.column("offset")[-1].as_py()) + 1
    processed = sum(rows.num_rows for _, rows in queues)
    return Processed(consumed, offered - processed, spilled)


def _below(offsets: pa.ChunkedArray, start: int) -> bool:
    """Whether some stored offset (>= 0) is below ``start`` (processed by an earlier
    batch already)."""
    stored = pc.filter(offsets, pc.greater_equal(offsets, 0)) if start > 0 else offsets
    if start <= 0 or len(stored) == 0:
        return False
    return bool(pc.min(stored).as_py() < start)


def merged_order(queues: list[tuple[str, pa.Table]]) -> list[tuple[int, int]]:
    """Return (queue, index) of every record in the order Kafka's ``PartitionGroup`` picks
    them: always the queue whose head record has the smallest timestamp (ties: the
    earlier topic in sorted order), each queue in its own order."""
    stamps = [rows.column("timestamp").to_pylist() for _, rows in queues]
    merged = heapq.merge(
        *(_tagged(q, col) for q, col in enumerate(stamps)), key=lambda item: (item[0], item[1])
    )
    return [(q, i) for _, q, i in merged]


def hold_back(
    order: list[tuple[int, int]], sizes: list[int], waits_for: list[bool]
) -> list[int] | None:
    """Return how many records of each queue to process now, or None for all of them.

    Records are taken in ``order`` until a queue in ``waits_for`` (its partition has
    records beyond this batch) is drained; the rest wait for the next batch, which reads
    that partition further (Kafka's task waits the same way while a drained partition has
    lag, ``max.task.idle.ms``).
    """
    if not any(waits_for):
        return None
    taken = [0] * len(sizes)
    for q, _i in order:
        taken[q] += 1
        if waits_for[q] and taken[q] == sizes[q]:
            return taken
    return None


def interleave(
    queues: list[tuple[str, pa.Table]], order: list[tuple[int, int]] | None = None
) -> Iterator[tuple[str, pa.Table]]:
    """Yield runs of consecutive records of one queue, in ``order`` (default: the
    :func:`merged_order` of ``queues``)."""
    run_q, run_start, run_len = -1, 0, 0
    for q, i in merged_order(queues) if order is None else order:
        if q == run_q:
            run_len += 1
            continue
        if run_len:
            yield queues[run_q][0], queues[run_q][1].slice(run_start, run_len)
        run_q, run_start, run_len = q, i, 1
    if run_len:
        yield queues[run_q][0], queues[run_q][1].slice(run_start, run_len)


def _tagged(queue: int, stamps: list[int]) -> Iterator[tuple[int, int, int]]:
    for i, ts in enumerate(stamps):
        yield ts, queue, i


def _process_run(task: StreamTask, partition: int, topic: str, rows: pa.Table) -> None:
    task.process_columns(
        topic,
        partition,
        rows.column("key"),
        rows.column("value"),
        rows.column("timestamp"),
        rows.column("offset"),
        _headers(rows.column("headers")),
    )


def _headers(column: pa.ChunkedArray) -> list[tuple[tuple[str, bytes | None], ...]] | None:
    """Return per-record header tuples, or None when no record has headers (the usual
    case, which then costs no per-record work)."""
    if len(pc.list_flatten(column)) == 0:
        return None
    return [tuple((h["key"], h["value"]) for h in hs) if hs else () for hs in column.to_pylist()]
