"""Start a streams application's SparkSession while the application prepares itself.

``StreamsApp.start()`` needs the session only to start its query; the topic plan and the
fencing of an older instance (reads and writes of the Delta logs) need none. The session
is therefore built in a thread of its own while they run, and the driver JVM boots
meanwhile. Nothing else changes: the same session, the same settings, the same errors
(raised where the session is first needed).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from pyspark.sql import SparkSession

from runtime.spark.session import get_or_create_session

log = logging.getLogger(__name__)


class SessionStart:
    """A SparkSession being built in a background thread (or the active one).

    Args:
        app_name: the Spark application name of a session built here.
    """

    def __init__(self, app_name: str) -> None:
        self._session: Future[SparkSession] = Future()
        active = SparkSession.getActiveSession()
        if active is not None:
            self._session.set_result(active)
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
            self._session.set_result(get_or_create_session(app_name))
        except BaseException as exc:
            self._session.set_exception(exc)


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
