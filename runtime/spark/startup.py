"""Start a streams application's SparkSession while the application prepares itself.

``StreamsApp.start()`` needs the session only to start its queries; the topic plan, the
fencing of an older instance, each stream thread's group join and its producers'
InitProducerId (reads and writes of the logs) need none. The session is therefore built
in a thread of its own while they run, and the driver JVM boots meanwhile; what needs the
session but not the caller (the executors' warm-up) starts from that thread as soon as
the session exists. Nothing else changes: the same session, the same settings, the same errors
(raised where the session is first needed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future

from pyspark.sql import SparkSession

from runtime.spark.session import get_or_create_session

log = logging.getLogger(__name__)


class SessionStart:
    """A SparkSession being built in a background thread (or the active one).

    Args:
        app_name: the Spark application name of a session built here.
        on_ready: called with the session as soon as it exists (in the building thread;
            its errors are logged): work that needs the session but not the caller.
    """

    def __init__(
        self, app_name: str, on_ready: Callable[[SparkSession], object] | None = None
    ) -> None:
        self._session: Future[SparkSession] = Future()
        self._on_ready = on_ready
        active = SparkSession.getActiveSession()
        if active is not None:
            self._session.set_result(active)
            self._ready(active)
            return
        threading.Thread(
            target=self._build, args=(app_name,), name="spark-session-start", daemon=True
        ).start()

    def session(self) -> SparkSession:
        """Wait for the session; return it, active in the calling thread too.

        Raises:
            the error that building the session raised.
        """
        return activate(self._session.result())

    def _build(self, app_name: str) -> None:
        try:
            session = get_or_create_session(app_name)
        except BaseException as exc:
            self._session.set_exception(exc)
            return
        self._session.set_result(session)
        self._ready(session)

    def _ready(self, session: SparkSession) -> None:
        if self._on_ready is None:
            return
        try:
            self._on_ready(session)
        except Exception as exc:  # extra work only: the session itself is fine
            log.warning("work on the new SparkSession failed: %s", exc)


def activate(session: SparkSession) -> SparkSession:
    """Make ``session`` the active session of the calling thread too (Spark keeps the
    active session per thread; the one that built it has it already)."""
    try:
        jvm = session._jvm
        jclass = SparkSession._get_j_spark_session_class(jvm)
        jclass.setActiveSession(session._jsparkSession)
    except Exception as exc:  # pragma: no cover - only getActiveSession() is affected
        log.debug("could not make the session active in this thread: %s", exc)
    return session
