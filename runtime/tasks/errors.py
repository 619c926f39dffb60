"""Errors across the JVM: a task's exception carried to the driver through Spark, which
passes only text (:func:`guarded` on the executor, :func:`task_error` on the driver), and
how the error that makes a batch's Spark job run again
(:class:`~common.errors.BatchRetryError`) crosses it."""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterator

import pyarrow as pa

from common.errors import BatchRetryError, StreamsProcessingError

_ERROR_TAG = "streams-task-error:"


class TaskFailedError(Exception):
    """Carries a task's exception to the driver through Spark, which passes only text: the
    original exception pickled and base64-encoded behind a tag (see :func:`task_error`)."""


def guarded(rows: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Yield ``rows``; turn an exception into a :class:`TaskFailedError` the driver decodes."""
    try:
        yield from rows
    except BatchRetryError:
        raise
    except Exception as exc:
        try:
            payload = base64.b64encode(pickle.dumps(exc)).decode()
        except Exception:  # not picklable: the driver rebuilds it from the text
            payload = ""
        raise TaskFailedError(f"{_ERROR_TAG}{payload}:{type(exc).__name__}: {exc}") from exc


def task_error(error: BaseException) -> BaseException | None:
    """Return the task's original exception carried in Spark's ``error``, if any."""
    text = str(error)
    at = text.find(_ERROR_TAG)
    if at < 0:
        return None
    payload = text[at + len(_ERROR_TAG) :].split(":", 1)[0]
    if payload:
        try:
            original = pickle.loads(base64.b64decode(payload))
            if isinstance(original, BaseException):
                return original
        except Exception:  # fall back to the message below
            pass
    message = text[at + len(_ERROR_TAG) :].split(":", 1)[-1].strip().splitlines()[0]
    return StreamsProcessingError(message)
