"""Processors of KTables: source, filter, map_values, to_stream, group_by's re-keying, and
the forwarder that emits table updates on cache flush (Kafka's
``TimestampedTupleForwarder``).

Table processors pass :class:`~topology.api.record.Change` values (new and, when a downstream
operator asked for it, old). Stores hold :class:`~topology.api.record.ValueAndTimestamp`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.errors import StreamsError
from statestores.api import PUT_RETURN_CODE_NOT_PUT, PUT_RETURN_CODE_VALID_TO_UNDEFINED
from statestores.caching import cache_max_bytes
from statestores.versioned_store import MeteredVersionedKeyValueStore
from topology.api.processor import Processor
from topology.api.record import Change, Record, ValueAndTimestamp, make_change
from topology.engine.columnar import Batch, rows_at
from topology.engine.context import NodeContext
from topology.engine.nodes import user_error

_LOG = logging.getLogger(__name__)
_new = tuple.__new__
AnyRecord = Record[Any, Any]
#: What :func:`put_table` returns for the latest version of its key (Kafka's
#: ``KeyValueStoreWrapper.PUT_RETURN_CODE_IS_LATEST``).
PUT_RETURN_CODE_IS_LATEST = PUT_RETURN_CODE_VALID_TO_UNDEFINED


@dataclass(slots=True)
class TableParams:
    """What a table node does, settled while the DSL is recorded: its store (``None``: not
    materialized) and whether downstream needs old values. Shared with its supplier."""

    store_name: str | None = None
    send_old_values: bool = False
    #: The parent table is versioned (Kafka's ``useVersionedSemantics``, KIP-914): a
    #: filter then forwards a deletion even when both old and new values are null.
    versioned_semantics: bool = False


def put_table(store: Any, key: Any, value: Any, timestamp: int) -> int:
    """Write a table update into a timestamped or a versioned store (Kafka's
    ``KeyValueStoreWrapper.put``).

    Returns:
        :data:`PUT_RETURN_CODE_IS_LATEST` when the update is its key's latest version (a
        timestamped store's always is), ``PUT_RETURN_CODE_NOT_PUT`` when a versioned store
        did not take it (older than its history retention: not forwarded either, KIP-914),
        else the ``valid_to`` of a version put into a versioned store's history.
    """
    if isinstance(store, MeteredVersionedKeyValueStore):
        return store.put(key, value, timestamp)
    store.put(key, None if value is None else ValueAndTimestamp(value, timestamp))
    return PUT_RETURN_CODE_IS_LATEST


class TupleForwarder:
    """Forward table updates directly, or, when the store caches, on flush."""

    def __init__(self, store: Any, context: Any, send_old_values: bool) -> None:
        self.context = context
        self.send_old_values = send_old_values
        self.cached = bool(
            store.set_flush_listener(
                self._on_flush, self._on_flush_batch, old_values=send_old_values
            )
        )
        #: Whether updates wait in the cache (one of size 0 forwards each write at once).
        self.buffered = self.cached and cache_max_bytes(context.app_config) > 0
        #: While set, what the cache hands on is not forwarded (a batch node forwarded it).
        self.muted = False

    def maybe_forward(self, record: AnyRecord) -> None:
        """Forward ``record`` (a Change value) unless the cache will forward it on flush."""
        if not self.cached:
            self.context.forward(record)

    def forward_folded(
        self,
        batch: Batch,
        index: list[int],
        keys: list[Any],
        changes: list[Any],
        stamps: list[int],
    ) -> None:
        """Forward the updates a batch node folded, one per record at ``index`` of
        ``batch``, as one batch (a cache of size 0 forwards them without headers)."""
        if not index:
            return
        hs = None if self.cached else batch.headers
        self.context.forward_batch(
            Batch(
                keys,
                changes,
                stamps,
                None if hs is None else [hs[i] for i in index],
                rows_at(batch.rows, index),
            )
        )

    def _on_flush_batch(
        self, keys: list[Any], news: list[Any], olds: list[Any], timestamps: list[int]
    ) -> None:
        """A flush's updates: one batch to the children (columnar), else one by one."""
        if self.muted:
            return
        context = self.context
        if not context.forwards_batches():
            for key, new, old, ts in zip(keys, news, olds, timestamps, strict=True):
                self._on_flush(key, new, old, ts)
            return
        send_old = self.send_old_values
        changes = [
            Change(None if new is None else new[0], None if old is None or not send_old else old[0])
            for new, old in zip(news, olds, strict=True)
        ]
        stamps = [ts if new is None else new[1] for new, ts in zip(news, timestamps, strict=True)]
        context.forward_batch(Batch(keys, changes, stamps, None, range(len(keys))))

    def _on_flush(self, key: Any, new: Any, old: Any, timestamp: int) -> None:
        if self.muted:
            return
        value = Change(
            None if new is None else new[0],
            None if old is None or not self.send_old_values else old[0],
        )
        ts = new[1] if new is not None else timestamp
        self.context.forward(_new(Record, (key, value, ts, ())))


class TableSourceProcessor(Processor[Any, Any, Any, Any]):
    """Turn a topic's records into table updates; materialize them when asked. Null keys
    are dropped; a null value deletes the key (a tombstone)."""

    context: NodeContext

    def __init__(self, name: str, params: TableParams) -> None:
        self.name = name
        self.params = params
        self.dropped = 0

    def init(self, context: Any) -> None:
        """Open the store when materialized."""
        self.context = context
        self.store: Any = None
        if self.params.store_name is not None:
            self.store = context.get_state_store(self.params.store_name)
            self.forwarder = TupleForwarder(self.store, context, self.params.send_old_values)
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


class _TableTransform(Processor[Any, Any, Any, Any]):
    """A table operator computing its value from the parent's change, optionally
    materialized into its own store."""

    def __init__(self, name: str, fn: Callable[..., Any], params: TableParams) -> None:
        self.name = name
        self.fn = fn
        self.params = params

    def init(self, context: Any) -> None:
        """Open the store when materialized."""
        self.context = context
        self.store: Any = None
        if self.params.store_name is not None:
            self.store = context.get_state_store(self.params.store_name)
            self.forwarder = TupleForwarder(self.store, context, self.params.send_old_values)

    def compute(self, key: Any, value: Any) -> Any:
        """Return the new value for the parent's ``value`` (``None`` stays ``None``)."""
        raise NotImplementedError

    def skips(self, new: Any, old: Any) -> bool:
        """Whether an update is not forwarded at all (only a filter skips some)."""
        return False

    def process(self, record: AnyRecord) -> None:
        """Transform the change, store it (when materialized) and forward it: a
        materialized node forwards whether its own store took the update as the latest
        version (KIP-914), one that is not forwards the parent's ``is_latest``."""
        key, change, ts = record[0], record[1], record[2]
        try:
            new = self.compute(key, change[0])
            old = None
            if self.params.send_old_values:
                if self.store is not None:
                    stored = self.store.get(key)
                    old = None if stored is None else stored[0]
                else:
                    old = self.compute(key, change[1])
        except Exception as exc:
            raise user_error(self.name, self.fn, exc) from exc
        if self.skips(new, old):
            return
        if self.store is None:
            self.context.forward(
                _new(Record, (key, make_change(new, old, change.is_latest), ts, record[3]))
            )
            return
        code = put_table(self.store, key, new, ts)
        if code != PUT_RETURN_CODE_NOT_PUT:
            out = make_change(new, old, code == PUT_RETURN_CODE_IS_LATEST)
            self.forwarder.maybe_forward(_new(Record, (key, out, ts, record[3])))


class TableFilterProcessor(_TableTransform):
    """Keep values for which ``fn(key, value)`` holds (``negate``: does not); a filtered
    out update becomes a deletion, as Kafka's ``KTableFilter``."""

    def __init__(
        self, name: str, fn: Callable[[Any, Any], bool], params: TableParams, negate: bool
    ) -> None:
        super().__init__(name, fn, params)
        self.negate = negate

    def compute(self, key: Any, value: Any) -> Any:
        """Return ``value`` if it passes, else ``None``."""
        if value is None:
            return None
        return value if bool(self.fn(key, value)) is not self.negate else None

    def skips(self, new: Any, old: Any) -> bool:
        """Skip a deletion of a row that was not there when old values are sent, unless
        the parent table is versioned (Kafka's ``KTableFilter``: an out-of-order update
        must reach a versioned table downstream even then)."""
        params = self.params
        return (
            params.send_old_values
            and not params.versioned_semantics
            and old is None
            and new is None
        )


class TableMapValuesProcessor(_TableTransform):
    """Map each value with ``fn(value)`` (or ``fn(key, value)``)."""

    def __init__(
        self, name: str, fn: Callable[..., Any], params: TableParams, with_key: bool
    ) -> None:
        super().__init__(name, fn, params)
        self.with_key = with_key

    def compute(self, key: Any, value: Any) -> Any:
        """Return the mapped value."""
        if value is None:
            return None
        return self.fn(key, value) if self.with_key else self.fn(value)


class ForwardingDisabledContext:
    """The node's context as a value transformer sees it: everything but forwarding (Kafka's
    ``ForwardingDisabledProcessorContext``), so the key cannot change."""

    __slots__ = ("_context",)

    def __init__(self, context: Any) -> None:
        self._context = context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def forward(self, *args: Any, **kwargs: Any) -> None:
        """Refuse: the transformed value is the transformer's only output."""
        raise StreamsError(
            "ProcessorContext#forward() is not supported from this context, as the framework "
            "must ensure the key is not changed (#forward allows changing the key on messages "
            "which are sent). Use KStream.map() instead."
        )


class TableTransformValuesProcessor(_TableTransform):
    """Transform each value with a user's transformer (Kafka's ``KTableTransformValues``):
    ``supplier()`` makes one per processor, initialised with the node's context (the
    stores connected to it); ``transform(key, value)`` sees deletions too (``None``)."""

    def __init__(self, name: str, supplier: Callable[[], Any], params: TableParams) -> None:
        super().__init__(name, supplier, params)
        self.transformer: Any = None

    def init(self, context: Any) -> None:
        """Open the store when materialized; make and initialise the transformer."""
        super().init(context)
        self.transformer = self.fn()
        if self.transformer is None:
            raise user_error(
                self.name,
                self.fn,
                TypeError("the supplier returned None; return a new transformer each call"),
                "transformer supplier",
            )
        init = getattr(self.transformer, "init", None)
        if init is not None:
            init(ForwardingDisabledContext(context))

    def compute(self, key: Any, value: Any) -> Any:
        """Return ``transform(key, value)``."""
        return self.transformer.transform(key, value)

    def close(self) -> None:
        """Close the transformer."""
        close = getattr(self.transformer, "close", None)
        if close is not None:
            close()


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
            self.forward(_new(Record, (new[0], Change(new[1], old[1]), ts, headers)))
            return
        if old_ok:
            self.forward(_new(Record, (old[0], Change(None, old[1]), ts, headers)))
        if new_ok:
            self.forward(_new(Record, (new[0], Change(new[1], None), ts, headers)))
