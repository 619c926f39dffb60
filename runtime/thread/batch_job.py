"""The Spark job of one batch: the levels of sub-topologies, run and collected.

Level 0 is a ``mapInArrow`` over the source's rows (one per partition number); each later
level a shuffle of the repartitioned records to their task's Spark partition, then a
``mapInArrow`` (see :mod:`runtime.tasks.task_runner`). A batch on a local master
(``plan.fused``: one Spark partition, see
:meth:`runtime.thread.placement.TaskPlacement.for_plan`) runs every level in one
``mapInArrow``, one level after another, without a shuffle: the task hosts do the work
side by side whichever Spark task visits them, and a stage costs tens of milliseconds.
That job is the same DataFrame at every batch of a thread (per number of partitions), its
plan read from a file (:mod:`runtime.tasks.plan_files`): Spark plans it once.
Only metadata rows come back to the driver: staged files, positions, counters, and when
the tasks' next wall-clock punctuation is due.

A job whose windowed count found records combined per key and window that it cannot
count as the records they stand for (:class:`~common.errors.CombinedRecordsLateError`)
runs again at once, in the same transaction, without combining (counted as
``uncombined-batch-total``).

A job lost to its infrastructure (a Python worker or an executor that died: any failure
not raised by a task) runs again, up to ``JOB_ATTEMPTS`` times, in the same transaction:
the failed attempt's results never reached the driver, so its staged files are orphans,
and each task host drops what it prepared for it (the transaction is not among the
outcomes it knows) and rebuilds the task from committed state.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType, _parse_datatype_string

from common.errors import CombinedRecordsLateError, StreamsError
from runtime.spark import executors
from runtime.spark.locality import executor_hosts, group_partitions, located_rows
from runtime.tasks.bundle import BUNDLE
from runtime.tasks.contract import METRIC, RECORD, ROW_DDL, WAKE, BatchPlan
from runtime.tasks.errors import guarded, task_error
from runtime.tasks.plan_files import plan_path, read_plan, write_plan
from runtime.tasks.task_runner import (
    arrow_rows,
    run_all_levels,
    run_inner_level,
    run_source_level,
    shuffled_rows,
)

log = logging.getLogger(__name__)

#: How many times a batch's Spark job runs when it fails for a reason outside its tasks.
JOB_ATTEMPTS = 3


@dataclass
class JobResult:
    """The rows of a batch's job, its counters, and the next wall-clock punctuation (ms)."""

    rows: list[Any]
    metrics: dict[str, int] = field(default_factory=dict)
    next_punctuation: int | None = None


def run_batch_job(
    df: DataFrame, plan: BatchPlan, depth: int, partitions: Mapping[int, int]
) -> JobResult:
    """Run ``plan``'s levels over ``df`` (the source's rows) as one Spark job.

    Args:
        df: the batch's source DataFrame.
        plan: the batch plan every Spark task receives.
        depth: the number of levels.
        partitions: level -> its number of tasks (Spark partitions of the shuffle).

    Raises:
        the first task's own exception (re-raised from Spark's wrapper), or StreamsError.
    """
    try:
        rows, retries = _collect(lambda: _job(df, plan, depth, partitions), plan)
        uncombined = 0
    except CombinedRecordsLateError as exc:
        if not plan.combine_windows:
            raise StreamsError(f"[{plan.thread.owner}] {exc} (it combined none: a bug)") from exc
        log.info("[%s] %s", plan.thread.owner, exc)
        plan = dataclasses.replace(plan, combine_windows=frozenset())
        uncombined_plan = plan
        rows, retries = _collect(lambda: _job(df, uncombined_plan, depth, partitions), plan)
        uncombined = 1
    result = JobResult(rows)
    if retries:
        result.metrics["job-retry-total"] = retries
    if uncombined:
        result.metrics["uncombined-batch-total"] = uncombined
    stray = [r for r in result.rows if r["kind"] in (RECORD, BUNDLE)]
    if stray:
        raise StreamsError(
            f"[batch {plan.thread.owner}] {len(stray)} repartitioned records of "
            f"{sorted({r['topic'] for r in stray})} reached no task; this is a bug"
        )
    due: list[int] = []
    for row in result.rows:
        kind = row["kind"]
        if kind == METRIC:
            result.metrics[row["topic"]] = result.metrics.get(row["topic"], 0) + row["count"]
        elif kind == WAKE:
            due.append(row["timestamp"])
    result.next_punctuation = min(due) if due else None
    return result


def _job(df: DataFrame, plan: BatchPlan, depth: int, partitions: Mapping[int, int]) -> DataFrame:
    """The batch's levels over ``df``, as one DataFrame of metadata rows."""
    schema = row_schema()
    rows = _source_rows(df, plan, partitions)
    if plan.fused and rows is not df and executors.is_local(df.sparkSession.sparkContext):
        # one Spark task on this machine: the same job at every batch, the plan in a file
        path = plan_path(plan.thread)
        write_plan(path, plan)
        return _planned_job(rows, path, depth)
    if plan.fused and depth > 1:  # one Spark task: no shuffle between the levels
        return rows.mapInArrow(functools.partial(_all_levels, plan, depth), schema)
    out = rows.mapInArrow(functools.partial(_source_level, plan), schema)
    for level in range(1, depth):
        spark_partitions = plan.spark_partitions_of(partitions[level])
        out = out.repartition(spark_partitions, "shuffle").mapInArrow(
            functools.partial(_inner_level, plan, level), schema
        )
    return out


@functools.lru_cache(maxsize=32)
def _planned_job(rows: DataFrame, path: str, depth: int) -> DataFrame:
    """Every level over ``rows`` (numbered rows, themselves built once per shape), in one
    Spark task reading its batch's plan at ``path`` (:mod:`runtime.tasks.plan_files`):
    built once per shape and thread, so Spark plans it once."""
    return rows.mapInArrow(functools.partial(_planned_levels, path, depth), row_schema())


@functools.cache
def row_schema() -> StructType:
    """The rows' schema, parsed once (a DDL string is parsed by the JVM at every use)."""
    parsed = _parse_datatype_string(ROW_DDL)
    assert isinstance(parsed, StructType)
    return parsed


def _source_rows(df: DataFrame, plan: BatchPlan, partitions: Mapping[int, int]) -> DataFrame:
    """The rows level 0 starts from: when the driver planned every read (``plan.inputs``,
    what a stream thread does; its query's own rows only trigger the batch), one row per
    partition number, in ``plan.spark_partitions_of`` Spark partitions (consecutive
    numbers share one), made by the JVM alone (``range``): no Python process runs to
    produce them; on a cluster, grouped by the executor their tasks live on, each group's
    Spark partition preferring that executor (:mod:`runtime.spark.locality`). Otherwise the
    source's rows (records, or its own read plans)."""
    if plan.inputs is None:
        return df
    visited = [
        int(t.split("_")[1]) for t in plan.visit if plan.levels.get(int(t.split("_")[0]), 0) == 0
    ]
    count = max([partitions.get(0, 0), *(p + 1 for p in plan.inputs), *(p + 1 for p in visited)])
    if count == 0:
        return df
    spark_partitions = plan.spark_partitions_of(count)
    spark = df.sparkSession
    owner = _first_level_owners(plan, count)
    hosts = executor_hosts(spark) if owner and not plan.fused else {}
    if hosts:  # on a cluster: each row's Spark partition prefers its tasks' executor
        return located_rows(spark, group_partitions(count, spark_partitions, owner), hosts)
    return _numbered_rows(spark, count, spark_partitions)


def _numbered_rows(spark: SparkSession, count: int, spark_partitions: int) -> DataFrame:
    """One row per partition number ``0..count-1`` in ``spark_partitions`` Spark
    partitions (built once per shape and SparkContext: its plan is analysed once, and a
    batch's job only adds its levels on top; each batch of a query comes with a new
    ``SparkSession`` object, so the context is the key)."""
    context = spark.sparkContext
    key = (count, spark_partitions)
    known = _rows_of_shape.get(key)
    if known is not None and known[0] is context:
        return known[1]
    if len(_rows_of_shape) >= _SHAPES_KEPT:
        _rows_of_shape.clear()
    rows = spark.range(0, count, 1, spark_partitions).selectExpr(
        "CAST(id AS INT) AS partition", "CAST(NULL AS BINARY) AS task_input"
    )
    _rows_of_shape[key] = (context, rows)
    return rows


#: The numbered rows built so far: (count, Spark partitions) -> (context, rows).
_rows_of_shape: dict[tuple[int, int], tuple[SparkContext, DataFrame]] = {}
#: How many shapes of numbered rows are kept.
_SHAPES_KEPT = 32


def _first_level_owners(plan: BatchPlan, count: int) -> dict[int, str]:
    """Partition number -> the executor its first-level tasks live on (on a cluster)."""
    owner: dict[int, str] = {}
    for task, (executor, _) in sorted(plan.placement.items()):
        sub, _, partition = task.partition("_")
        if plan.levels.get(int(sub), 0) == 0 and int(partition) < count:
            owner.setdefault(int(partition), executor)
    return owner


def _collect(job: Callable[[], DataFrame], plan: BatchPlan) -> tuple[list[Any], int]:
    """Return the job's rows and how many failed attempts came first.

    Each attempt builds its DataFrame anew: collecting the same one again would reuse the
    shuffle files its first run wrote and run only the failed level, while a task host
    that lost an earlier level of the batch needs every level to run again.
    """
    for attempt in range(1, JOB_ATTEMPTS + 1):
        try:
            # every column: only metadata rows reach the driver (a select would cost a
            # JVM call per column at every batch)
            return job().collect(), attempt - 1
        except Exception as exc:
            original = task_error(exc)
            if original is not None:
                raise original from exc
            text = str(exc).strip()
            if attempt == JOB_ATTEMPTS or "cancel" in text.lower():
                raise
            log.warning(
                "[%s] the batch's Spark job failed (attempt %d of %d), running it again: %s",
                plan.thread.owner,
                attempt,
                JOB_ATTEMPTS,
                text.splitlines()[0] if text else repr(exc),
            )
    raise AssertionError("unreachable")


def _source_level(plan: BatchPlan, batches: Any) -> Any:
    return guarded(arrow_rows(run_source_level(plan, batches)))


def _inner_level(plan: BatchPlan, level: int, batches: Any) -> Any:
    return guarded(arrow_rows(run_inner_level(plan, level, shuffled_rows(batches))))


def _all_levels(plan: BatchPlan, depth: int, batches: Any) -> Any:
    return guarded(arrow_rows(run_all_levels(plan, depth, batches)))


def _planned_levels(path: str, depth: int, batches: Any) -> Any:
    return guarded(_levels_of_file(path, depth, batches))


def _levels_of_file(path: str, depth: int, batches: Any) -> Iterator[Any]:
    yield from arrow_rows(run_all_levels(read_plan(path), depth, batches))
