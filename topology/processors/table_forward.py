"""How table nodes store and forward their updates: :class:`TableParams`, :func:`put_table`
(Kafka's ``KeyValueStoreWrapper.put``), :class:`TupleForwarder` (Kafka's
``TimestampedTupleForwarder``: directly, or on cache flush), and what their batch paths share:
a batch's keys read once (:func:`read_latest`) and written once (:func:`put_folded`), or its
records updated one by one (:func:`updates_in_context`), the updates forwarded as one batch
(:func:`forward_at`).

A batch node folds its updates per key only where that gives a store and a forward the
record engine's (:func:`folded_keys`): a store that keeps its latest values only (a
versioned store's put decides per record what is forwarded), keys that are hashable and not
null. Elsewhere it updates its store record by record and forwards one batch, except where
the store's cache forwards each write as it is made (a cache of size 0,
:attr:`TupleForwarder.forwards_each_write`): there the batch runs as one record at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from statestores.api import PUT_RETURN_CODE_VALID_TO_UNDEFINED
from statestores.caching import cache_max_bytes
from statestores.versioned_store import MeteredVersionedKeyValueStore
from topology.api.processor import Processor
from topology.api.record import Change, Record, ValueAndTimestamp
from topology.engine.columnar import Batch
from topology.engine.context import NodeContext
from topology.processors.joins import KeyValueReader

_new = tuple.__new__
AnyRecord = Record[Any, Any]
#: A key of a batch as its node folds it: with its type (1, 1.0 and True are one dict key,
#: not one serialized key).
TypedKey = tuple[type, Any]
#: What :func:`put_table` returns for the latest version of its key (Kafka's
#: ``KeyValueStoreWrapper.PUT_RETURN_CODE_IS_LATEST``).
PUT_RETURN_CODE_IS_LATEST = PUT_RETURN_CODE_VALID_TO_UNDEFINED
_NULL_KEY: TypedKey = (type(None), None)


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


class FlushForwarder:
    """Forward a store's updates directly, or, when the store caches, on flush (what a
    subclass's ``_on_flush`` and ``_on_flush_batch`` hand on)."""

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

    def maybe_forward(self, record: AnyRecord) -> None:
        """Forward ``record`` unless the cache will forward it on flush."""
        if not self.cached:
            self.context.forward(record)

    def _on_flush(self, key: Any, new: Any, old: Any, timestamp: int) -> None:
        raise NotImplementedError

    def _on_flush_batch(
        self, keys: list[Any], news: list[Any], olds: list[Any], timestamps: list[int]
    ) -> None:
        raise NotImplementedError


class TupleForwarder(FlushForwarder):
    """Forward table updates directly, or, when the store caches, on flush."""

    def __init__(self, store: Any, context: Any, send_old_values: bool) -> None:
        super().__init__(store, context, send_old_values)
        #: While set, what the cache hands on is not forwarded (a batch node forwarded it).
        self.muted = False

    @property
    def forwards_each_write(self) -> bool:
        """Whether the store's cache forwards each write as it is made (a cache of size 0):
        a batch node then takes its batch record by record."""
        return self.cached and not self.buffered

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
        if index:
            self.context.forward_batch(
                batch.standing_at(index, keys, changes, stamps, headers=not self.cached)
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


class TableStoreProcessor(Processor[Any, Any, Any, Any]):
    """A table processor stored in a store of its own when ``params`` names one, forwarding
    its updates through a :class:`TupleForwarder`."""

    context: NodeContext
    params: TableParams

    def init(self, context: Any) -> None:
        """Open the store when materialized."""
        self.context = context
        self.store: Any = None
        if self.params.store_name is not None:
            self.store = context.get_state_store(self.params.store_name)
            self.forwarder = TupleForwarder(self.store, context, self.params.send_old_values)

    def forward_update(self, record: AnyRecord, change: Change[Any] | None) -> None:
        """Forward ``record`` with the value ``change`` (nothing when None): at once when
        the node is not materialized, else unless its store's cache forwards it on flush."""
        if change is None:
            return
        if change is not record[1]:
            record = _new(Record, (record[0], change, record[2], record[3]))
        if self.store is None:
            self.context.forward(record)
        else:
            self.forwarder.maybe_forward(record)


def folded_keys(store: Any, keys: list[Any]) -> list[TypedKey] | None:
    """The typed keys of a batch its node may fold per key into ``store`` (see the module's
    doc), else None."""
    if isinstance(store, MeteredVersionedKeyValueStore):
        return None
    typed = list(zip(map(type, keys), keys, strict=True))
    try:
        distinct = set(typed)
    except TypeError:  # an unhashable key
        return None
    return None if _NULL_KEY in distinct else typed


def read_latest(store: Any, typed: list[TypedKey]) -> dict[TypedKey, Any]:
    """Each distinct key's stored ``ValueAndTimestamp`` (None: none), read at once where
    the store can."""
    distinct = list(dict.fromkeys(typed))
    found = KeyValueReader(store).get_many([key for _, key in distinct])
    return dict(zip(distinct, found, strict=True))


def put_folded(
    store: Any,
    context: Any,
    last: dict[TypedKey, int],
    values: Sequence[Any],
    stamps: Sequence[int],
) -> None:
    """Write each key of ``last`` once: its update at record ``last[key]`` (``values[i]``,
    None a deletion, timestamped ``stamps[i]``), in the order of those records, as one
    :func:`put_table` after another leaves a timestamped store (and its cache: the keys
    dirty in that order, each stamped with its record's time); at once where it can."""
    if not last:
        return
    order = sorted(last.items(), key=_second)
    keys = [key for (_, key), _ in order]
    times = [stamps[i] for _, i in order]
    rows = [
        None if (value := values[i]) is None else _new(ValueAndTimestamp, (value, stamps[i]))
        for _, i in order
    ]
    many = getattr(store, "put_many", None)
    if many is not None:
        many(keys, rows, times)
        if times:
            context.set_timestamp(times[-1])
        return
    for key, row, time in zip(keys, rows, times, strict=True):
        context.set_timestamp(time)
        store.put(key, row)


def updates_in_context(
    context: Any, batch: Batch, update: Callable[[Any, Any, int], Any]
) -> tuple[list[int], list[Any]]:
    """Run ``update(key, value, timestamp)`` for each record of ``batch`` in order, each
    with the record context the record engine gives it (what a user's transformer reads,
    what a store write is stamped with); return the index of each record it returned
    something for (not None), and what it returned."""
    index: list[int] = []
    outs: list[Any] = []
    position = iter(range(len(batch)))

    def run(record: AnyRecord) -> None:
        i = next(position)
        out = update(record[0], record[1], record[2])
        if out is not None:
            index.append(i)
            outs.append(out)

    context.record_by_record(run)(batch)
    return index, outs


def forward_at(context: Any, batch: Batch, index: Sequence[int], values: list[Any]) -> None:
    """Forward the records at ``index`` of ``batch`` with ``values`` as one batch (their
    keys, timestamps, headers and rows)."""
    if index:
        part = batch if len(index) == len(batch) else batch.take(index)
        context.forward_batch(part.with_values(values))


def _second(item: tuple[Any, int]) -> int:
    return item[1]
