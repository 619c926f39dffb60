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

This module holds :class:`ExceptionHandlers`, a task's three handlers; the contract is
:mod:`common.handlers_api`, the built-in handlers and dead letters
:mod:`common.handlers_builtin`, the names a key accepts :mod:`common.handlers_names`. Every
public name is importable from here.

Example (a user handler, configured as ``processing.exception.handler``)::

    class SkipValueErrors:
        def handle_error(self, context, record, exception):
            if isinstance(exception, ValueError):
                return Response.resume()
            return Response.fail()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from common.errors import StreamsError
from common.handlers_api import (
    DEAD_LETTER_QUEUE_TOPIC,
    HEADER_EXCEPTION,
    HEADER_MESSAGE,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_STACKTRACE,
    HEADER_TOPIC,
    DeserializationExceptionHandler,
    ErrorHandlerContext,
    Kind,
    Origin,
    ProcessingExceptionHandler,
    ProducerRecord,
    ProductionExceptionHandler,
    RawRecord,
    Response,
    Result,
    context_prefix,
)
from common.handlers_builtin import (
    DefaultProductionExceptionHandler,
    LogAndContinueExceptionHandler,
    LogAndContinueProcessingExceptionHandler,
    LogAndContinueProductionExceptionHandler,
    LogAndFailExceptionHandler,
    LogAndFailProcessingExceptionHandler,
    build_dead_letter_queue_record,
)
from common.handlers_names import check_handler, load_handler, short_name

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
    "Origin",
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
        defaults = all(short_name(k, n) == "log-and-fail" for k, n in names.items())
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
                f"{context_prefix(context)}: the {kind} exception handler {self.names[kind]} "
                f"raised {type(exc).__name__}: {exc} (fatal user code error in the error callback)"
            ) from exc
        if isinstance(answer, Result):
            answer = Response(answer)
        if not isinstance(answer, Response) or (
            answer.result is Result.RETRY and kind != "production"
        ):
            raise StreamsError(
                f"{context_prefix(context)}: the {kind} exception handler {self.names[kind]} "
                f"returned {answer!r}; return a common.handlers.Response (resume() or fail())"
            )
        return answer
