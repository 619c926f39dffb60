"""A task's error paths: where :class:`~topology.engine.task.StreamTask` asks Kafka's exception
handlers (:mod:`common.handlers`) what to do with a record that failed.

Nothing here runs unless something failed, except :meth:`TaskErrorPaths.guarded`: with a
processing handler that may resume (or a dead-letter topic), each processor node is wrapped
so that the handler decides where the error happened, as Kafka's ``ProcessorNode.process``:
RESUME drops the record at that node and its parent goes on with its other children.

A dead letter goes through the task's collector, so the runtime stages it in the batch's
transaction, beside the batch's outputs: both become visible, or neither.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from common.errors import SerializationError, StreamsError, StreamsProcessingError
from common.handlers import (
    ErrorHandlerContext,
    ExceptionHandlers,
    Origin,
    ProducerRecord,
    RawRecord,
    Response,
    Result,
)
from topology.engine.context import PunctuationSchedule
from topology.engine.nodes import user_error

if TYPE_CHECKING:
    from topology.engine.task import StreamTask

log = logging.getLogger(__name__)


class TaskErrorPaths:
    """The handlers of one task, and what the task does with their answers: count a
    skipped record in ``dropped_records``, send dead letters, or raise."""

    def __init__(self, task: StreamTask) -> None:
        self.task = task
        self.handlers = ExceptionHandlers(task.app_config)
        self.failed: BaseException | None = None  # the error a handler failed with

    def deserialization_failed(self, node: str, raw: RawRecord, exc: Exception) -> None:
        """A source could not deserialize ``raw``: return to skip it, raise to stop."""
        task = self.task
        context = ErrorHandlerContext(
            raw.topic,
            raw.partition,
            raw.offset,
            raw.headers,
            node,
            task.task_id,
            raw.timestamp,
            raw.key,
            raw.value,
        )
        response = self.handlers.on_deserialization_error(context, raw, exc)
        self.send_dead_letters(response)
        if response.result is not Result.RESUME:
            raise SerializationError(
                f"source {node}: cannot deserialize a record ({type(exc).__name__}: {exc}); "
                "deserialization.exception.handler=log-and-continue would skip it",
                topic=raw.topic,
                partition=raw.partition,
                offset=raw.offset,
            ) from exc
        task.dropped_records += 1

    def guarded(self, name: str, process: Callable[[Any], None]) -> Callable[[Any], None]:
        """Wrap node ``name`` so that the processing handler decides about its errors."""
        failed = self.processing_failed

        def run(record: Any) -> None:
            try:
                process(record)
            except Exception as exc:
                failed(name, record, exc)  # raises unless the handler resumes

        return run

    def processing_failed(self, node: str, record: Any, exc: Exception) -> None:
        """Ask the processing handler about ``exc`` raised at ``node`` (``record`` None: in
        a punctuator); return to drop the record there, raise to stop. Errors that are not
        processing errors (serdes, storage), or that a handler failed with, pass."""
        if exc is self.failed or (
            isinstance(exc, StreamsError) and not isinstance(exc, StreamsProcessingError)
        ):
            raise exc
        cause = exc.__cause__ if isinstance(exc, StreamsProcessingError) else exc
        user_exc = cause if isinstance(cause, Exception) else exc  # as the user raised it
        response = self.handlers.on_processing_error(self.context(node), record, user_exc)
        self.send_dead_letters(response)
        if response.result is Result.RESUME:
            self.task.dropped_records += 1
            return
        error = exc
        if not isinstance(exc, StreamsError):  # a processor's own bug, not user code
            error = StreamsProcessingError(f"processor {node}: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
        self.failed = error
        raise error

    def punctuator_failed(self, sched: PunctuationSchedule, exc: Exception) -> None:
        """A punctuator (or a node it forwarded to) raised: as :meth:`processing_failed`."""
        error: Exception = exc
        if not isinstance(exc, StreamsError):
            error = user_error(sched.node, sched.punctuator, exc, "punctuator")
            error.__cause__ = exc
        self.processing_failed(sched.node, None, error)

    def production_failed(
        self,
        node: str,
        record: ProducerRecord,
        exc: Exception,
        origin: Origin | None,
        error: Exception,
    ) -> None:
        """Sink ``node`` could not serialize (``origin``: the key or the value) or send
        (``origin`` None) ``record``: return to drop it, raise ``error`` to stop."""
        if exc is self.failed:
            raise exc
        response = self.handlers.on_production_error(self.context(node), record, exc, origin)
        self.send_dead_letters(response)
        if response.result is Result.RESUME:
            self.task.dropped_records += 1
            return
        if response.result is Result.RETRY:
            log.warning(
                "[task %s] node=%s RETRY is FAIL here: the error is not retriable",
                self.task.task_id,
                node,
            )
        self.failed = error
        raise error

    def context(self, node: str) -> ErrorHandlerContext:
        """Return the handler context of the record the task is processing at ``node``."""
        task = self.task
        raw_key, raw_value = self.source_raw()
        return ErrorHandlerContext(
            task.current_topic,
            task.current_partition,
            task.current_offset,
            task.current_headers,
            node,
            task.task_id,
            task.current_timestamp,
            raw_key,
            raw_value,
        )

    def source_raw(self) -> tuple[bytes | None, bytes | None]:
        """Return the bytes of the input record being processed ((None, None) if unknown:
        in a punctuator, or for a record a cache flush forwards)."""
        task = self.task
        topic, offset = task.current_topic, task.current_offset
        raw = task.raw_input
        if raw is not None and raw[0] == topic and raw[1] == offset:
            return raw[2], raw[3]
        columns = task.raw_columns
        if columns is not None and columns[0] == topic and offset is not None:
            offsets = columns[1]
            i = bisect_left(offsets, offset)
            if i < len(offsets) and offsets[i] == offset:
                return _raw(columns[2][i]), _raw(columns[3][i])
        return None, None

    def send_dead_letters(self, response: Response) -> None:
        """Send a handler's dead letters through the collector (the batch's transaction)."""
        for rec in response.dead_letter_queue_records:
            try:
                self.task.collector.send(
                    rec.topic, rec.key, rec.value, rec.timestamp, rec.headers, rec.partition
                )
            except Exception as exc:
                raise StreamsError(
                    f"[task {self.task.task_id}] cannot send a dead letter to topic "
                    f"{rec.topic} ({type(exc).__name__}: {exc}); a dead letter must go to "
                    "errors.dead.letter.queue.topic.name or to a sink topic of the topology"
                ) from exc


def _raw(item: Any) -> bytes | None:
    """An element of a raw column (an Arrow scalar when the column is Arrow's)."""
    as_py = getattr(item, "as_py", None)
    raw: bytes | None = item if as_py is None else as_py()
    return raw
