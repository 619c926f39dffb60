"""A stream thread's stall watchdog: input waits and no batch runs.

A thread's batches start when its trigger wakes its query (new records, records left
behind, a punctuator or a commit falling due, a rebalance). Should a wake-up ever be lost,
the thread would sit with input waiting and nothing to start its next batch. The watchdog
looks every tenth of its timeout: when no batch has run for ``stall.timeout.ms`` (by
default ten times the larger of ``poll.ms`` and the query's trigger interval) while the
thread's partitions hold records past its positions, or a wall-clock punctuator or a
commit is overdue by as long, the thread is *stalled*. The watchdog then logs one WARNING
line, counts it (``stalled-total``), wakes the query itself, and wakes it again every
timeout until a batch works again (a batch that finds nothing to read while records wait
does not count); ``streams-eos status`` shows the thread as STALLED meanwhile. The
watching starts after the thread's first batch that worked (a query's start is slow).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Overdue:
    """Why a thread should have run a batch: records unread, or the ms a punctuator or
    a commit has been overdue."""

    records: int = 0
    due_ms: int = 0

    def __bool__(self) -> bool:
        return self.records > 0 or self.due_ms > 0

    def describe(self) -> str:
        parts = []
        if self.records:
            parts.append(f"{self.records:,} records unread")
        if self.due_ms:
            parts.append(f"a punctuator or commit due {self.due_ms} ms ago")
        return " and ".join(parts)


class StallWatch:
    """Watches one stream thread (see the module).

    Args:
        name: the thread's name in log lines.
        timeout_ms: how long without a batch, with input waiting, is a stall.
        overdue: what the thread should be doing now (called between batches only).
        wake: wakes the thread's query.
        on_stall: told True when a stall starts, False when it ends.
    """

    def __init__(
        self,
        name: str,
        timeout_ms: int,
        *,
        overdue: Callable[[int], Overdue],
        wake: Callable[[], None],
        on_stall: Callable[[bool], None],
    ) -> None:
        self.name = name
        self.timeout_s = timeout_ms / 1000
        self._overdue = overdue
        self._wake = wake
        self._on_stall = on_stall
        self._lock = threading.Lock()
        self._running = False
        self._last_end: float | None = None
        self._stalled_since: float | None = None
        self._last_wake = 0.0
        #: Stalls seen since the thread started.
        self.stalls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watchdog-{name}", daemon=True)

    @property
    def stalled(self) -> bool:
        """Whether the thread is stalled now."""
        return self._stalled_since is not None

    def start(self) -> None:
        """Start watching (in a daemon thread)."""
        self._thread.start()

    def close(self) -> None:
        """Stop watching."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def batch_started(self) -> None:
        """A batch starts (no look while it runs)."""
        with self._lock:
            self._running = True

    def batch_ended(self, *, worked: bool) -> None:
        """A batch ended; ``worked``: it read records or ran its tasks (a batch that
        found nothing to do while input waits does not end a stall)."""
        with self._lock:
            self._running = False
            if not worked:
                return
            self._last_end = time.monotonic()
            since, self._stalled_since = self._stalled_since, None
        if since is not None:
            log.info(
                "[thread %s] batches run again after a stall of %.1f s",
                self.name,
                time.monotonic() - since,
            )
            self._on_stall(False)

    def check(self) -> bool:
        """Look once; return whether the thread is stalled."""
        now = time.monotonic()
        with self._lock:
            if self._running or self._last_end is None:
                return False
            idle_s = now - self._last_end
            stalled = self._stalled_since is not None
        if idle_s < self.timeout_s:
            return stalled
        overdue = self._overdue(int(self.timeout_s * 1000))
        if not overdue:
            return False
        with self._lock:
            if self._running:
                return False
            first = self._stalled_since is None
            if first:
                self._stalled_since = now
                self.stalls += 1
            rewake = first or now - self._last_wake >= self.timeout_s
            if rewake:
                self._last_wake = now
        if first:
            log.warning(
                "[thread %s] stalled: no batch for %.1f s with %s (stall.timeout.ms=%d); "
                "waking its query",
                self.name,
                idle_s,
                overdue.describe(),
                int(self.timeout_s * 1000),
            )
            self._on_stall(True)
        if rewake:
            self._wake()
        return True

    def _run(self) -> None:
        interval = max(self.timeout_s / 10, 0.05)
        while not self._stop.wait(interval):
            try:
                self.check()
            except Exception:  # a storage hiccup in a look: the next one tries again
                log.debug("[thread %s] the stall watchdog's look failed", self.name, exc_info=True)
