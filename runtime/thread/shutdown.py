"""Why a stream thread stops: it was fenced (:class:`TaskMigratedError`: it rejoins the
group, see :mod:`runtime.app.thread_errors`), or another instance asked the whole
application to stop (SHUTDOWN_APPLICATION).

An instance whose uncaught exception handler answers SHUTDOWN_APPLICATION writes a marker
file under the storage root (``_apps/<application.id>/shutdown-requested``: the time and
the reason); each stream thread of every instance looks for it before each batch and stops
when it was written after that instance started.
"""

from __future__ import annotations

from common.errors import (
    GenerationFencedError,
    ProducerFencedError,
    StreamsError,
    TaskMigratedError,
)
from runtime.storage.topics import TopicAdmin


def migrated(
    error: ProducerFencedError | GenerationFencedError, who: str, batch_id: int
) -> TaskMigratedError:
    """The :class:`TaskMigratedError` that ends thread ``who``'s batch ``batch_id`` after
    ``error``."""
    if isinstance(error, ProducerFencedError):
        return TaskMigratedError(
            f"[thread {who}] batch {batch_id}: fenced by a newer instance ({error}); "
            "nothing it staged is visible"
        )
    return TaskMigratedError(
        f"[thread {who}] batch {batch_id}: {error}; the batch was aborted (its tasks may "
        "belong to another member now)"
    )


class ApplicationShutdownError(StreamsError):
    """Another instance of the application asked every instance to stop
    (SHUTDOWN_APPLICATION from its uncaught exception handler)."""


def check_shutdown(
    admin: TopicAdmin, marker: tuple[str, int] | None, who: str, group: str, batch_id: int
) -> None:
    """Raise :class:`ApplicationShutdownError` when ``marker`` (its path, and when this
    instance started, ms) was written after the start.

    Args:
        who: the thread, as the error names it.
        group: the application id.
        batch_id: the batch about to run.
    """
    if marker is None:
        return
    path, started_ms = marker
    data = admin.root.read_bytes(path)
    if data is None:
        return
    stamp, _, reason = data.decode(errors="replace").partition("\n")
    if int(stamp or 0) >= started_ms:
        raise ApplicationShutdownError(
            f"[thread {who}] batch {batch_id}: an instance of {group} asked the whole "
            f"application to shut down (SHUTDOWN_APPLICATION) after: {reason}; fix the cause "
            "and start the instances again"
        )
