"""Processors of time-windowed aggregations (Kafka's ``KStreamWindowAggregate``) and what
the windowed processors share: the window store, the forwarder, the observed stream time
and the dropped-record count.

Each processor keeps its own *observed stream time* (the largest timestamp it has seen, as
Kafka's); a window closes at ``observed stream time - grace``. A record whose key is null,
or that would only update closed windows, is dropped and counted in the task's
``dropped_records`` (Kafka's ``dropped-records`` sensor).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from statestores.api import Window, Windowed
from topology.api.processor import Processor
from topology.api.record import Change, Record, ValueAndTimestamp
from topology.api.windows import FixedWindows
from topology.engine.columnar import Batch
from topology.engine.context import NodeContext
from topology.engine.nodes import user_error
from topology.processors.proc_aggregate import count_add, count_init
from topology.processors.proc_table import TableParams, TupleForwarder
from topology.processors.window_count import count_windows

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
    ) -> None:
        self.name = name
        self.params = params
        self.initializer = initializer
        self.aggregator = aggregator
        self.observed_stream_time = NO_TIME
        self.dropped = 0

    def init(self, context: Any) -> None:
        """Open the store and set up forwarding (on cache flush when caching is on)."""
        self.context = context
        assert self.params.store_name is not None
        self.store: Any = context.get_state_store(self.params.store_name)
        self.send_old = self.params.send_old_values
        self.forwarder = self.make_forwarder()

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
    ) -> None:
        super().__init__(name, params, initializer, aggregator)
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

    def process_batch(self, batch: Batch) -> None:
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
                if not buffered:
                    out.append(i)
                    out_keys.append(Windowed(key, window))
                    changes.append(Change(new, old if send_old else None))
                    out_ts.append(new_ts)
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
