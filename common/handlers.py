"""Kafka's exception handlers: what a task does with a record it cannot deserialize,
process or produce (KIP-1033 and KIP-1034, as in Kafka Streams 4.1).

=====================================  ======================================  ============
key                                    consulted when                          default
=====================================  ======================================  ============
``deserialization.exception.handler``  a source cannot deserialize a record    log-and-fail
``processing.exception.handler``       a processor or a punctuator raises      log-and-fail
``production.exception.handler``       a sink cannot serialize or send         log-and-fail
=====================================  ======================================  ============

A value is a short name (``log-and-fail``, ``log-and-continue``), Kafka's class name
(``LogAndContinueExceptionHandler``, also fully qualified), or the import path of a user
class (``pkg.module.Name`` or ``pkg.module:Name``), checked when the configuration loads.

A handler answers with a :class:`Response`: ``RESUME`` drops the record and counts it in the
task's ``dropped-records-total``; ``FAIL`` stops the task with an error naming the record;
``RETRY`` (production only) is ``FAIL`` here, as Kafka does for non-retriable errors, and
no error a sink meets here is retriable. A response may carry dead-letter records; with
``errors.dead.letter.queue.topic.name`` set, the built-in handlers attach one: the raw input
record (key, value, timestamp, headers) plus the ``__streams.errors.*`` headers.

Dead-letter records go through the task's collector, so the runtime stages them in the
batch's transaction: they become visible exactly when the batch's outputs and positions do.
After ``FAIL`` the batch is abandoned and its dead letters with it (as Kafka under
exactly-once; Kafka under at-least-once would have sent them).

Example (a user handler, configured as ``processing.exception.handler``)::

    class SkipValueErrors:
        def handle_error(self, context, record, exception):
            if isinstance(exception, ValueError):
                return Response.resume()
            return Response.fail()
"""

from __future__ import annotations

import enum
import importlib
import logging
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, Protocol, TypeAlias

from common.errors import ConfigError, StreamsError

__all__ = [
    "DEAD_LETTER_QUEUE_TOPIC",
    "HEADER_EXCEPTION",
    "HEADER_MESSAGE",
    "HEADER_OFFSET",
    "HEADER_PARTITION",
    "HEADER_STACKTRACE",
    "HEADER_TOPIC",
    "DefaultProductionExceptionHandler",
    "DeserializationExceptionHandler",
    "ErrorHandlerContext",
    "ExceptionHandlers",
    "LogAndContinueExceptionHandler",
    "LogAndContinueProcessingExceptionHandler",
    "LogAndContinueProductionExceptionHandler",
    "LogAndFailExceptionHandler",
    "LogAndFailProcessingExceptionHandler",
    "ProcessingExceptionHandler",
    "ProducerRecord",
    "ProductionExceptionHandler",
    "RawRecord",
    "Response",
    "Result",
    "build_dead_letter_queue_record",
    "check_handler",
    "load_handler",
]

log = logging.getLogger(__name__)

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
        """Retry the failed operation (production only; here it fails: see the module)."""
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


# -- dead-letter records -------------------------------------------------------------------


def exception_name(exc: BaseException) -> str:
    """Return the exception's qualified class name (``builtins.ValueError``)."""
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


def build_dead_letter_queue_record(
    topic: str,
    key: bytes | None,
    value: bytes | None,
    context: ErrorHandlerContext,
    exception: BaseException,
) -> ProducerRecord:
    """Return the dead letter of a failed record: ``key``/``value`` (normally the raw
    input's), the input's headers, then the error headers (class, message, stack trace,
    and the input's topic, partition and offset), as Kafka's ``ExceptionHandlerUtils``."""
    trace = "".join(traceback.format_exception(exception))
    errors = (
        (HEADER_EXCEPTION, exception_name(exception)),
        (HEADER_MESSAGE, str(exception)),
        (HEADER_STACKTRACE, trace),
        (HEADER_TOPIC, str(context.topic)),
        (HEADER_PARTITION, str(context.partition)),
        (HEADER_OFFSET, str(context.offset)),
    )
    headers = tuple(context.headers or ()) + tuple((k, v.encode()) for k, v in errors)
    return ProducerRecord(topic, key, value, context.timestamp, headers)


class _BuiltIn:
    """Reads ``errors.dead.letter.queue.topic.name`` in ``configure`` (Kafka's
    ``Configurable``) and builds the dead letter of a failed record when it is set."""

    def __init__(self) -> None:
        self.dead_letter_queue_topic: str | None = None

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Remember the dead-letter topic (empty: none)."""
        self.dead_letter_queue_topic = str(configs.get(DEAD_LETTER_QUEUE_TOPIC) or "") or None

    def dead_letters(
        self, context: ErrorHandlerContext, exception: Exception
    ) -> tuple[ProducerRecord, ...]:
        """Return the dead letter of the failed input record, or nothing without a DLQ."""
        topic = self.dead_letter_queue_topic
        if topic is None:
            return ()
        key, value = context.source_raw_key, context.source_raw_value
        return (build_dead_letter_queue_record(topic, key, value, context, exception),)


def _where(context: ErrorHandlerContext) -> str:
    return (
        f"[task {context.task_id}] node={context.processor_node_id} topic={context.topic} "
        f"partition={context.partition} offset={context.offset}"
    )


class LogAndFailExceptionHandler(_BuiltIn):
    """Deserialization: log the error and stop (the default)."""

    def handle_error(
        self, context: ErrorHandlerContext, record: RawRecord, exception: Exception
    ) -> Response:
        """Log at ERROR and fail."""
        log.error("%s deserialization failed; failing: %s", _where(context), exception)
        return Response.fail(self.dead_letters(context, exception))


class LogAndContinueExceptionHandler(_BuiltIn):
    """Deserialization: log the error, skip the record, go on."""

    def handle_error(
        self, context: ErrorHandlerContext, record: RawRecord, exception: Exception
    ) -> Response:
        """Log at WARNING and resume."""
        log.warning("%s deserialization failed; skipping: %s", _where(context), exception)
        return Response.resume(self.dead_letters(context, exception))


class LogAndFailProcessingExceptionHandler(_BuiltIn):
    """Processing: log the error and stop (the default)."""

    def handle_error(
        self, context: ErrorHandlerContext, record: Any, exception: Exception
    ) -> Response:
        """Log at ERROR and fail."""
        log.error("%s processing failed; failing: %r", _where(context), exception)
        return Response.fail(self.dead_letters(context, exception))


class LogAndContinueProcessingExceptionHandler(_BuiltIn):
    """Processing: log the error, drop the record at the failing node, go on."""

    def handle_error(
        self, context: ErrorHandlerContext, record: Any, exception: Exception
    ) -> Response:
        """Log at WARNING and resume."""
        log.warning("%s processing failed; dropping: %r", _where(context), exception)
        return Response.resume(self.dead_letters(context, exception))


class DefaultProductionExceptionHandler(_BuiltIn):
    """Production: stop on every error (the default, as Kafka's)."""

    def handle_error(
        self, context: ErrorHandlerContext, record: ProducerRecord, exception: Exception
    ) -> Response:
        """Fail."""
        return Response.fail(self.dead_letters(context, exception))

    def handle_serialization_error(
        self,
        context: ErrorHandlerContext,
        record: ProducerRecord,
        exception: Exception,
        origin: Origin,
    ) -> Response:
        """Fail."""
        return Response.fail(self.dead_letters(context, exception))


class LogAndContinueProductionExceptionHandler(_BuiltIn):
    """Production: log the error, drop the output record, go on (KIP-1348's proposal;
    Kafka itself ships no such handler)."""

    def handle_error(
        self, context: ErrorHandlerContext, record: ProducerRecord, exception: Exception
    ) -> Response:
        """Log at WARNING and resume."""
        log.warning("%s cannot send to %s; dropping: %s", _where(context), record.topic, exception)
        return Response.resume(self.dead_letters(context, exception))

    def handle_serialization_error(
        self,
        context: ErrorHandlerContext,
        record: ProducerRecord,
        exception: Exception,
        origin: Origin,
    ) -> Response:
        """Log at WARNING and resume."""
        log.warning(
            "%s cannot serialize the %s for %s; dropping: %s",
            _where(context),
            origin,
            record.topic,
            exception,
        )
        return Response.resume(self.dead_letters(context, exception))


# -- names ---------------------------------------------------------------------------------

_KAFKA: Final = "org.apache.kafka.streams.errors."
_BUILT_INS: Final[dict[Kind, dict[str, type[_BuiltIn]]]] = {
    "deserialization": {
        "log-and-fail": LogAndFailExceptionHandler,
        "log-and-continue": LogAndContinueExceptionHandler,
    },
    "processing": {
        "log-and-fail": LogAndFailProcessingExceptionHandler,
        "log-and-continue": LogAndContinueProcessingExceptionHandler,
    },
    "production": {
        "log-and-fail": DefaultProductionExceptionHandler,
        "log-and-continue": LogAndContinueProductionExceptionHandler,
    },
}
_METHODS: Final[dict[Kind, tuple[str, ...]]] = {
    "deserialization": ("handle_error",),
    "processing": ("handle_error",),
    "production": ("handle_error", "handle_serialization_error"),
}
#: What each handler key allows, for configuration errors.
ALLOWED: Final = {
    kind: "log-and-fail, log-and-continue"
    + (" (log-and-fail is also called default)" if kind == "production" else "")
    + f", Kafka's class names ({', '.join(c.__name__ for c in names.values())}), or the "
    f"import path (pkg.module.Name or pkg.module:Name) of a class with "
    f"{' and/or '.join(_METHODS[kind])}"
    for kind, names in _BUILT_INS.items()
}


def _short_name(kind: Kind, value: str) -> str | None:
    """Return the built-in short name ``value`` stands for, or None for a user path."""
    text = value.strip()
    short = text.lower().replace("_", "-")
    names = _BUILT_INS[kind]
    if short in names:
        return short
    if kind == "production" and short == "default":
        return "log-and-fail"
    simple = text.removeprefix(_KAFKA)
    for name, cls in names.items():
        if simple == cls.__name__:
            return name
    return None


def _import(path: str) -> Any:
    module_name, sep, attr_path = path.partition(":") if ":" in path else path.rpartition(".")
    if not module_name or not sep or not attr_path:
        raise ValueError("not a built-in name nor an import path")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"cannot import {module_name} ({type(exc).__name__}: {exc})") from exc
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module_name} has no attribute {attr_path}")
        obj = getattr(obj, part)
    return obj


def _instantiate(kind: Kind, obj: Any, path: str) -> Any:
    methods = _METHODS[kind]
    has_method = any(callable(getattr(obj, m, None)) for m in methods)
    if isinstance(obj, type) or (callable(obj) and not has_method):
        try:
            obj = obj()
        except Exception as exc:
            raise ValueError(
                f"calling {path} with no arguments failed ({type(exc).__name__}: {exc})"
            ) from exc
    if not any(callable(getattr(obj, m, None)) for m in methods):
        raise ValueError(
            f"{path} gives a {type(obj).__name__}, which has no {' or '.join(methods)}"
        )
    return obj


def check_handler(kind: Kind, value: str) -> str:
    """Return the canonical form of a handler key's value (a short name, or the import path
    unchanged); raise ValueError saying why the value is refused (its class cannot be
    imported, cannot be built with no arguments, or lacks the handler method)."""
    short = _short_name(kind, value)
    if short is not None:
        return short
    path = value.strip()
    _instantiate(kind, _import(path), path)
    return path


def load_handler(kind: Kind, value: str, configs: Mapping[str, Any]) -> Any:
    """Build the handler a configuration value names and ``configure(configs)`` it.

    Raises:
        ConfigError: the value is refused (see :func:`check_handler`).
    """
    short = _short_name(kind, value)
    try:
        handler = (
            _BUILT_INS[kind][short]()
            if short is not None
            else _instantiate(kind, _import(value.strip()), value.strip())
        )
    except ValueError as exc:
        raise ConfigError(f"{kind}.exception.handler: {exc} (got {value!r})") from exc
    configure = getattr(handler, "configure", None)
    if callable(configure):
        configure(configs)
    return handler


# -- the task's bundle -------------------------------------------------------------------


class ExceptionHandlers:
    """A task's three handlers, called with the checks Kafka makes around them.

    ``resumes_processing``: processing errors must be handled where they happen (a handler
    that may resume, or dead letters to build), so the task wraps every processor node;
    otherwise a processing error simply stops the task and nothing wraps the hot path.
    ``needs_raw_input``: some handler may need the input record's bytes.
    """

    def __init__(self, configs: Mapping[str, Any]) -> None:
        names: dict[Kind, str] = {
            kind: str(configs.get(f"{kind}.exception.handler") or "log-and-fail")
            for kind in ("deserialization", "processing", "production")
        }
        self.names = names
        self.deserialization = load_handler("deserialization", names["deserialization"], configs)
        self.processing = load_handler("processing", names["processing"], configs)
        self.production = load_handler("production", names["production"], configs)
        self.dead_letter_queue_topic = str(configs.get(DEAD_LETTER_QUEUE_TOPIC) or "") or None
        defaults = all(_short_name(k, n) == "log-and-fail" for k, n in names.items())
        self.needs_raw_input = self.dead_letter_queue_topic is not None or not defaults
        self.resumes_processing = self.dead_letter_queue_topic is not None or (
            type(self.processing) is not LogAndFailProcessingExceptionHandler
        )

    def on_deserialization_error(
        self, context: ErrorHandlerContext, record: RawRecord, exc: Exception
    ) -> Response:
        """Ask the deserialization handler."""
        return self._call(
            "deserialization", self.deserialization.handle_error, context, record, exc
        )

    def on_processing_error(
        self, context: ErrorHandlerContext, record: Any, exc: Exception
    ) -> Response:
        """Ask the processing handler (``record`` None: a punctuator failed)."""
        return self._call("processing", self.processing.handle_error, context, record, exc)

    def on_production_error(
        self,
        context: ErrorHandlerContext,
        record: ProducerRecord,
        exc: Exception,
        origin: Origin | None,
    ) -> Response:
        """Ask the production handler (``origin`` None: sending failed, else serializing
        the key or the value); a missing method fails, as Kafka's defaults."""
        method = "handle_error" if origin is None else "handle_serialization_error"
        fn = getattr(self.production, method, None)
        if not callable(fn):
            return Response.fail()
        if origin is None:
            return self._call("production", fn, context, record, exc)
        return self._call("production", fn, context, record, exc, origin)

    def _call(
        self, kind: Kind, fn: Callable[..., Any], context: ErrorHandlerContext, *args: Any
    ) -> Response:
        try:
            answer = fn(context, *args)
        except Exception as exc:
            raise StreamsError(
                f"{_where(context)}: the {kind} exception handler {self.names[kind]} raised "
                f"{type(exc).__name__}: {exc} (fatal user code error in the error callback)"
            ) from exc
        if isinstance(answer, Result):
            answer = Response(answer)
        if not isinstance(answer, Response) or (
            answer.result is Result.RETRY and kind != "production"
        ):
            raise StreamsError(
                f"{_where(context)}: the {kind} exception handler {self.names[kind]} returned "
                f"{answer!r}; return a common.handlers.Response (resume() or fail())"
            )
        return answer
