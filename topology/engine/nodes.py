"""Runtime pieces of a task's node graph: the source and sink runtimes, and the wrapping of
user code errors (naming the processor and the function, keeping the cause)."""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from typing import Any

from common.columns import serialize_column
from common.errors import SerializationError, StreamsError, StreamsProcessingError
from common.handlers import Origin, ProducerRecord
from common.serdes import (
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    LongSerde,
    Serde,
    StringSerde,
    serialize_many,
)
from topology.api.options import StreamPartitioner
from topology.api.record import Record
from topology.api.timestamps import TimestampExtractor
from topology.engine.collector import RecordCollector
from topology.engine.columnar import ArrowEntry, Batch
from topology.engine.combine import combine_counts, combine_windowed
from topology.engine.context import Forward, NodeContext
from topology.graph.graph import TopicNameExtractor

_new = tuple.__new__


def describe_function(fn: object) -> str:
    """Return ``'name' (file.py:12)`` for a function, or its type for other callables."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    code = getattr(fn, "__code__", None) or getattr(type(fn).__call__, "__code__", None)
    if code is None:
        return repr(name)
    return f"{name!r} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


def user_error(
    node: str, fn: object, exc: BaseException, what: str = "user function"
) -> StreamsError:
    """Return the error for ``exc`` raised by user code ``fn`` in processor ``node``.

    StreamsErrors (from nodes further down) are returned unchanged.
    """
    if isinstance(exc, StreamsError):
        return exc
    return StreamsProcessingError(
        f"processor {node}: {what} {describe_function(fn)} raised {type(exc).__name__}: {exc}"
    )


def guard(node: str, process: Forward, owner: object) -> Forward:
    """Wrap a Processor-API ``process`` so that its errors name the node (and pass
    StreamsErrors from further down unchanged)."""

    def run(record: Record[Any, Any]) -> None:
        try:
            process(record)
        except StreamsError:
            raise
        except Exception as exc:
            raise user_error(node, owner, exc, "processor") from exc

    return run


class SourceRuntime:
    """A source node in a task: deserializers, timestamp extractor, pre-bound children."""

    __slots__ = (
        "arrow_child",
        "batch_children",
        "children",
        "context",
        "extractor",
        "key_deserialize",
        "key_serde",
        "name",
        "value_deserialize",
        "value_serde",
    )

    def __init__(
        self,
        name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        extractor: TimestampExtractor | None,
        context: NodeContext,
    ) -> None:
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.key_deserialize = key_serde.deserialize
        self.value_deserialize = value_serde.deserialize
        self.extractor = extractor
        self.context = context
        self.children: tuple[Forward, ...] = ()
        #: The children's batch entries when the source runs columnar (else None).
        self.batch_children: tuple[Any, ...] | None = None
        self.arrow_child: ArrowEntry | None = None


#: The task's production error path: ``(node, record, exception, origin, error)``; it
#: returns to drop the output record (RESUME) or raises ``error``.
ProductionErrorCallback = Callable[[str, ProducerRecord, Exception, Origin | None, Exception], None]


_PLAIN_SERDES = (StringSerde, LongSerde, IntegerSerde, DoubleSerde, BytesSerde)


class SinkProcessor:
    """A sink node in a task: serializes and hands records to the collector; a failure to
    serialize or send goes to ``on_error`` (the production exception handler)."""

    __slots__ = (
        "_extractor",
        "_key_serde",
        "_key_serialize",
        "_on_error",
        "_partitioner",
        "_same_serde",
        "_send",
        "_topic",
        "_value_serde",
        "_value_serialize",
        "collector",
        "combine",
        "combine_windows",
        "combining_windows",
        "context",
        "name",
    )

    def __init__(
        self,
        name: str,
        *,
        topic: str | None,
        extractor: TopicNameExtractor | None,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        partitioner: StreamPartitioner | None,
        collector: RecordCollector,
        context: NodeContext,
        on_error: ProductionErrorCallback | None = None,
    ) -> None:
        self.name = name
        self._topic = topic
        self._extractor = extractor
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._same_serde = _equal_serdes(key_serde, value_serde)
        self._key_serialize = key_serde.serialize
        self._value_serialize = value_serde.serialize
        self._partitioner = partitioner
        self.collector = collector
        self._send = collector.send
        self.context = context
        self._on_error = on_error
        #: Whether batches are combined per key (a count's repartition topic).
        self.combine = False
        #: The time windows of the windowed count reading this sink's repartition topic,
        #: whose batches are combined per key and window set while ``combining_windows``
        #: (set for each batch: only where the batch shuffles the topic inside itself).
        self.combine_windows: Any = None
        self.combining_windows = False

    def process(self, record: Record[Any, Any]) -> None:
        """Serialize ``record`` and send it."""
        topic = self._topic
        if topic is None:
            topic = self._extract_topic(record)
        try:
            key = self._key_serialize(topic, record[0])
        except Exception as exc:
            self._serialization_failed(topic, record, exc, "key")  # raises unless dropped
            return
        try:
            value = self._value_serialize(topic, record[1])
        except Exception as exc:
            self._serialization_failed(topic, record, exc, "value")
            return
        partition = None
        if self._partitioner is not None:
            partition = self._choose_partition(topic, record)
        self._deliver(topic, key, value, record[2], record[3], partition)

    @property
    def topic(self) -> str | None:
        """The topic every record goes to (None: a topic extractor names it per record)."""
        return self._topic

    @property
    def batchable(self) -> bool:
        """Whether a batch can be sent whole: one topic, the default partitioner."""
        return self._topic is not None and self._partitioner is None

    def process_batch(self, batch: Batch) -> None:
        """Serialize the batch's keys and values in bulk and send them (a record that
        cannot be serialized: the batch goes record by record, so the production handler
        sees it as the record engine shows it). A sink of a count's repartition topic
        sends the batch combined per key (:mod:`topology.engine.combine`) once every
        record is known to serialize."""
        topic = self._topic
        assert topic is not None
        send_batch = getattr(self.collector, "send_batch", None)
        if self.combine or self.combining_windows:
            same = _same_items(batch.keys, batch.values)
            combined = (
                combine_counts(batch, values_valid=same)
                if self.combine
                else combine_windowed(batch, self.combine_windows, values_valid=same)
            )
            if combined is not None:
                try:
                    if not (self._same_serde and same):
                        self._serialize(self._value_serde, topic, batch.values, send_batch)
                    keys, values = self._serialized(topic, combined, send_batch)
                except Exception:  # the batch goes as it is, its failures and all
                    pass
                else:
                    self._send_serialized(topic, keys, values, combined, send_batch)
                    return
        try:
            keys, values = self._serialized(topic, batch, send_batch)
        except Exception:
            for i in range(len(batch.keys)):
                self.process(
                    _new(
                        Record,
                        (batch.keys[i], batch.values[i], batch.timestamps[i], batch.header(i)),
                    )
                )
            return
        self._send_serialized(topic, keys, values, batch, send_batch)

    @staticmethod
    def _serialize(serde: Serde[Any], topic: str, items: list[Any], send_batch: Any) -> Any:
        if send_batch is None:
            return serialize_many(serde, topic, items)
        return serialize_column(serde, topic, items)  # as Arrow: no bytes object per record

    def _serialized(self, topic: str, batch: Batch, send_batch: Any) -> tuple[Any, Any]:
        """The batch's keys and values serialized (raises what a serializer raises)."""
        keys = self._serialize(self._key_serde, topic, batch.keys, send_batch)
        if self._same_serde and _same_items(batch.keys, batch.values):
            return keys, keys  # the values are the keys (a grouping by value): serialized once
        return keys, self._serialize(self._value_serde, topic, batch.values, send_batch)

    def _send_serialized(
        self, topic: str, keys: Any, values: Any, batch: Batch, send_batch: Any
    ) -> None:
        ts, hs = batch.timestamps, batch.headers
        if send_batch is not None:
            try:
                send_batch(topic, keys, values, ts, hs)
                return
            except Exception:
                if self._on_error is None:
                    raise
            keys, values = keys.to_pylist(), values.to_pylist()
        for i in range(len(keys)):  # one by one: the production handler decides per record
            self._deliver(topic, keys[i], values[i], ts[i], () if hs is None else hs[i], None)

    def _deliver(  # noqa: PLR0917 - a serialized record
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Any,
        partition: int | None,
    ) -> None:
        try:
            self._send(topic, key, value, timestamp, headers, partition)
        except Exception as exc:
            if self._on_error is None:
                raise
            failed = ProducerRecord(topic, key, value, timestamp, headers, partition)
            self._on_error(self.name, failed, exc, None, exc)

    def _serialization_failed(
        self, topic: str, record: Record[Any, Any], exc: Exception, origin: Origin
    ) -> None:
        error = SerializationError(
            f"sink {self.name}: cannot serialize the record's {origin} for topic {topic} "
            f"({type(exc).__name__}: {exc}); give the sink serdes that match the key and "
            "value types (Produced.with_ / Grouped.with_ / Repartitioned.with_)"
        )
        error.__cause__ = exc
        if self._on_error is None:
            raise error
        failed = ProducerRecord(topic, record[0], record[1], record[2], record[3])
        self._on_error(self.name, failed, exc, origin, error)

    def _extract_topic(self, record: Record[Any, Any]) -> str:
        extractor = self._extractor
        assert extractor is not None
        try:
            return extractor(record[0], record[1], self.context)
        except Exception as exc:
            raise user_error(self.name, extractor, exc, "topic extractor") from exc

    def _choose_partition(self, topic: str, record: Record[Any, Any]) -> int | None:
        partitioner = self._partitioner
        assert partitioner is not None
        count = self.collector.partitions_for(topic)
        try:
            partition = partitioner(topic, record[0], record[1], count)
        except Exception as exc:
            raise user_error(self.name, partitioner, exc, "stream partitioner") from exc
        if partition is not None and not 0 <= partition < count:
            raise StreamsProcessingError(
                f"processor {self.name}: stream partitioner {describe_function(partitioner)} "
                f"returned partition {partition}, but topic {topic} has {count} partitions"
            )
        return partition


#: A deserializer function: ``(topic, data) -> value``.
Deserialize = Callable[[str, bytes | None], Any]


def _equal_serdes(a: Any, b: Any) -> bool:
    """Whether two serdes write the same bytes for the same value as key and as value: two
    equal built-in serdes (a user's serde may write keys and values differently, as a
    schema registry's does)."""
    return type(a) in _PLAIN_SERDES and type(a) is type(b) and bool(a == b)


def _same_items(a: list[Any], b: list[Any]) -> bool:
    """Whether two lists hold the very same objects (by identity: no ``__eq__`` runs)."""
    return a is b or (len(a) == len(b) and all(map(operator.is_, a, b)))
