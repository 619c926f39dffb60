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

A batch (emitting on update) is folded in memory where the store's retention cannot
change a result (:meth:`SessionWindowAggregateProcessor.process_batch`): each key's
sessions read once, merged record by record as :meth:`~SessionWindowAggregateProcessor.
process` merges them, written once each (the cache's dirty order), every update forwarded
as one batch when nothing caches them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable
from typing import Any

from statestores.api import Window, Windowed
from statestores.caching import cache_max_bytes
from topology.api.emit import ON_WINDOW_UPDATE, EmitStrategy
from topology.api.record import Change, Record
from topology.engine.columnar import Batch, rows_at
from topology.engine.nodes import user_error
from topology.processors.proc_aggregate import count_add, count_init
from topology.processors.proc_table import TableParams
from topology.processors.proc_window import AnyRecord, WindowedAggregating
from topology.processors.window_emit import forward_final

_new = tuple.__new__
_MIN_TIME = -(1 << 63)
_MAX_TIME = (1 << 63) - 1


class SessionTupleForwarder:
    """Forward session updates directly or on cache flush, stamped with the session's end
    (Kafka's ``SessionTupleForwarder`` and ``SessionCacheFlushListener``)."""

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

    def forward_folded(
        self, batch: Batch, index: list[int], keys: list[Any], changes: list[Any]
    ) -> None:
        """Forward the updates a batch folded (nothing caches them), one per record at
        ``index`` of ``batch``, each stamped with its session's end, as one batch."""
        if not index:
            return
        hs = batch.headers
        self.context.forward_batch(
            Batch(
                keys,
                changes,
                [k.window.end for k in keys],
                None if hs is None else [hs[i] for i in index],
                rows_at(batch.rows, index),
            )
        )

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


class SessionWindowAggregateProcessor(WindowedAggregating):
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
        if not emit.on_close:  # emitting on close looks for closed sessions per record
            self.process_batch = self._process_batch

    def make_forwarder(self) -> Any:
        """Return a forwarder stamping records with the session end."""
        return SessionTupleForwarder(self.store, self.context, self.send_old)

    def process(self, record: AnyRecord) -> None:
        """Merge the record's overlapping sessions and fold the record in."""
        key, ts = record[0], record[2]
        if key is None:
            self.drop("null key", record)
            return
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
        else:
            if start != ts or end != ts:
                for session, value in merged:
                    self.store.remove(session)
                    self._forward(session, None, value, record)
            agg = self.call(self.aggregator, key, record[1], agg)
            session_key = Windowed(key, window)
            self.store.put(session_key, agg)
            self._forward(session_key, agg, None, record)
        if self.emitter is not None:
            self._emit_closed(record, close_time)

    def _process_batch(self, batch: Batch) -> None:
        """Process a batch as :meth:`process` would, record by record, with the same
        store contents, drops and updates: runs of records are folded in memory
        (:meth:`_fold`); a record that cannot start a run (see :meth:`_run_end`) goes
        through :meth:`process` alone."""
        ks, ts = batch.keys, batch.timestamps
        n, i = len(ks), 0
        retention = getattr(self.store, "retention_period", None)
        while i < n:
            end = i if retention is None else self._run_end(ks, ts, i, retention)
            if end == i:
                self.context.set_timestamp(ts[i])
                self.process(_new(Record, (ks[i], batch.values[i], ts[i], batch.header(i))))
                i += 1
            else:
                self._fold(batch, i, end)
                i = end

    def _run_end(self, ks: list[Any], ts: list[int], start: int, retention: int) -> int:
        """The end of the longest run from ``start`` that :meth:`_fold` may take: keys
        hashable, and no session a record reaches (ending at ``t - gap`` or later) nor
        one it writes expiring while the run goes on. The store's stream time (the
        largest session end it took) stays at or below ``max(observed stream time, t)``
        over the run, so its oldest live end stays at or below ``t_min - gap`` when
        ``top - t_min <= retention - gap - 1``: the store's retention then changes no
        read and no write, and reading each key's sessions once is reading them per
        record."""
        reach = retention - self.gap_ms - 1
        top, low = self.observed_stream_time, None
        rest = ts[start:] if start else ts
        newest = max(rest)
        if max(top, newest) - min(rest) <= reach:  # the rest of the batch, if hashable
            try:
                set(ks[start:] if start else ks)
            except TypeError:
                pass
            else:
                return len(ks)
        for i in range(start, len(ks)):
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
        return len(ks)

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
            slot: _KeySessions(store.find_sessions(slot if plain else slot[1], first, last))
            for slot in slots
        }
        fold = _Fold(self, batch, found, plain)
        fold.run(lo, hi)
        set_timestamp = self.context.set_timestamp
        for (_slot, start, end), (key, value, i) in fold.writes():
            set_timestamp(ts[i])
            windowed = Windowed(key, Window(start, end))
            if value is None:
                store.remove(windowed)
            else:
                store.put(windowed, value)
        if not self.forwarder.cached:
            keys = [Windowed(k, Window(start, end)) for k, start, end in fold.out_keys]
            self.forwarder.forward_folded(batch, fold.out, keys, fold.changes)

    def _emit_closed(self, record: AnyRecord, close_time: int) -> None:
        """Emit the sessions ending before ``close_time`` not emitted yet, each stamped
        with its end (after the record's writes, as Kafka's: a record may merge a session
        that closes at this very record into a session still open)."""
        emitter = self.emitter
        assert emitter is not None
        if not emitter.due(close_time):
            return
        upper = close_time - 1  # both ends are inclusive
        lower = max(0, emitter.last_emit)
        if upper < 0 or upper < lower:
            return
        sessions, values = self.store.find_ended_sessions(lower, upper)
        n = len(sessions)
        ends = [s.window.end for s in sessions]
        forward_final(self.context, sessions, values, ends, [record[3]] * n, None)
        emitter.emitted(close_time, n)

    def _forward(self, session: Windowed[Any], new: Any, old: Any, record: AnyRecord) -> None:
        change = Change(new, old if self.send_old else None)
        out = _new(Record, (session, change, session.window.end, record[3]))
        self.forwarder.maybe_forward(out)


class _Fold:
    """The in-memory fold of a run of a batch's records (see
    :meth:`SessionWindowAggregateProcessor._fold`)."""

    def __init__(
        self,
        node: SessionWindowAggregateProcessor,
        batch: Batch,
        found: dict[Any, _KeySessions],
        plain: bool,
    ) -> None:
        self.node = node
        self.batch = batch
        self.found = found
        #: whether a key is its own slot in ``found`` (else ``(type, key)``)
        self.plain = plain
        self.buffered = node.forwarder.buffered
        self.cached = node.forwarder.cached
        #: (slot, start, end) -> (key, aggregate or None, record): each session's last
        #: write (a buffering cache), in the order of its last update
        self._last: dict[tuple[Any, int, int], tuple[Any, Any, int]] = {}
        #: every write in order (no cache, or one that hands each write on)
        self._all: list[tuple[tuple[Any, int, int], tuple[Any, Any, int]]] = []
        #: the forwarded updates (no cache): their records, (key, start, end), changes
        self.out: list[int] = []
        self.out_keys: list[tuple[Any, int, int]] = []
        self.changes: list[Change[Any]] = []

    def writes(self) -> list[tuple[tuple[Any, int, int], tuple[Any, Any, int]]]:
        """The store writes to make, in order: ``((slot, start, end), (key, aggregate or
        None, record))``. A buffering cache is written each session's last update, but
        not the removal of a session the run created: the cache would hold that tombstone
        of nothing and drop it on flush (the store had no such session: the run read
        every live session its records reach, and one it did not read is not one a cached
        tombstone hides, since a session covering it would have been live and read)."""
        if not self.buffered:
            return self._all
        found = self.found
        return [
            (place, write)
            for place, write in self._last.items()
            if write[1] is not None or (place[2], place[1]) in found[place[0]].loaded
        ]

    def run(self, lo: int, hi: int) -> None:
        """Merge and fold the records ``lo`` to ``hi``, as :meth:`process` does each."""
        if self.buffered:
            self._run_buffered(lo, hi)
            return
        node, batch, found, plain = self.node, self.batch, self.found, self.plain
        for i in range(lo, hi):
            key, t = batch.keys[i], batch.timestamps[i]
            if key is None:
                record = _new(Record, (key, batch.values[i], t, batch.header(i)))
                node.drop("null key", record)
                continue
            node.observe(t)
            slot = key if plain else (type(key), key)
            self._one(i, slot, found[slot], node.observed_stream_time)

    def _write(self, place: tuple[Any, int, int], key: Any, value: Any, old: Any, i: int) -> None:
        """Note the write of ``value`` (None: a removal) to the session at ``place`` by
        record ``i`` (and its update, forwarded when nothing caches it)."""
        if self.buffered:
            last = self._last
            last.pop(place, None)
            last[place] = (key, value, i)
        else:
            self._all.append((place, (key, value, i)))
        if not self.cached:
            self.out.append(i)
            self.out_keys.append((key, place[1], place[2]))
            self.changes.append(Change(value, old if self.node.send_old else None))

    def _run_buffered(self, lo: int, hi: int) -> None:  # noqa: PLR0915 - hot path
        """:meth:`run` for a cache that buffers: only each session's last write counts,
        so a record that reaches no session or exactly one (in order, the usual case)
        is folded without a search or a list, and the removal of a session the run
        created is not kept (see :meth:`writes`); a record reaching several goes through
        :meth:`_one`."""
        node, batch, found, plain = self.node, self.batch, self.found, self.plain
        ks, vs, ts = batch.keys, batch.values, batch.timestamps
        gap, grace, name = node.gap_ms, node.grace_ms, node.name
        init, merger, aggregator = node.initializer, node.merger, node.aggregator
        counting = init is count_init and aggregator is count_add
        last = self._last
        stream_time = node.observed_stream_time
        try:
            for i in range(lo, hi):
                key, t = ks[i], ts[i]
                if key is None:
                    node.drop("null key", _new(Record, (key, vs[i], t, batch.header(i))))
                    continue
                if t > stream_time:
                    stream_time = node.observed_stream_time = t
                slot = key if plain else (type(key), key)
                sessions = found[slot]
                aggs, bounds = sessions.aggs, sessions.bounds
                n = len(bounds)
                at = bisect_left(bounds, (t - gap, _MIN_TIME)) if n else 0
                reached = bounds[at] if at < n else None
                if reached is not None and (
                    reached[1] > t + gap
                    or (at + 1 < n and bounds[at + 1][0] <= t + gap + sessions.longest)
                ):
                    self._one(i, slot, sessions, stream_time)  # none reached, or several
                    continue
                try:
                    agg = 0 if counting else init()
                except Exception as exc:
                    raise user_error(name, init, exc) from exc
                start = end = t
                if reached is not None:
                    try:
                        agg = merger(key, agg, aggs[reached])
                    except Exception as exc:
                        raise user_error(name, merger, exc) from exc
                    if reached[1] < start:  # noqa: PLR1730 - hot path
                        start = reached[1]
                    if reached[0] > end:  # noqa: PLR1730 - hot path
                        end = reached[0]
                if end < stream_time - grace - gap:
                    record = _new(Record, (key, vs[i], t, batch.header(i)))
                    node.drop("expired window", record, Window(start, end))
                    continue
                if counting:
                    agg += 1
                else:
                    try:
                        agg = aggregator(key, vs[i], agg)
                    except Exception as exc:
                        raise user_error(name, aggregator, exc) from exc
                session = (end, start)
                if reached is None:  # a new session, the last in the order
                    bounds.append(session)
                elif reached != session:  # the reached session goes, merged into this one
                    del bounds[at]
                    del aggs[reached]
                    place = (slot, reached[1], reached[0])
                    last.pop(place, None)
                    if reached in sessions.loaded:
                        last[place] = (key, None, i)
                    if not bounds or bounds[-1] < session:
                        bounds.append(session)
                    else:
                        insort(bounds, session)
                    if end - start > sessions.longest:  # noqa: PLR1730 - hot path
                        sessions.longest = end - start
                aggs[session] = agg
                place = (slot, start, end)
                last.pop(place, None)
                last[place] = (key, agg, i)
        finally:
            node.observed_stream_time = max(node.observed_stream_time, stream_time)

    def _one(self, i: int, slot: Any, sessions: _KeySessions, stream_time: int) -> None:
        """Fold record ``i`` (a key) into its key's ``sessions`` as :meth:`process` folds
        it into the store."""
        node, batch = self.node, self.batch
        key, t, gap, name = batch.keys[i], batch.timestamps[i], node.gap_ms, node.name
        aggs, bounds = sessions.aggs, sessions.bounds
        merged = sessions.reach(bisect_left(bounds, (t - gap, _MIN_TIME)), t + gap)
        try:
            agg = node.initializer()
        except Exception as exc:
            raise user_error(name, node.initializer, exc) from exc
        start = end = t
        for reached in merged:
            try:
                agg = node.merger(key, agg, aggs[reached])
            except Exception as exc:
                raise user_error(name, node.merger, exc) from exc
            start, end = min(start, reached[1]), max(end, reached[0])
        if end < stream_time - node.grace_ms - gap:
            record = _new(Record, (key, batch.values[i], t, batch.header(i)))
            node.drop("expired window", record, Window(start, end))
            return
        try:
            agg = node.aggregator(key, batch.values[i], agg)
        except Exception as exc:
            raise user_error(name, node.aggregator, exc) from exc
        if start != t or end != t:
            for gone in merged:  # each removed: a tombstone
                del bounds[bisect_left(bounds, gone)]
                self._write((slot, gone[1], gone[0]), key, None, aggs.pop(gone), i)
        session = (end, start)
        if session not in aggs:
            insort(bounds, session)
            sessions.longest = max(sessions.longest, end - start)
        aggs[session] = agg
        self._write((slot, start, end), key, agg, None, i)


class _KeySessions:
    """One key's sessions while a batch folds: ``(end, start)`` bounds ascending (the
    store's order) and each one's aggregate."""

    __slots__ = ("aggs", "bounds", "loaded", "longest")

    def __init__(self, found: Any) -> None:
        self.aggs: dict[tuple[int, int], Any] = {}
        for session, value in found:
            self.aggs[(session.window.end, session.window.start)] = value
        self.bounds = list(self.aggs)
        #: the sessions read from the store
        self.loaded = frozenset(self.aggs)
        #: no session here is longer (a session starting by ``s`` ends by ``s + longest``)
        self.longest = max((end - start for end, start in self.bounds), default=0)

    def reach(self, at: int, latest_start: int) -> list[tuple[int, int]]:
        """The sessions from ``at`` on (those ending late enough) starting at or before
        ``latest_start``, in the store's order (:meth:`find_sessions`'): a session that
        starts by then ends by then plus the longest session's length."""
        bounds = self.bounds
        if at == len(bounds):
            return []
        to = bisect_right(bounds, (latest_start + self.longest, _MAX_TIME), at)
        return [b for b in bounds[at:to] if b[1] <= latest_start]
