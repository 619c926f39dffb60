"""Processors of KStream aggregations: ``aggregate``, ``reduce`` and ``count`` (an
aggregate of ``agg + 1`` from 0, with its own batch and Arrow paths), as Kafka's
``KStreamAggregate`` and ``KStreamReduce``; see :mod:`topology.processors.proc_aggregate`
for what they share."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable
from itertools import islice
from typing import Any

import numpy as np
import pyarrow.compute as pc

from common.columns import column_decodes, deserialize_column, same_bytes
from common.errors import SerializationError
from common.serdes import LongSerde
from statestores.metered import MeteredKeyValueStore
from topology.api.record import Change
from topology.engine.columnar import Batch
from topology.engine.nodes import user_error
from topology.graph.stores import ValueAndTimestampSerde
from topology.processors import count_kernel as kernel
from topology.processors.proc_aggregate import (
    MISSING,
    Aggregating,
    AnyRecord,
    count_add,
    count_init,
    get_many,
    read_keys,
)
from topology.processors.proc_table import TableParams


class StreamAggregateProcessor(Aggregating):
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
        stored_of = read_keys(store, ks)
        get = aggs.get
        fn: Any = aggregator
        try:
            for i, key, value, t in zip(range(len(ks)), ks, vs, ts, strict=True):
                if key is None or value is None:
                    continue
                current = get(key, MISSING)
                if current is MISSING:
                    stored = stored_of.get(key)
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


class StreamCountProcessor(StreamAggregateProcessor):
    """``count()``: an aggregate of ``agg + 1`` from 0. With a cache a batch is counted per
    key at once (the count of its records, the latest of their timestamps), as the record
    engine's cache would forward it: one update per key at the flush."""

    def __init__(self, name: str, params: TableParams) -> None:
        super().__init__(name, params, count_init, count_add)

    def scan(
        self, ks: list[Any], vs: list[Any], ts: list[int], cached: bool, nulls: bool
    ) -> tuple[dict[Any, Any], dict[Any, int], list[int], list[Any], list[int]]:
        """Count per key (every update, one by one, without a cache; with nulls as the
        generic fold)."""
        if nulls:
            return super().scan(ks, vs, ts, cached, nulls)
        if not cached:
            return self._every_update(ks, ts)
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

    def _every_update(
        self, ks: list[Any], ts: list[int]
    ) -> tuple[dict[Any, Any], dict[Any, int], list[int], list[Any], list[int]]:
        """Every record's update, in record order: its key's count so far (one more than
        the last), stamped with the latest timestamp so far (the generic fold's result,
        without a call per record)."""
        send_old = self.params.send_old_values
        aggs: dict[Any, Any] = {}
        stamps: dict[Any, int] = {}
        for key, stored in read_keys(self.store, ks).items():
            if stored is not None:
                aggs[key], stamps[key] = stored[0], stored[1]
        changes: list[Any] = []
        out_ts: list[int] = []
        get = aggs.get
        for key, t in zip(ks, ts, strict=True):
            old = get(key)
            if old is None:
                new, stamp = 1, t
            else:
                new, stamp = old + 1, stamps[key]
                if t > stamp:  # noqa: PLR1730 - no call per record
                    stamp = t
            aggs[key] = new
            stamps[key] = stamp
            changes.append(Change(new, old if send_old else None))
            out_ts.append(stamp)
        return aggs, stamps, list(range(len(ks))), changes, out_ts

    def forwards_rows(self) -> bool:
        """Whether :meth:`process_arrow` forwards an update per input record (no cache),
        whose record context is its input row's."""
        return not self.forwarder.buffered

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
        """Count a source's raw columns with the columnar kernel
        (:mod:`topology.processors.count_kernel`): records grouped by their key's bytes,
        only distinct keys deserialized, values never (only their nullness counts; they
        are checked to deserialize), each distinct key read and written once as bytes.
        With a cache, one update per key at the flush, as the record engine's cache
        forwards; without one, every record's update, in record order. A row counts
        ``weights[i]`` records when given (combined records, cached only). Return False,
        having done nothing, when the usual path must decide: a key or value that would
        not deserialize, a null without a cache, a store that does not hold plain
        counts."""
        store = self.store
        buffered = self.forwarder.buffered
        if (
            self.versioned
            or (not buffered and weights is not None)
            or not _holds_counts(store)
            or not column_decodes(value_serde, values)
        ):
            return False
        dropped = 0
        if keys.null_count or values.null_count:
            if not buffered:  # every update forwarded: the record path drops them in order
                return False
            valid = pc.and_(pc.is_valid(keys), pc.is_valid(values))
            keys, timestamps = keys.filter(valid), timestamps.filter(valid)
            if weights is not None:  # (a combined record has no null key or value)
                weights = np.asarray(weights, np.int64)[np.asarray(valid)]
            dropped = len(valid) - len(keys)
            if not len(keys):
                self.dropped += dropped
                return True
        groups = kernel.group(keys, weights)
        try:
            decoded = deserialize_column(key_serde, topic, groups.keys)
        except SerializationError:
            return False
        if None in decoded:  # a serde reading these bytes as no key
            return False
        if not same_bytes(key_serde, store.key_serde):
            raw_keys = store.raw_keys(decoded)
        else:
            raw_keys = groups.raw if groups.raw is not None else groups.keys.to_pylist()
        stored = kernel.parse(store.get_raw_many(raw_keys))
        if stored is None:
            return False
        ts = timestamps.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        updates = None
        if not buffered:
            every = kernel.every_update(groups, stored, ts, send_old=self.params.send_old_values)
            if every is None:
                return False
            updates, stamps = every
        else:
            stamps = kernel.latest(groups, ts, stored)
        self.dropped += dropped
        order = np.argsort(groups.last)  # a key's last record: the cache's dirty order
        counts = stored.counts + groups.sizes
        written = [raw_keys[i] for i in order.tolist()]
        put_ts = ts[groups.last[order]].tolist()
        self.forwarder.muted = not buffered  # forwarded below, every update
        try:
            store.put_raw_many(written, kernel.encode(counts[order], stamps[order]), put_ts)
        finally:
            self.forwarder.muted = False
        self.context.set_timestamp(put_ts[-1])
        if updates is not None:
            per_record = [decoded[i] for i in groups.group_of.tolist()]
            self.context.forward_batch(
                Batch(per_record, updates.changes, updates.stamps, None, range(len(per_record)))
            )
        return True


def _holds_counts(store: Any) -> bool:
    """Whether ``store`` is a plain key-value store of ``ValueAndTimestamp<Long>``."""
    serde = getattr(store, "value_serde", None)
    return (
        type(store) is MeteredKeyValueStore
        and type(serde) is ValueAndTimestampSerde
        and type(serde.inner) is LongSerde
    )


class StreamReduceProcessor(Aggregating):
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
        stored_of = read_keys(store, ks)
        get = aggs.get
        try:
            for i, key, value, t in zip(range(len(ks)), ks, vs, ts, strict=True):
                if key is None or value is None:
                    continue
                current = get(key, MISSING)
                if current is MISSING:
                    stored = stored_of.get(key)
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
