"""Measure the per-record cost of the processor layer: a word count and a windowed word
count (tumbling 1 s windows) through the TopologyTestDriver (in-memory stores, one commit
per piped record, as Kafka's driver), and the same topologies' two StreamTasks driven
directly in batches, as the Spark runtime drives them (no per-record commit).

Each timed run starts as a task host does: after a warm-up run of a few lines (first-use
imports), with the garbage of earlier runs collected and what is alive frozen
(``gc.freeze``, as the host server does after its imports), so that one run's leftovers do
not slow the next one's collections.

    python benchmarks/test_driver.py [--lines 20000] [--words-per-line 5]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from typing import Any

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from produce_consume import machine

from streams.config import StreamsConfig
from streams.serdes import Serdes
from streams.testing import TopologyTestDriver
from topology import Materialized, Produced, StreamsBuilder, TimeWindows, Topology
from topology.engine.task import StreamTask
from topology.engine.task_commit import AtLeastOnceTaskCommit

S, L = Serdes.String(), Serdes.Long()
#: Lines of each warm-up run.
WARM_UP = 2_000
#: How the tasks run here commit: as the at_least_once runtime does.
COMMIT = AtLeastOnceTaskCommit()
CONFIG = {
    "application.id": "bench",
    "default.key.serde": "string",
    "default.value.serde": "string",
    "default.dsl.store": "in_memory",
    "topics.root": "/tmp/unused",
}


def word_count() -> Topology:
    """The word count of the README."""
    b = StreamsBuilder()
    (
        b.stream("lines")
        .flat_map_values(str.split)
        .group_by(lambda k, w: w)
        .count(Materialized.as_("counts"))
        .to_stream()
        .to("counts-out", Produced.with_(S, L))
    )
    return b.build()


def windowed_word_count() -> Topology:
    """The word count per tumbling one-second window (records 1 ms apart)."""
    b = StreamsBuilder()
    (
        b.stream("lines")
        .flat_map_values(str.split)
        .group_by(lambda k, w: w)
        .windowed_by(TimeWindows.of_size_and_grace(1000, 100))
        .count(Materialized.as_("windowed-counts"))
        .to_stream()
        .map(lambda k, v: (f"{k.key}@{k.window.start}", v))
        .to("counts-out", Produced.with_(S, L))
    )
    return b.build()


def make_lines(n: int, words: int) -> list[str]:
    """Return ``n`` lines of ``words`` words from a 1,000-word vocabulary."""
    rng = random.Random(7)
    vocab = [f"w{i:03d}" for i in range(1000)]
    return [" ".join(rng.choice(vocab) for _ in range(words)) for _ in range(n)]


def through_driver(lines: list[str], topology: Topology | None = None) -> float:
    """Pipe every line through the driver; return seconds."""
    with TopologyTestDriver(topology or word_count(), CONFIG) as driver:
        topic = driver.create_input_topic("lines", S, S, start_timestamp=0, auto_advance_ms=1)
        out = driver.create_output_topic("counts-out", S, L)
        start = time.perf_counter()
        for line in lines:
            topic.pipe_input(None, line)
        elapsed = time.perf_counter() - start
        assert out.get_queue_size() > 0
    return elapsed


class _Buffer:
    """Collects what the sinks send: record by record, or as Arrow columns in batches."""

    def __init__(self) -> None:
        self.records: list[tuple[str, Any, Any, int, Any]] = []
        self.columns: list[tuple[pa.Array, pa.Array, list[int], Any]] = []
        #: The output topic's records sent since the last take (key and value bytes).
        self.output: list[tuple[bytes, bytes]] = []

    def send(self, topic: str, key: Any, value: Any, ts: int, headers: Any, part: Any) -> None:  # noqa: PLR0917
        self.records.append((topic, key, value, ts, tuple(headers)))
        if topic == "counts-out":
            self.output.append((key, value))

    def send_batch(
        self, topic: str, keys: pa.Array, values: pa.Array, ts: list[int], headers: Any
    ) -> None:
        self.topic = topic
        self.columns.append((keys, values, ts, headers or [()] * len(ts)))
        if topic == "counts-out":
            self.output.append((keys, values))

    def take(self) -> tuple[Any, Any, list[int], Any]:
        """Everything sent since the last take, as columns (keys, values, timestamps,
        headers: None when no record has any)."""
        keys = [c[0] for c in self.columns] + [pa.array([r[1] for r in self.records])]
        values = [c[1] for c in self.columns] + [pa.array([r[2] for r in self.records])]
        ts = [t for c in self.columns for t in c[2]] + [r[3] for r in self.records]
        hs = [h for c in self.columns for h in c[3]] + [r[4] for r in self.records]
        if self.records:
            self.topic = self.records[0][0]
        self.columns, self.records = [], []
        as_binary = [c.cast(pa.binary()) for c in keys if len(c)]
        return (
            pa.chunked_array(as_binary, pa.binary()),
            pa.chunked_array([c.cast(pa.binary()) for c in values if len(c)], pa.binary()),
            ts,
            hs if any(hs) else None,
        )

    def partitions_for(self, topic: str) -> int:
        return 1


def through_tasks(
    lines: list[str],
    batch: int = 10_000,
    topology: Topology | None = None,
    engine: str = "columnar",
) -> tuple[float, dict[bytes, bytes]]:
    """Run the two tasks directly in batches (columns in, repartition hand-over) under
    ``processing.engine`` ``engine``; return seconds and the last output value per key."""
    config = StreamsConfig.from_dict({**CONFIG, "processing.engine": engine})
    topology = topology or word_count()
    up_out, down_out = _Buffer(), _Buffer()
    # each batch's repartition records are counted before the next commit, as on Spark
    up = StreamTask(topology, 0, 0, config, up_out, combine_repartitions=True)
    down = StreamTask(topology, 1, 0, config, down_out, combine_repartitions=True)
    up.initialize()
    down.initialize()
    encoded = [line.encode() for line in lines]
    start = time.perf_counter()
    for lo in range(0, len(encoded), batch):
        chunk = encoded[lo : lo + batch]
        n = len(chunk)
        up.process_columns(
            "lines", 0, [None] * n, chunk, list(range(lo, lo + n)), list(range(lo, lo + n))
        )
        up.prepare_commit()
        COMMIT.end_batch(up, None, worked=True)
        keys, values, ts, hs = up_out.take()
        down.process_columns(up_out.topic, 0, keys, values, ts, list(range(len(ts))), hs)
        down.prepare_commit()
        COMMIT.end_batch(down, None, worked=True)
        down_out.take()
    elapsed = time.perf_counter() - start
    up.close()
    down.close()
    final = {}
    for keys, values in down_out.output:
        if isinstance(keys, pa.Array):
            final.update(zip(keys.to_pylist(), values.to_pylist(), strict=True))
        else:
            final[keys] = values
    return elapsed, final


def main() -> None:
    """Run and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--words-per-line", type=int, default=5)
    args = parser.parse_args()
    lines = make_lines(args.lines, args.words_per_line)
    words = args.lines * args.words_per_line
    print(f"machine: {machine()}")
    print(f"word count: {args.lines} lines, {words} words, 1000 distinct words")
    through_driver(lines[:WARM_UP])
    _clean()
    seconds = through_driver(lines)
    print(
        f"  TopologyTestDriver (commit per record): {args.lines / seconds:,.0f} lines/s, "
        f"{words / seconds:,.0f} words/s"
    )
    _batches(lines, words, None)
    print("windowed word count: tumbling 1 s windows, lines 1 ms apart")
    through_driver(lines[:WARM_UP], windowed_word_count())
    _clean()
    seconds = through_driver(lines, windowed_word_count())
    print(
        f"  TopologyTestDriver (commit per record): {args.lines / seconds:,.0f} lines/s, "
        f"{words / seconds:,.0f} words/s"
    )
    _batches(lines, words, windowed_word_count)


def _clean() -> None:
    """Collect the garbage of earlier runs; freeze what is alive (see the module)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _batches(lines: list[str], words: int, topology: Any) -> None:
    """Print both engines' figures for StreamTask batches, and their ratio."""
    rates, finals = {}, {}
    for engine in ("record", "columnar"):
        through_tasks(lines[:WARM_UP], topology=topology and topology(), engine=engine)
        _clean()
        seconds, finals[engine] = through_tasks(
            lines, topology=topology and topology(), engine=engine
        )
        rates[engine] = words / seconds
        print(
            f"  StreamTask batches of 10,000 lines, {engine + ' engine:':17} "
            f"{len(lines) / seconds:,.0f} lines/s, {words / seconds:,.0f} words/s"
        )
    if finals["columnar"] != finals["record"]:
        raise SystemExit("the two engines' final counts differ")
    print(f"  columnar / record = {rates['columnar'] / rates['record']:.2f} (same final counts)")


if __name__ == "__main__":
    main()
