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

This module holds the stream-table joins; the table-table joins are in
:mod:`topology.processors.join_table_table`. Every public name is importable from here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from common.errors import TopologyError
from statestores.versioned_store import MeteredVersionedKeyValueStore
from topology.api.processor import Processor
from topology.api.record import Record
from topology.engine.columnar import Batch
from topology.engine.context import NodeContext
from topology.engine.nodes import user_error
from topology.processors.join_grace import GraceBuffer
from topology.processors.join_table_table import (
    TableJoinGetter,
    TableJoinMergeProcessor,
    TableJoinMode,
    TableTableJoinProcessor,
    runs_transformer,
)
from topology.processors.joins import (
    DerivedGetter,
    GetterSupplier,
    KeyedJoiner,
    StoreGetter,
    ValueGetter,
    call_joiner,
    get_many,
)

__all__ = [
    "StreamTableJoinProcessor",
    "TableJoinGetter",
    "TableJoinMergeProcessor",
    "TableJoinMode",
    "TableTableJoinProcessor",
    "runs_transformer",
    "versioned_reader",
]

_LOG = logging.getLogger(__name__)
_new = tuple.__new__


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
            ts = batch.timestamps
            for i in range(len(ks)):
                self.context.set_timestamp(ts[i])
                self.process(_new(Record, (ks[i], vs[i], ts[i], batch.header(i))))
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
