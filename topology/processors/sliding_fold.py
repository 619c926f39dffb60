"""A sliding-window aggregation's batch folded in memory: the columnar engine's path of
:class:`~topology.processors.proc_sliding.SlidingWindowAggregateProcessor`.

Each key's windows over the batch's span of time are read with one range fetch; the
records are folded one by one, in order, as the record path folds them (Kafka's
``KStreamSlidingWindowAggregate``: the same windows updated and created, the user's
functions called in the same order), on those windows in memory; each changed window is
written once, in the order of its last update (the cache's dirty and LRU order of the
record path), stamped with its last update's timestamp. Without a cache that buffers them,
the updates go out as one batch, each with its record's row (none under emit-on-close: the
node forwards closed windows, not updates, and a batch folds only between the records that
look for them, see :mod:`topology.processors.close_batch`).

What a record sees is what the record path's range read would find:

- under a buffering cache, every window the batch read or wrote (the cache keeps what it
  was given whatever the store below expired, and holds the batch's writes until the
  commit: nothing the batch reads is evicted, see :func:`cache_holds`);
- without one, the store
  below hides windows that start before ``stream time - retention`` (+1), its stream time
  the largest window start written, which the batch's own writes advance. A range read
  looks at that bound once per segment, when it reaches the segment, after the writes of
  the windows it yielded before: the fold does the same.

A store whose cache forwards each write at once (none: a cache of size 0 is no cache, see
:mod:`topology.graph.stores`) is not folded.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable
from typing import Any

from common.errors import StreamsError
from statestores.api import Window, Windowed
from statestores.caching import cache_max_bytes
from topology.api.record import Change, Record, ValueAndTimestamp
from topology.engine.columnar import Batch

_new = tuple.__new__
#: The bytes a new window is taken to add to a cache (its key, value and the cache's
#: bookkeeping: an estimate) when a batch's writes are checked against the cache's free
#: room; a record creates at most three windows.
WINDOW_BYTES = 256


def cache_holds(node: Any, windows: int) -> bool:
    """Whether ``node``'s buffering cache has room for ``windows`` more windows (of
    :data:`WINDOW_BYTES`), so that the record path would evict nothing during the batch
    (an eviction forwards dirty windows mid-batch and forgets what it evicts)."""
    cached = node.store.cached_bytes()
    room = cache_max_bytes(node.context.app_config) - (cached or 0)
    return windows * WINDOW_BYTES <= room


class SlidingFold:
    """One batch of a sliding-window node, folded in memory (see the module docstring).

    Args:
        node: the processor (its store, functions, forwarder, observed stream time).
        batch: the batch.
        keys: the batch's distinct non-null keys whose records have values.
    """

    def __init__(self, node: Any, batch: Batch, keys: Iterable[Any]) -> None:
        self.node = node
        self.batch = batch
        store = node.store
        self.store = store
        self.diff = node.diff
        self.buffered = node.forwarder.buffered
        #: Whether every update is forwarded (no cache buffers it, and the node emits
        #: updates, not closed windows).
        self.collect = not self.buffered and node.emitter is None
        self.send_old = node.send_old
        self.stream = store.stream_time
        lows: dict[Any, int] = {}
        highs: dict[Any, int] = {}
        ts = batch.timestamps
        for i, key in enumerate(batch.keys):
            if key in keys:
                t = ts[i]
                if key not in lows or t < lows[key]:
                    lows[key] = t
                if key not in highs or t > highs[key]:
                    highs[key] = t
        diff = self.diff
        #: Each key's windows: their starts in order, and start -> ValueAndTimestamp.
        self.windows: dict[Any, tuple[list[int], dict[int, Any]]] = {}
        for key, low in lows.items():
            found = dict(store.fetch(key, max(0, low - 2 * diff), highs[key] + 1))
            self.windows[key] = (list(found), found)
        #: (key, start) -> the record of its last update, in update order.
        self.last: dict[tuple[Any, int], int] = {}
        self.out: list[int] = []
        self.out_keys: list[Any] = []
        self.changes: list[Any] = []
        self.out_ts: list[int] = []
        # the record being folded
        self._i = 0
        self._key: Any = None
        self._value: Any = None
        self._ts = 0
        self._close = 0
        self._starts: list[int] = []
        self._vals: dict[int, Any] = {}

    def run(self) -> None:
        """Fold every record, write the changed windows, forward the updates."""
        node, batch = self.node, self.batch
        ks, vs, ts = batch.keys, batch.values, batch.timestamps
        diff, grace = self.diff, node.windows.grace_ms
        windows = self.windows
        for i in range(len(ks)):
            key, value, t = ks[i], vs[i], ts[i]
            if key is None or value is None:
                node.drop("null key or value", _new(Record, (key, value, t, batch.header(i))))
                continue
            node.observed_stream_time = max(node.observed_stream_time, t)
            close = node.observed_stream_time - grace
            if t + 1 + diff <= close:
                node.drop("expired window", _new(Record, (key, value, t, ())), Window(t - diff, t))
                continue
            self._i, self._key, self._value, self._ts, self._close = i, key, value, t, close
            self._starts, self._vals = windows[key]
            if t < diff:
                self._early()
            else:
                self._reverse()
        self._write()

    def _write(self) -> None:
        node, last, windows = self.node, self.last, self.windows
        forwarder = node.forwarder
        if last:
            keys = [key for key, _ in last]
            starts = [start for _, start in last]
            values = [windows[key][1][start] for key, start in last]
            ts = self.batch.timestamps
            stamps = [ts[i] for i in last.values()]
            node.context.set_timestamp(stamps[-1])
            self.store.put_many(keys, values, starts, stamps)
        if self.collect:
            forwarder.forward_folded(self.batch, self.out, self.out_keys, self.changes, self.out_ts)

    def _range(self, low: int, high: int, reverse: bool) -> Iterable[int]:
        """The starts in ``[low, high]`` of the record's key a range read yields."""
        starts = self._starts
        picked = starts[bisect_left(starts, low) : bisect_right(starts, high)]
        if reverse:
            picked.reverse()
        if self.buffered or self.store.read_floor(max(self.stream, high)) <= low:
            return picked  # nothing in the range expires before the read is done
        return self._unexpired(picked)

    def _unexpired(self, picked: list[int]) -> Iterable[int]:
        """``picked`` less what the store below hides, looked at per segment."""
        store, segment, floor = self.store, None, 0
        for start in picked:
            at = store.segment_of(start)
            if at != segment:
                segment, floor = at, store.read_floor(self.stream)
            if start >= floor:
                yield start

    def _put(self, start: int, stored: Any, new: Any, old: Any) -> None:
        """Write ``stored`` into the window at ``start`` and record its update ``new``
        (``old`` the aggregate it replaces)."""
        vals = self._vals
        if start not in vals:
            insort(self._starts, start)
        if self.collect:
            self.out.append(self._i)
            self.out_keys.append(Windowed(self._key, Window(start, start + self.diff)))
            self.changes.append(Change(new, old if self.send_old else None))
            self.out_ts.append(stored[1])
        vals[start] = stored
        self.stream = max(self.stream, start)
        slot = (self._key, start)
        self.last.pop(slot, None)
        self.last[slot] = self._i

    def _update(self, start: int, stored: Any) -> None:
        """Fold the record into the window at ``start`` (aggregate ``stored``) unless it
        is closed."""
        node, end = self.node, start + self.diff
        key, value, ts = self._key, self._value, self._ts
        if end < self._close:
            node.drop("expired window", _new(Record, (key, value, ts, ())), Window(start, end))
            return
        old = None if stored is None else stored[0]
        new = node.call(node.aggregator, key, value, old)
        new_ts = ts if old is None else max(ts, stored[1])
        self._put(start, _new(ValueAndTimestamp, (new, new_ts)), new, old)

    def _initial(self) -> Any:
        node = self.node
        return _new(ValueAndTimestamp, (node.call(node.initializer), self._ts))

    def _create_right_window(self, right_agg: Any) -> None:
        self._put(self._ts + 1, right_agg, right_agg[0], None)

    def _reverse(self) -> None:
        """Kafka's ``processReverse``, as the processor's."""
        ts, diff, vals = self._ts, self.diff, self._vals
        starts: set[int] = set()
        left_agg: Any = None
        right_agg: Any = None
        left_created = right_created = False
        previous_ts: int | None = None
        for start in self._range(max(0, ts - 2 * diff), ts + 1, True):
            stored = vals[start]
            starts.add(start)
            end = start + diff
            if start == ts + 1:
                right_created = True
            elif end > ts:
                if right_agg is None:
                    right_agg = stored
                self._update(start, stored)
            elif end == ts:
                left_created = True
                self._update(start, stored)
                if stored[1] >= ts:
                    return
                previous_ts = stored[1]
            else:
                left_agg, previous_ts = stored, stored[1]
                break
        if previous_ts is not None:
            previous_right = previous_ts + 1
            if previous_right not in starts and previous_right + diff >= ts:
                self._update(previous_right, self._initial())
        if not left_created:
            if previous_ts is not None and ts - diff <= previous_ts:
                initial = _new(ValueAndTimestamp, (left_agg[0], ts))
            else:
                initial = self._initial()
            self._update(ts - diff, initial)
        if not right_created and right_agg is not None and right_agg[1] > ts:
            self._create_right_window(right_agg)

    def _early(self) -> None:
        """Kafka's ``processEarly``, as the processor's."""
        ts, vals = self._ts, self._vals
        combined: Any = None
        right_agg: Any = None
        right_created = False
        starts: set[int] = set()
        previous_ts: int | None = None
        for start in self._range(0, ts + 1, False):
            stored = vals[start]
            starts.add(start)
            if start == 0:
                combined = stored
                if stored[1] < ts:
                    previous_ts = stored[1]
            elif start <= ts:
                right_agg = stored
                self._update(start, stored)
            elif start == ts + 1:
                right_created = True
            else:
                raise StreamsError(
                    f"processor {self.node.name}: unexpected window start {start} for a "
                    f"record at {ts}"
                )
        if right_agg is None and combined is not None and combined[1] > ts:
            right_agg = combined
        if not right_created and right_agg is not None and right_agg[1] > ts:
            self._create_right_window(right_agg)
        if previous_ts is not None and previous_ts + 1 not in starts:
            self._update(previous_ts + 1, self._initial())
        self._update(0, self._initial() if combined is None else combined)
