"""The word count in this library against the same job in Spark's own stateful operators.

One input of --records lines in --partitions partitions is produced once, as a topic.
``--job windowed`` counts words per hopping window instead (--window-ms wide, advancing
by --advance-ms, --grace-ms of grace; the lines' timestamps --step-ms apart): this
library's ``windowed_by(TimeWindows...).count()`` against Spark's
``withWatermark(...).groupBy(window(...), word).count()`` (watermark delay = grace), both
checked against the counts computed from the input (no record is late for either).
``--job emit-final`` is the same windowed count emitting each window once, when it closes:
this library's ``.emit_strategy(EmitStrategy.on_window_close())`` (KIP-825) against Spark's
append output mode, over the same windows and grace (= watermark delay). Both must emit
the same final windows, each once, with its count: every window whose end is at most the
last timestamp minus the grace. Spark emits the last of them in the no-data batch that its
last watermark brings (``spark.sql.streaming.noDataMicroBatches.enabled``, which this
project's session turns off, is on for this job); this library looks for closed windows
after every record (Kafka's internal ``__emit.interval.ms.kstreams.windowed.aggregation__``
= 0), so that the last record closes them too. Both numbers of final windows are printed.

* **streams**: ``examples/wordcount.py`` under exactly_once_v2 (RocksDB store, changelog,
  transactions), reading ``max.poll.records`` lines per partition per batch, until idle.
* **spark**: the same job in Structured Streaming's own operators, reading the topic's
  Parquet data files with the file source (``maxFilesPerTrigger``), copied aside once
  produced (this library's log cleaner merges the topic's small files while it runs, and
  the file source would read a merged file and the files it replaced):
  ``explode(split(lower(value), '\\W+'))``, ``groupBy(word).count()`` on the RocksDB
  state store provider, update mode, each batch's changed counts appended to a Parquet
  directory by ``foreachBatch``; ``spark.sql.shuffle.partitions`` = the input's
  partitions; ``trigger(availableNow=True)`` (``--job emit-final``: append mode).

Both read the input in the same number of batches of about --batch-lines lines: Spark's
``maxFilesPerTrigger`` is the share of the files that holds that many, and this library's
``max.poll.records`` is the largest partition's lines over Spark's number of batches (the
partitions differ a little in size: a cap of --batch-lines over the partitions would leave
a few lines of the largest ones to one more, nearly empty, batch). --max-poll-records sets
it instead.

The two take turns for --rounds rounds in one SparkSession (local[2]), so they meet the
same machine noise; each system's figure is its best round. Both final counts are checked
against the input. Printed: input lines/s, batches, batch latency p50/p99, and the ratio
streams / spark (the project's goal: above 1).

    python benchmarks/vs_spark.py [--records 1000000] [--partitions 8] [--rounds 2]
                                  [--batch-lines 200000] [--max-poll-records N]
    python benchmarks/vs_spark.py --job windowed [--window-ms 10000] [--advance-ms 5000]
    python benchmarks/vs_spark.py --job emit-final [--grace-ms 600000] [--step-ms 1]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import load_wordcount, percentile, produce, run_mode
from produce_consume import machine
from pyspark.sql import functions as fn

from runtime.spark.session import get_or_create_session
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from streams.serdes import Serdes
from topology import (
    EmitStrategy,
    Materialized,
    Produced,
    StreamsBuilder,
    TimeWindows,
    Topology,
)
from topology.api.emit import EMIT_INTERVAL_KEY

NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
INPUT_SCHEMA = (
    "key binary, value binary, timestamp bigint, "
    "headers array<struct<key: string, value: binary>>, partition int"
)


def expected_counts(wc: Any, args: Any) -> Counter[str]:
    """The final count of every word (per window: ``word@start``) of the input."""
    counts: Counter[str] = Counter()
    chunk = chunk_of(args)
    for start in range(0, args.records, chunk):
        lines = wc.generate(min(chunk, args.records - start), seed=start)
        for i, (_key, line) in enumerate(lines, start):
            words = [w for w in re.split(r"\W+", line.lower()) if w]
            if args.job == "wordcount":
                counts.update(words)
                continue
            for window in windows_of(timestamp_of(i, args), args):
                counts.update(f"{w}@{window}" for w in words)
    if args.job == "emit-final":  # only the windows closed at the end are emitted
        close = timestamp_of(args.records - 1, args) - args.grace_ms
        return Counter({k: n for k, n in counts.items() if window_end(k, args) <= close})
    return counts


def window_end(key: str, args: Any) -> int:
    """The end of the window of a ``word@start`` key."""
    return int(key.rsplit("@", 1)[1]) + int(args.window_ms)


def chunk_of(args: Any) -> int:
    """Lines generated (one seed) and flushed (one file per partition) at a time: a batch's
    worth at most, so that Spark's file source can read batches of the same size."""
    return min(100_000, int(args.batch_lines))


def timestamp_of(i: int, args: Any) -> int:
    """The timestamp of line ``i``: 1 for the word count, else ``BASE_MS + i * step_ms``
    (late enough that no window starts before 0: Spark's would, Kafka's do not)."""
    return 1 if args.job == "wordcount" else BASE_MS + i * args.step_ms


#: The windowed job's first timestamp (2023-11-14T22:13:20Z).
BASE_MS = 1_700_000_000_000


def windows_of(ts: int, args: Any) -> list[int]:
    """The start of every hopping window holding ``ts``."""
    first = max(0, (ts - args.window_ms) // args.advance_ms + 1) * args.advance_ms
    return list(range(first, ts + 1, args.advance_ms))


def produce_input(admin: TopicAdmin, wc: Any, args: Any) -> None:
    """Write the input lines (timestamped for the windowed job), :func:`chunk_of` at a
    time."""
    chunk = chunk_of(args)
    if args.job == "wordcount":
        produce(admin, wc, args.records, chunk)
        return
    producer = Producer(admin)
    for start in range(0, args.records, chunk):
        lines = wc.generate(min(chunk, args.records - start), seed=start)
        for i, (key, line) in enumerate(lines, start):
            producer.send(wc.INPUT, key.encode(), line.encode(), timestamp=timestamp_of(i, args))
        producer.flush()


class WindowedJob:
    """The windowed word count, shaped like an example module (``run_mode`` runs it);
    ``--job emit-final``: emitting each window once, when it closes."""

    def __init__(self, wc: Any, args: Any) -> None:
        self.final = args.job == "emit-final"
        # emit-final: look for closed windows after every record (see the module's doc)
        self.CONFIG = {**wc.CONFIG, EMIT_INTERVAL_KEY: 0} if self.final else wc.CONFIG
        self.wc = wc
        self.args = args

    def build_topology(self) -> Topology:
        args = self.args
        windows = TimeWindows.of_size_and_grace(args.window_ms, args.grace_ms).advance_by(
            args.advance_ms
        )
        words = self.wc.WORD.findall
        b = StreamsBuilder()
        windowed = (
            b.stream(self.wc.INPUT)
            .flat_map_values(lambda line: words(line.lower()))
            .group_by(lambda _key, word: word)
            .windowed_by(windows)
        )
        if self.final:
            windowed = windowed.emit_strategy(EmitStrategy.on_window_close())
        (
            windowed.count(Materialized.as_("windowed-counts"))
            .to_stream()
            .map(lambda wk, n: (f"{wk.key}@{wk.window.start}", n))
            .to(self.wc.OUTPUT, Produced.with_(Serdes.String(), Serdes.Long()))
        )
        return b.build()


def streams_counts(root: str, topic: str, since: dict[int, int]) -> tuple[Counter[str], int]:
    """The last count of every word in this library's output topic from the offsets
    ``since`` on (a round's output), and the number of records there."""
    reader = TopicReader(root)
    longs = Serdes.Long()
    last: dict[str, int] = {}
    records = 0
    for partition in reader.end_offsets(topic):
        table = reader.read(topic, partition, since.get(partition, 0))
        records += table.num_rows
        for key, value in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            count = longs.deserialize(topic, value)
            if count is not None:
                last[key.decode()] = count
    return Counter(last), records


def differences(got: Counter[str], expected: Counter[str]) -> str:
    """Say how the counts ``got`` differ from those of the input."""
    missing = sorted(expected.keys() - got.keys())
    extra = sorted(got.keys() - expected.keys())
    wrong = sorted(k for k in got.keys() & expected.keys() if got[k] != expected[k])
    some = [f"{k}={got[k]} (not {expected[k]})" for k in wrong[:3]]
    return (
        f"the final counts differ from the input's: {len(missing)} missing {missing[:3]}, "
        f"{len(extra)} extra {extra[:3]}, {len(wrong)} wrong {some}"
    )


def run_spark(spark: Any, work: str, input_dir: str, *, turn: int, args: Any) -> dict[str, Any]:
    """Run the word count in Spark's own operators over every input file; time it."""
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    no_data_batches = spark.conf.get(NO_DATA_BATCHES)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    files = sum(
        1 for _dir, _subdirs, names in os.walk(input_dir) for n in names if n.endswith(".parquet")
    )
    files_per_trigger = files_per_trigger_of(files, args)
    lines = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(input_dir)
    )
    words = lines.select(
        fn.explode(fn.split(fn.lower(fn.col("value").cast("string")), r"\W+")).alias("word"),
        fn.timestamp_millis(fn.col("timestamp")).alias("ts"),
    ).where(fn.col("word") != "")
    if args.job == "wordcount":
        counts = words.groupBy("word").count()
    else:
        windowed = (
            words.withWatermark("ts", f"{args.grace_ms} milliseconds")
            .groupBy(
                fn.window(
                    "ts", f"{args.window_ms} milliseconds", f"{args.advance_ms} milliseconds"
                ),
                "word",
            )
            .count()
        )
        start_ms = (fn.unix_millis(fn.col("window.start"))).cast("string")
        counts = windowed.select(
            fn.concat(fn.col("word"), fn.lit("@"), start_ms).alias("word"), "count"
        )
    out = os.path.join(work, f"spark-out-{turn}")

    def sink(batch: Any, _batch_id: int) -> None:
        batch.write.mode("append").parquet(out)

    final = args.job == "emit-final"
    # Append mode emits the windows the last watermark closes in the no-data batch that
    # watermark brings: this project's session turns those batches off for its own queries.
    spark.conf.set(NO_DATA_BATCHES, str(final).lower())
    started = time.perf_counter()
    query = (
        counts.writeStream.outputMode("append" if final else "update")
        .foreachBatch(sink)
        .option("checkpointLocation", os.path.join(work, f"spark-checkpoint-{turn}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    spark.conf.set(NO_DATA_BATCHES, no_data_batches)
    times = [
        p["durationMs"]["triggerExecution"] / 1000
        for p in query.recentProgress
        if p.get("numInputRows", 0) > 0
    ]
    counted: Counter[str] = Counter()
    records = 0
    if os.path.isdir(out):  # append mode: no window closed, no output
        emitted = spark.read.parquet(out)
        records = emitted.count()
        for r in emitted.groupBy("word").agg(fn.max("count").alias("n")).collect():
            counted[r["word"]] = r["n"]
    return {
        "seconds": elapsed,
        "rate": args.records / elapsed,
        "batches": len(times),
        "p50": percentile(times, 0.5),
        "p99": percentile(times, 0.99),
        "counts": counted,
        "records": records,
        "files_per_trigger": files_per_trigger,
    }


def spark_input(admin: TopicAdmin, topic: str, work: str) -> str:
    """Copy the topic's data files (not its Delta log) aside for Spark's file source, each
    with its modification time (the file source's order); return the copy's directory."""
    copy = os.path.join(work, "spark-input")
    shutil.copytree(admin.table_path(topic), copy, ignore=shutil.ignore_patterns("_delta_log"))
    return copy


def files_per_trigger_of(files: int, args: Any) -> int:
    """Spark's ``maxFilesPerTrigger``: the share of the input's files holding about
    --batch-lines lines."""
    return max(1, round(files * int(args.batch_lines) / int(args.records)))


def max_poll_records_of(admin: TopicAdmin, topic: str, args: Any) -> int:
    """``max.poll.records`` that reads the input in as many batches as Spark's file
    source: the largest partition's lines over that number of batches."""
    path = admin.table_path(topic)
    files = sum(
        1 for _dir, _subdirs, names in os.walk(path) for n in names if n.endswith(".parquet")
    )
    batches = math.ceil(files / files_per_trigger_of(files, args))
    largest = max(TopicReader(admin).end_offsets(topic).values())
    return math.ceil(largest / batches)


def checked(system: str, got: dict[str, Any], expected: Counter[str], args: Any) -> str:
    """Check a round's final counts against the input's (``--job emit-final``: and that
    each window went out once); describe the round."""
    if got["counts"] != expected:
        raise SystemExit(f"{system}: {differences(got['counts'], expected)}")
    final = ""
    if args.job == "emit-final":
        if got["records"] != len(expected):
            raise SystemExit(f"{system}: {got['records']:,} records for {len(expected):,} windows")
        final = f"  final windows={got['records']:,}"
    return (
        f"{got['rate']:>9,.0f} lines/s  {got['seconds']:6.1f} s  batches={got['batches']}  "
        f"p50={got['p50']:.2f} s  p99={got['p99']:.2f} s  counts ok{final}"
    )


def report(best: dict[str, dict[str, Any]], *, final: bool = False) -> None:
    """Print each system's best round and the ratios of throughput and batch latency
    (``final``: and the final windows each emitted)."""
    print(f"\nspark's file source: maxFilesPerTrigger={best['spark']['files_per_trigger']}")
    print("best round per system:")
    print(f"{'system':<10}{'lines/s':>10}{'batches':>9}{'p50 s':>8}{'p99 s':>8}")
    for system in ("streams", "spark"):
        got = best[system]
        print(
            f"{system:<10}{got['rate']:>10,.0f}{got['batches']:>9}"
            f"{got['p50']:>8.2f}{got['p99']:>8.2f}"
        )
    if final:
        n, m = best["streams"]["records"], best["spark"]["records"]
        same = "same windows" if n == m else "DIFFERENT"
        print(f"final windows emitted: streams={n:,} spark={m:,} ({same})")
    ratio = best["streams"]["rate"] / best["spark"]["rate"]
    print(f"\nstreams (exactly_once_v2) / spark = {ratio:.2f} (goal: > 1)")
    latency = best["streams"]["p50"] / best["spark"]["p50"]
    print(f"batch latency p50, streams / spark = {latency:.2f} (goal: <= 1)")


def describe(args: Any) -> str:
    """Name the job and its windows."""
    if args.job == "wordcount":
        return "word count"
    job = (
        f"windowed word count ({args.window_ms} ms windows advancing by {args.advance_ms} ms, "
        f"grace {args.grace_ms} ms, lines {args.step_ms} ms apart)"
    )
    if args.job == "emit-final":
        job += ", final windows only (emit on window close / Spark's append mode)"
    return job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-lines", type=int, default=200_000)
    parser.add_argument("--max-poll-records", type=int, default=None)
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    parser.add_argument(
        "--job", choices=("wordcount", "windowed", "emit-final"), default="wordcount"
    )
    parser.add_argument("--window-ms", type=int, default=10_000)
    parser.add_argument("--advance-ms", type=int, default=5_000)
    parser.add_argument("--grace-ms", type=int, default=600_000)
    parser.add_argument("--step-ms", type=int, default=1)
    args = parser.parse_args()
    print(machine())
    print(
        f"{describe(args)}, {args.records:,} lines in {args.partitions} partitions, batches "
        f"of about {args.batch_lines:,} lines, {args.rounds} rounds"
    )
    wc = load_wordcount()
    job_module = wc if args.job == "wordcount" else WindowedJob(wc, args)
    work = tempfile.mkdtemp(prefix="vs-spark-")
    try:
        root = os.path.join(work, "root")
        admin = TopicAdmin(root)
        admin.create(wc.INPUT, args.partitions)
        admin.create(wc.OUTPUT, args.partitions)
        started = time.perf_counter()
        produce_input(admin, wc, args)
        print(f"input produced in {time.perf_counter() - started:.1f} s")
        input_dir = spark_input(admin, wc.INPUT, work)
        if args.max_poll_records is None:
            args.max_poll_records = max_poll_records_of(admin, wc.INPUT, args)
        print(f"streams: max.poll.records={args.max_poll_records:,} per partition")
        expected = expected_counts(wc, args)
        spark = get_or_create_session("benchmark-vs-spark", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        if args.job == "emit-final" and not expected:
            print("no window closes in this input: raise --records or lower --grace-ms")
        best: dict[str, dict[str, Any]] = {}
        for turn in range(args.rounds):
            for system in ("streams", "spark") if turn % 2 == 0 else ("spark", "streams"):
                if system == "streams":
                    # Rounds append to one output topic: a round's output is after the
                    # offsets its run starts from.
                    since = TopicReader(root).end_offsets(wc.OUTPUT)
                    got = run_mode(spark, job_module, work, "exactly_once_v2", turn=turn, args=args)
                    got["counts"], got["records"] = streams_counts(root, wc.OUTPUT, since)
                else:
                    got = run_spark(spark, work, input_dir, turn=turn, args=args)
                print(f"  round {turn + 1} {system:<8} {checked(system, got, expected, args)}")
                if system not in best or got["rate"] > best[system]["rate"]:
                    best[system] = got
        report(best, final=args.job == "emit-final")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
