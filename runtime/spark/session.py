"""Get the SparkSession a streams application runs on.

An application uses the active session when there is one (``spark-submit`` made it, or the
user did); otherwise it builds a local one from these defaults, quiet (``conf/log4j2``),
with the UI off and few shuffle partitions, which suits ``local[2]``.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Mapping

from pyspark.sql import SparkSession
from streams.conf import LOG4J2_FILE

log = logging.getLogger(__name__)

#: Spark settings used when this project builds the session itself.
DEFAULT_SPARK_CONF: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J2_FILE}",
}


def get_or_create_session(
    app_name: str = "spark-streams-eos",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return the active SparkSession, or build a local one.

    Args:
        app_name: the Spark application name of a session built here.
        master: the master URL of a session built here (``SPARK_MASTER`` or ``local[2]``).
        conf: more Spark settings for a session built here.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Python workers must run this interpreter (its venv has pyarrow, rocksdict, ...),
    # not whatever ``python3`` comes first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("SPARK_MASTER", "local[2]")
    )
    for key, value in {**DEFAULT_SPARK_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pandas >= 3.0.0.*", category=FutureWarning)
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    log.info(
        "started SparkSession master=%s version=%s", session.sparkContext.master, session.version
    )
    return session
