"""Processors of time-windowed aggregations (Kafka's ``KStreamWindowAggregate``) and what
the windowed processors share: the window store, the forwarder, the observed stream time
and the dropped-record count.

Each processor keeps its own *observed stream time* (the largest timestamp it has seen, as
Kafka's); a window closes at ``observed stream time - grace``. A record whose key is null,
or that would only update closed windows, is dropped and counted in the task's
``dropped_records`` (Kafka's ``dropped-records`` sensor).

Under ``EmitStrategy.on_window_close()`` updates are not forwarded: each window goes out
once when it closes (see :mod:`topology.processors.window_emit`). A record looks for the
windows its stream time closed *before* its own writes: those cannot touch a closed window,
so the result is Kafka's (which looks after them), and a record that moves stream time
far cannot expire from the store a window it closes before it is emitted. A batch folds
its records first, then emits what its records closed (its folded windows read over the
store's), then writes.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from statestores.api import Window, Windowed
from topology.api.emit import ON_WINDOW_UPDATE, EmitStrategy
from topology.api.processor import Processor
from topology.api.record import Change, Record, ValueAndTimestamp
from topology.api.windows import FixedWindows, TimeWindows
from topology.engine.columnar import Batch, rows_at
from topology.engine.context import NodeContext
from topology.engine.nodes import user_error
from topology.processors.proc_aggregate import count_add, count_init
from topology.processors.proc_table import TableParams, TupleForwarder
from topology.processors.window_count import count_windows
from topology.processors.window_emit import (
    NO_TIMESTAMP,
    SilentForwarder,
    WindowCloseEmitter,
    forward_final,
)

_LOG = logging.getLogger(__name__)
_new = tuple.__new__
AnyRecord = Record[Any, Any]
NO_TIME = -1


def count_dropped(context: Any) -> None:
    """Count one dropped record on the task (Kafka's task-level ``dropped-records``)."""
    record_dropped = getattr(context, "record_dropped", None)
    if record_dropped is not None:
        record_dropped()


class WindowedAggregating(Processor[Any, Any, Any, Any]):
    """Holds the store, the forwarder and the observed stream time of a windowed
    aggregation node."""

    context: NodeContext

    def __init__(
        self,
        name: str,
        params: TableParams,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        *,
        emit: EmitStrategy = ON_WINDOW_UPDATE,
    ) -> None:
        self.name = name
        self.params = params
        self.initializer = initializer
        self.aggregator = aggregator
        self.emit_strategy = emit
        self.observed_stream_time = NO_TIME
        self.dropped = 0
        #: The emit-on-close bookkeeping (None: every update is forwarded).
        self.emitter: WindowCloseEmitter | None = None

    def init(self, context: Any) -> None:
        """Open the store and set up forwarding (on cache flush when caching is on)."""
        self.context = context
        assert self.params.store_name is not None
        self.store: Any = context.get_state_store(self.params.store_name)
        self.send_old = self.params.send_old_values
        # the observed stream time commits with the windows: a task rebuilt from its
        # committed state (a crash, a batch run again) drops the records the run that was
        # not interrupted dropped
        keep = getattr(self.store, "keep_meta", None)
        if keep is not None:
            found = keep(f"stream-time:{self.name}", self._stream_time)
            if found is not None:
                self.observed_stream_time = max(self.observed_stream_time, found)
        if self.emit_strategy.on_close:
            self.emitter = WindowCloseEmitter(self.name, self.store, context)
            self.forwarder: Any = SilentForwarder()
        else:
            self.forwarder = self.make_forwarder()

    def emit_closed(self, found: list[tuple[Windowed[Any], Any]], record: AnyRecord) -> None:
        """Forward closed windows ``(windowed key, ValueAndTimestamp)`` with the headers of
        ``record``, the one that closed them."""
        hs = record[3]
        keys = [w for w, _ in found]
        values = [v[0] for _, v in found]
        forward_final(self.context, keys, values, [v[1] for _, v in found], [hs] * len(found), None)

    def make_forwarder(self) -> Any:
        """Return the forwarder of this node's updates."""
        return TupleForwarder(self.store, self.context, self.send_old)

    def drop(self, reason: str, record: AnyRecord, window: object = None) -> None:
        """Count ``record`` as dropped and log why."""
        self.dropped += 1
        count_dropped(self.context)
        _LOG.debug(
            "[%s] skipping record reason=%s key=%r timestamp=%d window=%s stream_time=%d",
            self.name,
            reason,
            record[0],
            record[2],
            window,
            self.observed_stream_time,
        )

    def _stream_time(self) -> int | None:
        return None if self.observed_stream_time == NO_TIME else self.observed_stream_time

    def observe(self, timestamp: int) -> None:
        """Advance the observed stream time to ``timestamp``."""
        self.observed_stream_time = max(self.observed_stream_time, timestamp)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a user function; name this node and the function if it raises."""
        try:
            return fn(*args)
        except Exception as exc:
            raise user_error(self.name, fn, exc) from exc

    def forward(  # noqa: PLR0917 - hot path
        self, key: Any, window: Window, new: Any, old: Any, ts: int, record: Any
    ) -> None:
        """Forward ``Change(new, old)`` of ``key`` in ``window`` (old only when asked)."""
        change = Change(new, old if self.send_old else None)
        self.forwarder.maybe_forward(_new(Record, (Windowed(key, window), change, ts, record[3])))


class TimeWindowAggregateProcessor(WindowedAggregating):
    """Fold each record into every time window holding it, while the window is open.

    As Kafka's ``KStreamWindowAggregate``: a window ``[start, end)`` takes the record when
    ``end > observed stream time - grace``; the aggregate's timestamp is the largest
    record timestamp in the window.
    """

    def __init__(
        self,
        name: str,
        params: TableParams,
        windows: FixedWindows,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        *,
        emit: EmitStrategy = ON_WINDOW_UPDATE,
    ) -> None:
        super().__init__(name, params, initializer, aggregator, emit=emit)
        if emit.on_close and not isinstance(windows, TimeWindows):
            raise ValueError(
                "ON_WINDOW_CLOSE strategy is only supported for TimeWindows and SlidingWindows "
                "for TimeWindowedKStream"
            )
        self.windows = windows
        #: A ``count()``: a source's raw columns may be counted inside Arrow.
        self.counting = initializer is count_init and aggregator is count_add

    def process_arrow(  # noqa: PLR0917 - a source's raw columns
        self,
        topic: str,
        keys: Any,
        values: Any,
        timestamps: Any,
        key_serde: Any,
        value_serde: Any,
        weights: Any = None,
    ) -> bool:
        """Count a source's raw columns per key and window inside Arrow (see
        :mod:`topology.processors.window_count`); False, having done nothing, when they
        go the usual way."""
        if not self.counting:
            return False
        return count_windows(self, topic, keys, timestamps, key_serde, values, value_serde, weights)

    def process(self, record: AnyRecord) -> None:
        """Update the record's open windows, drop it from the closed ones."""
        key, value, ts = record[0], record[1], record[2]
        if key is None:
            self.drop("null key", record)
            return
        self.observe(ts)
        close_time = self.observed_stream_time - self.windows.grace_ms
        store = self.store
        if self.emitter is not None and self.emitter.due(close_time):
            found = self.closed_windows(close_time)
            if found is not None:
                self.emit_closed(found, record)
                self.emitter.emitted(close_time, len(found))
        for start, window in self.windows.windows_for(ts).items():
            if window.end <= close_time:
                self.drop("expired window", record, window)
                continue
            stored = store.fetch_value(key, start)
            if stored is None:
                old, new_ts = self.call(self.initializer), ts
            else:
                old, new_ts = stored[0], max(ts, stored[1])
            new = self.call(self.aggregator, key, value, old)
            store.put(key, ValueAndTimestamp(new, new_ts), start)
            self.forward(key, window, new, old, new_ts, record)

    def closed_windows(
        self, close_time: int, pending: Any = None
    ) -> list[tuple[Windowed[Any], Any]] | None:
        """The windows closed by ``close_time`` and not emitted yet, by start then key
        bytes, or None when there is nothing to look at (Kafka's ``emitRangeUpperBound <
        0`` and ``shouldRangeFetch``); ``pending``: a batch's folded windows, not written
        yet, read over the stored ones."""
        size, last = self.windows.size(), self.emitter.last_emit  # type: ignore[union-attr]
        upper = close_time - size
        if upper < 0:
            return None
        lower = 0 if last == NO_TIMESTAMP else max(0, last - size) + 1
        if last != NO_TIMESTAMP:
            windows_for = self.windows.windows_for
            if windows_for(upper).keys() == windows_for(lower - 1).keys():
                return None  # no window starts between: nothing closed since
        return self.store.fetch_closed(lower, upper, pending)  # type: ignore[no-any-return]

    def emit_batch(
        self, rows: list[int], closes: list[int], pending: Any, batch: Batch | None = None
    ) -> None:
        """Emit the windows a batch's records closed, each with the record that closed it
        (the first whose close time reaches the window's end): ``rows`` the records that
        look (non-null keys), ``closes`` their close times, ``pending`` the batch's folded
        windows not written yet, ``batch`` the records (None: a source's raw columns, no
        headers, ``rows`` the input rows)."""
        emitter = self.emitter
        assert emitter is not None
        looks = emitter.looks(len(rows))
        if not looks:
            return
        final = closes[looks - 1]
        if emitter.last_emit != NO_TIMESTAMP and emitter.last_emit >= final:
            return
        found = self.closed_windows(final, pending)
        if found is None:
            return
        seen = closes[:looks]
        by = [rows[bisect_left(seen, w.window.end)] for w, _ in found]
        hs = None if batch is None or batch.headers is None else [batch.headers[i] for i in by]
        forward_final(
            self.context,
            [w for w, _ in found],
            [v[0] for _, v in found],
            [v[1] for _, v in found],
            hs,
            by if batch is None else rows_at(batch.rows, by),
        )
        emitter.emitted(final, len(found))

    def process_batch(self, batch: Batch) -> None:  # noqa: PLR0915 - one pass over a batch
        """Fold a batch per key and window: each (key, window) read once and written once,
        in the order of its last update (the cache's dirty order of the record engine);
        the aggregator called once per record and window; the observed stream time, the
        closed windows and the drops decided record by record, as :meth:`process` does.
        Without a cache every update is forwarded, in order, as one batch."""
        ks, vs, ts = batch.keys, batch.values, batch.timestamps
        try:
            set(ks)
        except TypeError:  # an unhashable key: record by record
            for i in range(len(ks)):
                self.context.set_timestamp(ts[i])
                self.process(_new(Record, (ks[i], vs[i], ts[i], batch.header(i))))
            return
        windows_for, grace = self.windows.windows_for, self.windows.grace_ms
        store, forwarder, send_old = self.store, self.forwarder, self.send_old
        buffered = forwarder.buffered
        aggs: dict[tuple[Any, int], Any] = {}  # (key, start) -> ValueAndTimestamp | None
        last: dict[tuple[Any, int], int] = {}  # -> the record of its last update
        closing = self.emitter is not None
        collect = not buffered and not closing
        looks: list[int] = []  # closing: the records that look for closed windows
        closes: list[int] = []  # and their close times
        out: list[int] = []
        out_keys: list[Any] = []
        changes: list[Any] = []
        out_ts: list[int] = []
        for i in range(len(ks)):
            key, t = ks[i], ts[i]
            if key is None:
                self.drop("null key", _new(Record, (key, vs[i], t, batch.header(i))))
                continue
            self.observe(t)
            close_time = self.observed_stream_time - grace
            if closing:
                looks.append(i)
                closes.append(close_time)
            for start, window in windows_for(t).items():
                if window.end <= close_time:
                    self.drop("expired window", _new(Record, (key, vs[i], t, ())), window)
                    continue
                slot = (key, start)
                stored = aggs[slot] if slot in aggs else store.fetch_value(key, start)
                if stored is None:
                    old, new_ts = self.call(self.initializer), t
                else:
                    old, new_ts = stored[0], max(t, stored[1])
                new = self.call(self.aggregator, key, vs[i], old)
                aggs[slot] = ValueAndTimestamp(new, new_ts)
                last.pop(slot, None)
                last[slot] = i
                if collect:
                    out.append(i)
                    out_keys.append(Windowed(key, window))
                    changes.append(Change(new, old if send_old else None))
                    out_ts.append(new_ts)
        if closing:  # before the writes: see the module's docstring
            self.emit_batch(looks, closes, aggs, batch)
        set_timestamp = self.context.set_timestamp
        forwarder.muted = not buffered  # a cache of size 0 hands on each put: see below
        try:
            for (key, start), i in last.items():
                set_timestamp(ts[i])
                store.put(key, aggs[(key, start)], start)
        finally:
            forwarder.muted = False
        forwarder.forward_folded(batch, out, out_keys, changes, out_ts)


def reducer_aggregator(reducer: Callable[[Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    """Return Kafka's aggregator of a windowed reduce: the first value as is, then
    ``reducer(aggregate, value)`` (the initializer gives ``None``)."""

    def aggregate(key: Any, value: Any, agg: Any) -> Any:
        return value if agg is None else reducer(agg, value)

    aggregate.__qualname__ = getattr(reducer, "__qualname__", "reducer")
    return aggregate


def none_initializer() -> None:
    """The initializer of a reduce: no aggregate yet."""
    return None
