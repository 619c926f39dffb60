"""The word count in this library against the same job in Spark's own stateful operators.

One input of --records lines in --partitions partitions is produced once, as a topic.

* **streams**: ``examples/wordcount.py`` under exactly_once_v2 (RocksDB store, changelog,
  transactions), reading ``max.poll.records`` lines per partition per batch, until idle.
* **spark**: the same job in Structured Streaming's own operators, reading the topic's
  Parquet data files with the file source (``maxFilesPerTrigger`` set so that a batch holds
  about as many lines): ``explode(split(lower(value), '\\W+'))``, ``groupBy(word).count()``
  on the RocksDB state store provider, update mode, each batch's changed counts appended to
  a Parquet directory by ``foreachBatch``; ``spark.sql.shuffle.partitions`` = the input's
  partitions; ``trigger(availableNow=True)``.

The two take turns for --rounds rounds in one SparkSession (local[2]), so they meet the
same machine noise; each system's figure is its best round. Both final counts are checked
against the input. Printed: input lines/s, batches, batch latency p50/p99, and the ratio
streams / spark (the project's goal: above 1).

    python benchmarks/vs_spark.py [--records 1000000] [--partitions 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
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

from runtime.spark.session import get_or_create_session
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from streams.serdes import Serdes

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
INPUT_SCHEMA = (
    "key binary, value binary, timestamp bigint, "
    "headers array<struct<key: string, value: binary>>, partition int"
)


def expected_counts(wc: Any, records: int) -> Counter[str]:
    """The final count of every word of the input (as :func:`modes.produce` made it)."""
    counts: Counter[str] = Counter()
    chunk = 100_000
    for start in range(0, records, chunk):
        for _key, line in wc.generate(min(chunk, records - start), seed=start):
            counts.update(w for w in re.split(r"\W+", line.lower()) if w)
    return counts


def streams_counts(root: str, topic: str) -> Counter[str]:
    """The last count of every word in this library's output topic."""
    reader = TopicReader(root)
    longs = Serdes.Long()
    last: dict[str, int] = {}
    for partition in reader.end_offsets(topic):
        table = reader.read(topic, partition, 0)
        for key, value in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            count = longs.deserialize(topic, value)
            if count is not None:
                last[key.decode()] = count
    return Counter(last)


def run_spark(spark: Any, work: str, input_dir: str, *, turn: int, args: Any) -> dict[str, Any]:
    """Run the word count in Spark's own operators over every input file; time it."""
    from pyspark.sql import functions as fn

    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    files = sum(
        1 for _dir, _subdirs, names in os.walk(input_dir) for n in names if n.endswith(".parquet")
    )
    per_batch = args.max_poll_records * args.partitions
    files_per_trigger = max(1, round(files * per_batch / args.records))
    lines = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(input_dir)
    )
    words = lines.select(
        fn.explode(fn.split(fn.lower(fn.col("value").cast("string")), r"\W+")).alias("word")
    ).where(fn.col("word") != "")
    counts = words.groupBy("word").count()
    out = os.path.join(work, f"spark-out-{turn}")

    def sink(batch: Any, _batch_id: int) -> None:
        batch.write.mode("append").parquet(out)

    started = time.perf_counter()
    query = (
        counts.writeStream.outputMode("update")
        .foreachBatch(sink)
        .option("checkpointLocation", os.path.join(work, f"spark-checkpoint-{turn}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    times = [
        p["durationMs"]["triggerExecution"] / 1000
        for p in query.recentProgress
        if p.get("numInputRows", 0) > 0
    ]
    rows = spark.read.parquet(out).groupBy("word").agg(fn.max("count").alias("n")).collect()
    return {
        "seconds": elapsed,
        "rate": args.records / elapsed,
        "batches": len(times),
        "p50": percentile(times, 0.5),
        "p99": percentile(times, 0.99),
        "counts": Counter({r["word"]: r["n"] for r in rows}),
        "files_per_trigger": files_per_trigger,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-poll-records", type=int, default=25_000)
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    args = parser.parse_args()
    print(machine())
    print(
        f"word count, {args.records:,} lines in {args.partitions} partitions, about "
        f"{args.max_poll_records:,} lines per partition per batch, {args.rounds} rounds"
    )
    wc = load_wordcount()
    work = tempfile.mkdtemp(prefix="vs-spark-")
    try:
        root = os.path.join(work, "root")
        admin = TopicAdmin(root)
        admin.create(wc.INPUT, args.partitions)
        admin.create(wc.OUTPUT, args.partitions)
        started = time.perf_counter()
        produce(admin, wc, args.records)
        print(f"input produced in {time.perf_counter() - started:.1f} s")
        expected = expected_counts(wc, args.records)
        spark = get_or_create_session("benchmark-vs-spark", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        best: dict[str, dict[str, Any]] = {}
        for turn in range(args.rounds):
            for system in ("streams", "spark") if turn % 2 == 0 else ("spark", "streams"):
                if system == "streams":
                    got = run_mode(spark, wc, work, "exactly_once_v2", turn=turn, args=args)
                    # Rounds append to one output topic; a word's newest count is this
                    # round's (a word stays in one partition).
                    got["counts"] = streams_counts(root, wc.OUTPUT)
                else:
                    got = run_spark(spark, work, admin.table_path(wc.INPUT), turn=turn, args=args)
                if got["counts"] != expected:
                    raise SystemExit(f"{system}: the final counts differ from the input's")
                print(
                    f"  round {turn + 1} {system:<8} {got['rate']:>9,.0f} lines/s  "
                    f"{got['seconds']:6.1f} s  batches={got['batches']}  "
                    f"p50={got['p50']:.2f} s  p99={got['p99']:.2f} s  counts ok"
                )
                if system not in best or got["rate"] > best[system]["rate"]:
                    best[system] = got
        print(f"\nspark's file source: maxFilesPerTrigger={best['spark']['files_per_trigger']}")
        print("best round per system:")
        print(f"{'system':<10}{'lines/s':>10}{'batches':>9}{'p50 s':>8}{'p99 s':>8}")
        for system in ("streams", "spark"):
            got = best[system]
            print(
                f"{system:<10}{got['rate']:>10,.0f}{got['batches']:>9}"
                f"{got['p50']:>8.2f}{got['p99']:>8.2f}"
            )
        ratio = best["streams"]["rate"] / best["spark"]["rate"]
        print(f"\nstreams (exactly_once_v2) / spark = {ratio:.2f} (goal: > 1)")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
