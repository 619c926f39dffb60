"""A task's processing entry points: how raw input reaches the processing of its topic's
source, measured as the task's ``process`` figures.

:class:`~topology.engine.task.StreamTask` chooses one of these once, when it is built
(:func:`task_input`), and its ``process``, ``process_batch`` and ``process_columns``
delegate to it:

- :class:`TaskInput`: records and columns as they are;
- :class:`RawKeepingInput`: keeps each record's input bytes first, for the dead letters of
  an exception handler that needs them;
- :class:`CombinedInput`: the task reads records a count's repartition sink combined per
  key (:mod:`topology.engine.combine`); a combined record counts as the records it
  stands for (:class:`CombinedRawKeepingInput` keeps the raw bytes too).

Each source's records then run as that source's processing object runs them (record by
record or columnar, chosen when the task is wired, :mod:`topology.engine.wiring`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from common.errors import CombinedRecordsLateError
from topology.api.record import Headers, InputRecord
from topology.engine.columnar import InputColumns, paused_collection
from topology.engine.combine import (
    combinable_topics,
    expansion,
    take_rows,
    weights_of,
    windowed_topics,
)
from topology.engine.task_metrics import NODE, PROCESS

#: A tuple type's instance without its Python-level ``__new__`` (the columns' call path).
_new = tuple.__new__

if TYPE_CHECKING:
    from topology.engine.record_processing import RecordProcessing
    from topology.engine.task import StreamTask


class TaskInput:
    """Raw records and columns to the processing of their topic's source.

    The call is measured as a whole (the task's ``process`` figures): a record processed
    inside a measured call (a batch, columns falling back to one record at a time) is
    not measured again.
    """

    def __init__(self, task: StreamTask) -> None:
        self._task = task
        self._measuring = False
        #: How many records the columns being processed stand for, when that is not their
        #: count (combined records); None otherwise.
        self.represented: int | None = None

    def process(  # noqa: PLR0917 - the per-record entry point
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers = (),
        offset: int = -1,
        partition: int | None = None,
    ) -> None:
        """Process one raw input record to completion (all nodes downstream)."""
        task = self._task
        part = task.partition if partition is None else partition
        if self._measuring:  # inside a call that measures itself
            task.processing_for(topic).process_raw(
                topic, part, key, value, timestamp, headers, offset
            )
            return
        self._measuring = True
        task.now_ms = task.wall_clock_ms()
        start = time.perf_counter_ns()
        try:
            task.processing_for(topic).process_raw(
                topic, part, key, value, timestamp, headers, offset
            )
        finally:
            self._measuring = False
            task.stats.record(PROCESS, "", 1, time.perf_counter_ns() - start)

    def process_batch(self, records: Iterable[InputRecord]) -> int:
        """Process raw records in order (any topics of the task); return how many."""
        task = self._task
        process = self.process
        count = 0
        self._measuring = True
        task.now_ms = task.wall_clock_ms()
        start = time.perf_counter_ns()
        try:
            for rec in records:
                process(rec[0], rec[4], rec[5], rec[3], rec[6], rec[2], rec[1])
                count += 1
        finally:
            self._measuring = False
            task.stats.record(PROCESS, "", count, time.perf_counter_ns() - start)
        return count

    @paused_collection
    def process_columns(  # noqa: PLR0917 - columns in record order
        self,
        topic: str,
        partition: int,
        keys: Any,
        values: Any,
        timestamps: Any,
        offsets: Any,
        headers: Sequence[Headers] | None = None,
    ) -> int:
        """Process one topic-partition's records given as columns; return the count.
        Measured as a whole: the task's ``process`` figures (records, time), the source
        node's end-to-end latency, and on DEBUG its records."""
        columns = _new(InputColumns, (topic, partition, keys, values, timestamps, offsets, headers))
        task = self._task
        processing = task.processing_for(columns.topic)
        task.now_ms = now = task.wall_clock_ms()
        self._measuring, self.represented = True, None
        start = time.perf_counter_ns()
        count = 0
        try:
            # a combined record's weight travels in its headers: none, nothing combined
            if columns.headers is None:
                count = processing.process_columns(columns)
            else:
                count = self.columns(processing, columns)
        finally:
            self._measuring = False
            # combined records count as the records they stand for
            records = count if self.represented is None else self.represented
            stats = task.stats
            stats.record(PROCESS, "", records, time.perf_counter_ns() - start)
        if records:
            name = processing.source.name
            stats.e2e(name, columns.timestamps, now)
            if stats.debug:
                stats.record(NODE, name, records, 0.0)
        return count

    def columns(self, processing: RecordProcessing, columns: InputColumns) -> int:
        """Run the columns through their source's ``processing`` (unmeasured)."""
        return processing.process_columns(columns)


class RawKeepingInput(TaskInput):
    """A task's entry points that keep each record's input bytes (``task.raw_input``)
    for an exception handler's dead letters (columns keep theirs anyway)."""

    def process(  # noqa: PLR0917 - the per-record entry point
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers = (),
        offset: int = -1,
        partition: int | None = None,
    ) -> None:
        """Keep the record's input bytes, then process it."""
        self._task.raw_input = (topic, offset, key, value)
        super().process(topic, key, value, timestamp, headers, offset, partition)


class CombinedInput(TaskInput):
    """A task's entry points when it reads topics whose records may come combined
    (:mod:`topology.engine.combine`): a combined record counts as the records it stands
    for, inside Arrow with its weight when its source's count takes the columns whole,
    else expanded into that many records. A windowed count's combined records are
    counted inside Arrow only: otherwise :class:`~common.errors.CombinedRecordsLateError`
    says the batch runs again uncombined.

    Args:
        task: the task.
        weighted: the topics whose records may come combined.
        windowed: those of them a windowed count reads.
    """

    def __init__(
        self, task: StreamTask, weighted: frozenset[str], windowed: frozenset[str]
    ) -> None:
        super().__init__(task)
        self._weighted = weighted
        self._windowed = windowed

    def process(  # noqa: PLR0917 - the per-record entry point
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers = (),
        offset: int = -1,
        partition: int | None = None,
    ) -> None:
        """Process a combined record as the records it stands for, one at a time."""
        many = 1
        if headers and topic in self._weighted:
            split = weights_of((headers,))
            if split is not None:
                if topic in self._windowed:
                    raise _late(self._task.task_id, topic, "one record at a time")
                many, headers = split[0][0], split[1][0]
        for _ in range(many):
            super().process(topic, key, value, timestamp, headers, offset, partition)

    def columns(self, processing: RecordProcessing, columns: InputColumns) -> int:
        """Count combined columns inside Arrow with their weights, or expanded."""
        topic, headers = columns.topic, columns.headers
        split = None
        if headers is not None and topic in self._weighted:
            split = weights_of(headers)
        if split is None:
            return super().columns(processing, columns)
        weights, stripped = split
        plain = not any(stripped)
        if plain and processing.process_arrow(columns._replace(headers=None), weights):
            self.represented = int(sum(weights))
            return len(weights)
        if topic in self._windowed:
            raise _late(self._task.task_id, topic, "by the usual path")
        index = expansion(weights)
        self.columns(
            processing,
            InputColumns(
                topic,
                columns.partition,
                take_rows(columns.keys, index),
                take_rows(columns.values, index),
                take_rows(columns.timestamps, index),
                take_rows(columns.offsets, index),
                None if plain else [stripped[i] for i in index.tolist()],
            ),
        )
        self.represented = int(sum(weights))
        return len(weights)


class CombinedRawKeepingInput(CombinedInput, RawKeepingInput):
    """:class:`CombinedInput` keeping each record's input bytes (:class:`RawKeepingInput`)."""


def task_input(task: StreamTask) -> TaskInput:
    """Choose ``task``'s entry points, once: whether ``process`` keeps each record's input
    bytes (only when an exception handler needs them), and whether the task reads topics
    whose records may come combined (a count's repartition topic; a windowed count's are
    combined inside a batch only, counted inside Arrow when no record of the batch is
    late, else the batch runs again uncombined)."""
    topology, app = task.topology, task.application_id
    own = set(topology.source_topics(task.subtopology.id, app))
    windowed = windowed_topics(topology, app) & own
    weighted = (combinable_topics(topology, app) & own) | windowed
    keeps_raw = task.errors.handlers.needs_raw_input
    if weighted:
        cls = CombinedRawKeepingInput if keeps_raw else CombinedInput
        return cls(task, weighted, windowed)
    return RawKeepingInput(task) if keeps_raw else TaskInput(task)


def _late(task_id: str, topic: str, how: str) -> CombinedRecordsLateError:
    return CombinedRecordsLateError(
        f"[task {task_id}] records of {topic} came combined per key and window and must be "
        f"counted {how}: the batch runs again without combining"
    )
