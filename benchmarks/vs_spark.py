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
    python benchmarks/vs_spark.py --job session [--gap-ms 100] [--session-lines 100]
    python benchmarks/vs_spark.py --job outer-join [--join-ms 2000] [--events-per-second 1000]

``--job session`` (session windows, :mod:`vs_spark_session`) and ``--job outer-join`` (a
stream-stream outer join, :mod:`vs_spark_join`) describe themselves in their modules; the
word-count jobs live in :mod:`vs_spark_words`, what all share in :mod:`vs_spark_kit`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import load_wordcount, run_mode
from produce_consume import machine
from vs_spark_join import OuterJoinJob
from vs_spark_kit import max_poll_records_of, output_pairs, report, run_spark, spark_input
from vs_spark_session import SessionJob
from vs_spark_words import WordsJob

from runtime.spark.session import get_or_create_session
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin

JOBS = ("wordcount", "windowed", "emit-final", "session", "outer-join")
#: Per job: defaults of the options it reads differently.
DEFAULTS: dict[str, dict[str, int]] = {
    "session": {"grace_ms": 1_800_000, "step_ms": 2},
    "outer-join": {"grace_ms": 2_000},
}


def parse_args() -> Any:
    """The command line, with the job's own defaults."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-lines", type=int, default=200_000)
    parser.add_argument("--max-poll-records", type=int, default=None)
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    parser.add_argument("--job", choices=JOBS, default="wordcount")
    parser.add_argument("--window-ms", type=int, default=10_000)
    parser.add_argument("--advance-ms", type=int, default=5_000)
    parser.add_argument("--grace-ms", type=int, default=None, help="600000 (see DEFAULTS)")
    parser.add_argument("--step-ms", type=int, default=None, help="1 (see DEFAULTS)")
    parser.add_argument("--gap-ms", type=int, default=100)
    parser.add_argument("--session-lines", type=int, default=100)
    parser.add_argument("--join-ms", type=int, default=2_000)
    parser.add_argument("--events-per-second", type=int, default=1_000)
    args = parser.parse_args()
    defaults = {"grace_ms": 600_000, "step_ms": 1, **DEFAULTS.get(args.job, {})}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def make_job(wc: Any, args: Any) -> Any:
    """The job ``--job`` names."""
    if args.job == "session":
        return SessionJob(wc, args)
    if args.job == "outer-join":
        return OuterJoinJob(wc, args)
    return WordsJob(wc, args)


def main() -> None:
    args = parse_args()
    print(machine())
    wc = load_wordcount()
    job = make_job(wc, args)
    print(
        f"{job.describe()}, {args.records:,} {job.unit} in {args.partitions} partitions, "
        f"batches of about {args.batch_lines:,} {job.unit}, {args.rounds} rounds"
    )
    work = tempfile.mkdtemp(prefix="vs-spark-")
    try:
        root = os.path.join(work, "root")
        admin = TopicAdmin(root)
        for topic in [*job.inputs, job.output]:
            admin.create(topic, args.partitions)
        started = time.perf_counter()
        job.produce(admin)
        print(f"input produced in {time.perf_counter() - started:.1f} s")
        dirs = [spark_input(admin, topic, work) for topic in job.inputs]
        if args.max_poll_records is None:
            args.max_poll_records = max_poll_records_of(admin, job.inputs[0], args)
        print(f"streams: max.poll.records={args.max_poll_records:,} per partition")
        expected = job.expected()
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
                    since = TopicReader(root).end_offsets(job.output)
                    got = run_mode(spark, job, work, "exactly_once_v2", turn=turn, args=args)
                    pairs = list(output_pairs(root, job.output, since))
                    got["counts"], got["records"] = job.streams_counts(pairs), len(pairs)
                else:
                    got = run_spark(spark, job, work, dirs, turn=turn, args=args)
                print(f"  round {turn + 1} {system:<8} {job.check(system, got, expected)}")
                if system not in best or got["rate"] > best[system]["rate"]:
                    best[system] = got
        report(best, job.unit, job.final_label)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
