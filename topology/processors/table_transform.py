"""Processors of the KTable operators that compute a row's value from its parent's:
``filter``/``filter_not`` (Kafka's ``KTableFilter``), ``map_values`` (``KTableMapValues``)
and ``transform_values`` (``KTableTransformValues``), each optionally materialized in its
own store.

An update's old value, when downstream asked for old values, is the node's stored value
when it is materialized, else the parent's old value computed again. A batch takes the
user's function once per value in record order, as one record at a time does (a record's
new value, then its old one); a materialized node reads each distinct key of a batch once
and writes it once where it can (see :mod:`topology.processors.table_forward`), else
updates its store record by record. A transformer runs record by record with its record's
context (it may read it, and the stores connected to its node). Either way the updates go
on as one batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from common.errors import StreamsError
from statestores.api import PUT_RETURN_CODE_NOT_PUT
from topology.api.record import Change, NonLatestChange, make_change
from topology.engine.columnar import Batch
from topology.engine.nodes import user_error
from topology.processors.table_forward import (
    PUT_RETURN_CODE_IS_LATEST,
    AnyRecord,
    TableParams,
    TableStoreProcessor,
    TypedKey,
    folded_keys,
    forward_at,
    put_folded,
    put_table,
    read_latest,
    updates_in_context,
)

_new = tuple.__new__
_TWICE = (0, 1)


class _TableTransform(TableStoreProcessor):
    """A table operator computing its value from the parent's change, optionally
    materialized into its own store."""

    def __init__(self, name: str, fn: Callable[..., Any], params: TableParams) -> None:
        self.name = name
        self.fn = fn
        self.params = params

    def compute(self, key: Any, value: Any) -> Any:
        """Return the new value for the parent's ``value`` (``None`` stays ``None``)."""
        raise NotImplementedError

    def compute_many(self, keys: list[Any], values: list[Any]) -> list[Any]:
        """:meth:`compute` of each value, in order."""
        return list(map(self.compute, keys, values))

    @property
    def skipping(self) -> bool:
        """Whether an update whose new and old values are both null is not forwarded at all
        (only a filter's may be, see :meth:`TableFilterProcessor.skipping`)."""
        return False

    def process(self, record: AnyRecord) -> None:
        """Transform the change, store it (when materialized) and forward it."""
        self.forward_update(record, self._update(record[0], record[1], record[2]))

    def _update(self, key: Any, change: Any, ts: int) -> Change[Any] | None:
        """Compute one update and store it (when materialized); return the change to
        forward, None when there is none (skipped, or a versioned store did not take it).
        A materialized node's change says whether its own store took the update as the
        latest version (KIP-914), one that is not passes on the parent's ``is_latest``."""
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
        if self.skipping and old is None and new is None:
            return None
        if self.store is None:
            return make_change(new, old, change.is_latest)
        code = put_table(self.store, key, new, ts)
        if code == PUT_RETURN_CODE_NOT_PUT:
            return None
        return make_change(new, old, code == PUT_RETURN_CODE_IS_LATEST)

    def process_batch(self, batch: Batch) -> None:
        """Transform a batch of updates and forward them as one batch (none where the
        store's cache forwards them on flush). Materialized, the batch is folded per key
        where it can be (:func:`~topology.processors.table_forward.folded_keys`), else
        each record updates the store in turn; a store whose cache forwards each write as
        it is made takes the batch as one record at a time."""
        store = self.store
        if store is None:
            self._forward_computed(batch)
        elif self.forwarder.forwards_each_write:
            self.context.record_by_record(self.process)(batch)
        elif (typed := folded_keys(store, batch.keys)) is not None:
            self._fold(batch, typed)
        else:
            self._update_each(batch)

    def _update_each(self, batch: Batch) -> None:
        """Update record by record (each with its record's context), forward one batch."""
        index, changes = updates_in_context(self.context, batch, self._update)
        if self.store is None or not self.forwarder.cached:
            forward_at(self.context, batch, index, changes)

    def _forward_computed(self, batch: Batch) -> None:
        """Compute the batch's updates (not materialized: an old value is the parent's,
        computed again) and forward them, each keeping its parent's ``is_latest``."""
        ks, cs = batch.keys, batch.values
        try:
            if self.params.send_old_values:  # each record's new value, then its old one
                both = self.compute_many(
                    [k for k in ks for _ in _TWICE], [v for c in cs for v in c]
                )
                news, olds = both[0::2], both[1::2]
            else:
                news, olds = self.compute_many(ks, [c[0] for c in cs]), [None] * len(ks)
        except Exception as exc:
            raise user_error(self.name, self.fn, exc) from exc
        if NonLatestChange in set(map(type, cs)):  # from a versioned table (KIP-914)
            changes = [
                make_change(n, o, c.is_latest) for n, o, c in zip(news, olds, cs, strict=True)
            ]
        else:
            changes = [_new(Change, pair) for pair in zip(news, olds, strict=True)]
        index: Sequence[int] = range(len(ks))
        if self.skipping:
            index = [i for i in index if news[i] is not None or olds[i] is not None]
            changes = [changes[i] for i in index]
        forward_at(self.context, batch, index, changes)

    def _fold(self, batch: Batch, typed: list[TypedKey]) -> None:
        """Compute the batch's updates into the node's store: each distinct key read once
        (when old values are sent) and written once, the updates forwarded as one batch
        unless the store's cache forwards them on flush."""
        ks, cs, ts = batch.keys, batch.values, batch.timestamps
        try:
            news = self.compute_many(ks, [c[0] for c in cs])
        except Exception as exc:
            raise user_error(self.name, self.fn, exc) from exc
        olds: dict[TypedKey, Any] | None = None
        if self.params.send_old_values:
            olds = {
                k: None if f is None else f[0] for k, f in read_latest(self.store, typed).items()
            }
        skipping, forwards = self.skipping, not self.forwarder.cached
        last: dict[TypedKey, int] = {}
        index: list[int] = []
        changes: list[Any] = []
        for i, key, new in zip(range(len(ks)), typed, news, strict=True):
            old = None
            if olds is not None:
                old = olds[key]
                if skipping and old is None and new is None:
                    continue
                olds[key] = new
            last[key] = i
            if forwards:
                index.append(i)
                changes.append(_new(Change, (new, old)))
        put_folded(self.store, self.context, last, news, ts)
        forward_at(self.context, batch, index, changes)


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

    def compute_many(self, keys: list[Any], values: list[Any]) -> list[Any]:
        """:meth:`compute` of each value."""
        fn, negate = self.fn, self.negate
        return [
            None if value is None or bool(fn(key, value)) is negate else value
            for key, value in zip(keys, values, strict=True)
        ]

    @property
    def skipping(self) -> bool:
        """Skip a deletion of a row that was not there when old values are sent, unless
        the parent table is versioned (Kafka's ``KTableFilter``: an out-of-order update
        must reach a versioned table downstream even then)."""
        params = self.params
        return params.send_old_values and not params.versioned_semantics


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

    def compute_many(self, keys: list[Any], values: list[Any]) -> list[Any]:
        """:meth:`compute` of each value."""
        fn = self.fn
        if self.with_key:
            return [None if v is None else fn(k, v) for k, v in zip(keys, values, strict=True)]
        return [None if v is None else fn(v) for v in values]


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

    def process_batch(self, batch: Batch) -> None:
        """Transform a batch record by record, each with the record context the record
        engine gives it (the transformer may read it, and the node's own store), and
        forward the updates as one batch (none when the store's cache forwards them on
        flush); a store whose cache forwards each write as it is made takes the batch as
        one record at a time."""
        if self.store is not None and self.forwarder.forwards_each_write:
            self.context.record_by_record(self.process)(batch)
        else:
            self._update_each(batch)

    def close(self) -> None:
        """Close the transformer."""
        close = getattr(self.transformer, "close", None)
        if close is not None:
            close()
