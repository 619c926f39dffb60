"""The processor of session aggregations (Kafka's ``KStreamSessionWindowAggregate``).

A record at ``t`` opens the session ``[t, t]``, or joins every session of its key that
ends at or after ``t - gap`` and starts at or before ``t + gap``: those sessions are merged
(``merger(key, agg1, agg2)``) into one spanning them all, removed from the store and
forwarded as tombstones, then the merged session takes the record and is forwarded. Every
forwarded record carries its session's end as timestamp. A merged session ending before
``observed stream time - gap - grace`` is closed (no record within grace can extend it
any more): the record is dropped and counted.

Under emit-on-close nothing is forwarded per update: after each record, the sessions that
ended before ``observed stream time - gap - grace`` go out once, by end, start, then key
bytes, each stamped with its end (Kafka's time-ordered session store's scan).

A batch is folded in memory where the store's retention cannot change a result
(:meth:`SessionWindowAggregateProcessor.process_batch`, :mod:`topology.processors.
session_fold`): each key's sessions read once, merged record by record as
:meth:`~SessionWindowAggregateProcessor.process` merges them, written once each (the
cache's dirty order), every update forwarded as one batch when nothing caches them. A
record that cannot start such a run goes alone, in its own record context. Under
emit-on-close the batch is cut at the records that emit closed sessions (see
:mod:`topology.processors.close_batch`): each of those goes alone, after the writes of
the records before it, and emits what the store then holds.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate, islice
from typing import Any

from statestores.api import Window, Windowed
from topology.api.emit import ON_WINDOW_UPDATE, EmitStrategy
from topology.api.record import Change, Record
from topology.engine.columnar import Batch
from topology.processors.close_batch import ClosingAggregating, part
from topology.processors.proc_table import TableParams
from topology.processors.proc_window import AnyRecord
from topology.processors.session_fold import KeySessions, SessionFold
from topology.processors.table_forward import FlushForwarder
from topology.processors.window_emit import forward_final

_new = tuple.__new__


class SessionTupleForwarder(FlushForwarder):
    """Forward session updates directly or on cache flush, stamped with the session's end
    (Kafka's ``SessionTupleForwarder`` and ``SessionCacheFlushListener``)."""

    def forward_folded(
        self, batch: Batch, index: list[int], keys: list[Any], changes: list[Any]
    ) -> None:
        """Forward the updates a batch folded (nothing caches them), one per record at
        ``index`` of ``batch``, each stamped with its session's end, as one batch."""
        if index:
            ends = [k.window.end for k in keys]
            self.context.forward_batch(batch.standing_at(index, keys, changes, ends))

    def _on_flush_batch(
        self, keys: list[Windowed[Any]], news: list[Any], olds: list[Any], stamps: list[int]
    ) -> None:
        """A flush's updates: one batch to the children (columnar), else one by one."""
        context = self.context
        if not context.forwards_batches():
            for key, new, old, ts in zip(keys, news, olds, stamps, strict=True):
                self._on_flush(key, new, old, ts)
            return
        send_old = self.send_old_values
        changes = [
            Change(new, old if send_old else None) for new, old in zip(news, olds, strict=True)
        ]
        ends = [key.window.end for key in keys]
        context.forward_batch(Batch(keys, changes, ends, None, range(len(keys))))

    def _on_flush(self, key: Windowed[Any], new: Any, old: Any, timestamp: int) -> None:
        change = Change(new, old if self.send_old_values else None)
        self.context.forward(_new(Record, (key, change, key.window.end, ())))


class SessionWindowAggregateProcessor(ClosingAggregating):
    """Aggregate into sessions separated by ``gap_ms`` of inactivity."""

    def __init__(  # noqa: PLR0917 - the aggregation's functions
        self,
        name: str,
        params: TableParams,
        gap_ms: int,
        grace_ms: int,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        *,
        emit: EmitStrategy = ON_WINDOW_UPDATE,
    ) -> None:
        super().__init__(name, params, initializer, aggregator, emit=emit)
        self.gap_ms = gap_ms
        self.grace_ms = grace_ms
        self.merger = merger

    def make_forwarder(self) -> Any:
        """Return a forwarder stamping records with the session end."""
        return SessionTupleForwarder(self.store, self.context, self.send_old)

    def _aggregate(self, record: AnyRecord) -> int | None:
        """Merge the record's overlapping sessions and fold the record in (or drop it);
        return the close time after it, None for a null key."""
        key, ts = record[0], record[2]
        if key is None:
            self.drop("null key", record)
            return None
        self.observe(ts)
        close_time = self.observed_stream_time - self.grace_ms - self.gap_ms
        merged: list[tuple[Windowed[Any], Any]] = []
        start = end = ts
        agg = self.call(self.initializer)
        for session, value in self.store.find_sessions(key, ts - self.gap_ms, ts + self.gap_ms):
            merged.append((session, value))
            agg = self.call(self.merger, key, agg, value)
            start = min(start, session.window.start)
            end = max(end, session.window.end)
        window = Window(start, end)
        if end < close_time:
            self.drop("expired window", record, window)
            return close_time
        if start != ts or end != ts:
            for session, value in merged:
                self.store.remove(session)
                self._forward(session, None, value, record)
        agg = self.call(self.aggregator, key, record[1], agg)
        session_key = Windowed(key, window)
        self.store.put(session_key, agg)
        self._forward(session_key, agg, None, record)
        return close_time

    def process_batch(self, batch: Batch) -> None:
        """Process a batch as :meth:`process` would, record by record, with the same
        store contents, drops, updates and closed sessions: runs of records are folded in
        memory (:meth:`_runs`); under emit-on-close the batch is cut at the records that
        emit (see :mod:`topology.processors.close_batch`), each of which is aggregated
        alone, after the writes of those before it, and emits what the store then holds,
        in its own record context."""
        ks, ts = batch.keys, batch.timestamps
        n = len(ks)
        if self.emitter is None:
            self._runs(batch, 0, n)
            return
        lookers = [i for i in range(n) if ks[i] is not None]  # a dropped record looks too
        wait = self.grace_ms + self.gap_ms
        seen = accumulate((ts[i] for i in lookers), max, initial=self.observed_stream_time)
        closes = [time - wait for time in islice(seen, 1, None)]
        self._process_closing(batch, lookers, closes, 1, self._runs)

    def _runs(self, batch: Batch, lo: int, hi: int) -> None:
        """Aggregate the records ``lo`` to ``hi`` of a batch (none of which emits closed
        sessions): runs of records are folded in memory (:meth:`_fold`); a record that
        cannot start a run (see :meth:`_run_end`) goes through :meth:`_aggregate` alone,
        in its own record context where it forwards its updates at once (they may reach
        nodes that read it)."""
        ks, ts = batch.keys, batch.timestamps
        retention = getattr(self.store, "retention_period", None)
        # whether a record's updates are forwarded as it is aggregated (nothing caches
        # them), then in its own record context (which the task keeps after it)
        forwards = self.emitter is None and not self.forwarder.cached
        i = lo
        while i < hi:
            end = i if retention is None else self._run_end(ks, ts, i, hi, retention)
            if end > i:
                self._fold(batch, i, end)
                i = end
            elif forwards:
                self._one_by_one(part(batch, i, i + 1))
                i += 1
            else:
                self.context.set_timestamp(ts[i])
                self._aggregate(_new(Record, (ks[i], batch.values[i], ts[i], batch.header(i))))
                i += 1

    def _run_end(self, ks: list[Any], ts: list[int], start: int, stop: int, retention: int) -> int:
        """The end (at most ``stop``) of the longest run from ``start`` that :meth:`_fold`
        may take: keys hashable, and no session a record reaches (ending at ``t - gap``
        or later) nor one it writes expiring while the run goes on. The store's stream
        time (the largest session end it took) stays at or below ``max(observed stream
        time, t)`` over the run, so its oldest live end stays at or below ``t_min - gap``
        when ``top - t_min <= retention - gap - 1``: the store's retention then changes
        no read and no write, and reading each key's sessions once is reading them per
        record."""
        reach = retention - self.gap_ms - 1
        top, low = self.observed_stream_time, None
        rest = ts[start:stop]
        newest = max(rest)
        if max(top, newest) - min(rest) <= reach:  # the rest of the stretch, if hashable
            try:
                set(ks[start:stop])
            except TypeError:
                pass
            else:
                return stop
        for i in range(start, stop):
            key = ks[i]
            if key is None:
                continue
            try:
                hash(key)
            except TypeError:
                return i
            t = ts[i]
            top = max(top, t)
            low = t if low is None or t < low else low
            if top - low > reach:
                return i
        return stop

    def _fold(self, batch: Batch, lo: int, hi: int) -> None:
        """Fold the records ``lo`` to ``hi`` of a batch: each key's reachable sessions
        read once, each record merged into them in memory exactly as :meth:`process`
        merges it in the store (the user's functions called as often, in the same order),
        then the store written: with a cache that buffers, each session once in the order
        of its last update (the cache's dirty order), else every write in order (an
        uncached store, or a cache of size 0 that hands each write on); updates nothing
        caches are forwarded as one batch."""
        ks, ts, gap, store = batch.keys, batch.timestamps, self.gap_ms, self.store
        whole = lo == 0 and hi == len(ks)
        times = ts if whole else ts[lo:hi]
        first, last = min(times) - gap, max(times) + gap
        # by type too: 1 and True are one dict key, not one stored key; each key's
        # sessions the run's records may reach (a few more are harmless: a record reaches
        # only those ending at t - gap or later, all live)
        distinct = set(ks if whole else ks[lo:hi])
        distinct.discard(None)
        plain = len({type(k) for k in distinct}) <= 1  # then a key is its own slot
        slots = distinct if plain else {(type(k), k) for k in distinct}
        found = {
            slot: KeySessions(store.find_sessions(slot if plain else slot[1], first, last))
            for slot in slots
        }
        fold = SessionFold(self, batch, found, plain)
        fold.run(lo, hi)
        set_timestamp = self.context.set_timestamp
        for (_slot, start, end), (key, value, i) in fold.writes():
            set_timestamp(ts[i])
            windowed = Windowed(key, Window(start, end))
            if value is None:
                store.remove(windowed)
            else:
                store.put(windowed, value)
        if fold.collect:
            keys = [Windowed(k, Window(start, end)) for k, start, end in fold.out_keys]
            self.forwarder.forward_folded(batch, fold.out, keys, fold.changes)

    def _emit_closed(self, record: AnyRecord, close_time: int, row: int | None = None) -> None:
        """Emit the sessions ending before ``close_time`` not emitted yet, each stamped
        with its end (after the record's writes, as Kafka's: a record may merge a session
        that closes at this very record into a session still open); ``row`` as
        :meth:`ClosingAggregating._emit_closed` takes it."""
        emitter = self.emitter
        assert emitter is not None
        if row is None and not emitter.due(close_time):
            return
        upper = close_time - 1  # both ends are inclusive
        lower = max(0, emitter.last_emit)
        if upper < 0 or upper < lower:
            return
        sessions, values = self.store.find_ended_sessions(lower, upper)
        n = len(sessions)
        ends = [s.window.end for s in sessions]
        rows = None if row is None else [row] * n
        forward_final(self.context, sessions, values, ends, [record[3]] * n, rows)
        emitter.emitted(close_time, n)

    def _forward(self, session: Windowed[Any], new: Any, old: Any, record: AnyRecord) -> None:
        change = Change(new, old if self.send_old else None)
        out = _new(Record, (session, change, session.window.end, record[3]))
        self.forwarder.maybe_forward(out)
