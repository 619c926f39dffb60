"""The count's columnar kernel: a batch of raw key bytes counted with NumPy.

A count reads nothing of a value but its nullness, so a source's raw columns can be
counted without a Python object per record (:meth:`~topology.processors.
proc_stream_aggregate.StreamCountProcessor.process_arrow`): the keys are grouped by their
bytes inside Arrow, each distinct key is read from the store once and written once (its
``ValueAndTimestamp<Long>``, 8 bytes of timestamp then 8 of count, parsed and built as
arrays), and, without a cache, every record's update (its key's count so far, stamped with
the latest timestamp so far) is computed as arrays too: the results of the record-by-record
fold, without a step per record.
"""

from __future__ import annotations

import operator
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.columns import looks_distinct
from topology.api.record import Change

_new = tuple.__new__
_VAT_LONG = 16  # a stored count: 8 bytes of timestamp, 8 of count (big-endian)


class Groups(NamedTuple):
    """A batch's records grouped by key bytes: ``group_of[i]`` is record ``i``'s group, the
    groups in order of first appearance (``keys``: their bytes)."""

    keys: pa.Array
    group_of: np.ndarray
    sizes: np.ndarray  # records per group (or their weights)
    last: np.ndarray  # each group's last record
    rank: np.ndarray | None  # each record's place among its group's (None: all first)
    raw: list[bytes] | None  # ``keys`` as bytes objects, when they were made


def group(keys: Any, weights: Any = None) -> Groups:
    """Group ``keys`` (an Arrow binary column without nulls) by their bytes."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    n = len(keys)
    if looks_distinct(keys):  # Arrow's hashing of many distinct keys is slower
        raw = keys.to_pylist()
        if len(dict.fromkeys(raw)) == n:  # every key once: the groups are the records
            every = np.arange(n, dtype=np.int64)
            sizes = np.ones(n, np.int64) if weights is None else np.asarray(weights, np.int64)
            return Groups(keys, every, sizes, every, None, raw)
    encoded = pc.dictionary_encode(keys)
    index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    m = len(encoded.dictionary)
    if m == n:
        sizes = np.ones(n, np.int64) if weights is None else np.asarray(weights, np.int64)
        return Groups(encoded.dictionary, index, sizes, np.arange(n, dtype=np.int64), None, None)
    counts = np.bincount(index, minlength=m)
    order = np.argsort(index, kind="stable")
    starts = np.cumsum(counts) - counts
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n, dtype=np.int64) - starts[index[order]]
    last = order[starts + counts - 1]
    sizes = (
        counts.astype(np.int64)
        if weights is None
        else np.bincount(index, weights=np.asarray(weights, np.float64), minlength=m).astype(
            np.int64
        )
    )
    return Groups(encoded.dictionary, index, sizes, last, rank, None)


class Stored(NamedTuple):
    """Each group's stored count and timestamp (0 where ``present`` is False)."""

    counts: np.ndarray
    stamps: np.ndarray
    present: np.ndarray


def parse(raws: list[bytes | None]) -> Stored | None:
    """The stored ``ValueAndTimestamp<Long>`` entries; None when one is not 16 bytes."""
    present = np.fromiter(map(operator.is_not, raws, repeat(None)), bool, len(raws))
    counts = np.zeros(len(raws), np.int64)
    stamps = np.zeros(len(raws), np.int64)
    if present.any():
        joined = b"".join(raw for raw in raws if raw is not None)
        if len(joined) != _VAT_LONG * int(present.sum()):
            return None
        pairs = np.frombuffer(joined, ">i8")
        stamps[present] = pairs[0::2]
        counts[present] = pairs[1::2]
    return Stored(counts, stamps, present)


def encode(counts: np.ndarray, stamps: np.ndarray) -> list[bytes]:
    """``ValueAndTimestamp<Long>`` bytes of each count and its timestamp."""
    pairs = np.empty((len(counts), 2), ">i8")
    pairs[:, 0] = stamps
    pairs[:, 1] = counts
    buffer = pairs.tobytes()
    return [buffer[i : i + _VAT_LONG] for i in range(0, len(buffer), _VAT_LONG)]


def running_max(index: np.ndarray, ts: np.ndarray, m: int) -> np.ndarray | None:
    """Each record's latest timestamp among its group's records so far (itself included);
    None where the sums would not fit 64 bits."""
    if len(ts) < 2 or bool((ts[1:] >= ts[:-1]).all()):  # in time order: each is the latest
        return ts
    low, span = int(ts.min()), int(ts.max()) - int(ts.min()) + 1
    if m * span >= 1 << 62:
        return None
    # groups lifted apart, so one running maximum never carries from a group to the next
    order = np.argsort(index, kind="stable")
    lifted = (ts[order] - low) + index[order] * span
    out = np.empty_like(ts)
    out[order] = np.maximum.accumulate(lifted) - index[order] * span + low
    return out


class Updates(NamedTuple):
    """Every record's update, in record order (for a count without a cache)."""

    changes: list[Any]
    stamps: list[int]


def every_update(
    groups: Groups, stored: Stored, ts: np.ndarray, *, send_old: bool
) -> tuple[Updates, np.ndarray] | None:
    """Each record's ``Change(count so far, count before it or None)`` and timestamp (the
    latest so far, the stored one included), and each group's last timestamp so stamped;
    None when the timestamps are too far apart to be lifted into 64 bits."""
    index = groups.group_of
    running = running_max(index, ts, len(groups.keys))
    if running is None:
        return None
    base = stored.counts[index]
    if groups.rank is not None:
        base = base + groups.rank
    present = stored.present[index]
    stamps = np.where(present, np.maximum(running, stored.stamps[index]), running)
    news = (base + 1).tolist()
    if send_old:
        olds: list[Any] = base.tolist()
        fresh = ~present if groups.rank is None else ~present & (groups.rank == 0)
        for i in np.flatnonzero(fresh).tolist():
            olds[i] = None  # a key's first count replaces nothing
        changes = list(map(_new, repeat(Change), zip(news, olds, strict=True)))
    else:
        changes = list(map(_new, repeat(Change), zip(news, repeat(None))))
    return Updates(changes, stamps.tolist()), stamps[groups.last]


def latest(groups: Groups, ts: np.ndarray, stored: Stored) -> np.ndarray:
    """Each group's latest timestamp, the stored one included."""
    top = np.full(len(groups.keys), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(top, groups.group_of, ts)
    return np.where(stored.present, np.maximum(top, stored.stamps), top)
