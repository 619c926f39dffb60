"""The record engine for one source of a task: :class:`RecordProcessing` runs each record
through every node below the source before the next record.

A task chooses one processing object per source when it is wired
(:mod:`topology.engine.wiring`): this one, or
:class:`~topology.engine.columnar_processing.ColumnarProcessing` for a source whose records
run columnar. The object holds what its source's records need, bound once: the children's
entries, the timestamp extractor, the deserializers, the task's punctuation queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from common.columns import deserialize_column, int_list
from common.errors import SerializationError, StreamsError
from common.handlers import RawRecord
from topology.api.record import ConsumedRecord, Headers, make_record
from topology.api.timestamps import invalid_timestamp
from topology.engine.columnar import InputColumns
from topology.engine.nodes import SourceRuntime, user_error

if TYPE_CHECKING:
    from topology.engine.punctuation import PunctuationQueue
    from topology.engine.task import StreamTask


class RecordProcessing:
    """How the records of ``source`` run in ``task``: one at a time.

    Args:
        task: the task (its record context, stream time, consumed offsets).
        source: the source node, wired (its children bound).
    """

    def __init__(self, task: StreamTask, source: SourceRuntime) -> None:
        self.task = task
        self.source = source
        self.punctuations: PunctuationQueue = task.punctuations
        self._extractor = source.extractor
        self._children = source.children
        #: A node that takes the source's raw Arrow columns whole (columnar only).
        self._arrow_child: Any = None
        #: The highest timestamp extracted per topic-partition (what a timestamp
        #: extractor gets as partition time).
        self._partition_time: dict[tuple[str, int], int] = {}

    def process_arrow(self, columns: InputColumns, weights: Sequence[int] | None = None) -> bool:
        """Hand raw Arrow columns to a node that takes them whole: none does here (see
        ColumnarProcessing); return False, the records go the usual way."""
        return False

    def process_raw(  # noqa: PLR0917 - a raw record's fields
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        offset: int,
    ) -> None:
        """Deserialize one raw record and run it (a record that cannot be deserialized
        goes to the deserialization handler); mark its offset consumed."""
        source, task = self.source, self.task
        try:
            k = source.key_deserialize(topic, key)
            v = source.value_deserialize(topic, value)
        except Exception as exc:
            raw = RawRecord(topic, partition, offset, timestamp, key, value, headers)
            task.errors.deserialization_failed(source.name, raw, exc)  # raises unless skipped
        else:
            self.run(topic, partition, k, v, timestamp, headers, offset)
        task.consumed_offsets[(topic, partition)] = offset + 1

    def process_columns(self, columns: InputColumns) -> int:
        """Hand the raw columns to a node that takes them whole, when there is one (see
        :meth:`process_arrow`); else deserialize them in bulk and run their records (when
        a record cannot be deserialized, every record goes one at a time through the
        task's ``process``, whose handler decides about the bad ones). Return the count."""
        if self._arrow_child is not None and self.process_arrow(columns):
            return len(columns.timestamps)
        task, source = self.task, self.source
        topic, partition, keys, values, timestamps, offsets, headers = columns
        timestamps, offsets = int_list(timestamps), int_list(offsets)
        task.raw_columns = (topic, offsets, keys, values)
        try:
            ks = deserialize_column(source.key_serde, topic, keys)
            vs = deserialize_column(source.value_serde, topic, values)
        except SerializationError:
            keys, values = _pylist(keys), _pylist(values)
            task.raw_columns = (topic, offsets, keys, values)
            for i in range(len(keys)):
                hs = () if headers is None else tuple(headers[i])
                task.process(topic, keys[i], values[i], timestamps[i], hs, offsets[i], partition)
            return len(keys)
        self.run_columns(
            _new(InputColumns, (topic, partition, ks, vs, timestamps, offsets, headers))
        )
        if offsets:
            task.consumed_offsets[(topic, partition)] = offsets[-1] + 1
        return len(ks)

    def run_columns(self, columns: InputColumns) -> None:
        """Run deserialized columns' records, one at a time."""
        topic, partition, keys, values, timestamps, offsets, headers = columns
        run = self.run
        no_headers: Headers = ()
        for i in range(len(keys)):
            run(
                topic,
                partition,
                keys[i],
                values[i],
                timestamps[i],
                no_headers if headers is None else tuple(headers[i]),
                offsets[i],
            )

    def run(  # noqa: PLR0917 - hot path
        self,
        topic: str,
        partition: int,
        key: Any,
        value: Any,
        timestamp: int,
        headers: Headers,
        offset: int,
    ) -> None:
        """Run one deserialized record through every node below the source, then the
        stream-time punctuators it brings due."""
        extractor = self._extractor
        task = self.task
        if extractor is None:
            if timestamp < 0:
                raise invalid_timestamp(topic, partition, offset, timestamp)
        else:
            timestamp = self._extract(
                extractor, topic, partition, offset, timestamp, key, value, headers
            )
            if timestamp < 0:
                task.skipped_records += 1
                return
        task.current_topic = topic
        task.current_partition = partition
        task.current_offset = offset
        task.current_headers = headers
        task.current_timestamp = timestamp
        if timestamp > task.stream_time:  # noqa: PLR1730 - cheaper than max() per record
            task.stream_time = timestamp
        record = make_record(key, value, timestamp, headers)
        for child in self._children:
            child(record)
        punctuations = self.punctuations
        if task.stream_time >= punctuations.next_stream_time:
            punctuations.punctuate_stream_time(task.stream_time)

    def _extract(  # noqa: PLR0917 - hot path
        self,
        extractor: Any,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        key: Any,
        value: Any,
        headers: Headers,
    ) -> int:
        tp = (topic, partition)
        partition_time = self._partition_time.get(tp, -1)
        consumed = ConsumedRecord(topic, partition, offset, timestamp, key, value, headers)
        try:
            ts: int = extractor.extract(consumed, partition_time)
        except StreamsError:
            raise
        except Exception as exc:
            raise user_error(f"source of {topic}", extractor, exc, "timestamp extractor") from exc
        if ts > partition_time:
            self._partition_time[tp] = ts
        return ts


#: A tuple type's instance without its Python-level ``__new__`` (once per batch).
_new = tuple.__new__


def _pylist(column: Any) -> Sequence[Any]:
    """A column as a Python sequence (Arrow columns converted)."""
    to_pylist = getattr(column, "to_pylist", None)
    items: Sequence[Any] = column if to_pylist is None else to_pylist()
    return items
