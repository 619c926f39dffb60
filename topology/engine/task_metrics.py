"""What a task measures while it runs, summed up until the runtime takes it.

A task lives in an executor's Python worker; the driver keeps the application's metrics
(:mod:`runtime.app.metrics`). Between the two travel :class:`TaskStats`' figures: per kind
of measurement and name (a processor node, a store) how many values were recorded, their
sum, largest and smallest, and the latest value of gauges. The task records into them;
each batch's result carries what was recorded since the last batch (:meth:`TaskStats.drain`)
and the driver feeds it into its sensors, so no figure is counted twice and none is lost
with a batch that failed (a failed batch's figures never reach the driver, as its outputs).

Nothing here is per record on the INFO level: the task counts a batch of records at once
and times whole calls. DEBUG adds per-node counts and per-store-operation timings, whose
cost is a counter per node call and two clock reads per store call.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import pyarrow.compute as pc

from common.metrics import RecordingLevel
from statestores.bytes_layer import bottom

#: What a task records (``kind``), with the level it records on.
PROCESS = "process"  # records processed by the task; ns spent (INFO, thread and task)
PUNCTUATE = "punctuate"  # punctuator calls; ns spent (INFO)
DROPPED = "dropped"  # dropped records (INFO)
E2E = "e2e"  # end-to-end latency in ms at a source or terminal node (INFO)
COMMIT = "commit"  # the task's flush before a commit; ns spent (DEBUG)
NODE = "node"  # records a processor node received (DEBUG)
STORE = "store"  # a store operation: name "<store>\x00<operation>"; ns spent (DEBUG)
RESTORE = "restore"  # changelog records restored into a store; ns spent (INFO)
REMAINING = "restore-remaining"  # gauge: records left to restore (INFO)
STORE_SIZE = "store-size"  # gauge: bytes of a store's files on disk (INFO)
STORE_KEYS = "store-keys"  # gauge: a store's estimated number of keys (INFO)
STORE_MEMTABLES = "store-memtables"  # gauge: bytes in a store's memtables (INFO)

#: The file of a restore's progress in a task's state directory (see RestoreStats).
RESTORE_PROGRESS = "restore-progress.json"
#: How often that file is rewritten during a restore (seconds).
PROGRESS_EVERY_S = 0.5

#: One recorded figure: (kind, name, count, sum, max, min).
Figure = tuple[str, str, int, float, float, float]


class TaskStats:
    """Figures a task recorded since they were last drained.

    Args:
        level: the recording level (``metrics.recording.level``).
    """

    def __init__(self, level: RecordingLevel = RecordingLevel.INFO):
        self.level = level
        self.debug = level >= RecordingLevel.DEBUG
        self._figures: dict[tuple[str, str], list[float]] = {}
        self._gauges: dict[tuple[str, str], float] = {}

    def record(  # noqa: PLR0917 - Kafka's Sensor.record with a batch's summary
        self,
        kind: str,
        name: str,
        count: int,
        total: float,
        high: float | None = None,
        low: float | None = None,
    ) -> None:
        """Record ``count`` values summing to ``total`` (largest ``high``, smallest
        ``low``; by default their mean)."""
        if count <= 0:
            return
        mean = total / count
        hi = mean if high is None else high
        lo = mean if low is None else low
        entry = self._figures.get((kind, name))
        if entry is None:
            self._figures[(kind, name)] = [count, total, hi, lo]
            return
        entry[0] += count
        entry[1] += total
        entry[2] = max(entry[2], hi)
        entry[3] = min(entry[3], lo)

    def gauge(self, kind: str, name: str, value: float) -> None:
        """Set gauge ``kind`` of ``name`` to ``value``."""
        self._gauges[(kind, name)] = value

    def timed(self, kind: str, name: str, call: Callable[[], Any], count: int = 1) -> Any:
        """Run ``call`` and record ``count`` values of its duration (ns) divided among
        them."""
        start = time.perf_counter_ns()
        try:
            return call()
        finally:
            elapsed = time.perf_counter_ns() - start
            self.record(kind, name, count, elapsed, elapsed / count, elapsed / count)

    def drain(self) -> tuple[list[Figure], dict[str, float]]:
        """The figures recorded and the gauges set since the last drain; both are reset
        (gauges are sent again only when set again)."""
        figures = [(k, n, int(e[0]), e[1], e[2], e[3]) for (k, n), e in self._figures.items()]
        gauges = {f"{k}\x00{n}": v for (k, n), v in self._gauges.items()}
        self._figures = {}
        self._gauges = {}
        return figures, gauges

    def e2e(self, node: str, timestamps: Any, now_ms: int) -> None:
        """Record the end-to-end latency of records with ``timestamps`` (ms; a sequence
        or an Arrow array) reaching ``node`` at ``now_ms``."""
        if hasattr(timestamps, "to_numpy"):
            n = len(timestamps)
            if not n:
                return
            low, high = (v.as_py() for v in pc.min_max(timestamps).values())
            self.e2e_figures(node, (n, low, high, pc.sum(timestamps).as_py()), now_ms)
        elif timestamps:
            self.e2e_figures(
                node, (len(timestamps), min(timestamps), max(timestamps), sum(timestamps)), now_ms
            )

    def e2e_figures(
        self, node: str, figures: tuple[int, int, int, int] | None, now_ms: int
    ) -> None:
        """Record the end-to-end latency of records whose timestamps' ``figures`` are
        ``(records, least, greatest, sum)`` (see
        :meth:`topology.engine.columnar.Batch.timestamp_figures`), reaching ``node`` at
        ``now_ms``."""
        if figures is None:
            return
        n, low, high, total = figures
        if low is None or low < 0:
            return
        self.record(E2E, node, n, now_ms * n - total, now_ms - low, now_ms - high)


def store_figure_name(store: str, operation: str) -> str:
    """The name a store operation's figures carry."""
    return f"{store}\x00{operation}"


#: A store's operations as Kafka's metrics name them: method -> operation.
STORE_OPERATIONS = {
    "get": "get",
    "get_many": "get",
    "get_raw_many": "get",
    "put": "put",
    "put_many": "put",
    "put_raw_many": "put",
    "put_if_absent": "put-if-absent",
    "put_all": "put-all",
    "delete": "delete",
    "range": "range",
    "reverse_range": "range",
    "all": "all",
    "reverse_all": "all",
    "prefix_scan": "prefix-scan",
    "fetch": "fetch",
    "fetch_all": "fetch",
    "backward_fetch": "fetch",
    "find_sessions": "fetch",
    "remove": "remove",
    "flush": "flush",
}


def time_store_operations(store: Any, stats: TaskStats) -> None:
    """Time every operation of ``store`` into ``stats`` (DEBUG): each method of
    :data:`STORE_OPERATIONS` the store has is replaced, on this instance only, by one that
    records its calls (``*_many`` count each key) and their duration. A range's time is
    that of making its iterator, as in Kafka."""
    for method, operation in STORE_OPERATIONS.items():
        inner = getattr(store, method, None)
        if inner is None or not callable(inner):
            continue
        name = store_figure_name(store.name, operation)
        many = method.endswith("_many")
        setattr(store, method, _timed(inner, name, many, stats))


def _timed(inner: Callable[..., Any], name: str, many: bool, stats: TaskStats) -> Any:
    record, clock = stats.record, time.perf_counter_ns

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return inner(*args, **kwargs)
        finally:
            elapsed = clock() - start
            count = max(len(args[0]), 1) if many and args else 1
            record(STORE, name, count, elapsed, elapsed / count, elapsed / count)

    return timed


def store_disk_size(store: Any) -> tuple[int, int] | None:
    """The bytes of ``store``'s SST files and of its memtables (None: no RocksDB)."""
    try:
        below = bottom(store)
    except TypeError:
        return None
    disk, memtables = below.disk_size(), below.memtable_size()
    return None if disk is None or memtables is None else (disk, memtables)


class RestoreStats:
    """A restore listener recording into a task's stats: records restored and the time
    per store (``restore-total``, ``restore-rate``, ``restore-latency``), and the records
    left to restore (``restore-remaining-records-total``); then tells ``inner``.

    While a restore runs it also keeps ``restore-progress.json`` in the task's state
    directory (``{store: [restored, total]}``, rewritten at most twice a second, removed at
    the end): what ``streams-eos run`` draws its restore progress bar from on a local
    master.

    Args:
        stats: the task's stats (a callable: the task is built after its state manager).
        inner: the runtime's own listener, if any.
        state_dir: the task's state directory (a callable, as ``stats``; None: no file).
    """

    def __init__(
        self,
        stats: Callable[[], TaskStats | None],
        inner: Any = None,
        state_dir: Callable[[], str | None] | None = None,
    ):
        self._stats = stats
        self.inner = inner
        self._state_dir = state_dir
        self._left: dict[str, tuple[int, int]] = {}
        self._progress: dict[str, list[int]] = {}
        self._written = 0.0

    def on_restore_start(self, store: str, start_offset: int, end_offset: int) -> None:
        self._left[store] = (end_offset, time.perf_counter_ns())
        self._progress[store] = [0, max(end_offset - start_offset, 0)]
        self._write_progress(force=True)
        stats = self._stats()
        if stats is not None:
            stats.gauge(REMAINING, store, max(end_offset - start_offset, 0))
        if self.inner is not None:
            self.inner.on_restore_start(store, start_offset, end_offset)

    def on_batch_restored(self, store: str, batch_end_offset: int, restored: int) -> None:
        end, started = self._left.get(store, (batch_end_offset, time.perf_counter_ns()))
        now = time.perf_counter_ns()
        self._left[store] = (end, now)
        stats = self._stats()
        if stats is not None:
            stats.record(RESTORE, store, restored, now - started)
            stats.gauge(REMAINING, store, max(end - batch_end_offset, 0))
        if store in self._progress:
            self._progress[store][0] += restored
            self._write_progress(force=False)
        if self.inner is not None:
            self.inner.on_batch_restored(store, batch_end_offset, restored)

    def on_restore_end(self, store: str, total_restored: int, elapsed_s: float) -> None:
        self._left.pop(store, None)
        self._progress.pop(store, None)
        self._write_progress(force=True)
        stats = self._stats()
        if stats is not None:
            stats.gauge(REMAINING, store, 0)
        if self.inner is not None:
            self.inner.on_restore_end(store, total_restored, elapsed_s)

    def _write_progress(self, *, force: bool) -> None:
        directory = self._state_dir() if self._state_dir is not None else None
        if directory is None:
            return
        now = time.monotonic()
        if not force and now - self._written < PROGRESS_EVERY_S:
            return
        self._written = now
        path = os.path.join(directory, RESTORE_PROGRESS)
        try:
            if not self._progress:
                if os.path.exists(path):
                    os.unlink(path)
                return
            tmp = f"{path}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self._progress, f)
            os.replace(tmp, path)
        except OSError:  # for people watching only: never fails a restore
            return
