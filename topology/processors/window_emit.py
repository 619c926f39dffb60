"""Emit on window close (Kafka's KIP-825): the bookkeeping a closing windowed node shares.

A node under ``EmitStrategy.on_window_close()`` forwards nothing while it aggregates; it
forwards each window once, its final aggregate, when stream time passes the window's
close. As Kafka's ``AbstractKStreamTimeWindowAggregateProcessor``:

- it looks for closed windows at most every ``__emit.interval.ms.kstreams.windowed.
  aggregation__`` ms of wall-clock time (default 1000; 0: after every record), at the
  first record that finds the interval passed (Kafka's ``TimeTracker``);
- it looks only when the close time moved past the last one it emitted (``last emitted
  window close``), and range-scans the store from there, in the store's time order;
- each window goes out with its stored aggregate and timestamp, the headers (and record
  context) of the record that closed it, and no old value.

Exactly once: the last emitted window close is written into the node's own store as a
metadata entry (:mod:`statestores.segments`), so it is changelogged and committed in the
same transaction as the outputs it accounts for; a task rebuilt after a crash or a move
reads it back and never emits a window twice (Kafka keeps it in the commit's processor
metadata, committed with the offsets).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from topology.api.emit import DEFAULT_EMIT_INTERVAL_MS, EMIT_INTERVAL_KEY
from topology.api.record import Change, Headers, Record
from topology.engine.columnar import Batch

_LOG = logging.getLogger(__name__)
_new = tuple.__new__
#: Kafka's ``ConsumerRecord.NO_TIMESTAMP``: nothing emitted yet.
NO_TIMESTAMP = -1
#: The store metadata entry holding the last emitted window close.
LAST_EMIT_KEY = "emit.last.window.close"


class SilentForwarder:
    """The forwarder of a closing node's updates: none are forwarded (Kafka's
    ``maybeForwardUpdate`` returns at once under ``ON_WINDOW_CLOSE``)."""

    cached = False
    buffered = False
    muted = False

    def maybe_forward(self, record: Any) -> None:
        """Forward nothing."""

    def forward_folded(self, *args: Any) -> None:
        """Forward nothing."""


class WindowCloseEmitter:
    """The last emitted window close and the emit throttle of one closing node.

    Args:
        name: the node's name (for logs).
        store: the node's window or session store (it keeps the last emitted close).
        context: the node's context (wall clock, configuration, forwarding).
    """

    def __init__(self, name: str, store: Any, context: Any) -> None:
        self.name = name
        self.store = store
        self.context = context
        last = store.read_meta(LAST_EMIT_KEY)
        self.last_emit = NO_TIMESTAMP if last is None else last
        self.interval = int(context.app_config.get(EMIT_INTERVAL_KEY, DEFAULT_EMIT_INTERVAL_MS))
        self.next_time_to_emit = 0
        #: How many windows this node emitted (Kafka's ``emitted-records`` sensor).
        self.emitted_total = 0

    def _throttled(self) -> bool:
        """Whether the wall clock is still before the next look (else book the next)."""
        now = self.context.current_system_time_ms()
        if now < self.next_time_to_emit:
            return True
        self.next_time_to_emit = now + self.interval
        return False

    def due(self, close_time: int) -> bool:
        """Kafka's ``shouldEmitFinal``: the interval passed and the close time moved."""
        if self._throttled():
            return False
        return self.last_emit == NO_TIMESTAMP or self.last_emit < close_time

    def looks(self, count: int) -> int:
        """How many of a batch's ``count`` records look for closed windows: every one with
        no interval, else the first (the batch's records share one wall-clock reading, as
        a poll's records share Kafka's cached system time), or none while throttled."""
        if not count or self._throttled():
            return 0
        return count if self.interval <= 0 else 1

    def emitted(self, close_time: int, count: int) -> None:
        """Record that every window up to ``close_time`` went out (logged, committed)."""
        self.last_emit = close_time
        self.emitted_total += count
        self.store.write_meta(LAST_EMIT_KEY, close_time)
        _LOG.debug("[%s] emitted windows=%d close_time=%d", self.name, count, close_time)


def forward_final(  # noqa: PLR0917 - the columns of the emitted records
    context: Any,
    keys: list[Any],
    values: list[Any],
    stamps: list[int],
    headers: list[Headers] | None,
    rows: Sequence[int] | None,
) -> None:
    """Forward final results ``Change(value, None)``: as one batch (the input ``rows``
    that closed them) to children that take batches, else one by one (``rows`` None: in
    the context of the record being processed)."""
    if not keys:
        return
    changes = [Change(value, None) for value in values]
    if rows is not None and context.forwards_batches():
        context.forward_batch(Batch(keys, changes, stamps, headers, rows))
        return
    for i, key in enumerate(keys):
        hs: Headers = () if headers is None else headers[i]
        context.forward(_new(Record, (key, changes[i], stamps[i], hs)))
