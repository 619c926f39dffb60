"""A poison record on local Spark, under exactly_once_v2: log-and-continue skips and counts
it; the dead-letter topic receives it with its origin, in the batch's transaction;
log-and-fail stops the app naming the record, and nothing of that batch is committed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.config import StreamsConfig
from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.app.app_state import AppState
from runtime.storage.committer import TopicCommitter
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.offsets import OffsetsStore
from topology import Consumed, Produced, StreamsBuilder, Topology

S, L = Serdes.String(), Serdes.Long()
POISON = b"not-a-number"
APP = "poison"


def topology() -> Topology:
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, L)).map_values(lambda v: v + 1).to("out", Produced.with_(S, L))
    return b.build()


def produce(admin: TopicAdmin) -> None:
    """Partition 0: k0=1, k1=POISON (offset 1), k2=3; partition 1: k3=4."""
    admin.create("in", 2)
    admin.create("out", 2)
    producer = Producer(admin)
    for key, value, partition in (
        (b"k0", L.serialize("in", 1), 0),
        (b"k1", POISON, 0),
        (b"k2", L.serialize("in", 3), 0),
        (b"k3", L.serialize("in", 4), 1),
    ):
        producer.send("in", key, value, timestamp=10, headers=[("h", b"v")], partition=partition)
    producer.flush()


def make_app(spark: SparkSession, root: str, tmp_path: Path, **extra: Any) -> StreamsApp:
    config = StreamsConfig.from_dict(
        {
            "application.id": APP,
            "topics.root": root,
            "state.dir": str(tmp_path / "state"),
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": 50,
            "group.initial.rebalance.delay.ms": 0,  # one instance: no one to wait for
            **extra,
        }
    )
    return StreamsApp(topology(), config, spark=spark)


def records(root: str, topic: str) -> list[dict[str, Any]]:
    reader = TopicReader(root)
    out: list[dict[str, Any]] = []
    for partition in sorted(reader.end_offsets(topic)):
        for row in reader.read(topic, partition, 0).to_pylist():
            out.append({**row, "partition": partition})
    return out


def test_log_and_continue_skips_the_poison_record_and_counts_it(
    spark: SparkSession,
    admin: TopicAdmin,
    root: str,
    tmp_path: Path,
) -> None:
    produce(admin)
    app = make_app(
        spark,
        root,
        tmp_path,
        **{"deserialization.exception.handler": "log-and-continue"},
    )
    app.run_until_idle()
    values = [L.deserialize("out", r["value"]) for r in records(root, "out")]
    assert sorted(v for v in values if v is not None) == [2, 4, 5]
    assert app.metrics().total("dropped-records-total") == 1
    # the poison record is consumed: the committed position is past it
    assert OffsetsStore(admin).fetch(APP) == {("in", 0): 3, ("in", 1): 1}


def test_dead_letter_is_committed_with_the_batch_and_names_its_origin(
    spark: SparkSession,
    admin: TopicAdmin,
    root: str,
    tmp_path: Path,
) -> None:
    produce(admin)
    app = make_app(
        spark,
        root,
        tmp_path,
        **{
            "deserialization.exception.handler": "log-and-continue",
            "errors.dead.letter.queue.topic.name": "in-dlq",
        },
    )
    app.run_until_idle()
    assert admin.num_partitions("in-dlq") == 2  # created like the source
    [letter] = records(root, "in-dlq")
    assert (letter["key"], letter["value"], letter["timestamp"]) == (b"k1", POISON, 10)
    headers = [(h["key"], h["value"]) for h in letter["headers"]]
    assert headers[0] == ("h", b"v")
    origin = dict(headers[1:])
    assert origin["__streams.errors.exception"] == b"common.errors.SerializationError"
    assert b"LongDeserializer" in origin["__streams.errors.message"]
    assert origin["__streams.errors.topic"] == b"in"
    assert origin["__streams.errors.partition"] == b"0"
    assert origin["__streams.errors.offset"] == b"1"
    assert len(records(root, "out")) == 3
    # one transaction: the dead letter and the outputs carry the same Delta txn version
    thread = app.thread
    assert thread is not None
    tid = thread.transactional_id
    version = TopicCommitter(admin, "out").committed_txn_version(tid)
    assert version >= 0
    assert TopicCommitter(admin, "in-dlq").committed_txn_version(tid) == version


def test_log_and_fail_stops_naming_the_record_and_commits_nothing(
    spark: SparkSession,
    admin: TopicAdmin,
    root: str,
    tmp_path: Path,
) -> None:
    produce(admin)
    app = make_app(spark, root, tmp_path, **{"errors.dead.letter.queue.topic.name": "in-dlq"})
    with pytest.raises(Exception, match=r"topic=in partition=0 offset=1") as info:
        app.run_until_idle()
    assert "cannot deserialize" in str(info.value)
    assert app.state is AppState.ERROR
    # nothing of the batch: no output (not even k0, before the poison), no dead letter,
    # no committed position
    assert records(root, "out") == []
    assert records(root, "in-dlq") == []
    assert OffsetsStore(admin).fetch(APP) == {}
