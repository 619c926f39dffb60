"""How a batch runs its sub-topologies: levels, the shuffle between them, and the order
in which a task takes the records of several topics."""

from __future__ import annotations

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from common.serdes import Serdes
from runtime.tasks.partition_group import hold_back, interleave, merged_order
from runtime.tasks.task_runner import shuffle_keys, spark_hash_int
from runtime.thread.batch_levels import plan_levels
from topology import Grouped, StreamsBuilder


def test_the_int_hash_is_sparks(spark: SparkSession) -> None:
    values = [*range(-50, 200), 2**31 - 1, -(2**31)]
    df = spark.createDataFrame([(v,) for v in values], "v int")
    got = {r["v"]: r["h"] for r in df.select("v", sf.hash("v").alias("h")).collect()}
    assert {v: spark_hash_int(v) for v in values} == got


def test_shuffle_keys_put_each_partition_in_its_own_spark_partition(spark: SparkSession) -> None:
    for n in (1, 3, 8, 16):
        keys = shuffle_keys(n)
        df = spark.createDataFrame([(p, keys[p]) for p in range(n)], "p int, shuffle int")

        def where(rows: object) -> object:
            part = TaskContext.get().partitionId()  # type: ignore[union-attr]
            for row in rows:  # type: ignore[attr-defined]
                yield (row["p"], part)

        placed = dict(df.repartition(n, "shuffle").rdd.mapPartitions(where).collect())
        assert placed == {p: p for p in range(n)}, n


def _two_stage() -> object:
    b = StreamsBuilder()
    s = Serdes.String()
    (
        b.stream("in")
        .group_by(lambda k, v: v, Grouped.with_(s, s))
        .count()
        .to_stream()
        .group_by(lambda k, v: str(v), Grouped.with_(s, Serdes.Long()))
        .count()
        .to_stream()
        .to("out")
    )
    return b.build()


def test_levels_follow_the_repartition_topics() -> None:
    topology = _two_stage()
    names = sorted(topology.repartition_topic_names("app"))  # type: ignore[attr-defined]
    assert len(names) == 2
    sources = {"in": 0, names[0]: 1, names[1]: 2}
    levels = plan_levels(topology, sources, {0: 4, 1: 4, 2: 4}, "app", in_batch=True)  # type: ignore[arg-type]
    assert levels.levels == {0: 0, 1: 1, 2: 2}
    assert levels.inline == {names[0]: 1, names[1]: 2}
    assert levels.depth == 3
    assert levels.shuffle == {4: shuffle_keys(4)}
    through = plan_levels(topology, sources, {0: 4, 1: 4, 2: 4}, "app", in_batch=False)  # type: ignore[arg-type]
    assert through.levels == {0: 0, 1: 0, 2: 0}
    assert through.inline == {}
    assert through.depth == 1


def test_records_of_several_topics_are_taken_by_timestamp() -> None:
    def rows(stamps: list[int]) -> pa.Table:
        return pa.table({"timestamp": pa.array(stamps, pa.int64()), "i": list(range(len(stamps)))})

    queues = [("a", rows([1, 5, 6, 20])), ("b", rows([2, 3, 30])), ("c", rows([5]))]
    order = [
        (topic, ts)
        for topic, run in interleave(queues)
        for ts in run.column("timestamp").to_pylist()
    ]
    # The head with the smallest timestamp goes first; ties go to the earlier topic; a
    # queue keeps its own order even when it is not sorted by time.
    assert order == [
        ("a", 1),
        ("b", 2),
        ("b", 3),
        ("a", 5),
        ("c", 5),
        ("a", 6),
        ("a", 20),
        ("b", 30),
    ]


def test_records_after_a_drained_partition_with_more_to_read_wait() -> None:
    """``a``'s partition has records beyond the batch: once its last record here is taken,
    the rest (``b``'s 30) waits for the next batch; nobody waiting takes everything."""

    def rows(stamps: list[int]) -> pa.Table:
        return pa.table({"timestamp": pa.array(stamps, pa.int64())})

    queues = [("a", rows([1, 5, 6, 20])), ("b", rows([2, 3, 30]))]
    order = merged_order(queues)
    assert order == [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (0, 3), (1, 2)]
    assert hold_back(order, [4, 3], [True, False]) == [4, 2]
    assert hold_back(order, [4, 3], [False, True]) == [4, 3]  # b drains last: all of it
    assert hold_back(order, [4, 3], [False, False]) is None


def test_the_topics_of_a_cycle_go_through_storage_and_the_rest_is_shuffled() -> None:
    """A foreign-key join's subscription and response topics form a cycle between its
    two sub-topologies: they are read from their topics; an acyclic repartition upstream
    of the join stays a shuffle inside the batch."""
    s = Serdes.String()
    b = StreamsBuilder()
    left = b.stream("in").group_by(lambda k, v: v, Grouped.with_(s, s)).count()
    left.join(b.table("right"), str, lambda a, c: f"{a}{c}").to_stream().to("out")
    topology = b.build()
    names = sorted(topology.repartition_topic_names("app"))
    cyclic = [n for n in names if "FK-JOIN" in n]
    assert len(names) == 3 and len(cyclic) == 2
    subs = {sub.id: sub for sub in topology.task_subtopologies()}
    sources = {
        topology.topic_name(t, "app", internal=spec.internal): sub_id
        for sub_id, sub in subs.items()
        for name in sub.sources
        for spec in [topology.nodes[name]]
        for t in spec.topics  # type: ignore[union-attr]
    }
    levels = plan_levels(topology, sources, dict.fromkeys(subs, 2), "app", in_batch=True)
    assert set(levels.inline) == set(names) - set(cyclic)
    assert levels.depth == 2
