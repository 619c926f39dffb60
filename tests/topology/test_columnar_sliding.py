"""The columnar engine against the record engine on sliding-window aggregations: the same
random input, cut into the same random batches, must give the same records on every topic
(in order, with their timestamps and headers), the same record context downstream, and
the same final stores; late records (dropped past the grace), out-of-order ones, null keys
and values, early records (before the time difference) and stream-time punctuators that
cut batches included.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from common.config import StreamsConfig
from common.serdes import Serdes
from topology import Grouped, Materialized, Produced, StreamsBuilder, Topology
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import SlidingWindows
from topology.engine.processing import BATCH, describe_processing
from topology.engine.task import StreamTask

from .test_columnar import BASE, Collector, Contextual, Ticker, random_batches, run

S, L = Serdes.String(), Serdes.Long()
Batches = list[list[tuple[str, str | None, str, int]]]
Build = Callable[[StreamsBuilder, Materialized, SlidingWindows], None]


def _grouped(b: StreamsBuilder) -> Any:
    """The words of ``in`` (a value ``fig...`` made null), grouped by key."""
    return (
        b.stream("in")
        .map_values(lambda v: None if v.startswith("fig") else v)
        .group_by_key(Grouped.with_(S, S))
    )


def sliding_count(b: StreamsBuilder, mat: Materialized, windows: SlidingWindows) -> None:
    serde = WindowedSerdes.time_windowed_serde_from(S, windows.time_difference_ms)
    _grouped(b).windowed_by(windows).count(mat).to_stream().to("out", Produced.with_(serde, L))


def sliding_aggregate(b: StreamsBuilder, mat: Materialized, windows: SlidingWindows) -> None:
    """An aggregate whose result depends on the order of its records."""
    serde = WindowedSerdes.time_windowed_serde_from(S, windows.time_difference_ms)
    _grouped(b).windowed_by(windows).aggregate(
        lambda: "", lambda k, v, agg: (agg + v[:2])[-24:], mat.with_value_serde(S)
    ).to_stream().to("out", Produced.with_(serde, S))


def sliding_reduce(b: StreamsBuilder, mat: Materialized, windows: SlidingWindows) -> None:
    """A reduce, its updates fed record by record to a node reading its record context
    (offset, stream time, headers), then to a stream-time punctuator that cuts batches."""
    _grouped(b).windowed_by(windows).reduce(
        lambda agg, v: agg + "|" + v[:3] if len(agg) < 30 else v, mat
    ).to_stream().map(lambda wk, v: (f"{wk.key}@{wk.window.start}", v)).process(Contextual).process(
        Ticker
    ).to("out", Produced.with_(S, S))


def sliding_regrouped(b: StreamsBuilder, mat: Materialized, windows: SlidingWindows) -> None:
    """A count whose table is re-grouped and counted: its updates carry old values."""
    _grouped(b).windowed_by(windows).count(mat).group_by(
        lambda wk, n: (str(n % 3), f"{wk.key}@{wk.window.start}"), Grouped.with_(S, S)
    ).count(Materialized.as_("regrouped")).to_stream().to("out", Produced.with_(S, L))


TOPOLOGIES: dict[str, Build] = {
    "count": sliding_count,
    "aggregate": sliding_aggregate,
    "reduce": sliding_reduce,
    "regrouped": sliding_regrouped,
}

#: ``caching`` -> (Materialized with caching?, configuration).
CACHES: dict[str, tuple[bool, dict[str, Any]]] = {
    "cache": (True, {}),
    "cache-size-0": (True, {"statestore.cache.max.bytes": 0}),
    "no-cache": (False, {}),
}


def early_batches(seed: int) -> Batches:
    """``random_batches`` moved to the start of time: the first records come before the
    time difference (Kafka's ``processEarly``)."""
    return [
        [(t, k, v, max(0, ts - 1_000)) for t, k, v, ts in batch]
        for batch in random_batches(seed, ["in"])
    ]


def dense_batches(seed: int) -> Batches:
    """Two keys, records a few ms apart, many out of order: records within the grace find
    windows the store already expired (hidden by a read, or still in the cache)."""
    return random_batches(seed, ["in"], n=600, keys=2, step=12, late_share=0.3)


def tight_batches(seed: int, base: int) -> Batches:
    """Two keys, records 0-3 ms apart from ``base`` on, 40% of them up to 14 ms out of
    order, in batches of 1-50: with a time difference of a few ms, records land on the
    edge of the store's retention (a window just expired below, or not yet)."""
    rnd = random.Random(seed)
    records, ts = [], base
    for _ in range(700):
        ts += rnd.randint(0, 3)
        at = ts - rnd.randint(0, 14) if rnd.random() < 0.4 else ts
        key = None if rnd.random() < 0.03 else f"k{rnd.randrange(2)}"
        records.append(("in", key, rnd.choice(["apple", "banana", "fig", "cherry"]), max(0, at)))
    batches, i = [], 0
    while i < len(records):
        size = rnd.randint(1, 50)
        batches.append(records[i : i + size])
        i += size
    return batches


def spread_batches(seed: int) -> Batches:
    """Records some 200 ms apart: the windows cross the stores' 60 s segments."""
    return random_batches(seed, ["in"], n=500, keys=4, step=400, late_share=0.2)


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each run's engine itself (not the suite's two runs)."""
    return "each run's own"


def compare(build: Build, windows: SlidingWindows, caching: str, batches: Batches) -> None:
    cached, config = CACHES[caching]

    def topology() -> Topology:
        b = StreamsBuilder()
        mat = Materialized.as_("store")
        build(b, mat if cached else mat.with_caching_disabled(), windows)
        return b.build()

    record = run(topology(), batches, "record", config)
    assert any(record[0].values())
    for arrow in (False, True):
        columnar = run(topology(), batches, "columnar", config, arrow=arrow)
        assert columnar[0] == record[0], arrow
        assert columnar[1] == record[1], arrow


@pytest.mark.parametrize("caching", sorted(CACHES))
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_both_engines_give_the_same_sliding_windows(name: str, caching: str, seed: int) -> None:
    windows = SlidingWindows.of_time_difference_and_grace(60, 40)
    compare(TOPOLOGIES[name], windows, caching, random_batches(seed, ["in"]))


@pytest.mark.parametrize("caching", sorted(CACHES))
@pytest.mark.parametrize("name", ["count", "aggregate"])
@pytest.mark.parametrize("seed", [4, 5])
def test_early_records_and_no_grace(name: str, caching: str, seed: int) -> None:
    windows = SlidingWindows.of_time_difference_with_no_grace(100)
    compare(TOPOLOGIES[name], windows, caching, early_batches(seed))


@pytest.mark.parametrize("caching", sorted(CACHES))
@pytest.mark.parametrize("seed", [6, 7])
def test_windows_across_segments(caching: str, seed: int) -> None:
    windows = SlidingWindows.of_time_difference_with_no_grace(250)
    compare(sliding_aggregate, windows, caching, spread_batches(seed))


@pytest.mark.parametrize("caching", sorted(CACHES))
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize(("seed", "grace"), [(9, 0), (10, 20), (11, 45)])
def test_windows_the_store_expired(name: str, caching: str, seed: int, grace: int) -> None:
    windows = SlidingWindows.of_time_difference_and_grace(100, grace)
    compare(TOPOLOGIES[name], windows, caching, dense_batches(seed))


@pytest.mark.parametrize("caching", ["cache", "no-cache"])
@pytest.mark.parametrize("name", ["count", "aggregate", "regrouped"])
@pytest.mark.parametrize("grace", [0, 1, 3])
@pytest.mark.parametrize(("seed", "base"), [(12, 0), (13, 59_700), (14, 119_650)])
def test_records_on_the_edge_of_retention(
    name: str, caching: str, grace: int, seed: int, base: int
) -> None:
    """Early records (``base`` 0) and windows across a segment boundary (60 s, 120 s)."""
    windows = SlidingWindows.of_time_difference_and_grace(5, grace)
    compare(TOPOLOGIES[name], windows, caching, tight_batches(seed, base))


def test_a_small_cache_runs_record_by_record_as_the_record_engine() -> None:
    """A cache too small for a batch's windows (it would evict mid-batch): the batch goes
    record by record."""
    windows = SlidingWindows.of_time_difference_and_grace(60, 40)
    cached = {"statestore.cache.max.bytes": 3_000}
    b = StreamsBuilder()
    sliding_count(b, Materialized.as_("store"), windows)
    batches = random_batches(8, ["in"])
    record = run(b.build(), batches, "record", cached)
    b = StreamsBuilder()
    sliding_count(b, Materialized.as_("store"), windows)
    columnar = run(b.build(), batches, "columnar", cached)
    assert columnar == record


def test_the_batch_path_reads_and_writes_each_window_once() -> None:
    """A batch of one key: one range read, each window written once, and the node is
    described as taking batches."""
    b = StreamsBuilder()
    sliding_count(
        b, Materialized.as_("store"), SlidingWindows.of_time_difference_and_grace(50, 500)
    )
    topology = b.build()
    settings = StreamsConfig.from_dict({**BASE, "processing.engine": "columnar"})
    task = StreamTask(topology, 0, 0, settings, Collector())
    task.initialize()
    stamps = [1_000 + 10 * i for i in range(40)]
    task.process_columns("in", 0, [b"k"] * 40, [b"apple"] * 40, stamps, list(range(40)), None)
    store: Any = task.stores["store"]
    assert store.metrics["range"] == 1
    written = store.metrics["put"]
    assert written == len(list(store.all()))
    task.close()
    described = describe_processing(topology, {**BASE, "processing.engine": "columnar"})
    hows = dict(described.sources[0].nodes)
    assert hows["KSTREAM-AGGREGATE-0000000002"] == BATCH
