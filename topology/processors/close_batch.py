"""A batch of an emit-on-close session or sliding-window node (the columnar engine's path):
where its records look for closed windows, and the batch cut there.

Under ``EmitStrategy.on_window_close()`` a record looks for closed windows after its own
writes (:mod:`topology.processors.window_emit`): what it finds is the store's content at
that moment, every key's. A batch is therefore folded in memory between the records that
emit (:func:`emission_cuts`), and each of those runs alone, after the writes of the ones
before it, and emits what the store holds then, in its own record context (:func:`cut_at`,
:class:`ClosingAggregating`). Which records emit is known before the batch runs: a
record's close time follows from the observed stream time alone, and the records that look
are those of :meth:`~topology.processors.window_emit.WindowCloseEmitter.looks` (every one
with no emit interval, else the batch's first, which reads the wall clock for the batch:
its records share one reading, as those of a time-windowed aggregation's batch do); one
emits when its close time passed the last one emitted and closes anything.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from topology.api.record import Headers, Record
from topology.engine.columnar import Batch, rows_at
from topology.processors.proc_window import AnyRecord, WindowedAggregating
from topology.processors.window_emit import NO_TIMESTAMP, WindowCloseEmitter, forward_final

_new = tuple.__new__


def emission_cuts(
    emitter: WindowCloseEmitter, lookers: list[int], closes: list[int], floor: int
) -> list[int]:
    """The records of a batch that emit closed windows, in order.

    Args:
        emitter: the node's emitter (asked once whether the batch's records look).
        lookers: the records that would look for closed windows, in order (those with a
            key, not dropped before they look).
        closes: each one's close time (the observed stream time after it, less what the
            windows wait).
        floor: the least close time that closes anything (a smaller one emits nothing and
            leaves the last emitted close as it is).
    """
    looks = emitter.looks(len(lookers))
    last = emitter.last_emit
    cuts = []
    for i, close in zip(lookers[:looks], closes[:looks], strict=True):
        if (last == NO_TIMESTAMP or last < close) and close >= floor:
            cuts.append(i)
            last = close
    return cuts


def cut_at(
    n: int,
    cuts: list[int],
    stretch: Callable[[int, int], None],
    emitting: Callable[[int], None],
) -> None:
    """Run a batch of ``n`` records cut at ``cuts``: ``stretch(lo, hi)`` the records from
    ``lo`` to ``hi`` (none of them emits), ``emitting(i)`` each record that emits."""
    lo = 0
    for cut in cuts:
        if lo < cut:
            stretch(lo, cut)
        emitting(cut)
        lo = cut + 1
    if lo < n:
        stretch(lo, n)


def part(batch: Batch, lo: int, hi: int) -> Batch:
    """The records ``lo`` to ``hi`` of ``batch`` (the batch itself when that is all)."""
    if lo == 0 and hi == len(batch):
        return batch
    hs = batch.headers
    return Batch(
        batch.keys[lo:hi],
        batch.values[lo:hi],
        batch.timestamps[lo:hi],
        None if hs is None else hs[lo:hi],
        rows_at(batch.rows, range(lo, hi)),
    )


def row_of(batch: Batch, i: int) -> int:
    """The input row of record ``i`` of ``batch``."""
    return rows_at(batch.rows, (i,))[0]


def forward_closed(
    context: Any, found: list[tuple[Any, Any]], headers: Headers, row: int | None
) -> None:
    """Forward closed windows ``(windowed key, ValueAndTimestamp)``, each stamped with its
    aggregate's timestamp, with the ``headers`` of the record that closed them: in the
    context of input ``row`` (as one batch), or of the record being processed (None)."""
    n = len(found)
    forward_final(
        context,
        [w for w, _ in found],
        [v[0] for _, v in found],
        [v[1] for _, v in found],
        [headers] * n,
        None if row is None else [row] * n,
    )


class ClosingAggregating(WindowedAggregating):
    """A windowed aggregation whose records look for closed windows after their own
    writes under emit-on-close (sessions, sliding windows): :meth:`process` is
    :meth:`_aggregate` then :meth:`_emit_closed`; a batch is cut where its records emit
    (:meth:`_process_closing`)."""

    def init(self, context: Any) -> None:
        """Open the store and set up forwarding (see :class:`WindowedAggregating`)."""
        super().init(context)
        #: A batch's records fed to :meth:`_aggregate` one by one, each in its context.
        self._one_by_one = context.record_by_record(self._aggregate)

    def process(self, record: AnyRecord) -> None:
        """Aggregate the record; under emit-on-close, then emit the windows closed."""
        close_time = self._aggregate(record)
        if close_time is not None and self.emitter is not None:
            self._emit_closed(record, close_time)

    def _aggregate(self, record: AnyRecord) -> int | None:
        """Aggregate the record (or drop it); return the close time after it when it
        looks for closed windows, else None."""
        raise NotImplementedError

    def _emit_closed(self, record: AnyRecord, close_time: int, row: int | None = None) -> None:
        """Emit the windows closed by ``close_time`` not emitted yet, with the headers of
        ``record``; ``row``: the input row of a batch's record that emits (known to look,
        see :func:`emission_cuts`), None for a record processed alone (which looks only
        when the emitter says it is due)."""
        raise NotImplementedError

    def _process_closing(
        self,
        batch: Batch,
        lookers: list[int],
        closes: list[int],
        floor: int,
        stretch: Callable[[Batch, int, int], None],
    ) -> None:
        """Run a batch under emit-on-close: ``stretch(batch, lo, hi)`` the records between
        those that emit (``lookers``, ``closes`` and ``floor`` as :func:`emission_cuts`
        takes them), each of those aggregated alone, then emitting what it closed."""
        assert self.emitter is not None
        cuts = emission_cuts(self.emitter, lookers, closes, floor)
        cut_at(len(batch), cuts, partial(stretch, batch), partial(self._emitting, batch))

    def _emitting(self, batch: Batch, i: int) -> None:
        """Aggregate record ``i`` of ``batch`` (one that looks), then emit the windows it
        closed, in its row's context."""
        ts = batch.timestamps[i]
        record = _new(Record, (batch.keys[i], batch.values[i], ts, batch.header(i)))
        self.context.set_timestamp(ts)
        close_time = self._aggregate(record)
        assert close_time is not None
        self._emit_closed(record, close_time, row_of(batch, i))
