"""The processor of sliding-window aggregations (Kafka's ``KStreamSlidingWindowAggregate``).

Sliding windows ``[start, start + d]`` are inclusive at both ends and exist only where
records are: each record ``r`` at ``t`` has a *left* window ``[t - d, t]`` (ending at the
record) and, when later records lie within ``d`` of it, a *right* window
``[t + 1, t + 1 + d]`` (starting just after it). A new record updates the existing windows
that hold it, creates its own left window (from the aggregate of the previous record's
window when that record lies within ``d``), its right window (from the aggregate of the
windows after it), and the previous record's right window when missing.

The store is read newest first (Kafka's reverse-iteration path): from the record's right
window down to the first window ending before the record, which holds the aggregate of
the records preceding it. Records earlier than ``d`` (which would give negative starts)
go into one combined window ``[0, d]`` (Kafka's ``processEarly``).

Under emit-on-close a window closes once stream time minus grace passes its end; a record
(not an early one, as Kafka's) looks for closed windows after its writes, as Kafka's: its
own windows advance the store's stream time first, so a window the store's retention
(2 * difference + grace) dropped by then is never emitted (Kafka's
``testAggregateRandomInput``). The writes never touch a closed window.

The columnar engine hands the node a batch whole: its records are folded in memory, each
key's windows read once and each changed window written once (see
:mod:`topology.processors.sliding_fold`). A batch goes record by record (each record in
its own record context where its updates go out at once) where folding could not give the
record path's result: with an unhashable key, a store that does not say how it expires
windows, or a cache too full to hold the batch's windows without evicting, or one that
forwards each write at once. Under emit-on-close the batch is cut at the records that emit
closed windows (see :mod:`topology.processors.close_batch`), the records between folded as
above.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.errors import StreamsError
from statestores.api import Window
from topology.api.emit import ON_WINDOW_UPDATE, EmitStrategy
from topology.api.record import Record, ValueAndTimestamp
from topology.api.windows import SlidingWindows
from topology.engine.columnar import Batch
from topology.processors.close_batch import ClosingAggregating, forward_closed, part
from topology.processors.proc_table import TableParams
from topology.processors.proc_window import AnyRecord
from topology.processors.sliding_fold import SlidingFold, cache_holds
from topology.processors.window_emit import NO_TIMESTAMP

_new = tuple.__new__


class SlidingWindowAggregateProcessor(ClosingAggregating):
    """Aggregate over sliding windows of ``windows.time_difference_ms``."""

    def __init__(
        self,
        name: str,
        params: TableParams,
        windows: SlidingWindows,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        *,
        emit: EmitStrategy = ON_WINDOW_UPDATE,
    ) -> None:
        super().__init__(name, params, initializer, aggregator, emit=emit)
        self.windows = windows
        self.diff = windows.time_difference_ms

    def process_batch(self, batch: Batch) -> None:
        """Fold a batch in memory (see :mod:`topology.processors.sliding_fold`): each key's
        windows read with one range fetch, the records folded in order as :meth:`process`
        folds them, each changed window written once; without a buffering cache every
        update forwarded, in order, as one batch. Record by record where that could not
        give the same result. Under emit-on-close the batch is cut at the records that
        emit closed windows (see :mod:`topology.processors.close_batch`): each of those
        goes alone, after the writes of the records before it, and emits what the store
        then holds."""
        if self.emitter is None:
            self._stretch(batch, 0, len(batch))
            return
        lookers, closes = self._lookers(batch)
        self._process_closing(batch, lookers, closes, self.diff + 1, self._stretch)

    def _lookers(self, batch: Batch) -> tuple[list[int], list[int]]:
        """The records of a batch that would look for closed windows (those
        :meth:`_process_reverse` takes: not null, expired or early), and each one's close
        time."""
        ks, vs, ts = batch.keys, batch.values, batch.timestamps
        seen, grace, diff = self.observed_stream_time, self.windows.grace_ms, self.diff
        lookers: list[int] = []
        closes: list[int] = []
        for i in range(len(ks)):
            if ks[i] is None or vs[i] is None:
                continue
            t = ts[i]
            seen = max(seen, t)
            if diff <= t and t + 1 + diff > seen - grace:
                lookers.append(i)
                closes.append(seen - grace)
        return lookers, closes

    def _stretch(self, batch: Batch, lo: int, hi: int) -> None:
        """Fold the records ``lo`` to ``hi`` of a batch (none of which emits closed
        windows), or feed them one by one where folding could not give the same result:
        each in its own record context where it forwards its updates at once (nothing
        caches them; they may reach nodes that read it)."""
        records = part(batch, lo, hi)
        fold = self._fold(records)
        if fold is not None:
            fold.run()
        elif self.emitter is None and not self.forwarder.cached:
            self._one_by_one(records)
        else:
            ks, vs, ts = records.keys, records.values, records.timestamps
            for i in range(len(ks)):
                self.context.set_timestamp(ts[i])
                self._aggregate(_new(Record, (ks[i], vs[i], ts[i], records.header(i))))

    def _fold(self, batch: Batch) -> SlidingFold | None:
        """The batch's fold, or None when it goes record by record."""
        store = self.store
        if not hasattr(store, "read_floor"):
            return None
        if self.emitter is not None and store.cached_bytes() is not None:
            return None  # a closing node's cache (Kafka's DSL makes none) forwards nothing
        ks, vs = batch.keys, batch.values
        try:
            keys = {ks[i] for i in range(len(ks)) if vs[i] is not None} - {None}
        except TypeError:  # an unhashable key
            return None
        forwarder = self.forwarder
        if forwarder.cached and not forwarder.buffered:  # a cache forwarding each put
            return None
        if forwarder.buffered and not cache_holds(self, 3 * len(ks)):
            return None  # it might evict mid-batch
        return SlidingFold(self, batch, keys)

    def _aggregate(self, record: AnyRecord) -> int | None:
        """Update and create the windows of the record (or drop it); return the close
        time after it when it looks for closed windows (not a dropped or early record, as
        Kafka's), else None."""
        if record[0] is None or record[1] is None:
            self.drop("null key or value", record)
            return None
        ts = record[2]
        self.observe(ts)
        close_time = self.observed_stream_time - self.windows.grace_ms
        if ts + 1 + self.diff <= close_time:
            self.drop("expired window", record, Window(ts - self.diff, ts))
            return None
        if ts < self.diff:  # as Kafka's processEarly: no look for closed windows
            self._process_early(record, close_time)
            return None
        self._process_reverse(record, close_time)
        return close_time  # it looks after its writes: see the module's docstring

    def _emit_closed(self, record: AnyRecord, close_time: int, row: int | None = None) -> None:
        """Emit the windows closed by ``close_time`` (ending before it) not emitted yet;
        ``row`` as :meth:`ClosingAggregating._emit_closed` takes it."""
        emitter = self.emitter
        assert emitter is not None
        if row is None and not emitter.due(close_time):
            return
        upper = close_time - self.diff - 1  # both ends are inclusive
        if upper < 0:
            return
        last = emitter.last_emit
        lower = 0 if last == NO_TIMESTAMP else max(0, last - self.diff)
        found = self.store.fetch_closed(lower, upper)
        forward_closed(self.context, found, record[3], row)
        emitter.emitted(close_time, len(found))

    def _window(self, start: int) -> Window:
        return Window(start, start + self.diff)

    def _process_reverse(self, record: AnyRecord, close_time: int) -> None:
        key, ts, diff = record[0], record[2], self.diff
        starts: set[int] = set()
        left_agg: Any = None
        right_agg: Any = None
        left_created = right_created = False
        previous_ts: int | None = None
        for start, stored in self.store.backward_fetch(key, max(0, ts - 2 * diff), ts + 1):
            starts.add(start)
            end = start + diff
            if start == ts + 1:
                right_created = True
            elif end > ts:
                if right_agg is None:
                    right_agg = stored
                self._update(self._window(start), stored, record, close_time)
            elif end == ts:
                left_created = True
                self._update(self._window(start), stored, record, close_time)
                if stored[1] >= ts:
                    return
                previous_ts = stored[1]
            else:  # end < ts: the window holding the records before this one
                left_agg, previous_ts = stored, stored[1]
                break
        self._create_windows(
            record, close_time, starts, right_agg, left_agg, left_created, right_created,
            previous_ts,
        )  # fmt: skip

    def _process_early(self, record: AnyRecord, close_time: int) -> None:
        key, ts = record[0], record[2]
        combined: tuple[int, Any] | None = None
        right_agg: Any = None
        right_created = False
        starts: set[int] = set()
        previous_ts: int | None = None
        for start, stored in self.store.fetch(key, 0, ts + 1):
            starts.add(start)
            if start == 0:
                combined = (start, stored)
                if stored[1] < ts:
                    previous_ts = stored[1]
            elif start <= ts:
                right_agg = stored
                self._update(self._window(start), stored, record, close_time)
            elif start == ts + 1:
                right_created = True
            else:
                raise StreamsError(
                    f"processor {self.name}: unexpected window start {start} for a record at {ts}"
                )
        if right_agg is None and combined is not None and combined[1][1] > ts:
            right_agg = combined[1]
        if not right_created and right_agg is not None and right_agg[1] > ts:
            self._create_right_window(record, right_agg)
        if previous_ts is not None and previous_ts + 1 not in starts:
            self._create_previous_right_window(previous_ts + 1, record, close_time)
        if combined is None:
            initial = ValueAndTimestamp(self.call(self.initializer), ts)
            self._update(self._window(0), initial, record, close_time)
        else:
            self._update(self._window(0), combined[1], record, close_time)

    def _create_windows(  # noqa: PLR0917 - Kafka's createWindows
        self,
        record: AnyRecord,
        close_time: int,
        starts: set[int],
        right_agg: Any,
        left_agg: Any,
        left_created: bool,
        right_created: bool,
        previous_ts: int | None,
    ) -> None:
        ts, diff = record[2], self.diff
        if previous_ts is not None:
            previous_right = previous_ts + 1
            if previous_right not in starts and previous_right + diff >= ts:
                self._create_previous_right_window(previous_right, record, close_time)
        if not left_created:
            if previous_ts is not None and ts - diff <= previous_ts:
                initial = ValueAndTimestamp(left_agg[0], ts)
            else:
                initial = ValueAndTimestamp(self.call(self.initializer), ts)
            self._update(self._window(ts - diff), initial, record, close_time)
        if not right_created and right_agg is not None and right_agg[1] > ts:
            self._create_right_window(record, right_agg)

    def _create_right_window(self, record: AnyRecord, right_agg: Any) -> None:
        """Store the aggregate of the records after this one as its right window."""
        window = self._window(record[2] + 1)
        self.store.put(record[0], right_agg, window.start)
        self.forward(record[0], window, right_agg[0], None, right_agg[1], record)

    def _create_previous_right_window(self, start: int, record: AnyRecord, close: int) -> None:
        initial = ValueAndTimestamp(self.call(self.initializer), record[2])
        self._update(self._window(start), initial, record, close)

    def _update(self, window: Window, stored: Any, record: AnyRecord, close_time: int) -> None:
        """Fold the record into ``window`` (aggregate ``stored``) unless it is closed."""
        if window.end < close_time:
            self.drop("expired window", record, window)
            return
        key, ts = record[0], record[2]
        old = None if stored is None else stored[0]
        new = self.call(self.aggregator, key, record[1], old)
        new_ts = ts if old is None else max(ts, stored[1])
        self.store.put(key, ValueAndTimestamp(new, new_ts), window.start)
        self.forward(key, window, new, old, new_ts, record)
