"""Where Spark keeps an application's query checkpoints."""

from __future__ import annotations

import logging
import os
import shutil

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.storage.fs import StorageRoot

log = logging.getLogger(__name__)

#: The SQL setting naming the class that writes a query's offset and commit logs.
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
#: Writes them through Hadoop's ``FileSystem`` API: the word count's micro-batch spends
#: about 15 ms on its two log writes, against about 70 ms through ``FileContext`` (Spark's
#: default, whose atomic overwrite is not needed where nothing is recovered;
#: ``benchmarks/checkpoint_writes.py``).
DISPOSABLE_CHECKPOINT_FILES = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def checkpoint_location(config: StreamsConfig, root: StorageRoot) -> str:
    """Return where Spark keeps the application's query checkpoints: under
    ``checkpoint.location`` when set, else under the storage root when it is a local path,
    else under ``state.dir`` (Spark cannot write an object store without its Hadoop
    connector). The stream threads' checkpoints are disposable; the DataFrame sources'
    (``<location>/sources/<topic>``) hold their read positions and are kept."""
    configured = config.checkpoint_location
    if configured:
        return f"{configured.rstrip('/')}/{config.application_id}"
    if root.is_local:
        return root.uri_of("_apps", config.application_id, "checkpoint")
    state_dir = os.path.abspath(config.state_dir)
    return os.path.join(state_dir, config.application_id, "spark-checkpoint")


def start_disposable(
    spark: SparkSession, writer: DataStreamWriter, location: str
) -> StreamingQuery:
    """Start ``writer``'s query with a disposable checkpoint at ``location``: emptied
    first, its logs written the cheap way.

    A stream thread's query checkpoint holds nothing to recover (positions live in
    ``__consumer_offsets``), so each start begins with an empty one, and its offset and
    commit logs, written at every micro-batch, need none of the default manager's atomic
    overwrite.
    """
    clear_checkpoint(location)
    return start_with_file_system_logs(spark, writer, location)


def start_batches(
    spark: SparkSession, writer: DataStreamWriter, *, name: str, interval_ms: int, location: str
) -> StreamingQuery:
    """Start a stream thread's query: ``writer`` named ``name``, triggered every
    ``interval_ms``, with a disposable checkpoint at ``location``."""
    writer = writer.queryName(name).trigger(processingTime=f"{interval_ms} milliseconds")
    return start_disposable(spark, writer, location)


def cancel_jobs(spark: SparkSession, query: StreamingQuery) -> None:
    """Cancel the running Spark jobs of ``query``'s batch (its job group is its run id):
    the batch function's job fails at once with ``SPARK_JOB_CANCELLED``."""
    spark.sparkContext.cancelJobGroup(str(query.runId))


def start_with_file_system_logs(
    spark: SparkSession, writer: DataStreamWriter, location: str
) -> StreamingQuery:
    """Start ``writer``'s query with its checkpoint at ``location``, its logs written
    through Hadoop's ``FileSystem`` API (:data:`DISPOSABLE_CHECKPOINT_FILES`).

    That manager writes a log file as a temporary file renamed into place, refusing an
    existing one, which on a local file system (an atomic rename) keeps a kept checkpoint
    (a DataFrame source's read positions) as safe as Spark's default, at a fraction of its
    cost (``benchmarks/checkpoint_writes.py``). Without Hadoop's native library both still
    fork a ``chmod`` for each file they create, a log file and its checksum file alike
    (four a micro-batch for a stream thread's query). The setting is read when the query
    starts; the session's own is put back at once, so the user's other queries keep
    theirs.
    """
    before = spark.conf.get(CHECKPOINT_FILE_MANAGER, None)
    spark.conf.set(CHECKPOINT_FILE_MANAGER, DISPOSABLE_CHECKPOINT_FILES)
    try:
        return writer.option("checkpointLocation", location).start()
    finally:
        if before is None:
            spark.conf.unset(CHECKPOINT_FILE_MANAGER)
        else:
            spark.conf.set(CHECKPOINT_FILE_MANAGER, before)


def is_local_location(location: str) -> bool:
    """Whether ``location`` is a path on the local file system (no scheme, or ``file:``)."""
    return "://" not in location or location.startswith("file:")


def clear_checkpoint(location: str) -> None:
    """Delete the checkpoint at ``location`` (a local path, or a URI pyarrow reaches)."""
    if is_local_location(location):
        shutil.rmtree(location.removeprefix("file://"), ignore_errors=True)
        return
    try:
        root = StorageRoot(location)
        root.delete_dir(root.base)
    except StreamsError as exc:  # a URI pyarrow cannot reach: Spark's own is used as is
        log.info("could not clear the Spark checkpoint %s: %s", location, exc)
