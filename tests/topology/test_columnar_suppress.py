"""``suppress`` on the columnar engine (a batch through the buffer at once, see
:mod:`topology.processors.proc_suppress`) against the record engine: the same random
input, cut into the same random batches, must give the same records on every topic (in
order, with their timestamps and headers, and the record context a node below reads), the
same final stores, and the same failure where a strict buffer overflows. Final results of
time and session windows, time limits over a table with tombstones and over windows,
every buffer bound (unbounded, records, bytes; emit early or shut down), late and
out-of-order records, caching on and off, in-memory and RocksDB stores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from common.config import StreamsConfig
from common.errors import StreamsError
from common.serdes import Serdes
from tests.topology.test_columnar import BASE, Collector, Contextual, random_batches, run
from topology import Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology
from topology.api.processor import Processor
from topology.api.record import Record
from topology.api.windows import SessionWindows, TimeWindows
from topology.dsl.suppress import BufferConfig, Suppressed
from topology.engine.processing import BATCH, describe_processing
from topology.engine.task import StreamTask

S, L = Serdes.String(), Serdes.Long()
Batches = list[list[tuple[str, str | None, str, int]]]


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each run's engine itself (not the suite's two runs)."""
    return "each run's own"


class Headed(Processor):  # type: ignore[type-arg]
    """Gives each record a header naming its first word (the suppress buffer keeps an
    update's headers and emits them with it)."""

    def init(self, context: Any) -> None:
        self.context = context

    def process(self, record: Any) -> None:
        word = record.value.split()[0]
        headers = () if word == "date" else (("w", word.encode()),)
        self.context.forward(Record(record.key, record.value, record.timestamp, headers))


#: name -> Suppressed over windows (``until_window_closes`` or a time limit).
WINDOWED: dict[str, Callable[[], Suppressed]] = {
    "final-unbounded": lambda: Suppressed.until_window_closes(BufferConfig.unbounded()),
    "final-strict-roomy": lambda: Suppressed.until_window_closes(
        BufferConfig.max_records(10_000).shut_down_when_full()
    ),
    "final-unlogged": lambda: Suppressed.until_window_closes(
        BufferConfig.unbounded().with_logging_disabled()
    ),
    "limit-windows": lambda: Suppressed.until_time_limit(30, BufferConfig.unbounded()),
    "limit-windows-bytes": lambda: Suppressed.until_time_limit(80, BufferConfig.max_bytes(900)),
}

#: name -> Suppressed over a table (time limits, every bound).
TABLE: dict[str, Callable[[], Suppressed]] = {
    "limit-unbounded": lambda: Suppressed.until_time_limit(60, BufferConfig.unbounded()),
    "limit-zero": lambda: Suppressed.until_time_limit(0, BufferConfig.unbounded()),
    "limit-records": lambda: Suppressed.until_time_limit(200, BufferConfig.max_records(3)),
    "limit-bytes": lambda: Suppressed.until_time_limit(150, BufferConfig.max_bytes(350)),
    "limit-both": lambda: Suppressed.until_time_limit(
        100, BufferConfig.max_records(5).with_max_bytes(500)
    ),
    "limit-strict-roomy": lambda: Suppressed.until_time_limit(
        50, BufferConfig.max_bytes(1 << 20).shut_down_when_full()
    ),
}

#: Buffers that overflow a strict bound: the application stops with the same error.
FULL: dict[str, Callable[[], Suppressed]] = {
    "final-records": lambda: Suppressed.until_window_closes(
        BufferConfig.max_records(4).shut_down_when_full()
    ),
    "final-bytes": lambda: Suppressed.until_window_closes(
        BufferConfig.unbounded().with_max_bytes(700)
    ),
    "limit-records": lambda: Suppressed.until_time_limit(
        500, BufferConfig.max_records(6).shut_down_when_full()
    ),
}

CACHES: dict[str, tuple[bool, dict[str, Any]]] = {
    "cache": (True, {}),
    "no-cache": (False, {}),
}


def windowed(
    suppressed: Suppressed, caching: bool, *, sessions: bool = False, headed: bool = True
) -> Topology:
    """Words counted per key in windows of 100 ms (or sessions of 40 ms) with a grace of
    60, headed records in (through a repartition topic), the suppressed counts out, then
    through a node reading its record context."""
    b = StreamsBuilder()
    mat = Materialized.as_("counts")
    if not caching:
        mat = mat.with_caching_disabled()
    stream = b.stream("in")
    grouped = (stream.process(Headed) if headed else stream).group_by_key(Grouped.with_(S, S))
    if sessions:
        table: Any = grouped.windowed_by(SessionWindows.of_inactivity_gap_and_grace(40, 60)).count(
            mat
        )
    else:
        table = grouped.windowed_by(TimeWindows.of_size_and_grace(100, 60)).count(mat)
    (
        table.suppress(suppressed)
        .to_stream()
        .map(lambda w, n: (f"{w.key}@{w.window.start}/{w.window.end}", str(n)))
        .process(Contextual)
        .to("out", Produced.with_(S, S))
    )
    return b.build()


def table_limited(suppressed: Suppressed, caching: bool) -> Topology:
    """A table of ``in`` whose values with ``fig`` are filtered out (tombstones), its
    updates (with old values) held back for a time limit, then out."""
    b = StreamsBuilder()
    mat = Materialized.as_("source")
    if not caching:
        mat = mat.with_caching_disabled()
    (
        b.table("in", Consumed.with_(S, S), mat)
        .filter(lambda k, v: "fig" not in v)
        .suppress(suppressed)
        .to_stream()
        .process(Contextual)
        .to("out", Produced.with_(S, S))
    )
    return b.build()


def compare(
    build: Callable[[], Topology],
    batches: Batches,
    config: dict[str, Any],
    each_batch: Callable[[int], bool] = lambda number: False,
) -> None:
    """Run ``batches`` through both engines (``each_batch(i)`` before batch ``i``, as
    ``run``'s ``combine_windows``); the records and stores must be the same."""
    record = run(build(), batches, "record", config, combine_windows=each_batch)
    assert record[0]["out"]
    for arrow in (False, True):
        columnar = run(
            build(), batches, "columnar", config, arrow=arrow, combine_windows=each_batch
        )
        assert columnar[0].keys() == record[0].keys()
        for topic in record[0]:
            assert columnar[0][topic] == record[0][topic], (topic, arrow)
        assert columnar[1] == record[1], arrow


#: (suppressed kind, over sessions?): every kind over time windows, two over sessions.
WINDOWED_CASES = [(kind, False) for kind in sorted(WINDOWED)]
WINDOWED_CASES += [("final-unbounded", True), ("limit-windows-bytes", True)]


@pytest.mark.parametrize("store", ["in_memory", "rocksDB"])
@pytest.mark.parametrize("cache", sorted(CACHES))
@pytest.mark.parametrize(("kind", "over_sessions"), WINDOWED_CASES)
@pytest.mark.parametrize("seed", [1, 2])
def test_suppressed_windows_give_the_record_engines_outputs(  # noqa: PLR0917
    seed: int, kind: str, over_sessions: bool, cache: str, store: str, tmp_path: Any
) -> None:
    caching, extra = CACHES[cache]
    batches = random_batches(seed, ["in"], n=500, keys=5, step=15, late_share=0.2)
    config = {**extra, "default.dsl.store": store, "state.dir": str(tmp_path)}
    compare(lambda: windowed(WINDOWED[kind](), caching, sessions=over_sessions), batches, config)


@pytest.mark.parametrize("cache", sorted(CACHES))
@pytest.mark.parametrize("kind", sorted(TABLE))
@pytest.mark.parametrize("seed", [5, 6, 7])
def test_a_time_limit_over_a_table_gives_the_record_engines_outputs(
    seed: int, kind: str, cache: str
) -> None:
    caching, config = CACHES[cache]
    batches = random_batches(seed, ["in"], n=500, keys=8, step=10, late_share=0.2)
    compare(lambda: table_limited(TABLE[kind](), caching), batches, config)


def run_until_full(
    topology: Topology, batches: Batches, engine: str
) -> tuple[list[Any], str, dict[str, Any]]:
    """Feed ``batches`` to a one-task topology (a commit after each) until it fails;
    return what it sent (committed or not), the error, and the suppress store's entries
    when it failed."""
    settings = StreamsConfig.from_dict({**BASE, "processing.engine": engine})
    collector = Collector()
    [sub] = topology.task_subtopologies()
    task = StreamTask(topology, sub.id, 0, settings, collector)
    task.initialize()
    offset = 0
    try:
        for batch in batches:
            rows = [(k, v, ts) for _, k, v, ts in batch]
            task.process_columns(
                "in",
                0,
                [None if k is None else k.encode() for k, _, _ in rows],
                [v.encode() for _, v, _ in rows],
                [ts for _, _, ts in rows],
                list(range(offset, offset + len(rows))),
                None,
            )
            offset += len(rows)
            task.prepare_commit()
    except StreamsError as exc:
        found: dict[str, Any] = dict(task.stores)
        stores = {
            name: sorted(store.all(), key=repr)
            for name, store in found.items()
            if name.startswith("KTABLE-SUPPRESS")
        }
        return collector.sent, str(exc), stores
    raise AssertionError("the buffer never overflowed")


@pytest.mark.parametrize("kind", sorted(FULL))
@pytest.mark.parametrize("seed", [8, 9])
def test_a_strict_buffer_overflows_where_the_record_engine_overflows(seed: int, kind: str) -> None:
    """The same records sent before the failure (the failing record's emissions too),
    the same message (records and bytes), the same buffer left in the store."""
    batches = random_batches(seed, ["in"], n=400, keys=8, step=10, late_share=0.2)

    def build() -> Topology:
        if kind.startswith("final"):
            return windowed(FULL[kind](), False, headed=False)
        return table_limited(FULL[kind](), False)

    record = run_until_full(build(), batches, "record")
    columnar = run_until_full(build(), batches, "columnar")
    assert "buffer exceeded its max capacity" in record[1]
    assert columnar[1] == record[1]
    assert columnar[2] == record[2]
    outputs = [r for r in record[0] if not r[0].endswith("-changelog")]
    assert [r for r in columnar[0] if not r[0].endswith("-changelog")] == outputs


def test_suppress_takes_batches_and_writes_each_key_once_a_batch() -> None:
    """The node is described as taking batches, and it does: a batch of one key's
    updates writes the buffer's store once."""
    topology = table_limited(Suppressed.until_time_limit(1_000, BufferConfig.unbounded()), False)
    columnar = {**BASE, "processing.engine": "columnar"}
    hows = dict(describe_processing(topology, columnar).sources[0].nodes)
    [name] = [n for n in hows if n.startswith("KTABLE-SUPPRESS")]
    assert hows[name] == BATCH
    task = StreamTask(topology, 0, 0, StreamsConfig.from_dict(columnar), Collector())
    task.initialize()
    stamps = [1_000 + i for i in range(30)]
    task.process_columns("in", 0, [b"k"] * 30, [b"apple"] * 30, stamps, list(range(30)), None)
    [store] = [s for n, s in dict[str, Any](task.stores).items() if n.startswith("KTABLE-SUP")]
    assert store.metrics["put"] == 1
    task.close()
