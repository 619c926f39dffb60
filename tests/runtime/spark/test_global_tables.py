"""Global tables on Spark under exactly_once_v2 give what the TopologyTestDriver gives: a
stream-global-table join (inner and left, in one topology) and an ``add_global_store``
topology, the global records produced first, then stream records, then an update of the
global topic during the run that later stream records see."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.storage.partitioner import partition_for_key
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from statestores.stores import Stores
from streams.testing import TopologyTestDriver
from tests.examples.harness import Outputs, assert_same_outputs, topic_outputs
from topology import Consumed, Materialized, Processor, Record, StreamsBuilder, Topology

#: Long Spark runs: the global-table join also runs in the default suite's parity cases.
pytestmark = pytest.mark.slow

S, L = Serdes.String(), Serdes.Long()
OUT = "out"
#: The outputs of the join topology: the inner and the left join, side by side.
JOIN_OUTS = ("out-join", "out-left")
PARTITIONS = 2
#: (topic, key, value) in the order they are produced; None marks "wait until the
#: application has processed everything so far".
Step = tuple[str, str, str] | None


def joiner(order: str, country: str | None) -> str:
    return f"{order}@{country}"


def country_of(key: str, order: str) -> str:
    return order.split(":", maxsplit=1)[0]


def join_topology() -> Topology:
    b = StreamsBuilder()
    countries = b.global_table("countries", Consumed.with_(S, S), Materialized.as_("countries"))
    orders = b.stream("orders", Consumed.with_(S, S))
    orders.join(countries, country_of, joiner).to(JOIN_OUTS[0])
    orders.left_join(countries, country_of, joiner).to(JOIN_OUTS[1])
    return b.build()


class SumUpdater(Processor[str, str, None, None]):
    """Adds each record's value to its key's total (a custom global processor)."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store("totals")

    def process(self, record: Record[str, str]) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + int(record.value))


class Lookup(Processor[str, str, str, str]):
    def init(self, context: Any) -> None:
        super().init(context)
        self.totals = context.get_state_store("totals")

    def process(self, record: Record[str, str]) -> None:
        total = self.totals.get(record.value)
        self.context.forward(record.with_value(f"{record.value}={total}"))


def global_store_topology() -> Topology:
    b = StreamsBuilder()
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("totals"), S, L)
    b.add_global_store(store, "countries", SumUpdater, Consumed.with_(S, S))
    b.stream("orders", Consumed.with_(S, S)).process(Lookup).to(OUT)
    return b.build()


def join_steps() -> list[Step]:
    steps: list[Step] = [("countries", "eu", "Europe"), ("countries", "us", "USA")]
    codes = ["eu", "us", "jp", "eu", "ch", "us", "jp", "eu", "us", "eu", "jp", "us"]
    steps += [("orders", f"o{i % 5}", f"{c}:{i}") for i, c in enumerate(codes)]
    steps += [None, ("countries", "jp", "Japan"), ("countries", "eu", "EU")]
    steps += [("orders", f"o{i % 5}", f"{c}:{i + 20}") for i, c in enumerate(codes)]
    return steps


def global_store_steps() -> list[Step]:
    steps: list[Step] = [("countries", k, v) for k, v in (("a", "2"), ("b", "5"), ("a", "3"))]
    keys = ["a", "b", "c", "a", "b", "a", "c", "b", "a", "b"]
    steps += [("orders", f"o{i % 4}", k) for i, k in enumerate(keys)]
    steps += [None, ("countries", "c", "7"), ("countries", "a", "10")]
    steps += [("orders", f"o{i % 4}", k) for i, k in enumerate(keys)]
    return steps


CONFIG = {
    "application.id": "global-parity",
    "default.key.serde": "string",
    "default.value.serde": "string",
}


def driver_outputs(topology: Topology, steps: list[Step], outs: tuple[str, ...]) -> Outputs:
    """The driver's output records, placed in partitions as the Spark run's sink does."""
    outputs: Outputs = {}
    with TopologyTestDriver(topology, CONFIG) as driver:
        for ts, step in enumerate(steps):
            if step is not None:
                topic, key, value = step
                driver.pipe_raw(topic, key.encode(), value.encode(), ts)
        for out in outs:
            per: dict[int, list[tuple[bytes | None, bytes | None, int]]] = {
                p: [] for p in range(PARTITIONS)
            }
            for raw in driver.output_queue(out):
                assert raw.key is not None
                part = partition_for_key(raw.key, PARTITIONS)
                per[part].append((raw.key, raw.value, raw.timestamp))
            outputs[out] = per
    return outputs


def app_config(root: str, tmp_path: Path) -> dict[str, Any]:
    return {
        **CONFIG,
        "processing.guarantee": "exactly_once_v2",
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,
        "max.poll.records": 3,
    }


def run_on_spark(  # noqa: PLR0917 - fixtures and the case
    spark: SparkSession,
    admin: TopicAdmin,
    root: str,
    tmp_path: Path,
    topology: Topology,
    steps: list[Step],
    outs: tuple[str, ...],
) -> Outputs:
    """Start the app on the records before the first wait mark, produce the rest while
    it runs (waiting at each mark for as many outputs as the driver gives); return its
    outputs."""
    for topic in ("countries", "orders", *outs):
        admin.create(topic, PARTITIONS)
    expected = _counts_at_marks(topology, steps, outs)
    producer = Producer(admin)
    app = StreamsApp(topology, app_config(root, tmp_path), spark=spark)
    marks = 0
    try:
        for ts, step in enumerate(steps):
            if step is None:
                if marks == 0:
                    app.start()
                _wait_for(app, root, outs, expected[marks])
                marks += 1
                continue
            topic, key, value = step
            producer.send(topic, key.encode(), value.encode(), timestamp=ts)
            producer.flush()  # one commit per record: the global update lands in between
        _wait_for(app, root, outs, expected[marks])
    finally:
        app.close()
    return topic_outputs(root, list(outs))


def _wait_for(
    app: StreamsApp, root: str, outs: tuple[str, ...], count: int, timeout: float = 180
) -> None:
    reader = TopicReader(root)
    deadline = time.monotonic() + timeout

    def produced() -> int:
        return sum(sum(reader.end_offsets(out).values()) for out in outs)

    while produced() < count:
        assert time.monotonic() < deadline, f"timed out waiting for {count} outputs"
        app.await_termination(0.3)  # raises the stream thread's error, if any
    time.sleep(0.3)
    assert produced() == count


def _counts_at_marks(topology: Topology, steps: list[Step], outs: tuple[str, ...]) -> list[int]:
    """The driver's output count at each wait mark (and at the end)."""
    counts: list[int] = []
    for i, step in enumerate([*steps, None]):
        if step is None:
            prefix = [s for s in steps[:i] if s is not None]
            outputs = driver_outputs(topology, prefix, outs)
            counts.append(sum(len(r) for per in outputs.values() for r in per.values()))
    return counts


def test_stream_global_table_join_matches_the_driver(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    steps = join_steps()
    expected = driver_outputs(join_topology(), steps, JOIN_OUTS)
    got = run_on_spark(spark, admin, root, tmp_path, join_topology(), steps, JOIN_OUTS)
    assert_same_outputs(got, expected)
    inner, left = (
        [v.decode() for recs in got[out].values() for _, v, _ in recs if v] for out in JOIN_OUTS
    )
    assert "jp:22@Japan" in inner and "eu:20@EU" in inner  # the update was seen
    assert "jp:2@None" in left and not [v for v in inner if v.endswith("@None")]


def test_add_global_store_matches_the_driver(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    steps = global_store_steps()
    topology = global_store_topology()
    expected = driver_outputs(topology, steps, (OUT,))
    got = run_on_spark(spark, admin, root, tmp_path, global_store_topology(), steps, (OUT,))
    assert_same_outputs(got, expected)
    values = [v.decode() for recs in got[OUT].values() for _, v, _ in recs if v]
    assert "a=5" in values and "a=15" in values and "c=7" in values  # summed, not put
    # Persistent global stores live in per-process directories, never in task ones.
    app_dir = tmp_path / "state" / CONFIG["application.id"]
    slots = os.listdir(app_dir / "global")
    assert slots and all(n.isdigit() for n in slots)
    assert not [n for n in os.listdir(app_dir) if n.startswith("0_")]  # sub-topology 0

    # A restart: the Python workers keep their global stores and read only what is new.
    steps += [("countries", "b", "100"), ("orders", "o9", "b")]
    producer = Producer(admin)
    for ts, step in enumerate(steps[-2:], start=len(steps) - 2):
        assert step is not None
        producer.send(step[0], step[1].encode(), step[2].encode(), timestamp=ts)
        producer.flush()
    StreamsApp(global_store_topology(), app_config(root, tmp_path), spark=spark).run_until_idle()
    assert_same_outputs(topic_outputs(root, [OUT]), driver_outputs(topology, steps, (OUT,)))
