"""Columnar processing: a node receives a batch of records as columns and hands a batch on.

A task processes one topic-partition's records of a poll (``StreamTask.process_columns``)
as a :class:`Batch`: keys, values, timestamps and headers as lists, plus each record's
input row. A node that can take a batch whole (the stateless DSL operators, the stream, table,
time-, sliding- and session-windowed aggregations (emitting on update or on window
close), ``suppress``, table sources, a table's filter, map_values, transform_values and
group_by re-keying, stream-table, stream-stream and table-table joins (inner, left and
outer), sinks) has a ``process_batch``: the user's function is called once per record and
nothing else is. Any other node (a Processor-API node) gets a batch through
:func:`record_entry`, which feeds
it record by record with the record context a record-at-a-time run gives it (the input
record's offset and headers, the stream time up to that record), so it behaves exactly as
in the record engine.

Batches change the order in which *different* nodes see records (one node takes the whole
batch before its child does), never the order within one node, so a source runs columnar
only where that cannot change a result (:func:`columnar_source`, decided when the task is
built): every node below it is reached by one path, no two of those nodes share a store,
and no two of its sinks write one topic. Stream-time punctuators fire between the records
where the record engine fires them: the batch is cut there.
"""

from __future__ import annotations

import gc
import operator
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import wraps
from itertools import accumulate, chain, repeat
from typing import TYPE_CHECKING, Any, NamedTuple, ParamSpec, TypeVar, overload

import numpy as np

from topology.api.record import Headers, Record
from topology.engine.task_api import TaskView
from topology.graph.graph import ProcessorSpec, SinkSpec

if TYPE_CHECKING:
    from topology.graph.topology import Topology

_new = tuple.__new__
_NO_HEADERS: Headers = ()
#: A bound below which a sum of int64 products cannot overflow.
_SAFE_SUM = 1 << 62
P = ParamSpec("P")
R = TypeVar("R")

#: ``processing.engine``: how a task feeds records to its nodes.
ENGINES = ("columnar", "record")


class Repeated:
    """A column of ``items[i]`` repeated ``counts[i]`` times, in order (what a flat map's
    expansion makes of its input's keys and timestamps), kept as the two until read."""

    __slots__ = ("_arrays", "counts", "items")

    def __init__(self, items: Sequence[Any], counts: list[int]) -> None:
        self.items = items
        self.counts = counts
        self._arrays: tuple[Any, Any] | None = None

    def materialized(self) -> list[Any]:
        """The column as a list."""
        return list(chain.from_iterable(map(repeat, self.items, self.counts)))

    def int_arrays(self) -> tuple[Any, Any]:
        """The items (ints) and the counts as int64 NumPy arrays."""
        if self._arrays is None:
            items, counts = self.items, self.counts
            self._arrays = (
                np.fromiter(items, np.int64, len(items)),
                np.fromiter(counts, np.int64, len(counts)),
            )
        return self._arrays


class Batch:
    """Records as columns: ``headers`` None when no record has any; ``rows`` the input row
    each record came from (for the record context of nodes fed record by record). Keys
    and timestamps may be given as :class:`Repeated` (a flat map's expansion): they are
    made lists when first read, and what the timestamps sum to is known without them
    (:meth:`timestamp_figures`), so a chain that never reads a column costs nothing per
    record for it."""

    __slots__ = ("_keys", "_timestamps", "headers", "rows", "values")

    def __init__(
        self,
        keys: list[Any] | Repeated,
        values: list[Any],
        timestamps: list[int] | Repeated,
        headers: list[Headers] | None,
        rows: Sequence[int],
    ) -> None:
        self._keys = keys
        self.values = values
        self._timestamps = timestamps
        self.headers = headers
        self.rows = rows

    @property
    def keys(self) -> list[Any]:
        """The records' keys."""
        ks = self._keys
        if isinstance(ks, Repeated):
            ks = self._keys = ks.materialized()
        return ks

    @property
    def timestamps(self) -> list[int]:
        """The records' timestamps."""
        ts = self._timestamps
        if isinstance(ts, Repeated):
            ts = self._timestamps = ts.materialized()
        return ts

    def timestamp_array(self) -> Any:
        """The records' timestamps as an int64 NumPy array."""
        ts = self._timestamps
        if isinstance(ts, Repeated):
            return np.repeat(*ts.int_arrays())
        return np.fromiter(ts, np.int64, len(ts))

    def timestamp_figures(self) -> tuple[int, int, int, int] | None:
        """``(records, least, greatest, sum)`` of the timestamps, None when there are none;
        from the repeated timestamps when they are (a few input records, not every
        output)."""
        ts = self._timestamps
        if not isinstance(ts, Repeated):
            return (len(ts), min(ts), max(ts), sum(ts)) if ts else None
        n = len(self.values)
        if not n:
            return None
        stamps, counts = ts.int_arrays()
        present = counts > 0
        if not present.all():
            stamps, counts = stamps[present], counts[present]
        low, high = int(stamps.min()), int(stamps.max())
        if (high - low) * n < _SAFE_SUM:  # each distance from the least times its count
            return n, low, high, low * n + int((stamps - low) @ counts)
        return n, low, high, sum(map(operator.mul, ts.items, ts.counts))

    def __len__(self) -> int:
        return len(self.values)

    def take(self, index: Sequence[int]) -> Batch:
        """The records at ``index``, in that order."""
        ks, vs, ts = self.keys, self.values, self.timestamps
        return self.standing_at(
            index, [ks[i] for i in index], [vs[i] for i in index], [ts[i] for i in index]
        )

    def standing_at(
        self,
        index: Sequence[int],
        keys: list[Any],
        values: list[Any],
        timestamps: list[int],
        headers: bool = True,
    ) -> Batch:
        """New records, one for each record at ``index`` of this batch, with that record's
        headers (none when ``headers`` is false) and input row."""
        hs = self.headers if headers else None
        return Batch(
            keys,
            values,
            timestamps,
            None if hs is None else [hs[i] for i in index],
            rows_at(self.rows, index),
        )

    def with_keys(self, keys: list[Any]) -> Batch:
        """The same records with new keys."""
        return Batch(keys, self.values, self._timestamps, self.headers, self.rows)

    def with_values(self, values: list[Any]) -> Batch:
        """The same records with new values."""
        return Batch(self._keys, values, self._timestamps, self.headers, self.rows)

    def header(self, i: int) -> Headers:
        """The headers of record ``i``."""
        hs = self.headers
        return _NO_HEADERS if hs is None else hs[i]


class ExpandedRows(Sequence[int]):
    """The input rows of a batch a flat map expanded: ``rows[i]`` ``counts[i]`` times, in
    order. Kept as the counts until read: a node that never reads its records' rows (a
    stateless chain, a combining sink) costs nothing per record; one fed record by record
    reads them as a list, built once (:meth:`materialized`); a few records' rows
    (:func:`rows_at`) are found by bisection."""

    __slots__ = ("_counts", "_ends", "_list", "_n", "_rows")

    def __init__(self, rows: Sequence[int], counts: list[int], n: int) -> None:
        self._rows = rows
        self._counts = counts
        self._n = n
        self._ends: list[int] | None = None
        self._list: list[int] | None = None

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        return self.materialized()[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.materialized())

    def materialized(self) -> list[int]:
        """Every record's row, as a list."""
        if self._list is None:
            self._list = list(chain.from_iterable(map(repeat, self._rows, self._counts)))
        return self._list

    def pick(self, index: Iterable[int]) -> list[int]:
        """The rows of the records at ``index``."""
        if self._list is not None:
            return [self._list[i] for i in index]
        if self._ends is None:
            self._ends = list(accumulate(self._counts))
        ends, rows = self._ends, self._rows
        return [rows[bisect_right(ends, i)] for i in index]


def rows_at(rows: Sequence[int], index: Iterable[int]) -> list[int]:
    """The rows of the records at ``index`` of a batch whose rows are ``rows``."""
    if type(rows) is ExpandedRows:
        return rows.pick(index)
    return [rows[i] for i in index]


def expanded(
    batch: Batch, keys: list[Any] | Repeated, values: list[Any], counts: list[int]
) -> Batch:
    """The batch of ``keys``/``values`` a flat map expanded from ``batch``: record ``i`` of
    ``batch`` became ``counts[i]`` records, with its timestamp, headers and row."""
    hs = batch.headers
    return Batch(
        keys,
        values,
        Repeated(batch.timestamps, counts),
        None if hs is None else list(chain.from_iterable(map(repeat, hs, counts))),
        ExpandedRows(batch.rows, counts, len(values)),
    )


@contextmanager
def collection_paused() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector while a batch runs (no-op where it is
    off already). A batch allocates a container or more per record (a line's words, a
    record tuple), almost all freed at once by reference counting; the collector, run
    every few hundred allocations, would scan them and everything alive for nothing.
    Cycles a batch makes wait for the next collection after it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def paused_collection(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` with the cyclic garbage collector paused (:func:`collection_paused`)."""

    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with collection_paused():
            return fn(*args, **kwargs)

    return run


#: A node's batch entry.
BatchForward = Callable[[Batch], None]

#: A node's entry for a source's raw columns: ``(topic, keys, values, timestamps,
#: key_serde, value_serde, weights)`` with keys and values Arrow binary columns as read,
#: ``weights`` None or how many records each row stands for (combined records, see
#: :mod:`topology.engine.combine`); returns whether the node took them (False: the batch
#: goes the usual way, nothing done).
ArrowEntry = Callable[[str, Any, Any, Sequence[int], Any, Any, Sequence[int] | None], bool]


class InputColumns(NamedTuple):
    """One topic-partition's records as columns, as a task is given them
    (``StreamTask.process_columns``): keys and values Arrow binary columns or sequences of
    bytes, timestamps and offsets int columns, ``headers`` None when no record has any.
    Once deserialized, the same with keys and values as objects and ints as lists."""

    topic: str
    partition: int
    keys: Any
    values: Any
    timestamps: Any
    offsets: Any
    headers: Sequence[Headers] | None


class BatchInput:
    """The input rows of the batch being processed: what a node fed record by record
    reads as its record context."""

    __slots__ = ("_stream_time", "_stream_times", "_timestamps", "headers", "offsets")

    def __init__(
        self,
        offsets: Sequence[int],
        headers: Sequence[Headers] | None,
        timestamps: Sequence[int],
        stream_time: int,
    ) -> None:
        self.offsets = offsets
        self.headers = headers
        self._timestamps = timestamps
        self._stream_time = stream_time
        self._stream_times: list[int] | None = None

    @property
    def stream_times(self) -> list[int]:
        """The task's stream time once each row is taken (the record engine's)."""
        if self._stream_times is None:
            self._stream_times = list(accumulate(self._timestamps, max, initial=self._stream_time))[
                1:
            ]
        return self._stream_times


def record_entry(task: TaskView, forward: Callable[[Record[Any, Any]], None]) -> BatchForward:
    """Feed a batch to ``forward`` (a node's per-record entry) record by record, each with
    the record context the record engine gives it."""

    def run(batch: Batch) -> None:
        given = task.batch_input
        if given is None:  # a batch outside process_columns (a cache flush): no row context
            ks, vs, ts = batch.keys, batch.values, batch.timestamps
            for i in range(len(ks)):
                task.current_timestamp = ts[i]
                forward(_new(Record, (ks[i], vs[i], ts[i], batch.header(i))))
            return
        offsets, in_headers, times = given.offsets, given.headers, given.stream_times
        ks, vs, ts, hs, rows = batch.keys, batch.values, batch.timestamps, batch.headers, batch.rows
        if type(rows) is ExpandedRows:
            rows = rows.materialized()
        after = task.stream_time  # where the batch being run leaves it
        try:
            for i in range(len(ks)):
                row = rows[i]
                task.current_offset = offsets[row]
                task.current_headers = _NO_HEADERS if in_headers is None else in_headers[row]
                task.stream_time = times[row]
                task.current_timestamp = ts[i]
                forward(_new(Record, (ks[i], vs[i], ts[i], _NO_HEADERS if hs is None else hs[i])))
        finally:
            task.stream_time = after

    return run


def columnar_source(topology: Topology, source: str, subtopology_nodes: Sequence[str]) -> bool:
    """Whether the records of ``source`` may run columnar: below it every node is reached by
    one path, no two nodes share a store, and no two sinks write one topic (or any sink
    names its topic per record while another sink exists), so taking a batch node by node
    gives each node, store and topic-partition the record engine's order."""
    inside = set(subtopology_nodes)
    seen: set[str] = set()
    stores: set[str] = set()
    topics: set[str | None] = set()
    sinks = 0
    todo = [source]
    while todo:
        name = todo.pop()
        for kid in topology.children.get(name, ()):
            if kid not in inside:
                continue
            if kid in seen:
                return False  # reached twice (a merge of two paths from this source)
            seen.add(kid)
            spec = topology.nodes[kid]
            if isinstance(spec, ProcessorSpec):
                if stores & set(spec.stores):
                    return False
                stores.update(spec.stores)
            elif isinstance(spec, SinkSpec):
                sinks += 1
                topic = spec.topic if spec.topic_extractor is None else None
                if topic in topics or (None in topics and sinks > 1):
                    return False
                if topic is None and sinks > 1:
                    return False
                topics.add(topic)
            todo.append(kid)
    return True


def batch_children(
    names: Sequence[str], entries: Mapping[str, BatchForward]
) -> tuple[BatchForward, ...]:
    """The batch entries of the children ``names`` (those inside the task)."""
    return tuple(entries[n] for n in names if n in entries)


def arrow_entry(children: Sequence[Any]) -> ArrowEntry | None:
    """The raw-column entry of a source whose only child takes raw columns (a count, which
    reads no value but its nullness: its keys are grouped inside Arrow, and only distinct
    keys are deserialized), else None."""
    if len(children) != 1:
        return None
    entry: ArrowEntry | None = getattr(children[0], "process_arrow", None)
    return entry
