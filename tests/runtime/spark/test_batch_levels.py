"""How a batch runs its sub-topologies: levels, the shuffle between them, and the order
in which a task takes the records of several topics."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from common.config import StreamsConfig
from common.serdes import Serdes
from runtime.tasks.partition_group import interleave
from runtime.tasks.shuffle import shuffle_keys, spark_hash_int
from runtime.thread.batch_levels import WindowCombining, plan_levels
from topology import Grouped, Processor, StreamsBuilder, TimeWindows


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
    assert levels.partitions == {0: 4, 1: 4, 2: 4}
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


def _fk_join_after_a_repartition() -> tuple[object, dict[str, int]]:
    s = Serdes.String()
    b = StreamsBuilder()
    left = b.stream("in").group_by(lambda k, v: v, Grouped.with_(s, s)).count()
    left.join(b.table("right"), str, lambda a, c: f"{a}{c}").to_stream().to("out")
    topology = b.build()
    subs = {sub.id: sub for sub in topology.task_subtopologies()}
    sources = {
        topology.topic_name(t, "app", internal=spec.internal): sub_id
        for sub_id, sub in subs.items()
        for name in sub.sources
        for spec in [topology.nodes[name]]
        for t in spec.topics  # type: ignore[union-attr]
    }
    return topology, sources


def test_a_foreign_key_join_unrolls_into_levels_of_one_batch() -> None:
    """The subscription and response topics of a foreign-key join form a cycle between its
    two sub-topologies, but not a cycle of records: the left table's updates (level 1,
    after the upstream repartition) reach the subscriptions (level 2, with the right
    table's records, in timestamp order), which reach the responses (level 3): the left
    side runs at levels 1 and 3 of the same batch."""
    topology, sources = _fk_join_after_a_repartition()
    names = sorted(topology.repartition_topic_names("app"))  # type: ignore[attr-defined]
    (upstream,) = [n for n in names if "AGGREGATE" in n]
    (subscription,) = [n for n in names if "REGISTRATION" in n]
    (response,) = [n for n in names if "RESPONSE" in n]
    left, right = sources[upstream], sources[subscription]
    tasks = dict.fromkeys(set(sources.values()), 2)
    levels = plan_levels(topology, sources, tasks, "app", in_batch=True)  # type: ignore[arg-type]
    assert levels.inline == {upstream: 1, subscription: 2, response: 3}
    assert levels.levels == {0: 0, left: 3, right: 2}
    assert levels.topics == {upstream: 1}  # read at level 1, before the left side's last
    assert levels.visits == {left: (1, 3)}
    assert levels.depth == 4
    # the subscriptions are read with the right table (from storage): they may wait for
    # its next records, spilled to their topic; the other two are read alone
    assert levels.spill == {subscription}
    through = plan_levels(topology, sources, tasks, "app", in_batch=False)  # type: ignore[arg-type]
    assert through.inline == {} and through.depth == 1 and through.visits == {}


class _Forward(Processor):  # type: ignore[type-arg]
    def process(self, record: Any) -> None:
        self.context.forward(record)


def test_a_processor_api_sub_topology_is_not_visited_twice_in_a_batch() -> None:
    """A Processor-API node on the left side of a foreign-key join: its punctuators may
    forward anything at the end of a batch, so the left side runs once per batch and the
    response topic goes through storage (read by the next batch)."""
    b = StreamsBuilder()
    left = b.table("left")
    left.to_stream().process(_Forward).to("copy")
    left.join(b.table("right"), str, lambda a, c: f"{a}{c}").to_stream().to("out")
    topology = b.build()
    names = sorted(topology.repartition_topic_names("app"))
    (subscription,) = [n for n in names if "REGISTRATION" in n]
    (response,) = [n for n in names if "RESPONSE" in n]
    sources = {"left": 0, response: 0, "right": 1, subscription: 1}
    levels = plan_levels(topology, sources, {0: 2, 1: 2}, "app", in_batch=True)
    assert levels.inline == {subscription: 1}
    assert levels.levels == {0: 0, 1: 1} and levels.visits == {}


def test_a_windowed_count_is_combined_inside_exactly_once_v2_batches_only() -> None:
    """Its topic is combined where the batch shuffles it, never after a batch that had to
    run again uncombined (for a while), and never under at_least_once (whose tasks commit
    their stores as they go: a second attempt would count the batch twice)."""
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v).windowed_by(
        TimeWindows.of_size_and_grace(10, 5)
    ).count().to_stream().to("out")
    topology = b.build()
    (topic,) = topology.repartition_topic_names("app")  # type: ignore[attr-defined]
    sources = {"in": 0, topic: 1}
    shuffled = plan_levels(topology, sources, {0: 2, 1: 2}, "app", in_batch=True)  # type: ignore[arg-type]
    through = plan_levels(topology, sources, {0: 2, 1: 2}, "app", in_batch=False)  # type: ignore[arg-type]
    base = {
        "application.id": "app",
        "topics.root": "/tmp/unused",
        "processing.guarantee": "exactly_once_v2",
    }
    eos = WindowCombining(topology, StreamsConfig.from_dict(base))
    assert eos.topics(shuffled, 0) == {topic}
    assert eos.topics(through, 0) == frozenset()
    eos.after(3, {"uncombined-batch-total": 1})
    assert eos.topics(shuffled, 4) == frozenset()
    assert eos.topics(shuffled, 4 + WindowCombining.UNCOMBINED_BATCHES) == {topic}
    alos = StreamsConfig.from_dict({**base, "processing.guarantee": "at_least_once"})
    assert WindowCombining(topology, alos).topics(shuffled, 0) == frozenset()
