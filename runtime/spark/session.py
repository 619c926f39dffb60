"""Get the SparkSession a streams application runs on.

An application uses the active session when there is one (the user made it), as it is.
Under ``spark-submit`` it builds the session with spark-submit's master and settings, which
win over the defaults here (those fill only what spark-submit leaves unset). Otherwise it
builds one on ``SPARK_MASTER`` (default ``local[2]``) from these defaults, quiet
(``conf/log4j2``), with the UI off and few shuffle partitions, which suits ``local[2]``,
with its driver JVM's classes shared from an archive made by an earlier run
(:mod:`runtime.spark.cds`), and Python workers forked with their modules imported
(:mod:`runtime.spark.worker_daemon`).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Mapping

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from common.conf import LOG4J2_FILE, LOG_FILE_ENV
from common.errors import ConfigError
from runtime.spark import cds

log = logging.getLogger(__name__)

#: Spark settings used when this project builds the session itself.
DEFAULT_SPARK_CONF: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    # the JVM and its Python workers talk over Unix sockets: over TCP, a worker waited
    # about 40 ms for a job's first input (Nagle's algorithm against a delayed ACK)
    "spark.python.unix.domain.socket.enabled": "true",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J2_FILE}",
}

#: More settings for a local master, whose Python workers run this interpreter: they fork
#: with pyarrow, pandas, deltalake, rocksdict and the runtime imported. (A cluster's
#: executors may get the project only with their tasks, too late for their daemon.)
LOCAL_SPARK_CONF: Mapping[str, str] = {
    "spark.python.daemon.module": "runtime.spark.worker_daemon",
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
    submitted = submitted_conf()
    if submitted is not None:
        # spark-submit started this driver: its master and settings win, ours fill gaps
        master = submitted.get("spark.master", "local[*]")
        builder = SparkSession.builder.appName(app_name)
    else:
        master = master or os.environ.get("SPARK_MASTER", "local[2]")
        builder = SparkSession.builder.appName(app_name).master(master)
    local = LOCAL_SPARK_CONF if master.startswith("local") else {}
    settings = {**DEFAULT_SPARK_CONF, **local, **(conf or {})}
    if submitted is not None:
        settings = {k: v for k, v in settings.items() if k not in submitted}
        settings.pop("spark.driver.extraJavaOptions", None)  # its JVM runs already
        sharing = cds.CdsPlan(java_options="", dumps=False)
    else:
        sharing = cds.plan(settings)
    if sharing.java_options:
        options = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{options} {sharing.java_options}".strip()
    log_file = os.environ.get(LOG_FILE_ENV)
    if log_file and submitted is None:  # the JVM logs to that file only (log4j2.properties)
        # added after the class-sharing plan: a system property does not change the archive
        options = settings.get("spark.driver.extraJavaOptions", "")
        quiet = f"-Dstreams.log.file={log_file} -Dstreams.console.level=off"
        settings["spark.driver.extraJavaOptions"] = f"{options} {quiet}".strip()
    for key, value in settings.items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pandas >= 3.0.0.*", category=FutureWarning)
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    if sharing.dumps:
        gateway = session.sparkContext._gateway
        atexit.register(_let_jvm_exit, getattr(gateway, "proc", None))
    log.info(
        "started SparkSession master=%s version=%s", session.sparkContext.master, session.version
    )
    return session


def submitted_conf() -> dict[str, str] | None:
    """Return spark-submit's settings when ``spark-submit`` started this driver (its JVM
    runs already, with ``--master`` and ``--conf`` as system properties); else None."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    SparkContext._ensure_initialized()  # connects to spark-submit's JVM
    return dict(SparkConf().getAll())


def _let_jvm_exit(proc: subprocess.Popen[bytes] | None, timeout_s: float = 60.0) -> None:
    """At exit, end the driver JVM ourselves and give it time to write its CDS archive
    (it exits when its stdin closes; a JVM killed with us would leave no archive)."""
    if proc is None or proc.poll() is not None:
        return
    _stop_accumulator_server()
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        pass  # the archive is only an optimisation


def _stop_accumulator_server() -> None:
    """Stop PySpark's accumulator server before the JVM goes: its handler would otherwise
    read the closed connection and print an EOFError traceback at exit."""
    context = SparkContext._active_spark_context
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        with contextlib.suppress(Exception):
            server.shutdown()


def check_local_workers(spark: SparkSession) -> None:
    """On a local master, check that Spark's Python workers can import this project (a
    session built by the user's own code runs ``python3`` from PATH unless told otherwise).

    Raises:
        ConfigError: the workers' interpreter lacks the project (what to set is named).
    """
    if not (spark.sparkContext.master or "").startswith("local"):
        return  # a cluster's executors: its own Python, checked by its first task
    python = (
        spark.conf.get("spark.pyspark.python", None)
        or os.environ.get("PYSPARK_PYTHON")
        or shutil.which("python3")
        or "python3"
    )
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return
    try:
        found = subprocess.run(
            [python, "-c", "import runtime.app, rocksdict, deltalake"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except OSError as exc:
        raise ConfigError(
            f"Spark's Python workers would run {python}, which cannot start ({exc}); set "
            f"PYSPARK_PYTHON={sys.executable} (or spark.pyspark.python) before the session"
        ) from exc
    if found.returncode != 0:
        raise ConfigError(
            f"Spark's Python workers would run {python}, which cannot import spark-streams-eos "
            f"(it is installed for {sys.executable}); set PYSPARK_PYTHON={sys.executable} (or "
            "the Spark setting spark.pyspark.python) before the SparkSession starts, or "
            "install the project for that Python"
        )
