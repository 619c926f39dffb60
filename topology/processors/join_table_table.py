"""Processors of table-table equi-joins (Kafka's ``KTableKTable{Inner,Left,Right,Outer}Join``
and ``KTableKTableJoinMerger``) and the view of a join result that is not materialized.

A table-table join has one processor per side: an update of one side looks the other side
up through its value getter and emits a :class:`~topology.api.record.Change` of the joined
value, timestamped ``max`` of both sides; a merge node (optionally materialized) joins both
paths. Old values are computed only when downstream asked for them.

A side takes a batch of updates whole: the other table does not change within it (its
updates come through the other side), so it is read once for the batch's distinct keys,
unless reading it runs a user's transformer (:func:`runs_transformer`), which reads once
per record with its record's context. The merge node stores a batch folded per key where
it can (see :mod:`topology.processors.table_forward`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal

from statestores.api import PUT_RETURN_CODE_NOT_PUT
from topology.api.processor import Processor
from topology.api.record import Change, Record, ValueAndTimestamp, make_change
from topology.engine.columnar import Batch
from topology.engine.context import NodeContext
from topology.engine.nodes import user_error
from topology.processors.joins import DerivedGetter, GetterSupplier, ValueGetter, get_many
from topology.processors.table_forward import (
    PUT_RETURN_CODE_IS_LATEST,
    TableParams,
    TableStoreProcessor,
    folded_keys,
    forward_at,
    put_folded,
    put_table,
    updates_in_context,
)
from topology.processors.table_transform import TableTransformValuesProcessor

_LOG = logging.getLogger(__name__)
_new = tuple.__new__
_UNKNOWN = -1
#: Which join a table-table side runs: ``right`` is the right side of a left join.
TableJoinMode = Literal["inner", "left", "right", "outer"]


class TableTableJoinProcessor(Processor[Any, Any, Any, Any]):
    """One side of a table-table join: an update here is joined with the other side's
    current value.

    Args:
        name: the node name.
        mode: the join seen from this side (``right``: right side of a left join).
        is_left: this is the left table (the joiner takes ``(left, right)``).
        getter: how to read the other table.
        joiner: the user's ``(left, right) -> result``.
        params: the join's shared params (``send_old_values``).
    """

    context: NodeContext

    def __init__(  # noqa: PLR0917 - one supplier per side
        self,
        name: str,
        mode: TableJoinMode,
        is_left: bool,
        getter: GetterSupplier,
        joiner: Callable[[Any, Any], Any],
        params: TableParams,
    ) -> None:
        self.name = name
        self.mode = mode
        self.is_left = is_left
        self.getter: ValueGetter = getter.make()
        self.fn = joiner
        self.params = params
        self.dropped = 0
        #: Reading the other table runs a user's transformer (see :meth:`process_batch`).
        self.transforming = runs_transformer(self.getter)

    def init(self, context: Any) -> None:
        """Open the other table's stores."""
        self.context = context
        self.getter.init(context)

    def _join(self, this: Any, other: Any) -> Any:
        left, right = (this, other) if self.is_left else (other, this)
        try:
            return self.fn(left, right)
        except Exception as exc:
            raise user_error(self.name, self.fn, exc, "value joiner") from exc

    def process(self, record: Record[Any, Any]) -> None:
        """Join the change with the other side and forward the joined change. An update
        that is not its key's latest version (from a versioned table, KIP-914) is dropped,
        counted in ``dropped-records``: a join result reflects the latest values only."""
        joined = self._joined(record[0], record[1], record[2], self.getter.get)
        if joined is not None:
            self.context.forward(_new(Record, (record[0], joined[0], joined[1], record[3])))

    def _joined(
        self, key: Any, change: Any, ts: int, read: Callable[[Any], Any]
    ) -> tuple[Change[Any], int] | None:
        """The joined change of one update and its timestamp (the larger of both sides'),
        the other side's value of ``key`` read with ``read``; None when nothing is
        forwarded."""
        if key is None:
            self.dropped += 1
            return None
        if not change.is_latest:
            self._skip_out_of_order()
            return None
        found = read(key)
        other = None if found is None else found[0]
        new_value, old_value = change[0], change[1]
        send_old, mode = self.params.send_old_values, self.mode
        if other is None and (
            mode in ("inner", "right") or (new_value is None and old_value is None)
        ):
            return None
        result_ts = max(ts, _UNKNOWN if found is None else found[1])
        new = old = None
        if mode == "right":
            new = self._join(new_value, other)
            old = self._join(old_value, other) if send_old else None
        elif mode == "outer":
            if other is not None or new_value is not None:
                new = self._join(new_value, other)
            if send_old and (other is not None or old_value is not None):
                old = self._join(old_value, other)
        else:
            new = None if new_value is None else self._join(new_value, other)
            old = self._join(old_value, other) if send_old and old_value is not None else None
        return _new(Change, (new, old)), result_ts

    def process_batch(self, batch: Batch) -> None:
        """Join a batch of updates and forward the joined changes as one batch. The other
        table does not change within the batch (its updates come through the other
        side), so it is read once for the batch's distinct keys; a getter that runs a
        user's transformer (:func:`runs_transformer`) is read once per record, with the
        record's context, as one record at a time reads it."""
        ks, cs, ts = batch.keys, batch.values, batch.timestamps
        joined = self._joined
        if self.transforming:
            get = self.getter.get
            index, outs = updates_in_context(
                self.context, batch, lambda key, change, t: joined(key, change, t, get)
            )
        else:
            read = self._reader(ks, cs)
            every = [joined(ks[i], cs[i], ts[i], read) for i in range(len(ks))]
            index = [i for i, out in enumerate(every) if out is not None]
            outs = [every[i] for i in index]
        if index:
            part = batch.take(index)
            changes, stamps = [out[0] for out in outs], [out[1] for out in outs]
            self.context.forward_batch(Batch(part.keys, changes, stamps, part.headers, part.rows))

    def _reader(self, keys: list[Any], changes: list[Any]) -> Callable[[Any], Any]:
        """How a batch reads the other table: from one read of the distinct keys that
        :meth:`_joined` looks up (by type too: 1, 1.0 and True are one dict key, not one
        serialized key), or key by key when one is unhashable."""
        wanted = (
            (type(k), k)
            for k, c in zip(keys, changes, strict=True)
            if k is not None and c.is_latest
        )
        try:
            distinct = list(dict.fromkeys(wanted))
        except TypeError:  # an unhashable key
            return self.getter.get
        if not distinct:
            return self.getter.get
        found = dict(zip(distinct, get_many(self.getter, [k for _, k in distinct]), strict=True))
        return lambda key: found[(type(key), key)]

    def _skip_out_of_order(self) -> None:
        """Drop an out-of-order update of a versioned table, as Kafka's table-table joins
        (an update of a table that is not versioned always is the latest)."""
        self.dropped += 1
        self.context.record_dropped()
        _LOG.info(
            "Skipping out-of-order record from versioned table while performing table-table join."
        )


class TableJoinMergeProcessor(TableStoreProcessor):
    """Merge both sides' joined changes; store them when the result is materialized
    (Kafka's ``KTableKTableJoinMerger``)."""

    def __init__(self, params: TableParams) -> None:
        self.params = params

    def process(self, record: Record[Any, Any]) -> None:
        """Store (when materialized) and forward; a materialized result forwards whether
        its store took the update as the latest version (KIP-914)."""
        self.forward_update(record, self._update(record[0], record[1], record[2]))

    def _update(self, key: Any, change: Any, ts: int) -> Change[Any] | None:
        """Store one joined change (when materialized); return the change to forward (the
        one given when it goes on as it is), None when a versioned store did not take it."""
        old = change[1] if self.params.send_old_values else None
        if self.store is None:
            return change if old is change[1] else make_change(change[0], None, change.is_latest)
        code = put_table(self.store, key, change[0], ts)
        if code == PUT_RETURN_CODE_NOT_PUT:
            return None
        return make_change(change[0], old, code == PUT_RETURN_CODE_IS_LATEST)

    def process_batch(self, batch: Batch) -> None:
        """Store (when materialized) and forward a batch of joined changes as one batch
        (none where the store's cache forwards them on flush): each distinct key written
        once where the batch folds
        (:func:`~topology.processors.table_forward.folded_keys`), else record by record; a
        store whose cache forwards each write as it is made takes the batch as one record
        at a time."""
        cs, send_old = batch.values, self.params.send_old_values
        store = self.store
        if store is None:
            if not send_old:
                cs = [c if c[1] is None else make_change(c[0], None, c.is_latest) for c in cs]
            self.context.forward_batch(batch.with_values(cs))
            return
        if self.forwarder.forwards_each_write:
            self.context.record_by_record(self.process)(batch)
            return
        forwards = not self.forwarder.cached
        typed = folded_keys(store, batch.keys)
        if typed is None:
            index, changes = updates_in_context(self.context, batch, self._update)
            if forwards:
                forward_at(self.context, batch, index, changes)
            return
        last = {key: i for i, key in enumerate(typed)}
        put_folded(store, self.context, last, [c[0] for c in cs], batch.timestamps)
        if forwards:
            olds: Sequence[Any] = [c[1] for c in cs] if send_old else [None] * len(cs)
            changes = [_new(Change, (c[0], o)) for c, o in zip(cs, olds, strict=True)]
            forward_at(self.context, batch, range(len(cs)), changes)


class TableJoinGetter:
    """Compute a non-materialized join result by key from both sides' getters (the
    ``view()`` of Kafka's table-table join processors)."""

    def __init__(
        self, mode: TableJoinMode, left: ValueGetter, right: ValueGetter, joiner: Any
    ) -> None:
        self.mode = mode
        self.left = left
        self.right = right
        self.joiner = joiner

    def init(self, context: Any) -> None:
        """Open both sides' stores."""
        self.left.init(context)
        self.right.init(context)

    def get(self, key: Any) -> ValueAndTimestamp[Any] | None:
        """Return the joined value of ``key`` and the larger timestamp, or None."""
        left = self.left.get(key)
        if left is None and self.mode != "outer":
            return None
        right = self.right.get(key)
        if right is None and self.mode == "inner":
            return None
        if left is None and right is None:
            return None
        ts = max(_UNKNOWN if left is None else left[1], _UNKNOWN if right is None else right[1])
        value = self.joiner(None if left is None else left[0], None if right is None else right[0])
        return ValueAndTimestamp(value, ts)


def runs_transformer(getter: Any) -> bool:
    """Whether reading ``getter`` runs a user's transformer: the view of a
    ``transform_values`` table that is not materialized, or of a table read through one.
    The transformer may read its record's context (and count its calls)."""
    if isinstance(getter, DerivedGetter) and isinstance(
        getter.operator, TableTransformValuesProcessor
    ):
        return True
    parents = (getattr(getter, name, None) for name in ("parent", "left", "right"))
    return any(runs_transformer(parent) for parent in parents if parent is not None)
