"""Processors of non-windowed aggregations: KStream ``aggregate``/``reduce`` (``count`` is
an aggregate) and KTable ``aggregate``/``reduce`` with adder and subtractor.

The aggregate is stored as ``ValueAndTimestamp``; its timestamp is the largest timestamp of
the records that made it. Updates are forwarded as ``Change(new, old)`` (old only when a
downstream operator asked for old values), directly or on cache flush.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.errors import StreamsProcessingError
from topology.api.processor import Processor
from topology.api.record import Change, Record, ValueAndTimestamp
from topology.engine.columnar import Batch
from topology.engine.context import NodeContext
from topology.engine.nodes import user_error
from topology.processors.proc_table import TableParams, TupleForwarder

_new = tuple.__new__
AnyRecord = Record[Any, Any]


class _Aggregating(Processor[Any, Any, Any, Any]):
    """Holds the store and the forwarder of an aggregation node."""

    context: NodeContext

    def __init__(self, name: str, params: TableParams) -> None:
        self.name = name
        self.params = params
        self.dropped = 0

    def init(self, context: Any) -> None:
        """Open the store and set up forwarding."""
        self.context = context
        assert self.params.store_name is not None
        self.store: Any = context.get_state_store(self.params.store_name)
        self.forwarder = TupleForwarder(self.store, context, self.params.send_old_values)

    def emit(self, key: Any, new: Any, old: Any, ts: int, record: AnyRecord) -> None:
        """Store ``new`` and forward the change."""
        self.store.put(key, None if new is None else ValueAndTimestamp(new, ts))
        change = Change(new, old if self.params.send_old_values else None)
        self.forwarder.maybe_forward(_new(Record, (key, change, ts, record[3])))

    def step(
        self, key: Any, value: Any, ts: int, current: Any, current_ts: int | None
    ) -> tuple[Any, int]:
        """Fold one record into ``current`` (the key's aggregate, None when there is none,
        with its timestamp); return the new aggregate and its timestamp. Raises the user's
        error."""
        raise NotImplementedError

    def fold(self, batch: Batch) -> None:
        """Fold a batch per key: each distinct key read once and written once (in the
        order of its last record, as the cache's dirty order of the record engine), the
        user's function called once per record. Without a cache every update is forwarded,
        in record order, as one batch; with one the cache forwards at its flush."""
        ks, vs, ts = batch.keys, batch.values, batch.timestamps
        try:
            last = {k: i for i, k in enumerate(ks) if k is not None and vs[i] is not None}
        except TypeError:  # an unhashable key: record by record
            for i in range(len(ks)):
                self.context.set_timestamp(ts[i])
                self.process(_new(Record, (ks[i], vs[i], ts[i], batch.header(i))))
            return
        forwarder = self.forwarder
        store, send_old, cached = self.store, self.params.send_old_values, forwarder.buffered
        step = self.step
        aggs: dict[Any, Any] = {}  # key -> its aggregate so far (None: none)
        stamps: dict[Any, int] = {}
        out: list[int] = []
        changes: list[Any] = []
        out_ts: list[int] = []
        for i in range(len(ks)):
            key, value = ks[i], vs[i]
            if key is None or value is None:
                self.dropped += 1
                continue
            if key in aggs:
                current = aggs[key]
            else:
                stored = store.get(key)
                current = None if stored is None else stored[0]
                if stored is not None:
                    stamps[key] = stored[1]
            new, stamp = step(key, value, ts[i], current, stamps.get(key))
            aggs[key] = new
            stamps[key] = stamp
            if not cached:
                out.append(i)
                changes.append(Change(new, current if send_old else None))
                out_ts.append(stamp)
        set_timestamp = self.context.set_timestamp
        # a cache of size 0 hands on each put at once: those updates are forwarded below
        forwarder.muted = not cached
        try:
            for key, i in sorted(last.items(), key=lambda item: item[1]):
                set_timestamp(ts[i])
                now = aggs[key]
                store.put(key, None if now is None else ValueAndTimestamp(now, stamps[key]))
        finally:
            forwarder.muted = False
        forwarder.forward_folded(batch, out, [ks[i] for i in out], changes, out_ts)


class StreamAggregateProcessor(_Aggregating):
    """``agg = aggregator(key, value, agg or initializer())``; null keys and values are
    dropped, as Kafka's ``KStreamAggregate``."""

    def __init__(
        self,
        name: str,
        params: TableParams,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(name, params)
        self.initializer = initializer
        self.aggregator = aggregator

    def process(self, record: AnyRecord) -> None:
        """Fold the record into its key's aggregate."""
        key, value, ts = record[0], record[1], record[2]
        if key is None or value is None:
            self.dropped += 1
            return
        stored = self.store.get(key)
        fn: Any = self.initializer
        try:
            if stored is None:
                old = self.initializer()
            else:
                old, ts = stored[0], max(ts, stored[1])
            fn = self.aggregator
            new = self.aggregator(key, value, old)
        except Exception as exc:
            raise user_error(self.name, fn, exc) from exc
        self.emit(key, new, None if stored is None else old, ts, record)

    def step(
        self, key: Any, value: Any, ts: int, current: Any, current_ts: int | None
    ) -> tuple[Any, int]:
        """``aggregator(key, value, agg or initializer())``, stamped with the later
        timestamp."""
        if current is None:
            try:
                current = self.initializer()
            except Exception as exc:
                raise user_error(self.name, self.initializer, exc) from exc
        elif current_ts is not None and current_ts > ts:
            ts = current_ts
        try:
            return self.aggregator(key, value, current), ts
        except Exception as exc:
            raise user_error(self.name, self.aggregator, exc) from exc

    def process_batch(self, batch: Batch) -> None:
        """Fold the batch per key."""
        self.fold(batch)


class StreamReduceProcessor(_Aggregating):
    """``agg = reducer(agg, value)``, the first value as is; null keys and values are
    dropped, as Kafka's ``KStreamReduce``."""

    def __init__(self, name: str, params: TableParams, reducer: Callable[[Any, Any], Any]) -> None:
        super().__init__(name, params)
        self.reducer = reducer

    def process(self, record: AnyRecord) -> None:
        """Fold the record into its key's aggregate."""
        key, value, ts = record[0], record[1], record[2]
        if key is None or value is None:
            self.dropped += 1
            return
        stored = self.store.get(key)
        if stored is None:
            self.emit(key, value, None, ts, record)
            return
        try:
            new = self.reducer(stored[0], value)
        except Exception as exc:
            raise user_error(self.name, self.reducer, exc) from exc
        self.emit(key, new, stored[0], max(ts, stored[1]), record)

    def step(
        self, key: Any, value: Any, ts: int, current: Any, current_ts: int | None
    ) -> tuple[Any, int]:
        """``reducer(agg, value)``, the first value as is."""
        if current is None:
            return value, ts
        try:
            new = self.reducer(current, value)
        except Exception as exc:
            raise user_error(self.name, self.reducer, exc) from exc
        return new, ts if current_ts is None or ts >= current_ts else current_ts

    def process_batch(self, batch: Batch) -> None:
        """Fold the batch per key."""
        self.fold(batch)


class TableAggregateProcessor(_Aggregating):
    """Apply a table update to its group: subtract the old value, add the new one (Kafka's
    ``KTableAggregate``). ``adder``/``subtractor`` are ``(key, value, agg) -> agg``."""

    def __init__(
        self,
        name: str,
        params: TableParams,
        *,
        initializer: Callable[[], Any] | None,
        adder: Callable[..., Any],
        subtractor: Callable[..., Any],
        reducing: bool = False,
    ) -> None:
        super().__init__(name, params)
        self.initializer = initializer
        self.adder = adder
        self.subtractor = subtractor
        self.reducing = reducing

    def process(self, record: AnyRecord) -> None:
        """Subtract, add, store, forward."""
        key, change, ts = record[0], record[1], record[2]
        if key is None:
            raise StreamsProcessingError(
                f"processor {self.name}: record key of a KTable aggregation with store "
                f"{self.params.store_name} must not be null"
            )
        stored = self.store.get(key)
        old_agg = None if stored is None else stored[0]
        fn: Any = self.subtractor
        try:
            agg, new_ts = old_agg, ts
            if change[1] is not None and old_agg is not None:
                agg = self._apply(self.subtractor, key, change[1], old_agg)
                new_ts = max(ts, stored[1])
            if change[0] is not None:
                fn = self.adder
                if agg is None:
                    agg = change[0] if self.reducing else self._init()
                    if not self.reducing:
                        agg = self._apply(self.adder, key, change[0], agg)
                else:
                    agg = self._apply(self.adder, key, change[0], agg)
                if stored is not None:
                    new_ts = max(ts, stored[1])
        except Exception as exc:
            raise user_error(self.name, fn, exc) from exc
        self.emit(key, agg, old_agg, new_ts, record)

    def _init(self) -> Any:
        assert self.initializer is not None
        return self.initializer()

    def _apply(self, fn: Callable[..., Any], key: Any, value: Any, agg: Any) -> Any:
        return fn(agg, value) if self.reducing else fn(key, value, agg)
