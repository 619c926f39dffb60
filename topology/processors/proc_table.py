"""Processors of KTables: the source, ``to_stream`` and ``group_by``'s re-keying.

Table processors pass :class:`~topology.api.record.Change` values (new and, when a downstream
operator asked for it, old). Stores hold :class:`~topology.api.record.ValueAndTimestamp`.

This module holds the source (Kafka's ``KTableSource``), ``to_stream`` and the re-keying
(``KTableRepartitionMap``); ``filter``, ``map_values`` and ``transform_values`` are in
:mod:`topology.processors.table_transform`, how table nodes store and forward their updates
(:class:`TableParams`, :func:`put_table`, :class:`TupleForwarder`) in
:mod:`topology.processors.table_forward`. Every public name is importable from here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from statestores.api import PUT_RETURN_CODE_NOT_PUT
from statestores.versioned_store import MeteredVersionedKeyValueStore
from topology.api.processor import Processor
from topology.api.record import Change, Record, ValueAndTimestamp, make_change
from topology.engine.columnar import Batch
from topology.engine.context import NodeContext
from topology.engine.nodes import user_error
from topology.processors.table_forward import (
    PUT_RETURN_CODE_IS_LATEST,
    AnyRecord,
    TableParams,
    TableStoreProcessor,
    TupleForwarder,
    put_table,
)
from topology.processors.table_transform import (
    ForwardingDisabledContext,
    TableFilterProcessor,
    TableMapValuesProcessor,
    TableTransformValuesProcessor,
)

__all__ = [
    "PUT_RETURN_CODE_IS_LATEST",
    "AnyRecord",
    "ForwardingDisabledContext",
    "TableFilterProcessor",
    "TableMapValuesProcessor",
    "TableParams",
    "TableRepartitionMapProcessor",
    "TableSourceProcessor",
    "TableStoreProcessor",
    "TableToStreamProcessor",
    "TableTransformValuesProcessor",
    "TupleForwarder",
    "put_table",
]

_LOG = logging.getLogger(__name__)
_new = tuple.__new__


class TableSourceProcessor(TableStoreProcessor):
    """Turn a topic's records into table updates; materialize them when asked. Null keys
    are dropped; a null value deletes the key (a tombstone)."""

    def __init__(self, name: str, params: TableParams) -> None:
        self.name = name
        self.params = params
        self.dropped = 0

    def init(self, context: Any) -> None:
        """Open the store when materialized."""
        super().init(context)
        self.versioned = isinstance(self.store, MeteredVersionedKeyValueStore)

    def process(self, record: AnyRecord) -> None:
        """Update the store and forward the change, as Kafka's ``KTableSource``: a versioned
        store's update too old to be put is not forwarded; one put into its history (older
        than the key's latest version) is forwarded as a :class:`NonLatestChange`, its old
        value the latest one."""
        key, value, ts = record[0], record[1], record[2]
        if key is None:
            self._skip_null_key(self.context.offset)
            return
        store = self.store
        if store is None:
            self.context.forward(_new(Record, (key, Change(value, None), ts, record[3])))
            return
        old = store.get(key)
        if old is not None and ts < old[1]:
            self._out_of_order(old[1], ts, self.context.offset)
        code = put_table(store, key, value, ts)
        if code == PUT_RETURN_CODE_NOT_PUT:
            return  # a versioned store's update older than its history retention
        old_value = old[0] if old is not None and self.params.send_old_values else None
        change = make_change(value, old_value, code == PUT_RETURN_CODE_IS_LATEST)
        self.forwarder.maybe_forward(_new(Record, (key, change, ts, record[3])))

    def _out_of_order(self, old_ts: int, new_ts: int, offset: int | None) -> None:
        """Log an update older than the stored value (applied all the same), as Kafka's
        ``KTableSource`` does."""
        context = self.context
        _LOG.warning(
            "Detected out-of-order KTable update for %s, old timestamp=[%s] new timestamp=[%s]."
            " topic=[%s] partition=[%s] offset=[%s].",
            self.params.store_name,
            old_ts,
            new_ts,
            context.topic,
            context.partition,
            offset,
        )

    def _skip_null_key(self, offset: int | None) -> None:
        """Drop a record with a null key: counted in the task's ``dropped-records`` and
        logged, as Kafka's ``KTableSource`` does."""
        self.dropped += 1
        context = self.context
        context.record_dropped()
        _LOG.warning(
            "Skipping record due to null key. topic=[%s] partition=[%s] offset=[%s]",
            context.topic,
            context.partition,
            offset,
        )

    def process_batch(self, batch: Batch) -> None:
        """Apply a batch of updates: each distinct key read once and written once (in the
        order of its last update), every update forwarded in order without a cache."""
        ks, vs, ts = batch.keys, batch.values, batch.timestamps
        keep = [i for i in range(len(ks)) if ks[i] is not None]
        if len(keep) < len(ks):
            for i in range(len(ks)):
                if ks[i] is None:
                    self._skip_null_key(self.context.input_offset(batch.rows[i]))
        if self.store is None:
            part = batch if len(keep) == len(ks) else batch.take(keep)
            self.context.forward_batch(part.with_values([Change(v, None) for v in part.values]))
            return
        try:
            # a versioned store keeps every version: record by record, as one at a time
            last = None if self.versioned else {ks[i]: i for i in keep}
        except TypeError:  # an unhashable key: record by record
            last = None
        if last is None:
            for i in keep:  # the null keys were counted above
                self.context.set_timestamp(ts[i])
                self.process(_new(Record, (ks[i], vs[i], ts[i], batch.header(i))))
            return
        store, forwarder, send_old = self.store, self.forwarder, self.params.send_old_values
        buffered = forwarder.buffered
        state: dict[Any, Any] = {}
        changes: list[Any] = []
        for i in keep:
            key, value = ks[i], vs[i]
            old = state[key] if key in state else store.get(key)
            if old is not None and ts[i] < old[1]:
                self._out_of_order(old[1], ts[i], self.context.input_offset(batch.rows[i]))
            state[key] = None if value is None else ValueAndTimestamp(value, ts[i])
            if not buffered:
                changes.append(Change(value, old[0] if old is not None and send_old else None))
        set_timestamp = self.context.set_timestamp
        forwarder.muted = not buffered  # a cache of size 0 hands on each put: see below
        try:
            for key, i in sorted(last.items(), key=lambda item: item[1]):
                set_timestamp(ts[i])
                store.put(key, state[key])
        finally:
            forwarder.muted = False
        if not buffered:
            forwarder.forward_folded(
                batch, keep, [ks[i] for i in keep], changes, [ts[i] for i in keep]
            )


class TableToStreamProcessor(Processor[Any, Any, Any, Any]):
    """Forward each update's new value as a stream record (a deletion as ``None``)."""

    context: NodeContext

    def init(self, context: Any) -> None:
        """Bind ``forward``."""
        self.context = context
        self.forward = context.forward

    def process(self, record: AnyRecord) -> None:
        """Unwrap the change."""
        self.forward(_new(Record, (record[0], record[1][0], record[2], record[3])))

    def process_batch(self, batch: Batch) -> None:
        """Unwrap every change."""
        self.context.forward_batch(batch.with_values([c[0] for c in batch.values]))


class TableRepartitionMapProcessor(Processor[Any, Any, Any, Any]):
    """Re-key a table update for ``group_by``: the old value goes to its old group as a
    subtraction and the new value to its new group as an addition (one record when both
    land in the same group), as Kafka's ``KTableRepartitionMap``."""

    context: NodeContext

    def __init__(self, name: str, fn: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        self.name = name
        self.fn = fn

    def init(self, context: Any) -> None:
        """Bind ``forward``."""
        self.context = context
        self.forward = context.forward

    def process(self, record: AnyRecord) -> None:
        """Select the new and old groups and forward; drop an update that is not its
        key's latest version (KIP-914: the aggregate of a versioned table holds its latest
        values only; an update from a table that is not versioned always is the latest)."""
        key, change, ts, headers = record
        if not change.is_latest:
            return
        for group, value in self._regrouped(key, change):
            self.forward(_new(Record, (group, value, ts, headers)))

    def process_batch(self, batch: Batch) -> None:
        """Re-key a batch of updates (the selector called as one record at a time does:
        a record's new value, then its old one) and forward what they become as one
        batch, each record's in :meth:`process`'s order."""
        index: list[int] = []
        keys: list[Any] = []
        values: list[Any] = []
        regrouped = self._regrouped
        for i, key, change in zip(range(len(batch)), batch.keys, batch.values, strict=True):
            if change.is_latest:
                for group, value in regrouped(key, change):
                    index.append(i)
                    keys.append(group)
                    values.append(value)
        if index:
            part = batch.take(index)
            self.context.forward_batch(
                Batch(keys, values, part.timestamps, part.headers, part.rows)
            )

    def _regrouped(self, key: Any, change: Any) -> tuple[tuple[Any, Change[Any]], ...]:
        """The ``(group, change)`` records an update becomes: the old group's subtraction,
        then the new group's addition, or one record when the groups are the same."""
        new: Any
        old: Any
        try:
            new = self.fn(key, change[0]) if change[0] is not None else None
            old = self.fn(key, change[1]) if change[1] is not None else None
        except Exception as exc:
            raise user_error(self.name, self.fn, exc) from exc
        new_ok = new is not None and new[0] is not None and new[1] is not None
        old_ok = old is not None and old[0] is not None and old[1] is not None
        if new_ok and old_ok and new[0] == old[0]:
            return ((new[0], Change(new[1], old[1])),)
        added = ((new[0], Change(new[1], None)),) if new_ok else ()
        return ((old[0], Change(None, old[1])), *added) if old_ok else added
