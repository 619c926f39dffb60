"""The processor of KTable ``aggregate``/``reduce``/``count``: a table update leaves its
old group and joins its new one (Kafka's ``KTableAggregate``); see
:mod:`topology.processors.proc_aggregate` for what it shares with the stream aggregations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.errors import StreamsProcessingError
from topology.api.record import Change
from topology.engine.columnar import Batch
from topology.engine.nodes import user_error
from topology.processors.proc_aggregate import (
    MISSING,
    Aggregating,
    AnyRecord,
    has_none,
    read_keys,
)
from topology.processors.proc_table import TableParams


class TableAggregateProcessor(Aggregating):
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
        if None in batch.keys or has_none(batch.values):
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
        stored_of = read_keys(store, ks)
        fn: Any = subtractor
        try:
            for i, key, change, t in zip(range(len(ks)), ks, vs, ts, strict=True):
                current = aggs.get(key, MISSING)
                if current is MISSING:
                    stored = stored_of.get(key)
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
