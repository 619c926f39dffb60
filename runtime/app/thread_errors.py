"""What a stream thread's error does to the instance (Kafka's uncaught exception handler,
and what Kafka handles before it).

* A full disk under Spark's checkpoint (the query itself ended) replaces the thread once
  the full-disk wait is over; so does a storage failing past its retries outside a batch
  (a start, a rejoin), for about 5 minutes of such failures in a row (as Kafka retries a
  timeout for ``task.timeout.ms``).
* ``TaskMigratedError`` (the thread's commit was fenced: its member lost the group, or its
  producer's epoch was bumped by the transaction timeout) never reaches the handler: as
  Kafka's ``StreamThread`` does, the thread closes its tasks and rejoins the group (here: a
  new thread with the same transactional id and ``group.instance.id``, whose producer
  fences the old one's epoch and whose tasks are new incarnations, built from committed
  state). Only when another process holds the thread's ``group.instance.id`` (a second
  process of this instance's process id: the zombie is this one) does the instance stop.
* Anything else goes to the application's handler (SHUTDOWN_CLIENT without one), but a
  shutdown another instance requested always stops this one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from common.errors import TaskMigratedError
from runtime.app.app_state import StreamThreadExceptionResponse
from runtime.thread.shutdown import ApplicationShutdownError
from runtime.thread.stream_thread import StreamThread

log = logging.getLogger(__name__)

Handler = Callable[[BaseException], StreamThreadExceptionResponse]


def respond_to(
    thread: StreamThread, error: BaseException, handler: Handler | None
) -> tuple[BaseException, StreamThreadExceptionResponse]:
    """The error that stopped ``thread`` (its own record of it, else ``error``: what its
    query raised) and what the instance does about it."""
    exc = thread.failure if thread.failure is not None else error
    if thread.failure is None and thread.disk_full.query_failed(error):
        return exc, StreamThreadExceptionResponse.REPLACE_THREAD  # its checkpoint's disk
    if thread.disk_full.storage_failed(exc):
        return exc, StreamThreadExceptionResponse.REPLACE_THREAD  # as Kafka's task.timeout.ms
    cancelled = thread.membership.cancelled if thread.membership is not None else None
    if cancelled is not None and not isinstance(exc, TaskMigratedError):
        exc = TaskMigratedError(
            f"[thread {thread.transactional_id}] its batch was cancelled: {cancelled}"
        )
    if isinstance(exc, TaskMigratedError):
        membership = thread.membership
        if membership is not None and not membership.replaced():
            log.warning(
                "[thread %s] rejoins the group with its tasks closed after %s: %s",
                thread.transactional_id,
                type(exc).__name__,
                exc,
            )
            return exc, StreamThreadExceptionResponse.REPLACE_THREAD
        log.error(
            "[thread %s] another process holds this thread's group.instance.id: this "
            "instance is the zombie and stops (give each running process its own state.dir)",
            thread.transactional_id,
        )
        return exc, StreamThreadExceptionResponse.SHUTDOWN_CLIENT
    if handler is None or isinstance(exc, ApplicationShutdownError):
        return exc, StreamThreadExceptionResponse.SHUTDOWN_CLIENT
    return exc, handler(exc)
