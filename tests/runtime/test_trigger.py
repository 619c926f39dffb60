"""The batch trigger without Spark: a client in Spark's place reads the lines that ask for
batches. A wake-up before Spark connects is kept for it; a record appended to a watched
topic is seen within ``poll.ms``; a topic a pattern matches later is watched and named;
close() returns at once."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

import pytest

from runtime.spark.source_topics import PatternWatch
from runtime.spark.trigger import BatchTrigger
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin


@pytest.fixture
def trigger(admin: TopicAdmin) -> Iterator[BatchTrigger]:
    admin.create("lines", 2)
    made = BatchTrigger(
        admin,
        ["lines"],
        poll_ms=20,
        name="t",
        patterns=PatternWatch([re.compile("extra-.*")], ["extra-internal"], admin.list, 1),
    )
    yield made
    made.close()


def connect(trigger: BatchTrigger) -> socket.socket:
    """Connect as Spark's socket source does."""
    client = socket.create_connection(("127.0.0.1", trigger.port), timeout=5)
    client.settimeout(0.3)
    return client


def lines_within(client: socket.socket, seconds: float) -> int:
    """How many lines arrive within ``seconds``."""
    got = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            data = client.recv(4096)
        except TimeoutError:
            continue
        if not data:
            break
        got += data
    return got.count(b"\n")


def test_a_wake_before_spark_connects_is_sent_once_it_does(trigger: BatchTrigger) -> None:
    trigger.wake()
    with connect(trigger) as client:
        assert lines_within(client, 0.5) == 1
        trigger.wake()
        assert lines_within(client, 0.3) == 1


def test_nothing_new_sends_nothing_and_a_new_record_sends_a_line(
    trigger: BatchTrigger, admin: TopicAdmin
) -> None:
    with connect(trigger) as client:
        assert lines_within(client, 0.3) == 0
        producer = Producer(admin)
        producer.send("lines", b"k", b"a line", partition=1)
        producer.flush()
        assert lines_within(client, 1.0) >= 1
        assert lines_within(client, 0.3) == 0  # seen once


def test_a_topic_a_pattern_matches_later_is_watched_and_named(
    trigger: BatchTrigger, admin: TopicAdmin
) -> None:
    with connect(trigger) as client:
        admin.create("extra-1", 1)
        admin.create("extra-internal", 1)  # excluded (an internal topic)
        assert lines_within(client, 1.0) >= 1
        assert trigger.subscribed() == ["extra-1", "lines"]
        producer = Producer(admin)
        producer.send("extra-1", b"k", b"v")
        producer.flush()
        assert lines_within(client, 1.0) >= 1


def test_another_connection_does_not_take_the_lines_from_the_first(
    trigger: BatchTrigger,
) -> None:
    with connect(trigger) as spark, connect(trigger) as stray:
        time.sleep(0.3)  # both taken
        trigger.wake()
        assert lines_within(spark, 0.5) == 1
        assert lines_within(stray, 0.3) == 1


def test_close_returns_at_once_and_a_later_wake_is_harmless(admin: TopicAdmin) -> None:
    admin.create("lines", 1)
    made = BatchTrigger(admin, ["lines"], poll_ms=100, name="t")
    client = connect(made)
    started = time.monotonic()
    made.close()
    assert time.monotonic() - started < 1.0
    made.wake()
    client.close()
