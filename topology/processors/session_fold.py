"""A session aggregation's run of a batch folded in memory: the columnar engine's path of
:class:`~topology.processors.proc_session.SessionWindowAggregateProcessor` (see its
``_fold``).

Each key's sessions the run's records may reach are read once (:class:`KeySessions`);
every record is merged into them as the processor's ``process`` merges it in the store
(the user's functions called as often, in the same order), and the writes to make are
noted: with a cache that buffers, each session's last (the cache's dirty order), else
every write in order. The updates nothing caches are noted for one batch forward (not
under emit-on-close, which forwards no update).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from typing import TYPE_CHECKING, Any

from statestores.api import Window
from topology.api.record import Change, Record
from topology.engine.columnar import Batch
from topology.engine.nodes import user_error
from topology.processors.proc_aggregate import count_add, count_init

if TYPE_CHECKING:
    from topology.processors.proc_session import SessionWindowAggregateProcessor

_new = tuple.__new__
_MIN_TIME = -(1 << 63)
_MAX_TIME = (1 << 63) - 1


class SessionFold:
    """The in-memory fold of a run of a batch's records (see
    :meth:`~topology.processors.proc_session.SessionWindowAggregateProcessor._fold`)."""

    def __init__(
        self,
        node: SessionWindowAggregateProcessor,
        batch: Batch,
        found: dict[Any, KeySessions],
        plain: bool,
    ) -> None:
        self.node, self.batch, self.found = node, batch, found
        #: whether a key is its own slot in ``found`` (else ``(type, key)``)
        self.plain = plain
        self.buffered = node.forwarder.buffered
        #: whether the updates are forwarded as the batch folds them (nothing caches
        #: them, and the node emits updates, not closed sessions)
        self.collect = not node.forwarder.cached and node.emitter is None
        #: (slot, start, end) -> (key, aggregate or None, record): each session's last
        #: write (a buffering cache), in the order of its last update
        self._last: dict[tuple[Any, int, int], tuple[Any, Any, int]] = {}
        #: every write in order (no cache, or one that hands each write on)
        self._all: list[tuple[tuple[Any, int, int], tuple[Any, Any, int]]] = []
        #: the forwarded updates (``collect``): their records, (key, start, end), changes
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
        """Merge and fold the records ``lo`` to ``hi``, as the processor's ``process`` does
        each."""
        if self.buffered:
            self._run_buffered(lo, hi)
            return
        node, batch, found, plain = self.node, self.batch, self.found, self.plain
        ks, ts = batch.keys, batch.timestamps
        for i in range(lo, hi):
            key, t = ks[i], ts[i]
            if key is None:
                record = _new(Record, (key, batch.values[i], t, batch.header(i)))
                node.drop("null key", record)
                continue
            node.observe(t)
            slot = key if plain else (type(key), key)
            self._one(i, slot, found[slot], node.observed_stream_time)

    def _write(self, place: tuple[Any, int, int], key: Any, value: Any, old: Any, i: int) -> None:
        """Note the write of ``value`` (None: a removal) to the session at ``place`` by
        record ``i`` (and its update, forwarded when ``collect``)."""
        if self.buffered:
            last = self._last
            last.pop(place, None)
            last[place] = (key, value, i)
        else:
            self._all.append((place, (key, value, i)))
        if self.collect:
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

    def _one(self, i: int, slot: Any, sessions: KeySessions, stream_time: int) -> None:
        """Fold record ``i`` (a key) into its key's ``sessions`` as the processor's
        ``process`` folds it into the store."""
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


class KeySessions:
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
