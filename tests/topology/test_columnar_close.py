"""Session and sliding-window aggregations emitting on window close, on the columnar
engine (a batch folded between the records that emit, see
:mod:`topology.processors.close_batch`) against the record engine: the same random input,
cut into the same random batches, must give the same records on every topic (in order,
with their timestamps and headers, and the record context a node below reads) and the
same final stores. Every record looks for closed windows (no emit interval), or the
first of a batch when a wall clock that moves between batches passes the interval; graces
from none to more than a batch's span; late, out-of-order and early records, null keys
and values; caching asked for or not, in-memory and RocksDB stores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from common.config import StreamsConfig
from tests.topology.test_columnar import BASE, Collector, Contextual, Ticker, random_batches, run
from tests.topology.test_columnar_sliding import dense_batches, early_batches
from tests.topology.test_columnar_suppress import Batches, Headed, S, compare
from topology import EmitStrategy, Grouped, Materialized, Produced, StreamsBuilder, Topology
from topology.api.emit import EMIT_INTERVAL_KEY
from topology.api.windows import SessionWindows, SlidingWindows
from topology.engine import task as task_module
from topology.engine.processing import BATCH, ONE_BY_ONE, describe_processing
from topology.engine.task import StreamTask

CLOSE = EmitStrategy.on_window_close()


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each run's engine itself (not the suite's two runs)."""
    return "each run's own"


class Clock:
    """A wall clock that moves only between batches (``step`` ms a batch): the records
    of a batch share one reading in both engines."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.now = 1_000_000

    def read(self) -> int:
        return self.now

    def batch(self, number: int) -> bool:
        """``run``'s per-batch hook: move to batch ``number``'s time; combine nothing."""
        self.now = 1_000_000 + number * self.step
        return False


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The tasks' wall clock, moving 700 ms a batch."""
    found = Clock(700)
    monkeypatch.setattr(task_module, "_now_ms", found.read)
    yield found


#: ``interval`` -> the configuration: every record looks, or the first of a batch once
#: the clock passed a second since the last look.
INTERVALS: dict[str, dict[str, Any]] = {"every-record": {EMIT_INTERVAL_KEY: 0}, "1s": {}}


def _mat(name: str, caching: bool) -> Materialized:
    mat = Materialized.as_(name)
    return mat if caching else mat.with_caching_disabled()


def sessions(
    kind: str,
    grace: int,
    caching: bool,
    retention: int | None = None,
    emit: EmitStrategy = CLOSE,
) -> Topology:
    """Words counted (or joined, or their first letters aggregated) per session of 40 ms
    of the records' keys (kept ``retention`` ms, by default gap plus grace), headed
    records in (through a repartition topic), each closed session (or each update, by
    ``emit``) out through a node reading its record context."""
    b = StreamsBuilder()
    grouped = b.stream("in").process(Headed).group_by_key(Grouped.with_(S, S))
    windowed = grouped.windowed_by(
        SessionWindows.of_inactivity_gap_and_grace(40, grace)
    ).emit_strategy(emit)
    mat = _mat("sessions", caching)
    if retention is not None:
        mat = mat.with_retention(retention)
    table: Any
    if kind == "count":
        table = windowed.count(mat)
    elif kind == "reduce":
        table = windowed.reduce(lambda a, v: f"{a}|{v}"[-40:], mat.with_value_serde(S))
    else:
        table = windowed.aggregate(
            lambda: "",
            lambda k, v, a: (a + v[:2])[-30:],
            lambda k, a, b: f"({a}){b}"[-30:],
            mat.with_value_serde(S),
        )
    (
        table.to_stream()
        .map(lambda w, v: (f"{w.key}@{w.window.start}/{w.window.end}", str(v)))
        .process(Contextual)
        .to("out", Produced.with_(S, S))
    )
    return b.build()


def sliding(kind: str, windows: SlidingWindows, caching: bool) -> Topology:
    """Words per key (a value ``fig...`` made null) counted or aggregated over sliding
    windows, each closed window out through a node reading its record context, then a
    stream-time punctuator that cuts batches."""
    b = StreamsBuilder()
    grouped = (
        b.stream("in")
        .map_values(lambda v: None if v.startswith("fig") else v)
        .group_by_key(Grouped.with_(S, S))
    )
    windowed = grouped.windowed_by(windows).emit_strategy(CLOSE)
    mat = _mat("sliding", caching)
    table: Any
    if kind == "count":
        table = windowed.count(mat)
    else:
        table = windowed.aggregate(
            lambda: "", lambda k, v, agg: (agg + str(v)[:2])[-24:], mat.with_value_serde(S)
        )
    (
        table.to_stream()
        .map(lambda w, v: (f"{w.key}@{w.window.start}", str(v)))
        .process(Contextual)
        .process(Ticker)
        .to("out", Produced.with_(S, S))
    )
    return b.build()


#: ``store-interval-caching`` -> (the configuration, whether the store asks for a cache).
SETUPS: dict[str, tuple[dict[str, Any], bool]] = {
    f"{store}-{interval}-{'cache' if caching else 'no-cache'}": (
        {**INTERVALS[interval], "default.dsl.store": store},
        caching,
    )
    for store in ("in_memory", "rocksDB")
    for interval in INTERVALS
    for caching in (True, False)
}


def _setup(name: str, tmp_path: Any) -> tuple[dict[str, Any], bool]:
    """A store (in a fresh state directory), an emit interval, a cache asked for or not."""
    config, caching = SETUPS[name]
    return {**config, "state.dir": str(tmp_path)}, caching


#: (setup, kind, grace, seed): every setup with every kind and grace, the two seeds in
#: turn (every pair of a setup and a seed is tried, in half the full product's cases).
SESSION_CASES = [
    (name, kind, grace, 1 + (i + j) % 2)
    for i, name in enumerate(sorted(SETUPS))
    for j, (kind, grace) in enumerate(
        (k, g) for k in ("count", "reduce", "aggregate") for g in (0, 60, 400)
    )
]


@pytest.mark.parametrize(("setup", "kind", "grace", "seed"), SESSION_CASES)
def test_closing_sessions_give_the_record_engines_outputs(  # noqa: PLR0917
    setup: str, kind: str, grace: int, seed: int, tmp_path: Any, clock: Clock
) -> None:
    config, caching = _setup(setup, tmp_path)
    batches = random_batches(seed, ["in"], n=600, keys=5, step=12, late_share=0.15)
    compare(lambda: sessions(kind, grace, caching), batches, config, clock.batch)


SLIDING_INPUTS: dict[str, Callable[[int], Batches]] = {
    "random": lambda seed: random_batches(seed, ["in"], n=500, keys=4, step=20),
    "early": early_batches,
    "dense": dense_batches,
}


#: (setup, kind, inputs, seed, grace): every setup with every kind and input, the
#: (seed, grace) pairs in turn (every pair of a setup, a kind, an input and a grace is
#: tried, in a third of the full product's cases).
SLIDING_CASES = [
    (name, kind, inputs, *[(3, 0), (4, 40), (5, 300)][(i + j) % 3])
    for i, name in enumerate(sorted(SETUPS))
    for j, (kind, inputs) in enumerate(
        (k, n) for k in ("count", "aggregate") for n in sorted(SLIDING_INPUTS)
    )
]


@pytest.mark.parametrize(("setup", "kind", "inputs", "seed", "grace"), SLIDING_CASES)
def test_closing_sliding_windows_give_the_record_engines_outputs(  # noqa: PLR0917
    setup: str, kind: str, inputs: str, seed: int, grace: int, tmp_path: Any, clock: Clock
) -> None:
    config, caching = _setup(setup, tmp_path)
    windows = SlidingWindows.of_time_difference_and_grace(60, grace)
    build = partial(sliding, kind, windows, caching)
    compare(build, SLIDING_INPUTS[inputs](seed), config, clock.batch)


def _closing_node(topology: Topology) -> str:
    [name] = [n for n in topology.nodes if n.startswith("KSTREAM-AGGREGATE")]
    return name


@pytest.mark.parametrize("which", ["sessions", "sliding"])
def test_a_closing_aggregation_takes_batches_whole(which: str, clock: Clock) -> None:
    """Described as taking batches, and it does: a batch of one key's records (no window
    closes) reads the store once a batch, not once a record; a user's processor below it
    is described as fed record by record."""
    if which == "sessions":
        topology = sessions("count", 5_000, False)
    else:
        topology = sliding("count", SlidingWindows.of_time_difference_and_grace(50, 5_000), False)
    settings = {**BASE, "processing.engine": "columnar"}
    described = describe_processing(topology, settings)
    hows = {name: how for source in described.sources for name, how in source.nodes}
    node = _closing_node(topology)
    assert hows[node] == BATCH
    assert [how for name, how in hows.items() if "PROCESSOR" in name] == [ONE_BY_ONE] * len(
        [name for name in hows if "PROCESSOR" in name]
    )
    sub = next(s for s in topology.task_subtopologies() if node in s.nodes)
    task = StreamTask(topology, sub.id, 0, StreamsConfig.from_dict(settings), Collector())
    task.initialize()
    [source] = sub.sources
    spec: Any = topology.nodes[source]
    runtime = topology.topic_name(spec.topics[0], "cmp", internal=spec.internal)
    stamps = [1_000 + 10 * i for i in range(40)]
    task.process_columns(runtime, 0, [b"k"] * 40, [b"apple"] * 40, stamps, list(range(40)), None)
    store: Any = next(iter(task.stores.values()))
    assert store.metrics["range"] <= 5, store.metrics  # one a batch (a punctuator cuts them)
    task.close()


def test_a_batch_whose_first_record_merges_a_closing_session_emits_after_its_writes(
    clock: Clock,
) -> None:
    """A batch's first record looks for closed sessions (the clock passed the interval)
    after a record of the batch before moved stream time: it merges a session that ended
    before its close time into one still open, so that session is gone when it looks
    (Kafka looks after the record's writes; the store keeps sessions longer than their
    grace, else it would ignore the removal), and only the two before it go out."""
    clock.step = 2_000
    late, opens = ("in", "k", "c", 1_180), ("in", "k", "d", 1_300)
    batches: Batches = [
        [("in", "k", "a", 1_000), ("in", "k", "b", 1_100), late, opens],
        [("in", "k", "e", 1_210)],  # merges [1180, 1180] (closed at 1200) into [1180, 1210]
    ]
    record = run(
        sessions("count", 60, False, 5_000), batches, "record", {}, combine_windows=clock.batch
    )
    assert [r[1] for r in record[0]["out"]] == [b"k@1000/1000", b"k@1100/1100"]
    columnar = run(
        sessions("count", 60, False, 5_000), batches, "columnar", {}, combine_windows=clock.batch
    )
    assert columnar == record


@pytest.mark.parametrize("kind", ["count", "aggregate"])
@pytest.mark.parametrize("seed", [6, 7])
def test_a_session_record_aggregated_alone_forwards_in_its_own_context(
    seed: int, kind: str, clock: Clock
) -> None:
    """Emitting on update, without a cache and with no grace, most records cannot start a
    run folded in memory and go alone: their updates reach the node below in their own
    record context (offset, stream time, headers)."""
    batches = random_batches(seed, ["in"], n=400, keys=4, step=12, late_share=0.15)
    update = EmitStrategy.on_window_update()
    compare(lambda: sessions(kind, 0, False, emit=update), batches, {}, clock.batch)
