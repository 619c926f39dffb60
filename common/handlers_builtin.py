"""The built-in exception handlers (Kafka's log-and-fail and log-and-continue families) and
the dead-letter record they attach when ``errors.dead.letter.queue.topic.name`` is set.

A dead letter is the raw input record (key, value, timestamp, headers) plus the
``__streams.errors.*`` headers naming the exception and the input's topic, partition and
offset, as Kafka's ``ExceptionHandlerUtils`` builds it.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from typing import Any

from common.handlers_api import (
    DEAD_LETTER_QUEUE_TOPIC,
    HEADER_EXCEPTION,
    HEADER_MESSAGE,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_STACKTRACE,
    HEADER_TOPIC,
    ErrorHandlerContext,
    Origin,
    ProducerRecord,
    RawRecord,
    Response,
    context_prefix,
)

#: The built-in handlers log under the name of the public module, which operators configure.
log = logging.getLogger("common.handlers")


def exception_name(exc: BaseException) -> str:
    """Return the exception's qualified class name (``builtins.ValueError``)."""
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


def format_stacktrace(exception: BaseException) -> str:
    """Return the stack trace of ``exception`` and of its own causes, as Kafka's header
    holds the exception's stack trace: its ``__cause__`` chain, and an implicit
    ``__context__`` only when that error was raised and caught inside the exception's own
    frames (an error the user's code was handling). A context caught outside them is the
    runtime's (a host process forked inside an ``except`` block raises everything in that
    block's context) and has nothing to do with the record: it is left out."""
    links: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exception
    note = ""
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        links.append((current, note))
        current, note = _own_cause(current)
    parts: list[str] = []
    for exc, link in reversed(links):
        parts.extend(traceback.format_exception(type(exc), exc, exc.__traceback__, chain=False))
        if link:
            parts.append(link)
    return "".join(parts)


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def _own_cause(exc: BaseException) -> tuple[BaseException | None, str]:
    """The error ``exc`` was raised from (and the line that links them), or (None, "")."""
    if exc.__cause__ is not None:
        return exc.__cause__, _CAUSE
    context = exc.__context__
    if context is None or exc.__suppress_context__ or not _caught_within(context, exc):
        return None, ""
    return context, _CONTEXT


def _caught_within(inner: BaseException, outer: BaseException) -> bool:
    """Whether ``inner`` was caught in a frame ``outer`` was raised through (not the
    frame that caught ``outer``: what that frame was handling is its own business)."""
    tb = inner.__traceback__
    if tb is None or outer.__traceback__ is None:
        return False
    frames = set()
    walk = outer.__traceback__.tb_next
    while walk is not None:
        frames.add(id(walk.tb_frame))
        walk = walk.tb_next
    return id(tb.tb_frame) in frames


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
    trace = format_stacktrace(exception)
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


class BuiltInHandler:
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


class LogAndFailExceptionHandler(BuiltInHandler):
    """Deserialization: log the error and stop (the default)."""

    def handle_error(
        self, context: ErrorHandlerContext, record: RawRecord, exception: Exception
    ) -> Response:
        """Log at ERROR and fail."""
        log.error("%s deserialization failed; failing: %s", context_prefix(context), exception)
        return Response.fail(self.dead_letters(context, exception))


class LogAndContinueExceptionHandler(BuiltInHandler):
    """Deserialization: log the error, skip the record, go on."""

    def handle_error(
        self, context: ErrorHandlerContext, record: RawRecord, exception: Exception
    ) -> Response:
        """Log at WARNING and resume."""
        log.warning("%s deserialization failed; skipping: %s", context_prefix(context), exception)
        return Response.resume(self.dead_letters(context, exception))


class LogAndFailProcessingExceptionHandler(BuiltInHandler):
    """Processing: log the error and stop (the default)."""

    def handle_error(
        self, context: ErrorHandlerContext, record: Any, exception: Exception
    ) -> Response:
        """Log at ERROR and fail."""
        log.error("%s processing failed; failing: %r", context_prefix(context), exception)
        return Response.fail(self.dead_letters(context, exception))


class LogAndContinueProcessingExceptionHandler(BuiltInHandler):
    """Processing: log the error, drop the record at the failing node, go on."""

    def handle_error(
        self, context: ErrorHandlerContext, record: Any, exception: Exception
    ) -> Response:
        """Log at WARNING and resume."""
        log.warning("%s processing failed; dropping: %r", context_prefix(context), exception)
        return Response.resume(self.dead_letters(context, exception))


class DefaultProductionExceptionHandler(BuiltInHandler):
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


class LogAndContinueProductionExceptionHandler(BuiltInHandler):
    """Production: log the error, drop the output record, go on (KIP-1348's proposal;
    Kafka itself ships no such handler)."""

    def handle_error(
        self, context: ErrorHandlerContext, record: ProducerRecord, exception: Exception
    ) -> Response:
        """Log at WARNING and resume."""
        log.warning(
            "%s cannot send to %s; dropping: %s", context_prefix(context), record.topic, exception
        )
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
            context_prefix(context),
            origin,
            record.topic,
            exception,
        )
        return Response.resume(self.dead_letters(context, exception))
