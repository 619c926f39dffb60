"""The records a visit repartitions inside its batch, as the rows that carry them on.

Between two levels that a Spark shuffle separates, each (topic, target partition) travels
as its own row (a *pack*, :func:`runtime.tasks.contract.pack_row`): the shuffle places
rows, so each must name one partition. A fused batch (``BatchPlan.fused``) has no shuffle:
the next level's tasks are visited by the same worker. There a visit sends each topic's
records for every target partition as one row (a *bundle*: one Arrow IPC stream, its
records in target order, a ``partition`` column naming each one's target), and the worker
splits the bundles of a level per target (:func:`bundle_inputs`). A batch of many
partitions and few records would otherwise pack, send and read as many small streams as
upstream tasks times target partitions (64 by 64 at 64 partitions).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from runtime.tasks.contract import PACKED_SCHEMA, BatchPlan, pack_row

#: The row kind of a bundle.
BUNDLE = "bundle"

#: A bundle's records: a packed record and the partition it is for.
BUNDLE_SCHEMA = PACKED_SCHEMA.append(pa.field("partition", pa.int32()))

_PLAIN = pa.ipc.IpcWriteOptions()

#: Repartitioned records of a visit: (topic, target partition, records).
Inline = list[tuple[str, int, pa.Table]]


def inline_rows(plan: BatchPlan, partition: int, inline: Inline) -> list[dict[str, Any]]:
    """The rows carrying ``inline`` (written by the visit of partition ``partition``) to
    the level reading them: one bundle per topic when the worker runs every level
    (``plan.bundles``), else one pack per (topic, target)."""
    if not plan.bundles:
        return [
            pack_row(plan, topic, target, partition, placed(chunk))
            for topic, target, chunk in inline
        ]
    by_topic: dict[str, list[tuple[int, pa.Table]]] = {}
    for topic, target, chunk in inline:
        by_topic.setdefault(topic, []).append((target, chunk))
    return [_bundle_row(topic, partition, chunks) for topic, chunks in by_topic.items()]


def placed(chunk: pa.Table) -> pa.Table:
    """Records shuffled inside the batch: offset -1, as they have none in their topic
    (unless they wait, and are spilled to it)."""
    offsets = pa.array(np.full(chunk.num_rows, -1, dtype=np.int64))
    return chunk.select(["key", "value", "timestamp", "headers"]).add_column(0, "offset", offsets)


def _bundle_row(topic: str, origin: int, chunks: list[tuple[int, pa.Table]]) -> dict[str, Any]:
    chunks.sort(key=lambda item: item[0])  # stable: a target's chunks keep their order
    parts = [
        placed(chunk).append_column(
            "partition", pa.array(np.full(chunk.num_rows, target, dtype=np.int32))
        )
        for target, chunk in chunks
    ]
    table = pa.concat_tables(parts, promote_options="permissive").cast(BUNDLE_SCHEMA)
    sink = pa.BufferOutputStream()
    with pa.ipc.RecordBatchStreamWriter(sink, BUNDLE_SCHEMA, options=_PLAIN) as writer:
        writer.write_table(table)
    return {
        "kind": BUNDLE,
        "topic": topic,
        "partition": -1,
        "count": table.num_rows,
        "origin": origin,
        "value": sink.getvalue().to_pybytes(),
    }


def bundle_inputs(
    bundles: Iterable[tuple[str, int, pa.Buffer]],
) -> dict[int, list[tuple[str, pa.Table]]]:
    """Each target partition's records from ``bundles`` (topic, origin, IPC stream): per
    partition, per origin in ascending order, each topic's records in their order (as the
    packs of a shuffle arrive), consecutive pieces of one topic joined."""
    pieces: list[tuple[int, int, str, pa.Table]] = []
    for topic, origin, blob in bundles:
        for target, records in _split(pa.ipc.open_stream(blob).read_all()):
            pieces.append((target, origin, topic, records))
    pieces.sort(key=lambda piece: piece[:3])
    inputs: dict[int, list[tuple[str, pa.Table]]] = {}
    for target, _origin, topic, records in pieces:
        mine = inputs.setdefault(target, [])
        if mine and mine[-1][0] == topic:
            mine[-1] = (topic, pa.concat_tables([mine[-1][1], records]))
        else:
            mine.append((topic, records))
    return inputs


def _split(table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    """The records of each target of a bundle (sorted by target), without the column."""
    targets = table.column("partition").to_numpy()
    records = table.drop_columns(["partition"])
    if not len(targets):
        return
    bounds = [0, *(np.flatnonzero(np.diff(targets)) + 1).tolist(), len(targets)]
    for start, end in itertools.pairwise(bounds):
        yield int(targets[start]), records.slice(start, end - start)
