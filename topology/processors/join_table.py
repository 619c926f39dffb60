"""Processors of the joins that read a table: stream-table and stream-global-table joins
(Kafka's ``KStreamKTableJoinProcessor``) and table-table equi-joins (``KTableKTable{Inner,
Left,Right,Outer}Join`` and ``KTableKTableJoinMerger``).

A stream-table join looks the table up when a *stream* record arrives; table updates never
produce output. A table-table join has one processor per side: an update of one side looks
the other side up through its value getter and emits a :class:`~topology.api.record.Change` of
the joined value, timestamped ``max`` of both sides; a merge node (optionally materialized)
joins both paths. Old values are computed only when downstream asked for them.

The DSL records these nodes in :mod:`topology.dsl.join_build` (stream-table and
stream-global-table) and :mod:`topology.dsl.join_table_build` (table-table).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

from common.errors import TopologyError
from statestores.api import PUT_RETURN_CODE_NOT_PUT
from statestores.versioned_store import MeteredVersionedKeyValueStore
from topology.api.processor import Processor
from topology.api.record import Record, ValueAndTimestamp, make_change
from topology.engine.columnar import Batch
from topology.engine.context import NodeContext
from topology.engine.nodes import user_error
from topology.processors.join_grace import GraceBuffer
from topology.processors.joins import (
    DerivedGetter,
    GetterSupplier,
    KeyedJoiner,
    StoreGetter,
    ValueGetter,
    call_joiner,
    get_many,
)
from topology.processors.proc_table import (
    PUT_RETURN_CODE_IS_LATEST,
    TableParams,
    TupleForwarder,
    put_table,
)

_LOG = logging.getLogger(__name__)
_new = tuple.__new__
_UNKNOWN = -1
#: Which join a table-table side runs: ``right`` is the right side of a left join.
TableJoinMode = Literal["inner", "left", "right", "outer"]


class StreamTableJoinProcessor(Processor[Any, Any, Any, Any]):
    """Join each stream record with the table value of ``key_mapper(key, value)`` (the key
    itself for a KTable). Records with a null value, or a null join key, are dropped; a
    left join keeps a null-key record (KIP-962) and joins it with ``None``.

    Args:
        name: the node name.
        getter: how to read the table.
        key_mapper: ``(key, value) -> table key`` for a global table, None for a KTable.
        joiner: ``(key, value, table value) -> result``.
        fn: the user's joiner (named in errors).
        left: a left join (emit ``joiner(key, value, None)`` when there is no match).
        grace_ms: the grace period (KIP-923): records wait in the buffer store
            ``buffer_store`` and are joined in timestamp order; needs a versioned table.
        buffer_store: the grace buffer's store name.

    A versioned table (KIP-914) is read as of the stream record's timestamp.
    """

    def __init__(  # noqa: PLR0917 - one supplier per join kind
        self,
        name: str,
        getter: GetterSupplier,
        key_mapper: Callable[[Any, Any], Any] | None,
        joiner: KeyedJoiner,
        fn: Any,
        left: bool,
        grace_ms: int | None = None,
        buffer_store: str | None = None,
    ) -> None:
        self.name = name
        self.getter: ValueGetter = getter.make()
        self.key_mapper = key_mapper
        self.joiner = joiner
        self.fn = fn
        self.left = left
        self.dropped = 0
        self.grace_ms = grace_ms
        self.buffer_store = buffer_store
        self.buffer: GraceBuffer | None = None
        #: Reads the table as of a time (a versioned table), else None.
        self.as_of: Any = None

    def init(self, context: Any) -> None:
        """Open the table's stores (and the grace buffer).

        Raises:
            TopologyError: a grace period over a table that is not versioned (fatal).
        """
        self.context: NodeContext = context
        self.getter.init(context)
        self.as_of = versioned_reader(self.getter)
        if self.grace_ms is not None:
            if self.as_of is None:
                raise TopologyError(
                    "KTable must be versioned to use a grace period in a stream table join."
                )
            self.buffer = GraceBuffer(context.get_state_store(self.buffer_store), self.grace_ms)

    def _map(self, key: Any, value: Any) -> Any:
        if self.key_mapper is None:
            return key
        try:
            return self.key_mapper(key, value)
        except Exception as exc:
            raise user_error(self.name, self.key_mapper, exc, "key selector") from exc

    def process(self, record: Record[Any, Any]) -> None:
        """Look the table up and emit the joined record (or drop it); with a grace period,
        buffer it and join what the buffer lets out."""
        key, value = record[0], record[1]
        table_key = self._map(key, value)
        kept = self.left and key is None and value is not None  # KIP-962
        if not kept and (table_key is None or value is None):
            self._skip(self.context.offset)
            return
        buffer = self.buffer
        if buffer is not None and key is not None and buffer.put(*record, self.context.topic):
            for k, v, ts, headers in buffer.evict():
                self._join(k, v, self._map(k, v), ts, headers)
            return
        self._join(key, value, table_key, record[2], record[3])

    def _join(self, key: Any, value: Any, table_key: Any, ts: int, headers: Any) -> None:
        if table_key is None:
            found = None
        elif self.as_of is not None:
            found = self.as_of(table_key, ts)
        else:
            found = self.getter.get(table_key)
        other = None if found is None else found[0]
        if self.left or other is not None:
            joined = call_joiner(self.name, self.fn, self.joiner, key, value, other)
            self.context.forward(_new(Record, (key, joined, ts, headers)))

    def _skip(self, offset: int | None) -> None:
        """Drop a record with a null value or join key: counted in the task's
        ``dropped-records`` and logged, as Kafka's ``KStreamKTableJoinProcessor`` does."""
        self.dropped += 1
        context = self.context
        context.record_dropped()
        _LOG.warning(
            "Skipping record due to null join key or value. topic=[%s] partition=[%s] offset=[%s]",
            context.topic,
            context.partition,
            offset,
        )

    def process_batch(self, batch: Batch) -> None:
        """Join a batch of stream records: the table read once for the batch's distinct
        join keys (the table does not change within the batch: its updates come between
        the stream's batches, in timestamp order), the joiner called once per record. A
        versioned table, read as of each record's time, is joined record by record."""
        ks, vs = batch.keys, batch.values
        if self.as_of is not None:
            for i in range(len(ks)):
                self.context.set_timestamp(batch.timestamps[i])
                self.process(_new(Record, (ks[i], vs[i], batch.timestamps[i], batch.header(i))))
            return
        if self.key_mapper is None:
            table_keys = ks
        else:
            try:
                table_keys = list(map(self.key_mapper, ks, vs))
            except Exception as exc:
                raise user_error(self.name, self.key_mapper, exc, "key selector") from exc
        # by type too: 1, 1.0 and True are one dict key, not one serialized key
        typed = list(zip(map(type, table_keys), table_keys, strict=True))
        looked_up = (  # as one record at a time: no lookup for a null value or join key
            t for t, v in zip(typed, vs, strict=True) if t[1] is not None and v is not None
        )
        try:
            distinct: list[Any] | None = list(dict.fromkeys(looked_up))
        except TypeError:  # an unhashable join key: one lookup per record
            distinct = None
        found: dict[Any, Any] = {}
        if distinct is not None:
            wanted = [tk for _, tk in distinct]
            found = dict(zip(distinct, get_many(self.getter, wanted), strict=True))
        left, keep, joined = self.left, [], []
        for i, (key, value, table_key) in enumerate(zip(ks, vs, table_keys, strict=True)):
            kept = left and key is None and value is not None  # KIP-962
            if not kept and (table_key is None or value is None):
                self._skip(self.context.input_offset(batch.rows[i]))
                continue
            if table_key is None:
                hit = None
            elif distinct is not None:
                hit = found[typed[i]]
            else:
                hit = self.getter.get(table_key)
            other = None if hit is None else hit[0]
            if left or other is not None:
                keep.append(i)
                joined.append(call_joiner(self.name, self.fn, self.joiner, key, value, other))
        if keep:
            taken = batch if len(keep) == len(ks) else batch.take(keep)
            context: Any = self.context
            context.forward_batch(taken.with_values(joined))


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
        key, change, ts = record[0], record[1], record[2]
        if key is None:
            self.dropped += 1
            return
        if not change.is_latest:
            self._skip_out_of_order()
            return
        found = self.getter.get(key)
        other = None if found is None else found[0]
        new_value, old_value = change[0], change[1]
        send_old, mode = self.params.send_old_values, self.mode
        if other is None and (
            mode in ("inner", "right") or (new_value is None and old_value is None)
        ):
            return
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
        self.context.forward(_new(Record, (key, make_change(new, old, True), result_ts, record[3])))

    def _skip_out_of_order(self) -> None:
        """Drop an out-of-order update of a versioned table, as Kafka's table-table joins
        (an update of a table that is not versioned always is the latest)."""
        self.dropped += 1
        self.context.record_dropped()
        _LOG.info(
            "Skipping out-of-order record from versioned table while performing table-table join."
        )


class TableJoinMergeProcessor(Processor[Any, Any, Any, Any]):
    """Merge both sides' joined changes; store them when the result is materialized
    (Kafka's ``KTableKTableJoinMerger``)."""

    def __init__(self, params: TableParams) -> None:
        self.params = params

    def init(self, context: Any) -> None:
        """Open the result store when materialized."""
        self.context = context
        self.store: Any = None
        if self.params.store_name is not None:
            self.store = context.get_state_store(self.params.store_name)
            self.forwarder = TupleForwarder(self.store, context, self.params.send_old_values)

    def process(self, record: Record[Any, Any]) -> None:
        """Store (when materialized) and forward; a materialized result forwards whether
        its store took the update as the latest version (KIP-914)."""
        key, change, ts = record[0], record[1], record[2]
        old = change[1] if self.params.send_old_values else None
        if self.store is None:
            if old is not change[1]:
                record = _new(
                    Record, (key, make_change(change[0], None, change.is_latest), ts, record[3])
                )
            self.context.forward(record)
            return
        code = put_table(self.store, key, change[0], ts)
        if code != PUT_RETURN_CODE_NOT_PUT:
            out = make_change(change[0], old, code == PUT_RETURN_CODE_IS_LATEST)
            self.forwarder.maybe_forward(_new(Record, (key, out, ts, record[3])))


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


def versioned_reader(getter: Any) -> Any:
    """Return ``read(key, as_of)`` when ``getter`` reads a versioned table (Kafka's
    ``KTableValueGetter.isVersioned``): its store, or a derived table's parent's through
    the operator; None otherwise."""
    if isinstance(getter, StoreGetter):
        store = getter.store
        return store.get if isinstance(store, MeteredVersionedKeyValueStore) else None
    if isinstance(getter, DerivedGetter):
        parent = versioned_reader(getter.parent)
        if parent is None:
            return None
        computed = getter._computed  # the derived table's own computation

        def read(key: Any, as_of: int) -> Any:
            return computed(key, parent(key, as_of))

        return read
    return None
