"""The columnar engine against the record engine on many-record batches: the same random
input, cut into the same random batches and committed at the same points, must give the
same records on every topic (in order), the same final stores, and the same punctuations.

(Every other topology test runs under both engines too, a record at a time.)
"""

from __future__ import annotations

import gc
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from common.config import StreamsConfig
from common.errors import CombinedRecordsLateError
from common.serdes import Serdes
from topology import (
    Branched,
    Consumed,
    Grouped,
    JoinWindows,
    Materialized,
    Produced,
    StreamsBuilder,
    Topology,
)
from topology.api.processor import Processor, PunctuationType
from topology.api.record import Record
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import TimeWindows
from topology.engine.columnar import collection_paused
from topology.engine.combine import combined_topics, weights_of, windowed_topics
from topology.engine.task import StreamTask
from topology.engine.task_commit import AtLeastOnceTaskCommit

S, L = Serdes.String(), Serdes.Long()
#: How the tasks built here commit (as the at_least_once runtime and the driver do).
COMMIT = AtLeastOnceTaskCommit()

BASE = {
    "application.id": "cmp",
    "topics.root": "/tmp/unused",
    "default.key.serde": "string",
    "default.value.serde": "string",
    "default.dsl.store": "in_memory",
}

Sent = tuple[str, Any, Any, int, Any]


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each run's engine itself (not the suite's two runs)."""
    return "each run's own"


class Collector:
    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def send(  # noqa: PLR0917 - the RecordCollector protocol
        self, topic: str, key: Any, value: Any, timestamp: int, headers: Any, partition: Any
    ) -> None:
        self.sent.append((topic, key, value, timestamp, tuple(headers)))

    def partitions_for(self, topic: str) -> int:
        return 1


def run(
    topology: Topology,
    batches: list[list[tuple[str, str | None, str, int]]],
    engine: str,
    config: dict[str, Any],
    *,
    arrow: bool = False,
    combine_windows: Callable[[int], bool] = lambda batch: False,
) -> tuple[dict[str, list[Sent]], dict[str, list[Any]]]:
    """Run every sub-topology's task 0 over ``batches`` of ``(topic, key, value, ts)``
    (one commit after each; keys and values as Arrow columns with ``arrow``, as the Spark
    runtime gives them), records written to a topic a task reads handed to it as the
    next batch; return the records per topic (changelogs left out: the columnar engine
    writes one change per key and batch) and every store's final content.
    ``combine_windows(i)``: whether batch ``i`` combines windowed counts' records (a
    :class:`Rerun` naming it when they came late)."""
    settings = StreamsConfig.from_dict({**BASE, **config, "processing.engine": engine})
    collector = Collector()
    tasks = [
        StreamTask(topology, sub.id, 0, settings, collector, combine_repartitions=True)
        for sub in topology.task_subtopologies()
    ]
    for task in tasks:
        task.initialize()
    offsets: dict[str, int] = {}

    def feed(topic: str, rows: list[tuple[bytes | None, bytes | None, int, Any]]) -> None:
        for task in tasks:
            try:
                task.source_for(topic)
            except Exception:
                continue
            start = offsets.get(topic, 0)
            offsets[topic] = start + len(rows)
            keys, values = [r[0] for r in rows], [r[1] for r in rows]
            headers = [r[3] for r in rows]
            task.process_columns(
                topic,
                0,
                pa.array(keys, pa.binary()) if arrow else keys,
                pa.array(values, pa.binary()) if arrow else values,
                pa.array([r[2] for r in rows], pa.int64()) if arrow else [r[2] for r in rows],
                pa.array(range(start, start + len(rows)), pa.int64())
                if arrow
                else list(range(start, start + len(rows))),
                headers if any(headers) else None,
            )

    out: dict[str, list[Sent]] = {}
    windowed = set(windowed_topics(topology, "cmp"))
    for number, batch in enumerate(batches):
        for task in tasks:
            task.combine_windows_in(windowed if combine_windows(number) else ())
        try:
            _run_batch(batch, feed, tasks, collector, out)
        except CombinedRecordsLateError as exc:
            raise Rerun(number) from exc
    stores = {name: _contents(store) for task in tasks for name, store in task.stores.items()}
    for task in tasks:
        task.close()
    return out, stores


def _contents(store: Any) -> list[Any]:
    """A store's entries: a session store's as its bytes layer holds them, in order."""
    if hasattr(store, "all"):
        return sorted(store.all(), key=repr)
    return list(store.wrapped.items(None, None))


class Rerun(Exception):  # noqa: N818 - what the runtime does: run the batch again
    def __init__(self, batch: int) -> None:
        super().__init__(batch)
        self.batch = batch


def _run_batch(
    batch: list[tuple[str, str | None, str, int]],
    feed: Callable[[str, list[tuple[bytes | None, bytes | None, int, Any]]], None],
    tasks: list[StreamTask],
    collector: Collector,
    out: dict[str, list[Sent]],
) -> None:
    by_topic: dict[str, list[tuple[bytes | None, bytes | None, int, Any]]] = {}
    for topic, key, value, ts in batch:
        by_topic.setdefault(topic, []).append(
            (None if key is None else key.encode(), value.encode(), ts, ())
        )
    for topic, rows in by_topic.items():
        feed(topic, rows)
    while True:  # commit; hand what the tasks wrote to the tasks reading it
        for task in tasks:
            task.prepare_commit()
            COMMIT.end_batch(task, None, worked=True)
        sent, collector.sent = collector.sent, []
        if not sent:
            break
        internal: dict[str, list[tuple[bytes | None, bytes | None, int, Any]]] = {}
        for record in sent:
            if record[0].endswith("-changelog"):
                continue
            out.setdefault(record[0], []).append(record)
            if record[0].endswith("-repartition"):
                internal.setdefault(record[0], []).append(record[1:5])
        for topic, rows in internal.items():
            feed(topic, rows)


def run_combined(build: Callable[[], Topology], batches: Any, config: Any) -> Any:
    """Run columnar with windowed counts combined per batch; a batch whose combined
    records come late runs again uncombined (as the runtime does); return ``run``'s."""
    uncombined: set[int] = set()
    while True:
        try:
            return run(
                build(),
                batches,
                "columnar",
                config,
                arrow=True,
                combine_windows=lambda i: i not in uncombined,
            )
        except Rerun as rerun:
            assert rerun.batch not in uncombined
            uncombined.add(rerun.batch)


def random_batches(  # noqa: PLR0917 - the shape of the input
    seed: int,
    topics: list[str],
    n: int = 400,
    keys: int = 12,
    step: int = 40,
    late_share: float = 0.15,
) -> list[list[tuple[str, str | None, str, int]]]:
    """``n`` records in batches of 1..60: keys from a small set (some None), words as
    values, timestamps rising by up to ``step`` with some (``late_share``) out of order."""
    rnd = random.Random(seed)
    words = ["apple", "banana", "cherry", "date", "elder", "fig", "grape"]
    records = []
    ts = 1_000
    for _ in range(n):
        ts += rnd.randint(0, step)
        late = rnd.random() < late_share
        key = None if rnd.random() < 0.05 else f"k{rnd.randrange(keys)}"
        value = " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 4)))
        records.append((rnd.choice(topics), key, value, ts - rnd.randint(0, 300) if late else ts))
    batches, i = [], 0
    while i < len(records):
        size = rnd.randint(1, 60)
        batches.append(records[i : i + size])
        i += size
    return batches


def word_count(b: StreamsBuilder, materialized: Materialized) -> None:
    (
        b.stream("in")
        .flat_map_values(str.split)
        .filter(lambda k, w: w != "date")
        .group_by(lambda k, w: w, Grouped.with_(S, S))
        .count(materialized)
        .to_stream()
        .to("out", Produced.with_(S, L))
    )


def stateless(b: StreamsBuilder, materialized: Materialized) -> None:
    branches = (
        b.stream("in")
        .peek(lambda k, v: None)
        .map(lambda k, v: (v.split()[0], f"{k}:{v}"))
        .filter_not(lambda k, v: k == "fig")
        .split()
        .branch(lambda k, v: k < "c", Branched.as_("low"))
        .branch(lambda k, v: len(v) > 20, Branched.with_function(lambda s: s.map_values(len)))
        .default_branch(Branched.as_("rest"))
    )
    for name, stream in branches.items():
        stream.to(f"out-{name}", Produced.with_(S, S if name.endswith(("low", "rest")) else L))
    b.stream("other").flat_map(lambda k, v: [(w, k) for w in v.split()]).select_key(
        lambda k, v: f"{k}!"
    ).to("out-other")


def aggregates(b: StreamsBuilder, materialized: Materialized) -> None:
    grouped = b.stream("in").group_by(lambda k, v: v.split()[0], Grouped.with_(S, S))
    grouped.reduce(lambda a, v: a + "|" + v if len(a) < 60 else v, materialized).to_stream().to(
        "reduced"
    )
    b.stream("other").map_values(lambda v: None if v.startswith("fig") else v).group_by_key(
        Grouped.with_(S, S)
    ).aggregate(
        lambda: 0,
        lambda k, v, agg: agg + len(v),
        Materialized.as_("lengths").with_value_serde(L),
    ).to_stream().map_values(lambda n: n * 2).to("lengths", Produced.with_(S, L))


def table_aggregates(b: StreamsBuilder, materialized: Materialized) -> None:
    """Table-side aggregations: each update subtracts the row's old value from its old
    group and adds the new one to its new group."""
    table = b.table("other", Consumed.with_(S, S), Materialized.as_("rows"))
    grouped = table.group_by(lambda k, v: (v.split()[0], v), Grouped.with_(S, S))
    grouped.count(materialized).to_stream().to("counts", Produced.with_(S, L))
    grouped.aggregate(
        lambda: "",
        lambda k, v, agg: (agg + v[:3])[-30:],
        lambda k, v, agg: agg.replace(v[:3], "", 1),
        Materialized.as_("letters"),
    ).to_stream().to("letters")
    grouped.reduce(
        lambda agg, v: agg + "|" + v if len(agg) < 50 else v,
        lambda agg, v: agg.replace(v, "", 1) or v,
        Materialized.as_("reduced"),
    ).to_stream().to("reduced")


def windowed(b: StreamsBuilder, materialized: Materialized) -> None:
    serde = WindowedSerdes.time_windowed_serde_from(S, 100)
    (
        b.stream("in")
        .map_values(lambda v: v.split()[-1])
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(TimeWindows.of_size_and_grace(100, 150).advance_by(50))
        .count()
        .to_stream()
        .to("out", Produced.with_(serde, L))
    )


def windowed_repartitioned(
    b: StreamsBuilder,
    materialized: Materialized,
    windows: TimeWindows | None = None,
) -> None:
    """A windowed count behind a repartition: its task counts raw columns (inside Arrow
    when they come as Arrow), out-of-order records and closed windows included."""
    serde = WindowedSerdes.time_windowed_serde_from(S, 100)
    (
        b.stream("in")
        .flat_map_values(str.split)
        .group_by(lambda k, w: w, Grouped.with_(S, S))
        .windowed_by(windows or TimeWindows.of_size_and_grace(100, 120).advance_by(40))
        .count(materialized)
        .to_stream()
        .to("out", Produced.with_(serde, L))
    )


def joined(b: StreamsBuilder, materialized: Materialized) -> None:
    table = b.table("other", Consumed.with_(S, S), Materialized.as_("table"))
    b.stream("in").filter(lambda k, v: k is not None).left_join(table, lambda v, t: f"{v}/{t}").to(
        "out"
    )


def joined_derived(b: StreamsBuilder, materialized: Materialized) -> None:
    """An inner join with a table derived without a store (read through its parent's),
    and a left join keyed by a word of the value: each batch's join keys read at once."""
    table = b.table("other", Consumed.with_(S, S), Materialized.as_("table"))
    upper = table.map_values(lambda v: None if v.startswith("fig") else v.upper())
    stream = b.stream("in").filter(lambda k, v: k is not None)
    stream.join(upper, lambda v, t: f"{v}&{t}").to("out")
    stream.select_key(lambda k, v: f"k{len(v) % 12}").left_join(table, lambda v, t: f"{v}/{t}").to(
        "out-rekeyed"
    )


def stream_joins(b: StreamsBuilder, materialized: Materialized) -> None:
    """Stream-stream joins, each side's records taken as batches: an inner join (each
    batch reads the other side's window once per key) and an outer join (fed one record
    at a time, after its window nodes took the batch)."""
    left = b.stream("in").filter(lambda k, v: len(v) > 4)
    right = b.stream("other").map_values(str.upper)
    windows = JoinWindows.of_time_difference_and_grace(60, 30)
    left.join(right, lambda a, c: f"{a}+{c}", windows).to("inner")
    left.map_values(lambda v: v[::-1]).outer_join(
        right.map_values(lambda v: v[:3]), lambda a, c: f"{a}|{c}", windows.after(20)
    ).to("outer")


def same_sink_twice(b: StreamsBuilder, materialized: Materialized) -> None:
    """Two branches write one topic: the record order there is the record engine's only
    when the source runs record by record (which the task decides when it is built)."""
    branches = b.stream("in").split().branch(lambda k, v: "apple" in v).default_branch()
    for stream in branches.values():
        stream.map_values(str.upper).to("out")


class Ticker(Processor):  # type: ignore[type-arg]
    def init(self, context: Any) -> None:
        self.context = context
        self.seen = 0
        context.schedule(100, PunctuationType.STREAM_TIME, self.tick)

    def tick(self, ts: int) -> None:
        self.context.forward(Record(f"tick@{ts}", str(self.seen), ts))

    def process(self, record: Any) -> None:
        self.seen += 1
        self.context.forward(record.with_value(f"{self.seen}:{record.value}"))


def punctuated(b: StreamsBuilder, materialized: Materialized) -> None:
    b.stream("in").map_values(lambda v: v.upper()).process(Ticker).to("out")


class Contextual(Processor):  # type: ignore[type-arg]
    """Forwards each word with its input record's offset and the stream time (what a node
    fed record by record reads of an expanded batch's rows)."""

    def init(self, context: Any) -> None:
        self.context = context

    def process(self, record: Any) -> None:
        offset, now = self.context.offset, self.context.current_stream_time_ms()
        self.context.forward(
            record.with_value(f"{offset}@{now}{self.context.headers}:{record.value}")
        )


def expanded_context(b: StreamsBuilder, materialized: Materialized) -> None:
    """Words of two nested flat maps, filtered, then fed record by record: each keeps its
    line's offset, headers, timestamp and stream time."""
    (
        b.stream("in")
        .flat_map_values(str.split)
        .flat_map(lambda k, w: [(w, w), (k, w.upper())] if len(w) > 4 else [(w, w)])
        .filter(lambda k, w: w != "date")
        .process(Contextual)
        .to("out")
    )


def counted_in_context(b: StreamsBuilder, materialized: Materialized) -> None:
    """A count taking a repartition topic's raw columns, its every update fed record by
    record to a node that reads its record context (offset, stream time, headers)."""
    (
        b.stream("in")
        .flat_map_values(str.split)
        .group_by(lambda k, w: w, Grouped.with_(S, S))
        .count(materialized)
        .to_stream()
        .map_values(str)
        .process(Contextual)
        .to("out")
    )


def counted_with_old_values(b: StreamsBuilder, materialized: Materialized) -> None:
    """A count straight off a source (null keys dropped) whose updates carry old values:
    a table re-grouped and counted below it asks for them."""
    (
        b.stream("in", Consumed.with_(S, S))
        .group_by_key()
        .count(materialized)
        .group_by(lambda k, n: (str(n % 3), k), Grouped.with_(S, S))
        .count(Materialized.as_("regrouped"))
        .to_stream()
        .to("out", Produced.with_(S, L))
    )


TOPOLOGIES: dict[str, Callable[[StreamsBuilder, Materialized], None]] = {
    "counted_in_context": counted_in_context,
    "counted_with_old_values": counted_with_old_values,
    "expanded_context": expanded_context,
    "word_count": word_count,
    "stateless": stateless,
    "aggregates": aggregates,
    "table_aggregates": table_aggregates,
    "windowed": windowed,
    "windowed_repartitioned": windowed_repartitioned,
    "joined": joined,
    "joined_derived": joined_derived,
    "stream_joins": stream_joins,
    "same_sink_twice": same_sink_twice,
    "punctuated": punctuated,
}


@pytest.mark.parametrize("caching", [True, False], ids=["cache", "no-cache"])
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_both_engines_give_the_same_records_and_stores(name: str, caching: bool, seed: int) -> None:
    def build() -> Topology:
        b = StreamsBuilder()
        mat = Materialized.as_("store")
        TOPOLOGIES[name](b, mat if caching else mat.with_caching_disabled())
        return b.build()

    config = {} if caching else {"statestore.cache.max.bytes": 0}
    batches = random_batches(seed, ["in", "other"])
    record = run(build(), batches, "record", config)
    for arrow in (False, True):
        columnar = run(build(), batches, "columnar", config, arrow=arrow)
        assert columnar[0].keys() == record[0].keys()
        for topic in record[0]:
            if topic in combined_topics(build(), StreamsConfig.from_dict({**BASE, **config})):
                # a cached count's repartition records go combined per key and batch
                assert name == "word_count" and caching
                assert len(columnar[0][topic]) < len(record[0][topic])
                assert weighted_keys(columnar[0][topic]) == weighted_keys(record[0][topic])
                continue
            assert columnar[0][topic] == record[0][topic], (topic, arrow)
        assert columnar[1] == record[1]
        assert any(columnar[0].values())


def weighted_keys(records: list[Sent]) -> Counter[Any]:
    """How many records each key has, a combined record counting as those it stands for."""
    counts: Counter[Any] = Counter()
    for record in records:
        split = weights_of([record[4]])
        counts[record[1]] += 1 if split is None else split[0][0]
    return counts


def test_a_source_with_two_branches_into_one_topic_runs_record_by_record() -> None:
    b = StreamsBuilder()
    same_sink_twice(b, Materialized.as_("store"))
    topology = b.build()
    task = StreamTask(
        topology,
        0,
        0,
        StreamsConfig.from_dict({**BASE, "processing.engine": "columnar"}),
        Collector(),
    )
    task.initialize()
    assert task.columnar and task.source_for("in").batch_children is None
    b = StreamsBuilder()
    word_count(b, Materialized.as_("store"))
    task = StreamTask(
        b.build(),
        0,
        0,
        StreamsConfig.from_dict({**BASE, "processing.engine": "columnar"}),
        Collector(),
    )
    task.initialize()
    assert task.source_for("in").batch_children is not None


#: Windowed counts are combined inside batches under exactly_once_v2 only.
EOS = {"processing.guarantee": "exactly_once_v2"}


def windowed_words(b: StreamsBuilder, materialized: Materialized) -> None:
    """Words counted in hopping windows whose grace is about a batch's span of time."""
    windowed_repartitioned(b, materialized, TimeWindows.of_size_and_grace(100, 250).advance_by(30))


@pytest.mark.parametrize("late_share", [0.0, 0.01, 0.1])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_windowed_count_combined_inside_batches_counts_as_record_by_record(
    seed: int, late_share: float
) -> None:
    """Combined per key and window set, a batch's records give the record engine's
    outputs and stores; a batch whose records come late runs again uncombined."""

    def build() -> Topology:
        b = StreamsBuilder()
        windowed_words(b, Materialized.as_("store"))
        return b.build()

    batches = random_batches(seed, ["in"], n=900, step=8, late_share=late_share)
    record = run(build(), batches, "record", EOS)
    got = run_combined(build, batches, EOS)
    repartition = next(t for t in record[0] if t.endswith("-repartition"))
    assert got[0]["out"] == record[0]["out"]
    assert got[1] == record[1]
    assert weighted_keys(got[0][repartition]) == weighted_keys(record[0][repartition])
    combined = [r for r in got[0][repartition] if r[4]]
    assert combined  # combining ran (every record of a combined batch is marked)
    assert len(got[0][repartition]) < len(record[0][repartition])


def test_a_combined_batch_of_late_records_runs_again_uncombined() -> None:
    """Records in ascending order, but older than the stream time's grace: combined by
    their task, refused by the counting task, run again uncombined and dropped."""

    def build() -> Topology:
        b = StreamsBuilder()
        windowed_words(b, Materialized.as_("store"))
        return b.build()

    batches = [
        [("in", "k", "apple banana apple", 10_000 + i) for i in range(0, 100, 5)],
        [("in", "k", "apple fig", 1_000 + i) for i in range(0, 50, 5)],
        [("in", "k", "fig fig", 10_200 + i) for i in range(0, 50, 5)],
    ]
    record = run(build(), batches, "record", EOS)
    with pytest.raises(Rerun) as rerun:
        run(build(), batches, "columnar", EOS, arrow=True, combine_windows=lambda i: True)
    assert rerun.value.batch == 1
    got = run(build(), batches, "columnar", EOS, arrow=True, combine_windows=lambda i: i != 1)
    assert got[0]["out"] == record[0]["out"]
    assert got[1] == record[1]
    marked = [r for r in got[0]["cmp-store-repartition"] if r[4]]
    assert marked  # batches 0 and 2 were combined, batch 1 not
    assert all(r[3] >= 10_000 for r in marked)


def test_the_garbage_collector_waits_while_a_batch_runs() -> None:
    """A batch's containers are freed by reference counting: the cyclic collector is off
    while it runs, back on after (and left off where the application turned it off)."""
    seen: list[bool] = []
    b = StreamsBuilder()
    b.stream("in").peek(lambda k, v: seen.append(gc.isenabled())).to("out")
    settings = StreamsConfig.from_dict({**BASE, "processing.engine": "columnar"})
    task = StreamTask(b.build(), 0, 0, settings, Collector())
    task.initialize()
    assert gc.isenabled()
    task.process_columns("in", 0, [b"k"], [b"v"], [1], [0])
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    task.close()
