"""The columnar engine for one source of a task: :class:`ColumnarProcessing` runs a
topic-partition's records of a poll node by node as batches (see
:mod:`topology.engine.columnar`), or hands a count its raw Arrow columns.

Chosen per source when the task is wired (:mod:`topology.engine.wiring`), for a source
whose records may run columnar (:func:`~topology.engine.columnar.columnar_source`). What
cannot run as a batch (a timestamp extractor, a negative timestamp) runs one record at a
time, as :class:`~topology.engine.record_processing.RecordProcessing` runs it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from common.columns import int_list
from topology.engine.columnar import Batch, BatchInput, InputColumns
from topology.engine.nodes import SourceRuntime
from topology.engine.record_processing import RecordProcessing
from topology.engine.task_metrics import NODE

if TYPE_CHECKING:
    from topology.engine.task import StreamTask


class ColumnarProcessing(RecordProcessing):
    """How the records of ``source`` run in ``task``: as batches.

    Args:
        task: the task (its record context, stream time, consumed offsets).
        source: the source node, wired with its children's batch entries.
    """

    def __init__(self, task: StreamTask, source: SourceRuntime) -> None:
        super().__init__(task, source)
        self._batch_children = source.batch_children or ()
        self._arrow_child = source.arrow_child
        #: Whether the node taking the raw columns forwards an update per input record,
        #: each with its row's record context (then the rows are given, as for a batch).
        self._arrow_rows = getattr(
            getattr(source.arrow_child, "__self__", None), "forwards_rows", None
        )
        #: The source's children inside the sub-topology (measured when one takes the raw
        #: columns whole).
        self._kids = tuple(task.topology.children.get(source.name, ()))

    def process_arrow(self, columns: InputColumns, weights: Sequence[int] | None = None) -> bool:
        """Hand the raw Arrow columns to the source's only child (a node that takes them
        whole, :func:`~topology.engine.columnar.arrow_entry`) when nothing cuts the batch:
        no timestamp extractor, no headers, no stream-time punctuation due. ``weights``:
        how many records each row stands for (combined records). Return whether the node
        took them (else the records go the usual way)."""
        topic, partition, keys, values, timestamps, offsets, headers = columns
        arrow_child = self._arrow_child
        if (
            arrow_child is None
            or not hasattr(keys, "cast")
            or not hasattr(values, "cast")
            or self._extractor is not None
            or headers is not None
            or not len(timestamps)
        ):
            return False
        ts = timestamps if hasattr(timestamps, "cast") else pa.array(timestamps, pa.int64())
        low, high = (v.as_py() for v in pc.min_max(ts).values())
        if low is None or low < 0:
            return False
        task = self.task
        before = task.stream_time
        final = max(high, before)
        if final >= self.punctuations.next_stream_time:
            return False
        last_offset = _last(offsets)
        task.current_topic, task.current_partition = topic, partition
        task.current_offset, task.current_timestamp = last_offset, _last(ts)
        task.current_headers = ()
        task.stream_time = final
        source = self.source
        if self._arrow_rows is not None and self._arrow_rows():  # an update per record
            task.batch_input = BatchInput(int_list(offsets), None, int_list(ts), before)
        try:
            took = arrow_child(
                topic, keys, values, ts, source.key_serde, source.value_serde, weights
            )
        finally:
            task.batch_input = None
        if not took:
            task.stream_time = before
            return False
        if task.stats.debug:  # the child took the columns whole
            for kid in self._kids:
                task.stats.record(NODE, kid, len(ts), 0.0)
        task.consumed_offsets[(topic, partition)] = last_offset + 1
        return True

    def run_columns(self, columns: InputColumns) -> None:
        """Run deserialized columns' records through the source's nodes as batches, cut
        where a stream-time punctuator falls due (it fires after the record that brings
        stream time to it); one record at a time where a timestamp extractor or a
        negative timestamp needs it."""
        if self._extractor is not None or not columns.keys or min(columns.timestamps) < 0:
            super().run_columns(columns)
            return
        topic, partition, keys, values, timestamps, offsets, headers = columns
        task, punctuations = self.task, self.punctuations
        hs = None if headers is None else [tuple(h) for h in headers]
        given = BatchInput(offsets, hs, timestamps, task.stream_time)
        n, start = len(keys), 0
        final_time = max(timestamps)
        final_time = max(final_time, task.stream_time)
        task.current_topic, task.current_partition = topic, partition
        ts = timestamps if type(timestamps) is list else list(timestamps)
        while start < n:
            end = n
            due = punctuations.next_stream_time
            if final_time >= due:  # cut after the record that brings stream time to it
                end = bisect.bisect_left(given.stream_times, due, start) + 1
            whole = start == 0 and end == n
            batch = Batch(
                keys if whole else keys[start:end],
                values if whole else values[start:end],
                ts if whole else ts[start:end],
                None if hs is None else hs[start:end],
                range(start, end),
            )
            last = end - 1
            task.current_offset, task.current_timestamp = offsets[last], ts[last]
            task.current_headers = () if hs is None else hs[last]
            task.stream_time = final_time if end == n else given.stream_times[last]
            task.batch_input = given
            try:
                for child in self._batch_children:
                    child(batch)
            finally:
                task.batch_input = None
            if task.stream_time >= punctuations.next_stream_time:
                punctuations.punctuate_stream_time(task.stream_time)
                task.current_topic, task.current_partition = topic, partition
            start = end


def _last(column: Any) -> int:
    """The last element of an int column (Arrow or a sequence)."""
    item = column[len(column) - 1]
    return int(item.as_py() if hasattr(item, "as_py") else item)
