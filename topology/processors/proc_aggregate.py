"""What the processors of non-windowed aggregations share: the base class that folds a
batch per key, the store helpers it uses, and the functions of ``count``.

The aggregate is stored as ``ValueAndTimestamp``; its timestamp is the largest timestamp of
the records that made it. Updates are forwarded as ``Change(new, old)`` (old only when a
downstream operator asked for old values), directly or on cache flush. The processors are
in :mod:`topology.processors.proc_stream_aggregate` (KStream ``aggregate``/``reduce``/
``count``) and :mod:`topology.processors.proc_table_aggregate` (KTable ``aggregate``/
``reduce`` with adder and subtractor).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from itertools import repeat
from typing import Any

from statestores.api import PUT_RETURN_CODE_NOT_PUT
from statestores.versioned_store import MeteredVersionedKeyValueStore
from topology.api.processor import Processor
from topology.api.record import Change, Record, ValueAndTimestamp, make_change
from topology.engine.columnar import Batch
from topology.engine.context import NodeContext
from topology.processors.proc_table import (
    PUT_RETURN_CODE_IS_LATEST,
    TableParams,
    TupleForwarder,
    put_table,
)

_new = tuple.__new__
AnyRecord = Record[Any, Any]
#: A scan's default for a key not yet folded in the batch (None is a deleted aggregate).
MISSING = object()


class Aggregating(Processor[Any, Any, Any, Any]):
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
        #: Materialized in a versioned store (KIP-889): folded record by record.
        self.versioned = isinstance(self.store, MeteredVersionedKeyValueStore)

    def emit(self, key: Any, new: Any, old: Any, ts: int, record: AnyRecord) -> None:
        """Store ``new`` and forward the change (as Kafka's aggregations: not when a
        versioned store did not take it; flagged by whether it is the latest version)."""
        if not self.versioned:
            self.store.put(key, None if new is None else ValueAndTimestamp(new, ts))
            change = Change(new, old if self.params.send_old_values else None)
            self.forwarder.maybe_forward(_new(Record, (key, change, ts, record[3])))
            return
        code = put_table(self.store, key, new, ts)
        if code != PUT_RETURN_CODE_NOT_PUT:
            old = old if self.params.send_old_values else None
            change = make_change(new, old, code == PUT_RETURN_CODE_IS_LATEST)
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
        if self.versioned:  # each put's version decides what is forwarded
            self.one_by_one(batch)
            return
        try:
            # hashes every key before any record is folded
            last = dict(zip(ks, range(len(ks)), strict=True))
        except TypeError:  # an unhashable key: record by record
            self.one_by_one(batch)
            return
        forwarder = self.forwarder
        cached = forwarder.buffered
        nulls = None in last or has_none(vs)
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
                    None if now is None else _new(ValueAndTimestamp, (now, stamps[key]))
                    for key, now in zip(keys, nows, strict=True)
                ],
                [ts[i] for _, i in ordered],
            )
            forwarder.forward_folded(batch, out, [ks[i] for i in out], changes, out_ts)
            return
        # a cache of size 0 hands on each put at once: those updates are forwarded below
        forwarder.muted = True
        try:
            keys = [key for key, _ in ordered]
            put_many(
                store,
                set_timestamp,
                keys,
                [
                    None
                    if (now := aggs[key]) is None
                    else _new(ValueAndTimestamp, (now, stamps[key]))
                    for key in keys
                ],
                [ts[i] for _, i in ordered],
            )
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


def read_keys(store: Any, keys: list[Any]) -> dict[Any, Any]:
    """Each distinct key's stored value (null keys left out), read at once: a batch's scan
    reads what it needs before it folds, one store access per key per batch."""
    distinct = [key for key in dict.fromkeys(keys) if key is not None]
    return dict(zip(distinct, get_many(store, distinct), strict=True))


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


def has_none(items: list[Any]) -> bool:
    """Whether an element is None (by identity: a value's ``__eq__`` is never called)."""
    return any(map(operator.is_, items, repeat(None)))


def count_init() -> int:
    """A count's initial aggregate."""
    return 0


def count_add(key: Any, value: Any, agg: int) -> int:
    """A count's aggregator."""
    return agg + 1


def count_sub(key: Any, value: Any, agg: int) -> int:
    """A table count's subtractor (a row leaving its group)."""
    return agg - 1
