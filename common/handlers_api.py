"""The contract between a task and its exception handlers: what a handler is told, what it
answers, and the names of the headers of a dead-letter record.

A handler is told an :class:`ErrorHandlerContext` and the failed record (a
:class:`RawRecord` as read, the processor's record, or a :class:`ProducerRecord`), and
answers a :class:`Response` (or a bare :class:`Result`). :mod:`common.handlers` describes
the keys that choose the handlers and what each answer does.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, Protocol, TypeAlias

DEAD_LETTER_QUEUE_TOPIC: Final = "errors.dead.letter.queue.topic.name"
HEADER_EXCEPTION: Final = "__streams.errors.exception"
HEADER_MESSAGE: Final = "__streams.errors.message"
HEADER_STACKTRACE: Final = "__streams.errors.stacktrace"
HEADER_TOPIC: Final = "__streams.errors.topic"
HEADER_PARTITION: Final = "__streams.errors.partition"
HEADER_OFFSET: Final = "__streams.errors.offset"

Kind: TypeAlias = Literal["deserialization", "processing", "production"]
Origin: TypeAlias = Literal["key", "value"]
Headers: TypeAlias = tuple[tuple[str, bytes | None], ...]


class Result(enum.Enum):
    """What the task does after a handler ran (Kafka's ``Result``; ``CONTINUE`` is the
    pre-4.1 name of ``RESUME``)."""

    RESUME = "RESUME"
    FAIL = "FAIL"
    RETRY = "RETRY"
    CONTINUE = "RESUME"  # an alias of RESUME


class ProducerRecord(NamedTuple):
    """A record to produce: a dead letter, or the record a sink failed to produce (its
    ``key`` and ``value`` are bytes, except for ``handle_serialization_error``, which gets
    them as the sink received them, unserialized, as Kafka's)."""

    topic: str
    key: Any
    value: Any
    timestamp: int
    headers: Headers = ()
    partition: int | None = None


class RawRecord(NamedTuple):
    """An input record as read, before deserialization (Kafka's
    ``ConsumerRecord<byte[], byte[]>``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class Response:
    """A handler's answer: the :class:`Result` and the dead-letter records to send."""

    result: Result
    dead_letter_queue_records: tuple[ProducerRecord, ...] = ()

    @classmethod
    def resume(cls, records: Iterable[ProducerRecord] | None = None) -> Response:
        """Drop the record and go on (after sending ``records``)."""
        return cls(Result.RESUME, tuple(records or ()))

    @classmethod
    def fail(cls, records: Iterable[ProducerRecord] | None = None) -> Response:
        """Stop the task (``records`` are sent, then abandoned with the batch)."""
        return cls(Result.FAIL, tuple(records or ()))

    @classmethod
    def retry(cls) -> Response:
        """Retry the failed operation (production only; it fails: see :mod:`common.handlers`)."""
        return cls(Result.RETRY)


@dataclass(frozen=True, slots=True)
class ErrorHandlerContext:
    """Where the error happened (Kafka's ``ErrorHandlerContext``).

    ``topic``/``partition``/``offset``/``headers`` are the input record's (None inside a
    punctuator); ``source_raw_key``/``source_raw_value`` are its bytes as read (None when
    unknown: punctuation, cache flushes).
    """

    topic: str | None
    partition: int | None
    offset: int | None
    headers: Headers | None
    processor_node_id: str
    task_id: str
    timestamp: int
    source_raw_key: bytes | None = None
    source_raw_value: bytes | None = None


class DeserializationExceptionHandler(Protocol):
    """Decides about an input record that cannot be deserialized."""

    def handle_error(
        self, context: ErrorHandlerContext, record: RawRecord, exception: Exception
    ) -> Response | Result:
        """Return RESUME to skip the record, FAIL to stop."""
        ...


class ProcessingExceptionHandler(Protocol):
    """Decides about a record whose processing raised (``record`` None: a punctuator)."""

    def handle_error(
        self, context: ErrorHandlerContext, record: Any, exception: Exception
    ) -> Response | Result:
        """Return RESUME to drop the record at the failing node, FAIL to stop."""
        ...


class ProductionExceptionHandler(Protocol):
    """Decides about a record a sink cannot send. A user class may define only one of the
    two methods; the other then fails, as Kafka's defaults."""

    def handle_error(
        self, context: ErrorHandlerContext, record: ProducerRecord, exception: Exception
    ) -> Response | Result:
        """The collector refused the record: RESUME drops it, FAIL stops."""
        ...

    def handle_serialization_error(
        self,
        context: ErrorHandlerContext,
        record: ProducerRecord,
        exception: Exception,
        origin: Origin,
    ) -> Response | Result:
        """The sink's key (``origin`` "key") or value serde failed."""
        ...


def context_prefix(context: ErrorHandlerContext) -> str:
    """Return the log prefix naming where the error happened (task, node, input record)."""
    return (
        f"[task {context.task_id}] node={context.processor_node_id} topic={context.topic} "
        f"partition={context.partition} offset={context.offset}"
    )
