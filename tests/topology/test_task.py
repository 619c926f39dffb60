"""StreamTask used directly, as the Spark runtime uses it: batches, columns, offsets,
changelogs through the collector, lifecycle."""

from __future__ import annotations

from typing import Any

import pytest

from common.config import StreamsConfig
from common.errors import StreamsError
from common.serdes import Serdes
from tests.topology.conftest import L, S
from topology import Consumed, Materialized, Produced, StreamsBuilder
from topology.api.record import InputRecord
from topology.engine.task import StreamTask, TaskState

CONFIG = StreamsConfig.from_dict(
    {
        "application.id": "wc",
        "topics.root": "/tmp/unused",
        "default.key.serde": "string",
        "default.value.serde": "string",
        "default.dsl.store": "in_memory",
    }
)


@pytest.fixture
def config(engine: str) -> StreamsConfig:
    """CONFIG under the test's engine (every test here runs under both)."""
    return CONFIG.model_copy(update={"processing_engine": engine})


class ListCollector:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, Any, int, int | None]] = []

    def send(  # noqa: PLR0917 - the RecordCollector protocol
        self, topic: str, key: Any, value: Any, timestamp: int, headers: Any, partition: Any
    ) -> None:
        self.sent.append((topic, key, value, timestamp, partition))

    def partitions_for(self, topic: str) -> int:
        return 4


def word_count() -> Any:
    b = StreamsBuilder()
    (
        b.stream("lines")
        .flat_map_values(str.split)
        .group_by(lambda k, w: w)
        .count(Materialized.as_("counts").with_caching_disabled())
        .to_stream()
        .to("out", Produced.with_(S, L))
    )
    return b.build()


def test_two_tasks_of_a_word_count_like_the_runtime_runs_them(config: StreamsConfig) -> None:
    topology = word_count()
    first, second = ListCollector(), ListCollector()
    upstream = StreamTask(topology, 0, 3, config, first)
    downstream = StreamTask(topology, 1, 3, config, second)
    for task in (upstream, downstream):
        task.initialize()
    assert (upstream.task_id, downstream.task_id) == ("0_3", "1_3")
    assert upstream.state is TaskState.RUNNING

    n = upstream.process_columns("lines", 3, [None, None], [b"a b", b"a"], [10, 20], [5, 6])
    assert n == 2
    assert [s[:4] for s in first.sent] == [
        ("wc-counts-repartition", b"a", b"a b".split()[0], 10),
        ("wc-counts-repartition", b"b", b"b", 10),
        ("wc-counts-repartition", b"a", b"a", 20),
    ]
    assert upstream.prepare_commit() == {("lines", 3): 7}
    assert upstream.stream_time == 20

    downstream.process_batch(
        InputRecord(topic, 3, offset, ts, key, value)
        for offset, (topic, key, value, ts, _) in enumerate(first.sent)
    )
    outputs = [(t, k, v) for t, k, v, _, _ in second.sent if t == "out"]
    assert outputs == [
        ("out", b"a", (1).to_bytes(8, "big")),
        ("out", b"b", (1).to_bytes(8, "big")),
        ("out", b"a", (2).to_bytes(8, "big")),
    ]
    changelog = [(k, p) for t, k, _, _, p in second.sent if t == "wc-counts-changelog"]
    assert changelog == [(b"a", 3), (b"b", 3), (b"a", 3)]  # the task's partition
    assert downstream.prepare_commit() == {("wc-counts-repartition", 3): 3}
    upstream.close()
    downstream.close()
    upstream.close()  # idempotent
    assert downstream.state is TaskState.CLOSED


def test_columns_with_a_bad_record_process_the_good_ones_first(config: StreamsConfig) -> None:
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, Serdes.Integer())).to("out")
    collector = ListCollector()
    task = StreamTask(b.build(), 0, 0, config, collector)
    task.initialize()
    with pytest.raises(StreamsError, match="offset=11"):
        task.process_columns("in", 0, [b"k", b"k"], [b"\0\0\0\1", b"x"], [1, 2], [10, 11])
    assert len(collector.sent) == 1


def test_illegal_transitions_are_refused(config: StreamsConfig) -> None:
    task = StreamTask(word_count(), 0, 0, config, ListCollector())
    with pytest.raises(StreamsError, match="illegal transition CREATED -> CREATED"):
        task.transition(TaskState.CREATED)
    task.initialize()
    with pytest.raises(StreamsError, match="initialize"):
        task.initialize()
    with pytest.raises(StreamsError, match="no source of sub-topology 0 reads topic other"):
        task.process("other", None, b"x", 1)
