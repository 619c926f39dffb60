"""What a stream thread tells about each batch it ran (Spark's ``StreamingQueryProgress``
in this runtime's terms)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from runtime.metrics import ThreadMetrics
from runtime.tasks.contract import FILE, STATS, decode_stats
from runtime.thread.read_plan import BatchReads
from topology.graph.topology import Topology

Positions = Mapping[tuple[str, int], int]


@dataclass(frozen=True)
class BatchProgress:
    """One batch of one stream thread.

    Attributes:
        thread: the thread's transactional id.
        batch_id: Spark's batch id.
        batches: the batches the thread has run (this one included).
        records_in: records the batch read from its input topics.
        records_out: records it wrote to output topics (not repartition or changelog
            topics).
        lag: records left in the thread's input partitions after it.
        commit_ms: its commit phase (ms).
        batch_ms: the whole batch (ms).
    """

    thread: str
    batch_id: int
    batches: int
    records_in: int
    records_out: int
    lag: int
    commit_ms: float
    batch_ms: float

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (for JSON)."""
        return asdict(self)

    def line(self) -> str:
        """One line for a person watching a run."""
        return (
            f"batch {self.batch_id}: in {self.records_in:,} out {self.records_out:,} "
            f"lag {self.lag:,} commit {self.commit_ms:.0f} ms batch {self.batch_ms:.0f} ms"
        )


class BatchReporter:
    """What a stream thread tells about its batches: its metrics (see
    :class:`runtime.metrics.ThreadMetrics`) and a :class:`BatchProgress` to each listener.

    Args:
        topology: the thread's topology (its internal topics are not output).
        application_id: the application.
        thread: the thread's transactional id (its progress' ``thread``).
        sensors: where to record metrics (None: nowhere).
    """

    def __init__(
        self, topology: Topology, application_id: str, thread: str, sensors: ThreadMetrics | None
    ):
        self.thread = thread
        self.sensors = sensors
        #: Told each batch's progress.
        self.listeners: list[Callable[[BatchProgress], None]] = []
        #: Told True when the thread's watchdog finds it stalled, False when it runs again.
        self.stall_listeners: list[Callable[[bool], None]] = []
        #: Whether the thread is stalled now (see :mod:`runtime.thread.watchdog`).
        self.stalled_now = False
        #: When the last batch ended (epoch ms; 0: none yet).
        self.last_batch_ms = 0
        #: Repartition and changelog topics: what a batch writes there is not output.
        self.internal = frozenset(topology.repartition_topic_names(application_id)) | frozenset(
            topology.changelog_topics(application_id).values()
        )
        self.job_seconds = 0.0
        self.records_out = 0

    def joined(self, membership: Any) -> None:
        """Record the member's group joins since last time (rebalance metrics)."""
        if membership is not None and membership.join_seconds:
            joins, membership.join_seconds = membership.join_seconds, []
            if self.sensors is not None:
                self.sensors.rebalanced(joins)

    def reassigned(self, tasks: list[str]) -> None:
        """The thread runs ``tasks`` now: forget the metrics of the others."""
        if self.sensors is not None:
            self.sensors.closed_tasks(tasks)

    def polled(self, reads: BatchReads, seconds: float) -> None:
        """The batch planned ``reads`` in ``seconds``."""
        if self.sensors is not None:
            self.sensors.polled(reads.records, seconds)

    def committing(self) -> None:
        """The batch's job and commit begin."""
        self.job_seconds, self.records_out = 0.0, 0

    def job_done(self, rows: list[Any], seconds: float) -> None:
        """The batch's job returned ``rows`` after ``seconds``: feed the tasks' figures,
        count the records written to output topics."""
        self.job_seconds += seconds
        sensors = self.sensors
        for row in rows:
            kind = row["kind"]
            if kind == STATS and sensors is not None:
                sensors.task_stats(row["task"], *decode_stats(row["value"]))
            elif kind == FILE and row["topic"] not in self.internal:
                self.records_out += row["count"]

    def committed(self, seconds: float) -> None:
        """Positions were committed between batches (at_least_once's commit falling due
        with nothing to read), in ``seconds``."""
        if self.sensors is not None:
            self.sensors.commit.record(seconds * 1000)

    def stalled(self, stalled: bool, counters: Mapping[str, int]) -> None:
        """The thread's watchdog found it stalled (True) or running again (False)."""
        self.stalled_now = stalled
        if self.sensors is not None:
            self.sensors.counters(counters)
        for listener in self.stall_listeners:
            listener(stalled)

    def lags(self, reads: BatchReads, positions: Positions) -> dict[tuple[str, int], int]:
        """Each owned partition's lag (its log end when planned less its position),
        recorded."""
        lags = _lags(reads, positions)
        if self.sensors is not None:
            self.sensors.lagged(lags)
        return lags

    def batch_done(  # noqa: PLR0917 - what one batch tells
        self,
        batch_id: int,
        batches: int,
        reads: BatchReads,
        positions: Positions,
        seconds: float,
        commit_seconds: float | None,
        producers: list[Any],
        counters: Mapping[str, int],
        *,
        committed: bool = True,
    ) -> None:
        """Record the batch's metrics and tell the listeners (``committed``: the batch
        committed its positions, which at_least_once does every ``commit.interval.ms``;
        ``commit_seconds`` is the time it took to write and commit what it did)."""
        self.last_batch_ms = time.time_ns() // 1_000_000
        lags = _lags(reads, positions)
        sensors = self.sensors
        if sensors is not None:
            sensors.batch_done(seconds, commit_seconds if committed else None, lags)
            for producer in producers:
                sensors.producer(producer)
            sensors.counters(counters)
        if not self.listeners:
            return
        progress = BatchProgress(
            thread=self.thread,
            batch_id=batch_id,
            batches=batches,
            records_in=reads.records,
            records_out=self.records_out,
            lag=sum(lags.values()),
            commit_ms=(commit_seconds or 0.0) * 1000,
            batch_ms=seconds * 1000,
        )
        for listener in self.listeners:
            listener(progress)


def _lags(reads: BatchReads, positions: Positions) -> dict[tuple[str, int], int]:
    """Each partition's log end (when the batch was planned) less its position."""
    return {tp: max(end - positions.get(tp, end), 0) for tp, end in reads.log_ends.items()}
