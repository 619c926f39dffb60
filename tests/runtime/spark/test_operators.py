"""Operators that need more of the runtime than a plain source-to-sink flow, run on real
Spark through ``StreamsApp`` and compared with the ``TopologyTestDriver`` on the same
input: a foreign-key join (its repartition topics form a cycle), a pattern source, a
topic-name-extractor sink, a per-source offset reset, the state listener across
rebalances, and a windowed count whose records are combined inside each batch."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.errors import UnknownTopicError
from runtime.app.app import StreamsApp
from runtime.app.app_state import AppState
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from streams.testing import TopologyTestDriver
from tests.runtime.spark.helpers import eos_config
from topology import Consumed, StreamsBuilder, TimeWindows, Topology

#: A raw record: key, value, timestamp.
Raw = tuple[bytes | None, bytes | None, int]


def config_for(app_id: str, root: str, state: Path, **extra: Any) -> dict[str, Any]:
    """An exactly_once_v2 configuration with small batches, for one instance."""
    small = {"commit.interval.ms": 50, "max.poll.records": 3}
    return eos_config(app_id, root, str(state), **{**small, **extra})


def produce(
    admin: TopicAdmin, topic: str, records: list[tuple[str | None, str | None]], start: int = 1
) -> None:
    """Append ``records`` to ``topic``, timestamps ``start``, ``start`` + 1, ... in order."""
    producer = Producer(admin)
    for ts, (key, value) in enumerate(records, start=start):
        producer.send(
            topic,
            None if key is None else key.encode(),
            None if value is None else value.encode(),
            timestamp=ts,
        )
    producer.flush()


def read_topic(root: str, topic: str) -> list[Raw]:
    """Every committed record of ``topic``, partition after partition, in offset order."""
    reader = TopicReader(root)
    out: list[Raw] = []
    for p in sorted(reader.end_offsets(topic)):
        table = reader.read(topic, p, 0)
        out += zip(
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            table.column("timestamp").to_pylist(),
            strict=True,
        )
    return out


def driver_run(
    topology: Topology, config: Mapping[str, Any], inputs: list[tuple[str, list[Raw]]]
) -> dict[str, list[Raw]]:
    """Pipe ``inputs`` (topic after topic) through the driver; return every output topic."""
    with TopologyTestDriver(topology, config) as driver:
        for topic, raws in inputs:
            for key, value, ts in raws:
                driver.pipe_raw(topic, key, value, ts)
        return {
            t: [(r.key, r.value, r.timestamp) for r in driver.output_queue(t)]
            for t in driver.producer_topics()
        }


def latest(records: list[Raw]) -> dict[bytes | None, bytes | None]:
    """The last value of each key (a table's final content; None: deleted)."""
    return {key: value for key, value, _ in records}


def raw(rows: list[tuple[str, str | None]]) -> list[Raw]:
    """``rows`` as raw records with timestamps 1, 2, ... (as :func:`produce` writes them)."""
    return [
        (k.encode(), None if v is None else v.encode(), ts)
        for ts, (k, v) in enumerate(rows, start=1)
    ]


def per_key(records: list[Raw]) -> dict[bytes | None, list[Raw]]:
    out: dict[bytes | None, list[Raw]] = {}
    for record in records:
        out.setdefault(record[0], []).append(record)
    return out


def run_app(spark: SparkSession, topology: Topology, config: Mapping[str, Any]) -> StreamsApp:
    app = StreamsApp(topology, config, spark=spark)
    app.run_until_idle()
    return app


# -- 1. a foreign-key join: its subscription and response topics form a cycle -----------


def fk_topology() -> Topology:
    b = StreamsBuilder()
    orders = b.table("orders")
    products = b.table("products")
    orders.join(
        products, lambda order: order.split(":")[0], lambda o, p: f"{o}/{p}"
    ).to_stream().to("enriched")
    return b.build()


FK_PRODUCTS = [("p1", "apple"), ("p2", "pear"), ("p3", "plum")]
FK_ORDERS = [("o1", "p1:2"), ("o2", "p2:1"), ("o3", "p1:5"), ("o4", "p3:1"), ("o5", "p9:1")]
FK_LATER = [("o2", "p3:4"), ("o1", None), ("o6", "p2:7")]


def test_a_foreign_key_join_runs_with_the_default_configuration(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    for topic in ("orders", "products", "enriched"):
        admin.create(topic, 2)
    produce(admin, "products", FK_PRODUCTS)
    produce(admin, "orders", FK_ORDERS)
    config = config_for("fk-app", root, tmp_path / "state", **{"max.poll.records": 5})
    app = run_app(spark, fk_topology(), config)
    # the round trip between the sub-topologies (subscriptions, then responses) ran
    # inside each batch: nothing went through its topics
    cyclic = [t for t in admin.list() if "FK-JOIN" in t and t.endswith("-topic")]
    assert len(cyclic) == 2
    assert not any(sum(TopicReader(root).end_offsets(t).values()) for t in cyclic)
    first = read_topic(root, "enriched")
    assert app.threads[0].levels.visits, "the left side runs at two levels of a batch"
    inputs = [("products", raw(FK_PRODUCTS)), ("orders", raw(FK_ORDERS))]
    assert latest(first) == latest(driver_run(fk_topology(), config, inputs)["enriched"])
    produce(admin, "orders", FK_LATER)  # a restart carries on from the committed state
    run_app(spark, fk_topology(), config)
    got = read_topic(root, "enriched")
    assert not Counter(first) - Counter(got)  # nothing of the first run is lost
    expected = driver_run(fk_topology(), config, [*inputs, ("orders", raw(FK_LATER))])
    assert latest(got) == latest(expected["enriched"])
    assert latest(got) == {
        b"o2": b"p3:4/plum",
        b"o3": b"p1:5/apple",
        b"o4": b"p3:1/plum",
        b"o6": b"p2:7/pear",
        b"o1": None,
    }
    # Spark may fold several updates of a key into one batch: the final record of each
    # key (value and timestamp) is the driver's
    # With the record cache on (the default), a product and the orders subscribing to it
    # in one batch answer twice, as in Kafka: the subscription sees the cached product at
    # once, and the cache forwards the product to its subscribers when it is flushed at
    # the commit (so the last timestamp may be the product's). The driver commits after
    # every record. Without the cache (the parity suite) every record is the driver's.
    assert (b"o3", b"p1:5/apple", 3) in first


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait until ``check()`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_records_shuffled_inside_a_batch_wait_for_a_table_partition_with_more_to_read(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """A stream re-keyed inside the batch joins a table read at the same level. The
    table's partitions have more records than a batch reads: once a slice is drained,
    the re-keyed records after it wait for the table's next records (max.task.idle.ms),
    as in Kafka. They exist nowhere else, so those that wait are spilled to their
    repartition topic in the batch's transaction and read from there by a later batch:
    every click is joined once, with its user (all users come first in time)."""
    for topic in ("clicks", "users", "joined"):
        admin.create(topic, 2)
    produce(admin, "users", [(f"u{i}", f"name{i}") for i in range(30)])
    produce(admin, "clicks", [(f"c{i}", f"u{i % 30}") for i in range(40)], start=100)
    b = StreamsBuilder()
    users = b.table("users")
    b.stream("clicks").select_key(lambda k, v: v).left_join(
        users, lambda click, name: f"{click}:{name}"
    ).to("joined")
    config = config_for("rekeyed-join", root, tmp_path / "state", **{"max.poll.records": 2})
    app = run_app(spark, b.build(), config)
    (rekeyed,) = app.threads[0].levels.inline
    assert app.threads[0].levels.spill == {rekeyed}
    assert sorted(v for _, v, _ in read_topic(root, "joined")) == sorted(
        f"u{i % 30}:name{i % 30}".encode() for i in range(40)
    )
    # the log manager purges the repartition topic below the committed offsets while the
    # app runs: its log-end offsets count every record ever spilled to it
    spilled = sum(TopicReader(root).end_offsets(rekeyed).values())
    assert spilled, "some clicks waited for the users' next records"
    assert app.metrics().total("held-back-records-total") >= spilled


# -- 2. a pattern source: existing and new matching topics, never internal ones ---------


def pattern_topology() -> Topology:
    b = StreamsBuilder()
    (
        b.stream(re.compile("orders-.*"))
        .group_by(lambda k, v: v)
        .count()
        .to_stream()
        .map_values(str)
        .to("sales")
    )
    return b.build()


def test_a_pattern_source_reads_matching_topics_and_new_ones_while_running(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    # application.id "orders-app": its internal topics match the pattern but are not read
    for topic, n in (("orders-a", 2), ("orders-b", 1), ("sales", 2), ("other", 1)):
        admin.create(topic, n)
    first = {
        "orders-a": [("k1", "apple"), ("k2", "pear"), ("k3", "apple")],
        "orders-b": [("k4", "pear"), ("k5", "plum")],
        "other": [("k6", "apple")],
    }
    later = [("k7", "apple"), ("k8", "fig")]
    for topic, rows in first.items():
        produce(admin, topic, rows)
    config = config_for("orders-app", root, tmp_path / "state", **{"metadata.max.age.ms": 300})
    inputs = [(t, raw(r)) for t, r in first.items() if t != "other"]
    expected = latest(driver_run(pattern_topology(), config, inputs)["sales"])
    app = StreamsApp(pattern_topology(), config, spark=spark)
    app.start()
    try:
        wait_for(lambda: latest(read_topic(root, "sales")) == expected, 120, "the first counts")
        assert app.state is AppState.RUNNING
        admin.create("orders-c", 2)  # a new matching topic, while the app runs
        produce(admin, "orders-c", later)
        expected = latest(
            driver_run(pattern_topology(), config, [*inputs, ("orders-c", raw(later))])["sales"]
        )
        assert expected[b"apple"] == b"3" and expected[b"fig"] == b"1"
        wait_for(lambda: latest(read_topic(root, "sales")) == expected, 120, "orders-c's counts")
    finally:
        app.close()
    # the pattern's sub-topology reads the matching topics, not "other", not the
    # application's own internal topics (which the pattern matches too)
    sources = app.threads[0].sources
    assert sorted(t for t, sub in sources.items() if sub == 0) == [
        "orders-a",
        "orders-b",
        "orders-c",
    ]
    assert any(t.startswith("orders-app-") for t in admin.list())


# -- 4. a source's own offset reset policy wins over auto.offset.reset -----------------


def reset_topology() -> Topology:
    b = StreamsBuilder()
    early = b.stream("early", Consumed(offset_reset="earliest"))
    late = b.stream("late", Consumed().with_offset_reset_policy("latest"))
    early.merge(late).map_values(str.upper).to("merged")
    return b.build()


def test_each_source_starts_where_its_own_reset_policy_says(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    for topic in ("early", "late", "merged"):
        admin.create(topic, 2)
    produce(admin, "early", [("a", "x"), ("b", "y")])
    produce(admin, "late", [("c", "z")])  # before the first start: skipped (latest)
    # "none" would refuse a partition without a committed position: the sources' own
    # policies decide instead
    config = config_for("reset-app", root, tmp_path / "state", **{"auto.offset.reset": "none"})
    app = StreamsApp(reset_topology(), config, spark=spark)
    app.start()
    values = lambda: sorted(v for _, v, _ in read_topic(root, "merged"))  # noqa: E731
    try:
        wait_for(lambda: values() == [b"X", b"Y"], 60, "early's records")
        assert app.state is AppState.RUNNING  # "late" was reset to its end, not refused
        produce(admin, "late", [("d", "w")])  # while running: past late's reset position
        produce(admin, "early", [("e", "v")])
        wait_for(lambda: len(values()) >= 4, 60, "the records produced while running")
    finally:
        app.close()
    inputs = [("early", raw([("a", "x"), ("b", "y"), ("e", "v")])), ("late", raw([("d", "w")]))]
    expected = driver_run(reset_topology(), config, inputs)["merged"]
    assert sorted(r[:2] for r in read_topic(root, "merged")) == sorted(r[:2] for r in expected)


# -- 3. a sink with a topic-name extractor -------------------------------------------------


def extractor_topology() -> Topology:
    b = StreamsBuilder()
    b.stream("events").map_values(str.upper).to(lambda k, v, ctx: f"events-{v.split(':')[0]}")
    return b.build()


def test_a_topic_name_extractor_writes_each_record_to_its_topic(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    for topic, n in (("events", 2), ("events-RED", 2), ("events-BLUE", 1)):
        admin.create(topic, n)
    rows = [(f"k{i % 5}", f"{'red' if i % 3 else 'blue'}:{i}") for i in range(12)]
    produce(admin, "events", rows)
    config = config_for("extract-app", root, tmp_path / "state")
    run_app(spark, extractor_topology(), config)
    expected = driver_run(extractor_topology(), config, [("events", raw(rows))])
    assert sorted(expected) == ["events-BLUE", "events-RED"]
    for topic, want in expected.items():
        got = read_topic(root, topic)
        assert sorted(got) == sorted(want), topic
        assert per_key(got) == per_key(want), topic  # each key's records in order
    assert len(read_topic(root, "events-RED")) == 8


def test_a_topic_name_extractor_naming_a_missing_topic_fails_with_what_to_do(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    for topic, n in (("events", 1), ("events-RED", 1)):
        admin.create(topic, n)
    produce(admin, "events", [("a", "red:1"), ("b", "green:2")])
    app = StreamsApp(
        extractor_topology(), config_for("extract-missing", root, tmp_path), spark=spark
    )
    with pytest.raises(UnknownTopicError, match=r"topic 'events-GREEN' does not exist.*--create"):
        app.run_until_idle()
    assert app.state is AppState.ERROR
    assert read_topic(root, "events-RED") == []  # the failed batch committed nothing


# -- 5. the state listener sees every rebalance ------------------------------------------


def upper_topology() -> Topology:
    b = StreamsBuilder()
    b.stream("words").map_values(str.upper).to("shouted")
    return b.build()


def test_the_state_goes_through_rebalancing_at_every_rebalance(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """A second instance joins, then leaves: each time the first one's group rebalances
    and its state goes RUNNING -> REBALANCING -> RUNNING, as Kafka's KafkaStreams does."""
    admin.create("words", 2)
    admin.create("shouted", 2)
    extra = {"heartbeat.interval.ms": 200, "session.timeout.ms": 10000}
    states: list[AppState] = []
    first = StreamsApp(
        upper_topology(), config_for("rebalance-app", root, tmp_path / "a", **extra), spark=spark
    )
    first.set_state_listener(lambda new, old: states.append(new))
    rows = [(f"k{i}", f"w{i}") for i in range(6)]
    produce(admin, "words", rows[:2])
    first.start()
    try:
        wait_for(lambda: len(read_topic(root, "shouted")) == 2, 60, "the first records")
        assert states == [AppState.REBALANCING, AppState.RUNNING]
        second = StreamsApp(
            upper_topology(),
            config_for("rebalance-app", root, tmp_path / "b", **extra),
            spark=spark,
        )
        second.start()  # returns once the group gave it its tasks
        wait_for(lambda: first.state is AppState.RUNNING, 60, "the first instance to rejoin")
        produce(admin, "words", rows[2:4])
        wait_for(lambda: len(read_topic(root, "shouted")) == 4, 60, "records of both instances")
        second.close()  # leaves the group: the first one takes every task back
        wait_for(lambda: states.count(AppState.REBALANCING) == 3, 60, "the second rebalance")
        wait_for(lambda: first.state is AppState.RUNNING, 60, "the first instance to rejoin")
        produce(admin, "words", rows[4:])
        wait_for(lambda: len(read_topic(root, "shouted")) == 6, 60, "the last records")
    finally:
        first.close()
    running, rebalancing = AppState.RUNNING, AppState.REBALANCING
    assert states == [*[rebalancing, running] * 3, AppState.PENDING_SHUTDOWN, AppState.NOT_RUNNING]
    expected = driver_run(upper_topology(), config_for("x", root, tmp_path), [("words", raw(rows))])
    assert sorted(r[:2] for r in read_topic(root, "shouted")) == sorted(
        r[:2] for r in expected["shouted"]
    )


# -- 6. a windowed count combined inside each batch; a late batch runs again uncombined --


def test_a_windowed_count_combines_inside_batches_and_runs_a_late_batch_again(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """Each batch's words are combined per word and window set before the shuffle (the
    batches' timestamps ascend). The second batch's are older than the grace allows:
    combined by their task, refused by the counting one, so the batch runs again
    uncombined, and its words are dropped as late, as the driver drops them."""
    for topic in ("words", "counts"):
        admin.create(topic, 1)
    times = [*range(100, 105), *range(10, 15), *range(105, 110)]
    raws: list[Raw] = [(None, b"abaab"[i % 5 : i % 5 + 1], ts) for i, ts in enumerate(times)]
    producer = Producer(admin)
    for key, value, ts in raws:
        producer.send("words", key, value, timestamp=ts)
    producer.flush()
    b = StreamsBuilder()
    (
        b.stream("words")
        .group_by(lambda k, w: w)
        .windowed_by(TimeWindows.of_size_and_grace(10, 20).advance_by(5))
        .count()
        .to_stream()
        .map(lambda wk, n: (f"{wk.key}@{wk.window.start}", str(n)))
        .to("counts")
    )
    topology = b.build()
    config = config_for("windowed-combined", root, tmp_path / "state", **{"max.poll.records": 5})
    app = run_app(spark, topology, config)
    expected = driver_run(topology, config, [("words", raws)])["counts"]
    assert latest(read_topic(root, "counts")) == latest(expected)
    assert app.metrics().total("uncombined-batch-total") == 1
