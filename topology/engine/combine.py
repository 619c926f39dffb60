"""Combining a count's records before its repartition topic (Spark's partial aggregation).

``group_by(...).count()`` repartitions every record to the task that counts it, which
reads nothing of a record but its key, its timestamp and whether key and value are null.
When that count caches its updates (Kafka's default), a columnar sink writing its
repartition topic combines a batch's records per key into one record that stands for
many: the key, the value of the key's last record, the latest timestamp, the last
record's headers, and the header :data:`COMBINED_HEADER` with how many records it stands
for (8 bytes, big-endian; absent when one). The records go out in the order of each key's
last record, so the counting task sees its keys in the order the record engine would
have left them in the cache (its dirty order), and forwards the same updates at the
flush: the same counts, with the same timestamps (a count keeps the latest), in the same
order. What shrinks is the repartition topic and the work of the counting task.

Only records whose result cannot depend on it are combined (:func:`combined_topics`,
decided from the topology and the configuration alone, so that every task agrees): the
topic is read by one source alone, the only node below it is the count, no Processor-API
node is in its sub-topology, the source is the sub-topology's only one, and timestamps are
the records' own. A batch with a null key or value, a negative timestamp, or keys other
than strings, integers or bytes goes as it is.

A task reading such a topic (:func:`combinable_topics`: the same conditions but the
cache's, which a restart may change) counts a combined record as the records it stands
for: inside Arrow with their weights, or expanded back into that many records for the
record-at-a-time paths.

A windowed count (``windowed_by(TimeWindows...).count()``) is combined too, per key and
*window set* (the records of one key whose timestamps fall in the same hopping windows),
but only inside a batch (:func:`combine_windowed`): its result depends on the order of
records through stream time, which decides which windows have closed. A batch whose
timestamps all ascend is combined when none of its records would find a window closed
even at its last timestamp; every record then carries the header (weight 1 included), at
the position of its group's last record, with that record's timestamp (the group's
latest). The counting task counts them inside Arrow when no window of any of them is
closed at the stream time it is counted at (the running maximum of the combined records'
timestamps: within a combined batch, which ascends, at least every one of its records'
own): no record was then late in the original order either, and the counts, timestamps
and cache order are those of the records one by one. Otherwise it raises
:class:`~common.errors.CombinedRecordsLateError` and the stream thread runs the batch
again without combining. Combined windowed records
are never written to a topic (the runtime combines only the repartition topics a batch
shuffles inside itself, under exactly_once_v2, whose batches run again invisibly), so a
record of a stored topic is always counted as it is.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from common.columns import looks_distinct
from common.errors import StreamsError
from topology.api.record import Headers
from topology.api.timestamps import FailOnInvalidTimestamp, extractor_from_name
from topology.api.windows import MAX_TIME, TimeWindows
from topology.engine.columnar import Batch, rows_at
from topology.graph.graph import ProcessorSpec, SourceSpec

if TYPE_CHECKING:
    from common.config import StreamsConfig
    from topology.graph.topology import Topology

#: The header of a combined record: how many records it stands for.
COMBINED_HEADER = "__streams.combined.count"

#: :attr:`~topology.graph.graph.ProcessorSpec.combiner` of a count, and of a windowed count
#: over time windows.
COUNT, WINDOWED_COUNT = "count", "windowed-count"

_BINARY = pa.binary()
_ARROW_KEY_TYPES = {str: pa.string(), bytes: _BINARY, int: pa.int64()}


def combinable_topics(topology: Topology, application_id: str) -> frozenset[str]:
    """The repartition topics (runtime names) read by a count whose records may arrive
    combined: their one reader's only child is a count, alone in its sub-topology with
    DSL nodes below it, records timestamped by the default extractor."""
    return frozenset(_readers(topology, application_id, COUNT))


def windowed_topics(topology: Topology, application_id: str) -> frozenset[str]:
    """The repartition topics (runtime names) read by a windowed count whose records may
    arrive combined inside a batch (the conditions of :func:`combinable_topics`)."""
    return frozenset(_readers(topology, application_id, WINDOWED_COUNT))


def _readers(topology: Topology, application_id: str, combiner: str) -> dict[str, ProcessorSpec]:
    """:func:`combinable_topics` of the counts named ``combiner``, with the count reading
    each."""
    readers = Counter(
        topic
        for spec in topology.nodes.values()
        if isinstance(spec, SourceSpec)
        for topic in spec.topics
    )
    found: dict[str, ProcessorSpec] = {}
    for sub in topology.task_subtopologies():
        if len(sub.sources) != 1:
            continue
        source = topology.nodes[sub.sources[0]]
        if (
            not isinstance(source, SourceSpec)
            or not source.internal
            or source.pattern is not None
            or len(source.topics) != 1
            or readers[source.topics[0]] != 1
            or source.timestamp_extractor is not None
        ):
            continue
        kids = [kid for kid in topology.children[source.name] if kid in sub.nodes]
        count = topology.nodes[kids[0]] if len(kids) == 1 else None
        if not isinstance(count, ProcessorSpec) or count.combiner != combiner:
            continue
        specs = [topology.nodes[name] for name in sub.nodes]
        if any(isinstance(spec, ProcessorSpec) and spec.user_code for spec in specs):
            continue
        found[topology.topic_name(source.topics[0], application_id, internal=True)] = count
    return found


def combined_topics(topology: Topology, config: StreamsConfig) -> frozenset[str]:
    """The repartition topics (runtime names) a columnar sink combines its batches for:
    :func:`combinable_topics` whose count caches (a store with caching, a cache of more
    than 0 bytes), with the default timestamp extractor reading the records' own."""
    return frozenset(_cached_readers(topology, config, COUNT))


def windowed_combined_topics(topology: Topology, config: StreamsConfig) -> dict[str, Any]:
    """The repartition topics (runtime names) whose records a columnar sink may combine
    inside a batch (:func:`combine_windowed`), with the time windows of the windowed count
    reading each: :func:`windowed_topics` whose count caches, timestamps the records' own,
    under exactly_once_v2 only (a batch that finds its combined records late runs again,
    which only a transaction makes invisible: an at_least_once task commits its stores as
    it goes, so a second attempt would count the batch twice)."""
    found: dict[str, Any] = {}
    if config.processing_guarantee != "exactly_once_v2":
        return found
    for topic, count in _cached_readers(topology, config, WINDOWED_COUNT).items():
        windows = getattr(count.supplier(), "windows", None)
        if isinstance(windows, TimeWindows):
            found[topic] = windows
    return found


def _cached_readers(
    topology: Topology, config: StreamsConfig, combiner: str
) -> dict[str, ProcessorSpec]:
    if config.statestore_cache_max_bytes <= 0:
        return {}
    if type(extractor_from_name(config.default_timestamp_extractor)) is not FailOnInvalidTimestamp:
        return {}
    return {
        topic: count
        for topic, count in _readers(topology, config.application_id, combiner).items()
        if count.stores
        and all(getattr(topology.stores[s], "caching_enabled", False) for s in count.stores)
    }


def combine_counts(batch: Batch, values_valid: bool = False) -> Batch | None:
    """The batch's records combined per key (see the module), or None when it has nothing
    to combine or must go as it is. ``values_valid``: the values are known not to be null
    (they are the keys)."""
    ks, vs, n = batch.keys, batch.values, len(batch.keys)
    keys = _key_column(batch, values_valid)
    if keys is None or looks_distinct(keys):  # (new keys: nothing to combine)
        return None
    ts = batch.timestamp_array()
    table = pa.table({"k": keys, "t": ts, "i": np.arange(n, dtype=np.int64)})
    groups = table.group_by("k", use_threads=False).aggregate(
        [("i", "max"), ("i", "count"), ("t", "max")]
    )
    if len(groups) == n or int(ts.min()) < 0:
        return None
    groups = groups.sort_by("i_max")  # each key at its last record: the cache's order
    order = groups.column("i_max").to_pylist()
    counts = groups.column("i_count").to_pylist()
    hs, rows = batch.headers, batch.rows
    headers: list[Headers] = []
    for i, many in zip(order, counts, strict=True):
        own = () if hs is None else hs[i]
        headers.append(own if many == 1 else (*own, (COMBINED_HEADER, many.to_bytes(8, "big"))))
    kept = [ks[i] for i in order]
    return Batch(
        kept,
        kept if vs is ks else [vs[i] for i in order],
        groups.column("t_max").to_pylist(),
        headers,
        rows_at(rows, order),
    )


def combine_windowed(
    batch: Batch, windows: TimeWindows, values_valid: bool = False
) -> Batch | None:
    """The batch's records combined per key and window set (see the module), every one
    marked with its weight; None when the batch goes as it is: timestamps that do not
    ascend, a record that would find a window closed at the batch's last timestamp, a
    null key or value, keys other than strings, integers or bytes, or nothing to combine.
    ``values_valid``: the values are known not to be null (they are the keys)."""
    ks, n = batch.keys, len(batch.keys)
    keys = _key_column(batch, values_valid)
    if keys is None:
        return None
    ts = batch.timestamp_array()
    size, advance = windows.size_ms, windows.advance_ms
    if int(ts[0]) < 0 or int(ts[-1]) > MAX_TIME - size or bool((ts[1:] < ts[:-1]).any()):
        return None
    first = np.maximum(0, ts - size + advance) // advance  # the windows [first, last]
    # ascending: the first record's earliest window ends first
    if int(first[0]) * advance + size <= int(ts[-1]) - windows.grace_ms:
        return None
    table = pa.table({"k": keys, "f": first, "l": ts // advance, "i": np.arange(n, dtype=np.int64)})
    groups = table.group_by(["k", "f", "l"], use_threads=False).aggregate(
        [("i", "max"), ("i", "count")]
    )
    if len(groups) == n:
        return None
    groups = groups.sort_by("i_max")  # each group at its last record: the cache's order
    order = groups.column("i_max").to_pylist()
    hs, vs = batch.headers, batch.values
    kept = [ks[i] for i in order]
    return Batch(
        kept,
        kept if vs is ks else [vs[i] for i in order],
        ts[order].tolist(),
        [
            (*(() if hs is None else hs[i]), (COMBINED_HEADER, many.to_bytes(8, "big")))
            for i, many in zip(order, groups.column("i_count").to_pylist(), strict=True)
        ],
        rows_at(batch.rows, order),
    )


def _key_column(batch: Batch, values_valid: bool) -> Any:
    """The batch's keys as an Arrow column, or None when its records must go as they are:
    fewer than two, a null key or value, keys of another or of more than one type."""
    ks, vs = batch.keys, batch.values
    kind = _ARROW_KEY_TYPES.get(type(ks[0])) if len(ks) > 1 else None
    # one key type: given a type, Arrow would take "a" as b"a", or 1.0 as 1. Inferred, a
    # bytes among str makes binary and a float among ints double (a bool fails): only
    # binary keys need their types checked
    if kind is None or (kind is _BINARY and len(set(map(type, ks))) != 1):
        return None
    try:
        keys = pa.array(ks)
    except (pa.ArrowException, OverflowError):
        return None
    if keys.type != kind:
        return None
    if keys.null_count or (not values_valid and any(map(operator.is_, vs, repeat(None)))):
        return None
    return keys


def weights_of(headers: Sequence[Headers]) -> tuple[list[int], list[Headers]] | None:
    """Each record's weight (how many records it stands for) and its headers without the
    combined header; None when no record is combined."""
    weights: list[int] = []
    stripped: list[Headers] = []
    combined = False
    for hs in headers:
        many, kept = 1, hs
        if hs and any(h[0] == COMBINED_HEADER for h in hs):
            rest = []
            for name, value in hs:
                if name == COMBINED_HEADER:
                    many = _weight(value)
                else:
                    rest.append((name, value))
            kept, combined = tuple(rest), True
        weights.append(many)
        stripped.append(kept)
    return (weights, stripped) if combined else None


def _weight(value: bytes | None) -> int:
    if value is None or len(value) != 8 or not 0 < (many := int.from_bytes(value, "big")) < 1 << 62:
        raise StreamsError(
            f"a record of a count's repartition topic carries the header {COMBINED_HEADER} "
            f"with {value!r}, not a count of 8 bytes: only the application writes that "
            "topic; do not produce to it (or reset the application to read past it)"
        )
    return many


def expansion(weights: Sequence[int]) -> Any:
    """The row of every record a combined batch stands for (row ``i`` ``weights[i]``
    times), as an int64 array."""
    return np.repeat(np.arange(len(weights), dtype=np.int64), np.asarray(weights, np.int64))


def take_rows(column: Any, index: Any) -> Any:
    """``column`` (an Arrow column or a sequence) at ``index``."""
    if hasattr(column, "take"):
        return column.take(pa.array(index))
    return [column[i] for i in index.tolist()]
