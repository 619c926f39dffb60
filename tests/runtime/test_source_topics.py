"""Pattern subscriptions and per-source reset policies, without Spark: which topics a
pattern source reads (never the application's internal ones), how the topic source finds
new ones at most every ``metadata.max.age.ms``, and how the stream thread adopts them."""

from __future__ import annotations

import re
import time

from common.config import StreamsConfig
from runtime.app.internal_topics import plan_topics
from runtime.spark.source_topics import (
    PatternFollower,
    PatternWatch,
    internal_topic_names,
    pattern_sources,
)
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.thread.read_plan import ReadPlanner
from topology import Consumed, StreamsBuilder, Topology


def topology() -> Topology:
    b = StreamsBuilder()
    orders = b.stream(re.compile("orders-.*"), Consumed(offset_reset="latest"))
    orders.merge(b.stream("audit")).group_by(lambda k, v: v).count().to_stream().to("out")
    return b.build()


def test_the_plan_reads_matching_topics_but_not_internal_ones(admin: TopicAdmin) -> None:
    for topic, n in (("orders-a", 2), ("orders-b", 3), ("audit", 1), ("out", 1), ("x", 1)):
        admin.create(topic, n)
    admin.create("orders-app-KSTREAM-AGGREGATE-STATE-STORE-0000000004-changelog", 3)
    plan = plan_topics(topology(), admin, "orders-app")
    external = {t for t in plan.sources if not t.startswith("orders-app-")}
    assert external == {"orders-a", "orders-b", "audit"}
    assert plan.tasks[0] == 3  # the largest partition count of the sub-topology's topics
    assert plan.offset_resets == {"orders-a": "latest", "orders-b": "latest"}
    assert internal_topic_names(topology(), "orders-app") <= set(plan.sources) | set(plan.outputs)


def test_the_source_policy_wins_over_auto_offset_reset(admin: TopicAdmin, root: str) -> None:
    admin.create("orders-a", 1)
    admin.create("audit", 1)
    producer = Producer(admin)
    for topic in ("orders-a", "audit"):
        producer.send(topic, b"k", b"v", timestamp=1)
    producer.flush()
    config = StreamsConfig(
        **{"application.id": "a", "topics.root": root, "auto.offset.reset": "earliest"}
    )
    planner = ReadPlanner(
        TopicReader(admin),
        config,
        {"orders-a": 0, "audit": 0},
        frozenset(),
        "t",
        offset_resets={"orders-a": "latest"},
    )
    positions: dict[tuple[str, int], int] = {}
    reads = planner.plan(["orders-a", "audit"], lambda task, p: True, positions)
    assert [s.topic for slices in reads.inputs.values() for s in slices] == ["audit"]
    assert positions == {("orders-a", 0): 1, ("audit", 0): 0}


def test_the_watch_lists_at_most_every_max_age() -> None:
    listings: list[int] = []
    topics = ["orders-a", "orders-app-x-repartition", "other"]

    def list_topics() -> list[str]:
        listings.append(1)
        return list(topics)

    patterns = [p.pattern for p in pattern_sources(topology())]
    watch = PatternWatch(patterns, ["orders-app-x-repartition"], list_topics, 60_000)
    assert watch.poll([]) == ["orders-a"]
    topics.append("orders-b")
    assert watch.poll(["orders-a"]) == []  # not due yet: no listing
    assert len(listings) == 1
    watch.max_age_ms = 1
    time.sleep(0.01)
    assert watch.poll(["orders-a"]) == ["orders-b"]


def test_the_thread_adopts_new_topics_that_fit_its_tasks(admin: TopicAdmin) -> None:
    admin.create("orders-a", 2)
    admin.create("orders-b", 2)
    admin.create("orders-big", 5)
    subscribed = ["audit", "orders-a", "orders-b", "orders-big"]
    follower = PatternFollower(topology(), "app", admin, lambda: subscribed, {0: 2})
    found, resets = follower.new_sources({"audit": 0, "orders-a": 0})
    assert found == {"orders-b": 0}  # orders-big has more partitions than tasks: later
    assert resets == {"orders-b": "latest"}
    assert follower.new_sources({"audit": 0, "orders-a": 0, "orders-b": 0}) == ({}, {})
