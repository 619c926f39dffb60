"""Processors of non-windowed aggregations: KStream ``aggregate``/``reduce`` (``count`` is
an aggregate) and KTable ``aggregate``/``reduce`` with adder and subtractor.

The aggregate is stored as ``ValueAndTimestamp``; its timestamp is the largest timestamp of
the records that made it. Updates are forwarded as ``Change(new, old)`` (old only when a
downstream operator asked for old values), directly or on cache flush.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable
from itertools import islice, repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.columns import column_decodes, deserialize_column
from common.errors import SerializationError, StreamsProcessingError
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

    def scan(
        self, ks: list[Any], vs: list[Any], ts: list[int], cached: bool, nulls: bool
    ) -> tuple[dict[Any, Any], dict[Any, int], list[int], list[Any], list[int]]:
        """Fold the records in order: return each key's aggregate (None: deleted) and its
        timestamp, and without a cache every update (record index, change, timestamp).
        Null keys and values (``nulls``: the batch has some) are dropped. Raises the
        user's error."""
        raise NotImplementedError

    def one_by_one(self, batch: Batch) -> None:
        """Process the batch's records one at a time."""
        ks, vs, ts = batch.keys, batch.values, batch.timestamps
        for i in range(len(ks)):
            self.context.set_timestamp(ts[i])
            self.process(_new(Record, (ks[i], vs[i], ts[i], batch.header(i))))

    def fold(self, batch: Batch) -> None:
        """Fold a batch per key: each distinct key read once and written once (in the
        order of its last record, as the cache's dirty order of the record engine), the
        user's function called once per record. Without a cache every update is forwarded,
        in record order, as one batch; with one the cache forwards at its flush."""
        ks, vs, ts = batch.keys, batch.values, batch.timestamps
        try:
            # hashes every key before any record is folded
            last = dict(zip(ks, range(len(ks)), strict=True))
        except TypeError:  # an unhashable key: record by record
            self.one_by_one(batch)
            return
        forwarder = self.forwarder
        cached = forwarder.buffered
        nulls = None in last or _has_none(vs)
        aggs, stamps, out, changes, out_ts = self.scan(ks, vs, ts, cached, nulls)
        if nulls:  # dropped records are not a key's last
            valid = [k is not None and v is not None for k, v in zip(ks, vs, strict=True)]
            last = {k: i for i, (k, ok) in enumerate(zip(ks, valid, strict=True)) if ok}
            self.dropped += valid.count(False)
        store = self.store
        set_timestamp = self.context.set_timestamp
        ordered = sorted(last.items(), key=_second)
        if cached:  # written at once, each stamped with its key's last record's timestamp
            keys = [key for key, _ in ordered]
            nows = [aggs[key] for key in keys]
            put_many(
                store,
                set_timestamp,
                keys,
                [
                    None if now is None else ValueAndTimestamp(now, stamps[key])
                    for key, now in zip(keys, nows, strict=True)
                ],
                [ts[i] for _, i in ordered],
            )
            forwarder.forward_folded(batch, out, [ks[i] for i in out], changes, out_ts)
            return
        # a cache of size 0 hands on each put at once: those updates are forwarded below
        forwarder.muted = True
        try:
            for key, i in ordered:
                set_timestamp(ts[i])
                now = aggs[key]
                store.put(key, None if now is None else ValueAndTimestamp(now, stamps[key]))
        finally:
            forwarder.muted = False
        forwarder.forward_folded(batch, out, [ks[i] for i in out], changes, out_ts)


def _second(item: tuple[Any, int]) -> int:
    return item[1]


def get_many(store: Any, keys: list[Any]) -> list[Any]:
    """Each key's stored value, read at once where the store can."""
    many = getattr(store, "get_many", None)
    if many is not None:
        return many(keys)  # type: ignore[no-any-return]
    return [store.get(key) for key in keys]


def put_many(
    store: Any,
    set_timestamp: Callable[[int], None],
    keys: list[Any],
    values: list[Any],
    timestamps: list[int],
) -> None:
    """Write each key in order as ``put`` would with the record timestamp
    ``timestamps[i]``, at once where the store can; the context is left at the last
    timestamp, as one put after another leaves it."""
    many = getattr(store, "put_many", None)
    if many is not None:
        many(keys, values, timestamps)
        if timestamps:
            set_timestamp(timestamps[-1])
        return
    for key, value, timestamp in zip(keys, values, timestamps, strict=True):
        set_timestamp(timestamp)
        store.put(key, value)


def _has_none(items: list[Any]) -> bool:
    """Whether an element is None (by identity: a value's ``__eq__`` is never called)."""
    return any(map(operator.is_, items, repeat(None)))


_MISSING = object()


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

    def scan(
        self, ks: list[Any], vs: list[Any], ts: list[int], cached: bool, nulls: bool
    ) -> tuple[dict[Any, Any], dict[Any, int], list[int], list[Any], list[int]]:
        """``aggregator(key, value, agg or initializer())`` per record, stamped with the
        later timestamp."""
        store, send_old = self.store, self.params.send_old_values
        init, aggregator = self.initializer, self.aggregator
        aggs: dict[Any, Any] = {}
        stamps: dict[Any, int] = {}
        out: list[int] = []
        changes: list[Any] = []
        out_ts: list[int] = []
        get = aggs.get
        fn: Any = aggregator
        try:
            for i, key, value, t in zip(range(len(ks)), ks, vs, ts, strict=True):
                if key is None or value is None:
                    continue
                current = get(key, _MISSING)
                if current is _MISSING:
                    stored = store.get(key)
                    if stored is not None:
                        current, stamps[key] = stored[0], stored[1]
                    else:
                        current = None
                if current is None:  # none yet (or deleted): start from the initializer
                    fn = init
                    old, stamp = init(), t
                    fn = aggregator
                    new = aggregator(key, value, old)
                    old = None
                else:
                    stamp = stamps[key]
                    if t > stamp:  # noqa: PLR1730 - no call per record
                        stamp = t
                    old = current
                    new = aggregator(key, value, current)
                aggs[key] = new
                stamps[key] = stamp
                if not cached:
                    out.append(i)
                    changes.append(Change(new, old if send_old else None))
                    out_ts.append(stamp)
        except Exception as exc:
            raise user_error(self.name, fn, exc) from exc
        return aggs, stamps, out, changes, out_ts

    def process_batch(self, batch: Batch) -> None:
        """Fold the batch per key."""
        self.fold(batch)


def count_init() -> int:
    """A count's initial aggregate."""
    return 0


def count_add(key: Any, value: Any, agg: int) -> int:
    """A count's aggregator."""
    return agg + 1


class StreamCountProcessor(StreamAggregateProcessor):
    """``count()``: an aggregate of ``agg + 1`` from 0. With a cache a batch is counted per
    key at once (the count of its records, the latest of their timestamps), as the record
    engine's cache would forward it: one update per key at the flush."""

    def __init__(self, name: str, params: TableParams) -> None:
        super().__init__(name, params, count_init, count_add)

    def scan(
        self, ks: list[Any], vs: list[Any], ts: list[int], cached: bool, nulls: bool
    ) -> tuple[dict[Any, Any], dict[Any, int], list[int], list[Any], list[int]]:
        """Count per key (every update, one by one, without a cache or with nulls)."""
        if not cached or nulls:
            return super().scan(ks, vs, ts, cached, nulls)
        counts = Counter(ks)
        if all(map(operator.le, ts, islice(ts, 1, None))):  # in time order: the last is latest
            latest = dict(zip(ks, ts, strict=True))
        else:
            latest = {}
            for key, t in zip(ks, ts, strict=True):
                if t > latest.get(key, t - 1):
                    latest[key] = t
        aggs: dict[Any, Any] = {}
        stamps: dict[Any, int] = {}
        distinct = list(counts)
        for key, stored in zip(distinct, get_many(self.store, distinct), strict=True):
            n, t = counts[key], latest[key]
            if stored is None:
                aggs[key], stamps[key] = n, t
            else:
                aggs[key], stamps[key] = stored[0] + n, max(stored[1], t)
        return aggs, stamps, [], [], []

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
        """Count a source's raw columns inside Arrow, with a cache (one update per key at
        the flush, as the record engine's cache forwards): records grouped by their key's
        bytes, only distinct keys deserialized, values never (only their nullness counts;
        they are checked to deserialize); a row counts ``weights[i]`` records when given
        (combined records). Return False, having done nothing, without a cache or when a
        key or value would not deserialize (the usual path reports it)."""
        if not self.forwarder.buffered or not column_decodes(value_serde, values):
            return False
        n = len(keys)
        table = pa.table(
            {
                "k": keys,
                "t": timestamps,
                "i": np.arange(n, dtype=np.int64),
                "w": np.ones(n, np.int64) if weights is None else np.asarray(weights, np.int64),
            }
        )
        if keys.null_count or values.null_count:
            table = table.filter(pc.and_(pc.is_valid(keys), pc.is_valid(values)))
        groups = table.group_by("k", use_threads=False).aggregate(
            [("i", "max"), ("w", "sum"), ("t", "max")]
        )
        groups = groups.sort_by("i_max")  # a key's last record: the cache's dirty order
        try:
            decoded = deserialize_column(key_serde, topic, groups.column("k"))
        except SerializationError:
            return False
        self.dropped += n - len(table)  # (a combined record has no null key or value)
        last_ts = pc.take(table.column("t"), pc.index_in(groups.column("i_max"), table.column("i")))
        counts = groups.column("w_sum").to_pylist()
        if any(key is None for key in decoded):  # a serde reading these bytes as no key
            kept = [i for i, key in enumerate(decoded) if key is not None]
            self.dropped += sum(counts) - sum(counts[i] for i in kept)
            groups, decoded = groups.take(kept), [decoded[i] for i in kept]
            last_ts = last_ts.take(kept)
            counts = groups.column("w_sum").to_pylist()
        writes = []
        for n_key, t_key, stored in zip(
            counts,
            groups.column("t_max").to_pylist(),
            get_many(self.store, decoded),
            strict=True,
        ):
            if stored is not None:
                n_key += stored[0]  # noqa: PLW2901 - the new count
                t_key = max(stored[1], t_key)  # noqa: PLW2901 - its timestamp
            writes.append(ValueAndTimestamp(n_key, t_key))
        put_many(self.store, self.context.set_timestamp, decoded, writes, last_ts.to_pylist())
        return True


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

    def scan(
        self, ks: list[Any], vs: list[Any], ts: list[int], cached: bool, nulls: bool
    ) -> tuple[dict[Any, Any], dict[Any, int], list[int], list[Any], list[int]]:
        """``reducer(agg, value)`` per record, the first value as is, stamped with the
        later timestamp. (The loop is :meth:`StreamAggregateProcessor.scan`'s with its own
        step written in: a call per record is what these loops save.)"""
        store, send_old, reducer = self.store, self.params.send_old_values, self.reducer
        aggs: dict[Any, Any] = {}
        stamps: dict[Any, int] = {}
        out: list[int] = []
        changes: list[Any] = []
        out_ts: list[int] = []
        get = aggs.get
        try:
            for i, key, value, t in zip(range(len(ks)), ks, vs, ts, strict=True):
                if key is None or value is None:
                    continue
                current = get(key, _MISSING)
                if current is _MISSING:
                    stored = store.get(key)
                    if stored is not None:
                        current, stamps[key] = stored[0], stored[1]
                    else:
                        current = None
                if current is None:  # the first value as is
                    new, stamp = value, t
                else:
                    stamp = stamps[key]
                    if t > stamp:  # noqa: PLR1730 - no call per record
                        stamp = t
                    new = reducer(current, value)
                aggs[key] = new
                stamps[key] = stamp
                if not cached:
                    out.append(i)
                    changes.append(Change(new, current if send_old else None))
                    out_ts.append(stamp)
        except Exception as exc:
            raise user_error(self.name, reducer, exc) from exc
        return aggs, stamps, out, changes, out_ts

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

    def process_batch(self, batch: Batch) -> None:
        """Fold the batch's table updates per key (a null key stops the task at its record,
        as one record at a time)."""
        if None in batch.keys or _has_none(batch.values):
            self.one_by_one(batch)
            return
        self.fold(batch)

    def scan(
        self, ks: list[Any], vs: list[Any], ts: list[int], cached: bool, nulls: bool
    ) -> tuple[dict[Any, Any], dict[Any, int], list[int], list[Any], list[int]]:
        """:meth:`process` per record: subtract the old value, add the new one."""
        store, send_old, reducing = self.store, self.params.send_old_values, self.reducing
        subtractor, adder = self.subtractor, self.adder
        aggs: dict[Any, Any] = {}
        stamps: dict[Any, int] = {}
        out: list[int] = []
        changes: list[Any] = []
        out_ts: list[int] = []
        fn: Any = subtractor
        try:
            for i, key, change, t in zip(range(len(ks)), ks, vs, ts, strict=True):
                current = aggs.get(key, _MISSING)
                if current is _MISSING:
                    stored = store.get(key)
                    current = None if stored is None else stored[0]
                    if stored is not None:
                        stamps[key] = stored[1]
                agg, stamp = current, t
                if change[1] is not None and current is not None:
                    fn = subtractor
                    agg = self._apply(subtractor, key, change[1], agg)
                    stamp = max(t, stamps[key])
                if change[0] is not None:
                    fn = adder
                    if agg is None:
                        agg = change[0] if reducing else adder(key, change[0], self._init())
                    else:
                        agg = self._apply(adder, key, change[0], agg)
                    if current is not None:
                        stamp = max(t, stamps[key])
                aggs[key] = agg
                stamps[key] = stamp
                if not cached:
                    out.append(i)
                    changes.append(Change(agg, current if send_old else None))
                    out_ts.append(stamp)
        except Exception as exc:
            raise user_error(self.name, fn, exc) from exc
        return aggs, stamps, out, changes, out_ts

    def _init(self) -> Any:
        assert self.initializer is not None
        return self.initializer()

    def _apply(self, fn: Callable[..., Any], key: Any, value: Any, agg: Any) -> Any:
        return fn(agg, value) if self.reducing else fn(key, value, agg)
