"""What every job of ``benchmarks/vs_spark.py`` shares: the input as Spark's file source
reads it, the batch sizes both systems read, the run of a Spark query, the outputs read
back as counters, their comparison and the report.

A job (:mod:`vs_spark_words`, :mod:`vs_spark_session`, :mod:`vs_spark_join`) is shaped like
an example module (``CONFIG``, ``build_topology()``: ``run_mode`` runs it) and adds:
``inputs`` and ``output`` (its topics), ``produce(admin)``, ``expected()`` (the result
computed from the input), ``spark_frame(spark, dirs, files_per_trigger)`` (its Spark query
over the copied inputs, and whether it runs in append mode), ``spark_counts(frame)`` and
``streams_counts(pairs)`` (each system's output as a counter), ``check(system, got)``.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from modes import percentile

from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin

NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
INPUT_SCHEMA = (
    "key binary, value binary, timestamp bigint, "
    "headers array<struct<key: string, value: binary>>, partition int"
)
#: The timestamped jobs' first timestamp (2023-11-14T22:13:20Z): late enough that no
#: window starts before 0 (Spark's would, Kafka's do not).
BASE_MS = 1_700_000_000_000


def chunk_of(args: Any) -> int:
    """Records generated (one seed) and flushed (one file per partition) at a time: a
    batch's worth at most, so that Spark's file source can read batches of the same size."""
    return min(100_000, int(args.batch_lines))


def parquet_files(path: str) -> int:
    """The number of Parquet data files under ``path``."""
    return sum(1 for _d, _s, names in os.walk(path) for n in names if n.endswith(".parquet"))


def spark_input(admin: TopicAdmin, topic: str, work: str) -> str:
    """Copy the topic's data files (not its Delta log) aside for Spark's file source, each
    with its modification time (the file source's order); return the copy's directory."""
    copy = os.path.join(work, f"spark-input-{topic}")
    shutil.copytree(admin.table_path(topic), copy, ignore=shutil.ignore_patterns("_delta_log"))
    return copy


def files_per_trigger_of(files: int, args: Any) -> int:
    """Spark's ``maxFilesPerTrigger``: the share of the input's files holding about
    --batch-lines records."""
    return max(1, round(files * int(args.batch_lines) / int(args.records)))


def max_poll_records_of(admin: TopicAdmin, topic: str, args: Any) -> int:
    """``max.poll.records`` that reads the input in as many batches as Spark's file
    source: the largest partition's records over that number of batches."""
    files = parquet_files(admin.table_path(topic))
    batches = math.ceil(files / files_per_trigger_of(files, args))
    largest = max(TopicReader(admin).end_offsets(topic).values())
    return math.ceil(largest / batches)


def file_stream(spark: Any, path: str, files_per_trigger: int) -> Any:
    """A streaming frame over a copied topic's Parquet files, ``files_per_trigger`` at a
    time."""
    return (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(path)
    )


def run_spark(
    spark: Any, job: Any, work: str, dirs: list[str], *, turn: int, args: Any
) -> dict[str, Any]:
    """Run ``job``'s query in Spark's own operators over every input file (its topics'
    copies ``dirs``) on the RocksDB state store provider, each batch's output appended
    to a Parquet directory by ``foreachBatch``; time it and read the output back."""
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    no_data_batches = spark.conf.get(NO_DATA_BATCHES)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    files_per_trigger = files_per_trigger_of(parquet_files(dirs[0]), args)
    frame, append = job.spark_frame(spark, dirs, files_per_trigger)
    out = os.path.join(work, f"spark-out-{turn}")

    def sink(batch: Any, _batch_id: int) -> None:
        batch.write.mode("append").parquet(out)

    # Append mode emits what the last watermark closes in the no-data batch that
    # watermark brings: this project's session turns those batches off for its own queries.
    spark.conf.set(NO_DATA_BATCHES, str(append).lower())
    started = time.perf_counter()
    query = (
        frame.writeStream.outputMode("append" if append else "update")
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
    counts: Counter[str] = Counter()
    records = 0
    if os.path.isdir(out):  # append mode: nothing closed, no output
        emitted = spark.read.parquet(out)
        records = emitted.count()
        counts = job.spark_counts(emitted)
    return {
        "seconds": elapsed,
        "rate": args.records / elapsed,
        "batches": len(times),
        "p50": percentile(times, 0.5),
        "p99": percentile(times, 0.99),
        "counts": counts,
        "records": records,
        "files_per_trigger": files_per_trigger,
    }


def output_pairs(root: str, topic: str, since: dict[int, int]) -> Iterator[tuple[bytes, Any]]:
    """Every (key, value) bytes pair of ``topic`` from the offsets ``since`` on (a round's
    output), partition by partition, each in offset order."""
    reader = TopicReader(root)
    for partition in reader.end_offsets(topic):
        table = reader.read(topic, partition, since.get(partition, 0))
        yield from zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        )


def differences(got: Counter[str], expected: Counter[str]) -> str:
    """Say how the counts ``got`` differ from those of the input."""
    missing = sorted(expected.keys() - got.keys())
    extra = sorted(got.keys() - expected.keys())
    wrong = sorted(k for k in got.keys() & expected.keys() if got[k] != expected[k])
    some = [f"{k}={got[k]} (not {expected[k]})" for k in wrong[:3]]
    return (
        f"the final results differ from the input's: {len(missing)} missing {missing[:3]}, "
        f"{len(extra)} extra {extra[:3]}, {len(wrong)} wrong {some}"
    )


def same_or_exit(system: str, got: Counter[str], expected: Counter[str]) -> None:
    """Stop the benchmark when ``got`` is not ``expected``, saying how they differ."""
    if got != expected:
        raise SystemExit(f"{system}: {differences(got, expected)}")


def round_line(got: dict[str, Any], unit: str, note: str) -> str:
    """Describe a checked round."""
    return (
        f"{got['rate']:>9,.0f} {unit}/s  {got['seconds']:6.1f} s  batches={got['batches']}  "
        f"p50={got['p50']:.2f} s  p99={got['p99']:.2f} s  {note}"
    )


def report(
    best: dict[str, dict[str, Any]],
    unit: str,
    final: str | None = None,
    *,
    spark: str = "spark",
    goal: str = "> 1",
) -> None:
    """Print each system's best round and the ratios of throughput and batch latency
    (``final``: what both emitted once, and how many of them each did; ``spark`` names
    Spark's side in the ratio, ``goal`` the ratio's goal)."""
    print(f"\nspark's file source: maxFilesPerTrigger={best['spark']['files_per_trigger']}")
    print("best round per system:")
    print(f"{'system':<10}{unit + '/s':>12}{'batches':>9}{'p50 s':>8}{'p99 s':>8}")
    for system in ("streams", "spark"):
        got = best[system]
        print(
            f"{system:<10}{got['rate']:>12,.0f}{got['batches']:>9}"
            f"{got['p50']:>8.2f}{got['p99']:>8.2f}"
        )
    if final is not None:
        n, m = best["streams"]["final"], best["spark"]["final"]
        same = "same" if n == m else "DIFFERENT"
        print(f"{final} emitted: streams={n:,} spark={m:,} ({same})")
    ratio = best["streams"]["rate"] / best["spark"]["rate"]
    print(f"\nstreams (exactly_once_v2) / {spark} = {ratio:.2f} (goal: {goal})")
    latency = best["streams"]["p50"] / best["spark"]["p50"]
    print(f"batch latency p50, streams / spark = {latency:.2f} (goal: <= 1)")
