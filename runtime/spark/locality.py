"""Spark partitions that prefer an executor: a batch's first level, placed where its tasks
live (as Spark's own stateful operators place theirs through preferred locations).

Spark's Python API gives no way to set an RDD partition's preferred locations; the JVM's
``SparkContext.makeRDD(Seq[(T, Seq[String])])`` does (one partition per element, each with
its locations), so the rows are made there through the Py4J gateway, as a DataFrame of one
row per partition number. A location ``executor_<host>_<id>`` asks Spark's scheduler for
that very executor; it waits ``spark.locality.wait`` (3 s) for it before running the task
elsewhere (the task's visit then goes to its executor over TCP, see
:mod:`runtime.tasks.client`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

log = logging.getLogger(__name__)

#: One row per group: its partition numbers, comma-separated (exploded afterwards).
_SCHEMA = StructType([StructField("partitions", StringType(), nullable=False)])


def executor_hosts(spark: SparkSession) -> dict[str, str]:
    """Return executor id -> host, as Spark's scheduler knows them (the driver excluded)."""
    jvm = spark.sparkContext._jvm
    status = spark.sparkContext._jsc.sc().statusStore()
    executors = jvm.scala.jdk.javaapi.CollectionConverters.asJava(  # type: ignore[union-attr]
        status.executorList(True)
    )
    out: dict[str, str] = {}
    for summary in executors:
        executor = str(summary.id())
        if executor != "driver":
            out[executor] = str(summary.hostPort()).rsplit(":", 1)[0]
    return out


def group_partitions(
    count: int, spark_partitions: int, owner: Mapping[int, str]
) -> list[tuple[list[int], str | None]]:
    """Split partition numbers ``0..count-1`` into about ``spark_partitions`` groups, each
    of one executor's partitions (``owner``: partition -> executor; others: no executor)."""
    by_executor: dict[str | None, list[int]] = {}
    for partition in range(count):
        by_executor.setdefault(owner.get(partition), []).append(partition)
    groups: list[tuple[list[int], str | None]] = []
    for executor, partitions in sorted(by_executor.items(), key=lambda kv: kv[1][0]):
        chunks = max(1, round(len(partitions) * spark_partitions / max(count, 1)))
        size = -(-len(partitions) // chunks)
        for at in range(0, len(partitions), size):
            groups.append((partitions[at : at + size], executor))
    return groups


def located_rows(
    spark: SparkSession, groups: Sequence[tuple[list[int], str | None]], hosts: Mapping[str, str]
) -> DataFrame:
    """One Spark partition per group, preferring its executor, with the columns of
    ``spark.range``'s rows: ``partition int, task_input binary`` (null)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    converters = jvm.scala.jdk.javaapi.CollectionConverters
    elements = jvm.java.util.ArrayList()
    for partitions, executor in groups:
        gateway = spark.sparkContext._gateway
        values = gateway.new_array(jvm.java.lang.Object, 1)  # type: ignore[union-attr]
        values[0] = ",".join(str(p) for p in partitions)
        row = jvm.org.apache.spark.sql.RowFactory.create(values)
        places = jvm.java.util.ArrayList()
        host = hosts.get(executor or "")
        if host is not None:
            places.add(f"executor_{host}_{executor}")
        elements.add(jvm.scala.Tuple2(row, converters.asScala(places).toList()))
    row_class = jvm.java.lang.Class.forName("org.apache.spark.sql.Row")
    tag = getattr(getattr(jvm.scala.reflect, "ClassTag$"), "MODULE$").apply(row_class)
    context = spark.sparkContext._jsc.sc()
    rdd = context.makeRDD(converters.asScala(elements).toList(), tag)
    schema = spark._jsparkSession.parseDataType(_SCHEMA.json())
    frame = DataFrame(spark._jsparkSession.createDataFrame(rdd.toJavaRDD(), schema), spark)
    return frame.selectExpr("explode(split(partitions, ',')) AS p").selectExpr(
        "CAST(p AS INT) AS partition", "CAST(NULL AS BINARY) AS task_input"
    )
