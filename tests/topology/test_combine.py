"""A cached count's repartition records combined per key (topology.engine.combine): which
topics combine, what a combined record holds, and that the counting task counts it as the
records it stands for on every path (inside Arrow, expanded for the record path, one
record at a time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from common.config import StreamsConfig
from common.errors import StreamsError
from tests.topology.test_columnar import BASE as COLUMNAR_BASE
from tests.topology.test_columnar import Collector as SentRecords
from tests.topology.test_columnar import L, S
from topology import (
    Grouped,
    Materialized,
    Produced,
    StreamsBuilder,
    TimeWindows,
    Topology,
)
from topology.api.processor import Processor
from topology.engine.columnar import Batch
from topology.engine.combine import (
    COMBINED_HEADER,
    combinable_topics,
    combine_counts,
    combined_topics,
    weights_of,
)
from topology.engine.task import StreamTask
from topology.engine.task_commit import AtLeastOnceTaskCommit

BASE = {**COLUMNAR_BASE, "application.id": "cmb"}
REPARTITION = "cmb-counts-repartition"


def commit(task: StreamTask) -> None:
    """Commit ``task`` as the at_least_once runtime does: flush, then its stores apply."""
    task.prepare_commit()
    AtLeastOnceTaskCommit().end_batch(task, None, worked=True)


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each task's engine itself (not the suite's two runs)."""
    return "each task's own"


class Collector(SentRecords):
    def take(self, topic: str) -> list[tuple[str, Any, Any, int, tuple[Any, ...]]]:
        mine = [r for r in self.sent if r[0] == topic]
        self.sent = [r for r in self.sent if r[0] != topic]
        return mine


def word_count(
    mat: Materialized | None = None, after: Callable[[Any], Any] = lambda s: s
) -> Topology:
    b = StreamsBuilder()
    counts = (
        b.stream("lines")
        .flat_map_values(str.split)
        .group_by(lambda k, w: w, Grouped.with_(S, S))
        .count(mat or Materialized.as_("counts"))
    )
    after(counts.to_stream()).to("out", Produced.with_(S, L))
    return b.build()


class Upper(Processor):  # type: ignore[type-arg]
    def init(self, context: Any) -> None:
        self.context = context

    def process(self, record: Any) -> None:
        self.context.forward(record)


def config(**extra: Any) -> StreamsConfig:
    return StreamsConfig.from_dict({**BASE, **extra})


def test_only_a_cached_counts_own_repartition_topic_is_combined() -> None:
    assert combined_topics(word_count(), config()) == {REPARTITION}
    assert combinable_topics(word_count(), "cmb") == {REPARTITION}
    assert combined_topics(word_count(), config(**{"statestore.cache.max.bytes": 0})) == set()
    uncached = word_count(Materialized.as_("counts").with_caching_disabled())
    assert combined_topics(uncached, config()) == set()
    assert combinable_topics(uncached, "cmb") == {REPARTITION}  # its records are read so
    user_code = word_count(after=lambda s: s.process(Upper))
    assert combinable_topics(user_code, "cmb") == set()
    b = StreamsBuilder()
    b.stream("lines").group_by(lambda k, w: w).reduce(lambda a, v: a + v).to_stream().to("out")
    assert combinable_topics(b.build(), "cmb") == set()
    b = StreamsBuilder()
    b.stream("lines").group_by_key().count().to_stream().to("out", Produced.with_(S, L))
    assert combinable_topics(b.build(), "cmb") == set()  # no repartition
    b = StreamsBuilder()
    b.stream("lines").group_by(lambda k, w: w).windowed_by(
        TimeWindows.of_size_and_grace(10, 0)
    ).count().to_stream().map(lambda k, v: (k.key, v)).to("out", Produced.with_(S, L))
    assert combinable_topics(b.build(), "cmb") == set()


def test_a_batch_is_combined_per_key_in_the_order_of_each_keys_last_record() -> None:
    batch = Batch(
        ["a", "b", "a", "c", "b", "a"],
        ["a", "b", "a", "c", "b", "a"],
        [5, 3, 4, 9, 8, 1],
        [(), (("h", b"1"),), (), (), (("h", b"2"),), ()],
        range(6),
    )
    combined = combine_counts(batch)
    assert combined is not None
    assert combined.keys == ["c", "b", "a"]
    assert combined.timestamps == [9, 8, 5]  # the latest of each key's
    assert combined.headers == [
        (),
        (("h", b"2"), (COMBINED_HEADER, (2).to_bytes(8, "big"))),
        ((COMBINED_HEADER, (3).to_bytes(8, "big")),),
    ]
    assert list(combined.rows) == [3, 4, 5]
    assert weights_of(combined.headers) == ([1, 2, 3], [(), (("h", b"2"),), ()])
    for keys, values in (
        (["a", None, "a"], ["x", "y", "z"]),  # a null key
        (["a", "b", "a"], ["x", None, "z"]),  # a null value
        ([1.0, 2.0, 1.0], ["x", "y", "z"]),  # keys whose equality is not their bytes'
        (["a", "b", "c"], ["x", "y", "z"]),  # nothing to combine
        (["a", b"a", "a"], ["x", "y", "z"]),  # mixed types: equal in Arrow, not in bytes
        ([b"a", "a", b"a"], ["x", "y", "z"]),
        ([1, 1.0, 1], ["x", "y", "z"]),
        ([1, True, 1], ["x", "y", "z"]),
    ):
        assert combine_counts(Batch(keys, values, [1, 2, 3], None, range(3))) is None


LINES = [
    "to be or not to be",
    "that is the question",
    "to be is to do",
    "do be do be do",
]


def counted(feed: str) -> tuple[list[Any], list[Any], list[Any]]:
    """The word count of LINES (two batches) with the first task columnar (its repartition
    records combined), the second fed as ``feed`` says; return the repartition records,
    the output records and the final store."""
    topology = word_count()
    collector = Collector()
    up = StreamTask(
        topology,
        0,
        0,
        config(**{"processing.engine": "columnar"}),
        collector,
        combine_repartitions=True,
    )
    engine = "record" if feed == "record" else "columnar"
    down = StreamTask(topology, 1, 0, config(**{"processing.engine": engine}), collector)
    up.initialize()
    down.initialize()
    repartitioned, out = [], []
    for lo in (0, 2):
        lines = [line.encode() for line in LINES[lo : lo + 2]]
        up.process_columns("lines", 0, [None, None], lines, [lo * 10, lo * 10 + 5], [lo, lo + 1])
        commit(up)
        records = collector.take(REPARTITION)
        repartitioned += records
        keys, values = [r[1] for r in records], [r[2] for r in records]
        ts, hs = [r[3] for r in records], [r[4] for r in records]
        offsets = list(range(len(records)))
        if feed == "arrow":
            down.process_columns(
                REPARTITION, 0, pa.array(keys), pa.array(values), pa.array(ts), offsets, hs
            )
        elif feed == "lists":
            down.process_columns(REPARTITION, 0, keys, values, ts, offsets, hs)
        else:
            for i in range(len(records)):
                down.process(REPARTITION, keys[i], values[i], ts[i], hs[i], i, 0)
        commit(down)
        out += collector.take("out")
    store = sorted(down.stores["counts"].all())
    up.close()
    down.close()
    return repartitioned, out, store


@pytest.mark.parametrize("feed", ["arrow", "lists", "record"])
def test_the_counting_task_counts_combined_records_as_the_records_they_stand_for(
    feed: str,
) -> None:
    repartitioned, out, store = counted(feed)
    words = [w for line in LINES for w in line.split()]
    assert len(repartitioned) < len(words)
    assert any(COMBINED_HEADER in dict(r[4]) for r in repartitioned)
    final = {r[1]: r[2] for r in out}
    assert {k.decode(): int.from_bytes(v, "big") for k, v in final.items()} == {
        w: words.count(w) for w in set(words)
    }
    assert all(COMBINED_HEADER not in dict(r[4]) for r in out)
    assert [(k, v.value) for k, v in store] == sorted((w, words.count(w)) for w in set(words))


def test_every_feed_gives_the_same_outputs() -> None:
    results = [counted(feed)[1:] for feed in ("arrow", "lists", "record")]
    assert results[0] == results[1]
    assert sorted(results[0][0]) == sorted(results[2][0])  # the record path: one at a time


def test_a_malformed_combined_header_is_refused_with_what_to_do() -> None:
    for value in (b"\x00" * 8, b"\x01", None):
        with pytest.raises(StreamsError, match="do not produce to it"):
            weights_of([((COMBINED_HEADER, value),)])
