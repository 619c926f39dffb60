"""A windowed count of a source's raw columns inside Arrow (tumbling and hopping windows).

``windowed_by(TimeWindows...).count()`` reads nothing of a record but its key, its
timestamp and its key's nullness. With a cache (one update per key and window at the
flush), a batch of raw columns is counted without a Python object per record: the
processor's observed stream time is a running maximum, each record is paired with the
windows holding it, a pair whose window has closed (``end <= stream time - grace``) is
dropped, and the pairs are grouped by key bytes and window start, giving each window's
count, latest timestamp and last update. Only distinct keys are deserialized, and each key
and window is read and written once (all read at once, then all written at once), in the
order of its last update, which is the cache's dirty order of record-at-a-time
processing. The drops and the observed stream time are those of record-at-a-time
processing, record for record. Under emit-on-close, the windows the records closed are
emitted between the reads and the writes (see :mod:`topology.processors.proc_window`).

Combined records (``weights``: :mod:`topology.engine.combine`) are counted here under
emit-on-close too. A combined record stands at its group's last record with that record's
timestamp, so the stream time at each combined record is the one the records had there,
and a batch's last record closes the same windows; none of the batch's own windows is
closed (else the batch runs again uncombined), so what goes out are stored windows with
their stored aggregates. What may differ is only which record looks for closed windows
when the emit interval throttles (a later one of the batch, as a wall clock that lapsed a
little later would have chosen) and so which record's headers a window goes out with.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa

from common.columns import column_decodes, deserialize_column
from common.errors import SerializationError
from topology.api.record import ValueAndTimestamp
from topology.api.windows import MAX_TIME, TimeWindows


def count_windows(  # noqa: PLR0917 - a source's raw columns
    node: Any,
    topic: str,
    keys: Any,
    timestamps: Any,
    key_serde: Any,
    values: Any,
    value_serde: Any,
    weights: Any = None,
) -> bool:
    """Count the columns into ``node``'s windows (a ``TimeWindowAggregateProcessor`` that
    counts, with a cache). Return False, having done nothing, when they must go the usual
    way: no cache, debug logging of drops, a key or value that would not deserialize, or
    timestamps near the end of time; and, ``weights`` given (how many records each row
    stands for: combined records, see :mod:`topology.engine.combine`), when any record
    finds a window closed."""
    windows = node.windows
    closing = node.emitter is not None  # emit on close: nothing forwarded per update
    if (
        not isinstance(windows, TimeWindows)
        or not (node.forwarder.buffered or closing)
        or logging.getLogger("topology.processors.proc_window").isEnabledFor(logging.DEBUG)
        or not column_decodes(value_serde, values)
    ):
        return False
    size, advance, grace = windows.size_ms, windows.advance_ms, windows.grace_ms
    stamps = np.asarray(timestamps, dtype=np.int64)
    valid = np.flatnonzero(np.asarray(keys.is_valid(), dtype=bool))
    t = stamps[valid]
    if len(t) and int(t.max()) > MAX_TIME - size:
        return False
    seen = np.maximum.accumulate(t) if len(t) else t
    stream = np.maximum(seen, node.observed_stream_time)
    first = (np.maximum(0, t - size + advance) // advance) * advance
    steps = np.arange(-(-size // advance), dtype=np.int64)
    starts = first[:, None] + steps[None, :] * advance
    holding = starts <= t[:, None]
    closed = (starts + size) <= (stream - grace)[:, None]
    late = holding & closed
    if weights is not None and bool(late.any()):
        return False  # a combined record's stream time is not its records' one by one
    rows, step = np.nonzero(holding & ~closed)  # in update order: record, then window start
    pairs = pa.table(
        {
            "k": keys.take(pa.array(valid[rows])),
            "s": starts[rows, step],
            "t": t[rows],
            "p": np.arange(len(rows), dtype=np.int64),
            "w": np.ones(len(rows), np.int64)
            if weights is None
            else np.asarray(weights, np.int64)[valid][rows],
        }
    )
    groups = (
        pairs.group_by(["k", "s"], use_threads=False)
        .aggregate([("p", "max"), ("w", "sum"), ("t", "max")])
        .sort_by("p_max")
    )
    try:
        decoded = deserialize_column(key_serde, topic, groups.column("k"))
    except SerializationError:
        return False
    if any(key is None for key in decoded):  # a serde reading these bytes as no key
        return False
    if closing:
        try:
            set(decoded)
        except TypeError:  # unhashable keys: the usual way
            return False
    store = node.store
    last_ts = t[rows][groups.column("p_max").to_numpy()].tolist()
    starts = groups.column("s").to_pylist()
    updated = []
    for stored, many, latest in zip(
        store.fetch_values(decoded, starts),
        groups.column("w_sum").to_pylist(),
        groups.column("t_max").to_pylist(),
        strict=True,
    ):
        if stored is not None:
            many += stored[0]  # noqa: PLW2901 - the new count
            latest = max(latest, stored[1])  # noqa: PLW2901 - its timestamp
        updated.append(ValueAndTimestamp(many, latest))
    if closing and len(t):  # the windows these records closed, before the writes
        node.emit_batch(
            valid.tolist(),
            (stream - grace).tolist(),
            dict(zip(zip(decoded, starts, strict=True), updated, strict=True)),
        )
    # each written with its last update's timestamp, as one put after another would be
    store.put_many(decoded, updated, starts, last_ts)
    if last_ts:
        node.context.set_timestamp(last_ts[-1])
    if len(t):
        node.observed_stream_time = int(stream[-1])
    drops = len(stamps) - len(valid) + int(late.sum())
    node.dropped += drops
    record_dropped = getattr(node.context, "record_dropped", None)
    if record_dropped is not None:
        for _ in range(drops):
            record_dropped()
    return True
