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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statestores.api import Window, Windowed
from topology.api.emit import ON_WINDOW_UPDATE, EmitStrategy
from topology.api.record import Change, Record
from topology.processors.proc_table import TableParams
from topology.processors.proc_window import AnyRecord, WindowedAggregating
from topology.processors.window_emit import forward_final

_new = tuple.__new__


class SessionTupleForwarder:
    """Forward session updates directly or on cache flush, stamped with the session's end
    (Kafka's ``SessionTupleForwarder`` and ``SessionCacheFlushListener``)."""

    def __init__(self, store: Any, context: Any, send_old_values: bool) -> None:
        self.context = context
        self.send_old_values = send_old_values
        self.cached = bool(store.set_flush_listener(self._on_flush))

    def maybe_forward(self, record: AnyRecord) -> None:
        """Forward ``record`` unless the cache will forward it on flush."""
        if not self.cached:
            self.context.forward(record)

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
