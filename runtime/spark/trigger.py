"""When a stream thread's next batch runs: the wake-ups of Kafka's poll loop.

A stream thread plans each batch's reads itself, from its committed positions, so its
query's source only has to say *when* to run a batch. That source is Spark's own socket
source, which runs in the driver's JVM, connected to a :class:`BatchTrigger` in the
driver's Python process: every line the trigger sends asks for a batch (lines that arrive
between two of Spark's triggers make one batch). A new query's first batch runs at once,
and a Python streaming source would cost a fresh Python process per query (two seconds
before its first batch) and a storage round trip per wake-up.

The trigger sends a line when

* the log-end offset of a topic it watches moved (checked every ``poll.ms``): a record
  appended after one check is seen by the next, so every record gets a batch planned after
  it was committed;
* the thread asks (:meth:`BatchTrigger.wake`): it left records behind, a wall-clock
  punctuator is due, its group rebalances;
* a pattern source matches a new topic (topics listed at most every
  ``metadata.max.age.ms``): the topic is watched from then on, and
  :meth:`BatchTrigger.subscribed` names it for the thread to read.

Such a query's Spark checkpoint holds nothing to recover (the socket source's offsets count
lines; positions live in ``__consumer_offsets``): the application starts each query with an
empty one.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from common.pools import shared_pool
from runtime.spark import trigger_faults
from runtime.spark.source_topics import PatternWatch
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin

log = logging.getLogger(__name__)

#: How long the accepting thread waits for a connection before it checks for close().
_ACCEPT_WAIT_S = 0.2

#: Spark's classes whose warnings say nothing about a stream thread's query: the socket
#: source warns at every query start that it keeps nothing for a recovery (this one needs
#: none); the processing-time trigger warns at every batch longer than its interval, which
#: ``commit.interval.ms`` is not a bound of (a thread commits at most that often, as in
#: Kafka Streams). The trigger's class moved between Spark releases: both names are
#: quietened. The loggers are the driver JVM's, so the user's own queries there lose these
#: two warnings as well (a query's ``lastProgress`` still shows how long its batches take).
_QUIET_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.sources.TextSocketSourceProvider",
    "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor",
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
)


class BatchTrigger:
    """The driver's side of a stream thread's socket source.

    Args:
        admin: the storage root's topic admin (its topics' log-end offsets are watched).
        topics: the topics the thread reads.
        poll_ms: how often the log-end offsets are checked (``poll.ms``).
        name: names the trigger's threads and log lines (the thread's transactional id).
        patterns: finds the topics a pattern source subscribes to later (None: none).
    """

    def __init__(
        self,
        admin: TopicAdmin,
        topics: Iterable[str],
        *,
        poll_ms: int,
        name: str,
        patterns: PatternWatch | None = None,
    ) -> None:
        self.name = name
        self.poll_ms = poll_ms
        self.patterns = patterns
        self._topics = sorted(set(topics))
        self._reader = TopicReader(admin)
        self._lock = threading.Lock()
        #: Every connection taken: Spark's source, and any other local process that
        #: connected (each gets the lines; none can take them from Spark's).
        self._clients: list[socket.socket] = []
        self._pending = False
        self._failing: str | None = None
        self._closed = threading.Event()
        self._alarm: threading.Timer | None = None
        self._frame: Future[DataFrame] | None = None
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(_ACCEPT_WAIT_S)  # so that the accepting thread sees close()
        self.port: int = self._server.getsockname()[1]
        # Taken before the query starts, so a record appended before its first batch is
        # read by that batch and one appended after it moves an end the watch sees.
        self._ends = self._log_ends()
        self._threads = [
            threading.Thread(target=self._accept, name=f"trigger-accept-{name}", daemon=True),
            threading.Thread(target=self._watch, name=f"trigger-watch-{name}", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def prepare(self, spark: Callable[[], SparkSession]) -> None:
        """Build :meth:`dataframe` in the background, from the session ``spark`` returns
        once the JVM is up: the thread joins its group and fences its producer meanwhile
        (on a restart, both took 15 s, and so did the JVM's start with the DataFrame's
        calls into it, one after the other)."""
        self._frame = shared_pool("query-prepare", 2).submit(lambda: self._build(spark()))

    def dataframe(self, spark: SparkSession) -> DataFrame:
        """The streaming DataFrame whose batches this trigger starts (Spark's socket
        source, connected to this trigger): the one :meth:`prepare` built, if any."""
        pending, self._frame = self._frame, None
        return pending.result() if pending is not None else self._build(spark)

    def _build(self, spark: SparkSession) -> DataFrame:
        _quiet_warnings(spark)
        return (
            spark.readStream.format("socket")
            .option("host", "127.0.0.1")
            .option("port", str(self.port))
            .load()
        )

    def wake(self, reason: str = "behind") -> None:
        """Run a batch soon, even without new records; ``reason`` says why (``records``,
        ``behind``, ``alarm``, ``rebalance``, ``watchdog``: see :mod:`.trigger_faults`)."""
        trigger_faults.delay()
        if trigger_faults.dropped(reason):
            log.debug("[trigger %s] a wake-up (%s) dropped by a test hook", self.name, reason)
            return
        self._send()

    def _send(self) -> None:
        """Send one line to every connection (once Spark connects, when none is yet)."""
        with self._lock:
            if not self._clients:
                self._pending = True  # sent once Spark connects
                return
            for client in list(self._clients):
                try:
                    client.send(b"batch\n")
                except BlockingIOError:  # lines it has not read yet: a batch comes anyway
                    continue
                except OSError:  # gone (the query stopped or failed): nobody to wake there
                    self._clients.remove(client)
                    log.debug("[trigger %s] a connection left", self.name)

    def wake_at(self, due_ms: int | None) -> None:
        """Run a batch at ``due_ms`` (epoch ms; a wall-clock punctuator falls due then)
        even when no record arrives; replaces the time set before (None: none)."""
        with self._lock:
            if self._alarm is not None:
                self._alarm.cancel()
                self._alarm = None
            if due_ms is None or self._closed.is_set():
                return
            delay = max(0.0, (due_ms - time.time_ns() // 1_000_000) / 1000)
            self._alarm = threading.Timer(delay, self.wake, args=("alarm",))
            self._alarm.daemon = True
            self._alarm.start()

    def latest_ends(self) -> dict[str, dict[int, int]]:
        """The log end of each partition of every topic watched, as last seen."""
        return self._ends

    def subscribed(self) -> list[str]:
        """Every topic watched: the thread's own and those a pattern found since."""
        with self._lock:
            return list(self._topics)

    def close(self) -> None:
        """Stop watching; close the connection (call after the query stopped)."""
        self._closed.set()
        with self._lock:
            if self._alarm is not None:
                self._alarm.cancel()
            for client in self._clients:
                with contextlib.suppress(OSError):
                    client.close()
            self._clients.clear()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        with contextlib.suppress(OSError):
            self._server.close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    # -- the trigger's threads ---------------------------------------------------------------

    def _accept(self) -> None:
        """Take Spark's connection (its source connects at the query's first batch)."""
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            client.setblocking(False)  # a wake never waits for a reader
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._clients.append(client)
                pending, self._pending = self._pending, False
            if pending:
                self._send()

    def _watch(self) -> None:
        """Every ``poll.ms``: wake when a log-end offset moved or a pattern found a topic."""
        while not self._closed.wait(self.poll_ms / 1000):
            trigger_faults.delay()
            try:
                self._follow_patterns()
                ends = self._log_ends()
            except Exception as exc:  # a storage hiccup: the next check tries again
                failing = str(exc)
                if failing != self._failing:  # once per kind of failure, not every poll
                    log.warning(
                        "[trigger %s] reading the log-end offsets failed (trying again every "
                        "poll.ms): %s",
                        self.name,
                        exc,
                    )
                self._failing = failing
                continue
            self._failing = None
            if ends != self._ends:
                self._ends = ends
                self.wake("records")

    def _follow_patterns(self) -> None:
        if self.patterns is None:
            return
        new = self.patterns.poll(self.subscribed())
        if new:
            with self._lock:
                self._topics = sorted({*self._topics, *new})
            log.info("[trigger %s] pattern sources found %s", self.name, new)

    def _log_ends(self) -> dict[str, dict[int, int]]:
        return {topic: self._reader.end_offsets(topic) for topic in self.subscribed()}


def _quiet_warnings(spark: SparkSession) -> None:
    """Log only the errors of :data:`_QUIET_LOGGERS` (their warnings concern Spark's own
    recovery and trigger interval, neither of which a stream thread relies on)."""
    jvm: Any = getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:
        return
    with contextlib.suppress(Exception):  # not log4j 2: the warnings stay
        for name in _QUIET_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
                name, jvm.org.apache.logging.log4j.Level.ERROR
            )
