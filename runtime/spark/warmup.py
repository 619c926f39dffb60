"""The executors of a cluster warmed up while the application starts.

An executor that just started (a new instance's, or one Spark replaced) pays for its
first Python task: the worker daemon starts and imports the task engine (pyarrow,
pandas, deltalake, rocksdict, this project), and the first worker forks the task hosts'
server. Paid inside the first batch, on a one-core executor that ran the batch's Spark
tasks one after another, it was 8-10 s of every restart's first batch. The driver spends
about as long joining the group, fencing its producers and starting the query before
that batch, without the executors; so a small job runs meanwhile (started as soon as the
session exists, :class:`~runtime.spark.startup.SessionStart`), one Spark task per
executor core, that starts the daemon and the server (:func:`start_host_server`). Its
answers (each executor's server address) let the first batch place the tasks itself
(:class:`~runtime.spark.executors.HostServers`).

The job is a ``mapInArrow`` over a DataFrame, as the batches are, not an RDD's
``mapPartitions``: an executor keeps one Python daemon per worker environment, and Spark's
SQL runners add ``SPARK_SIMPLIFIED_TRACEBACK`` to theirs. An RDD warm-up started a daemon
that no batch used, and the first batch's first Spark task booted the other one (3.6 s of
a restart's first batch on a loaded machine).

In local mode the executor is the driver's own process, already warm; nothing runs.
A warm-up that fails changes nothing: the first batch starts what it needs, as before.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql import SparkSession

from common.config import StreamsConfig
from runtime.spark import executors
from runtime.tasks.client import start_host_server

log = logging.getLogger(__name__)


def warm_executors(spark: SparkSession, config: StreamsConfig) -> threading.Thread | None:
    """Start the warm-up job in a thread of its own (None on a local master)."""
    context = spark.sparkContext
    if executors.is_local(context):
        return None
    driver_host = context.getConf().get("spark.driver.host") or ""
    work = functools.partial(
        _warm, config.state_dir, config.application_id, driver_host, executors.HOST_SECRET
    )
    record = executors.warming(config.application_id)

    def run() -> None:
        started = time.perf_counter()
        servers: dict[str, str] = {}
        try:  # one Spark task on each executor expected: wait for them as the batches do
            executors.wait_for_expected(context, f"[app {config.application_id}] warm-up")
            slots = max(1, executors.slots(context))
            frame = spark.range(0, slots, 1, slots)
            # a barrier stage runs its tasks all at once, one per core: every executor
            # runs one (Spark refuses barrier stages under dynamic allocation)
            barrier = not executors.dynamic_allocation(context)
            found = frame.mapInArrow(work, "executor string, server string", barrier=barrier)
            servers = {row.executor: row.server for row in found.collect() if row.server}
        except Exception as exc:  # the first batch starts what it needs itself
            log.info("[app %s] executor warm-up skipped: %s", config.application_id, exc)
            return
        finally:
            record.found(servers)
        log.info(
            "[app %s] executors %s warmed up in %.1f s (Python workers, task host servers)",
            config.application_id,
            ", ".join(sorted(servers)),
            time.perf_counter() - started,
        )

    thread = threading.Thread(target=run, name="executor-warm-up", daemon=True)
    thread.start()
    return thread


def _warm(
    state_dir: str,
    application_id: str,
    driver_host: str,
    secret: str,
    _batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """On an executor: start its host server and give it the driver's secret; yield the
    executor's id and the server's TCP address."""
    executor, server = start_host_server(state_dir, application_id, driver_host, secret)
    for _ in _batches:  # its one row
        pass
    yield pa.RecordBatch.from_pydict({"executor": [executor], "server": [server]})
