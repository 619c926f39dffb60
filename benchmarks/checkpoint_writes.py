"""How a stream thread's query writes its Spark checkpoint: Spark's default manager
(Hadoop ``FileContext``) against the ``FileSystem`` one the application uses.

The word count under exactly_once_v2 processes --records lines in small batches
(--max-poll-records per partition, so each batch is mostly fixed cost), once with each
checkpoint manager, the two taking turns for --rounds rounds (each figure is a mode's best
round). Printed per mode: batches/s, batch p50, and the median time Spark spent per
micro-batch writing its offset log (``walCommit``) and commit log (``commitOffsets``),
from the queries' progress; then the ratio of the two.

    python benchmarks/checkpoint_writes.py [--records 40000] [--max-poll-records 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import bench_config, load_wordcount, percentile, produce
from produce_consume import machine

from runtime.app.app import StreamsApp
from runtime.spark import checkpoint
from runtime.spark.session import get_or_create_session
from runtime.storage.topics import TopicAdmin

MANAGERS = {
    "spark-default": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileContextBasedCheckpointFileManager"
    ),
    "filesystem": checkpoint.DISPOSABLE_CHECKPOINT_FILES,
}


def run(spark: Any, wc: Any, work: str, mode: str, *, turn: int, args: Any) -> dict[str, float]:
    checkpoint.DISPOSABLE_CHECKPOINT_FILES = MANAGERS[mode]  # what start_disposable sets
    config = bench_config(
        wc.CONFIG,
        f"cp-{mode}-{turn}",
        work,
        **{"commit.interval.ms": 10, "max.poll.records": args.max_poll_records},
    )
    app = StreamsApp(wc.build_topology(), config, spark=spark)
    started = time.perf_counter()
    app.run_until_idle()
    elapsed = time.perf_counter() - started
    times = [t for thread in app.threads for t in thread.batch_times]
    progress = [p for q in app.queries for p in q.recentProgress]
    writes = [
        p["durationMs"].get("walCommit", 0) + p["durationMs"].get("commitOffsets", 0)
        for p in progress
    ]
    return {
        "rate": len(times) / elapsed,
        "batches": len(times),
        "p50": percentile(times, 0.5),
        "writes": statistics.median(writes) if writes else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-poll-records", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(machine())
    print(
        f"word count, {args.records:,} lines in {args.partitions} partitions, "
        f"max.poll.records={args.max_poll_records}, {args.rounds} rounds"
    )
    wc = load_wordcount()
    work = tempfile.mkdtemp(prefix="checkpoint-writes-")
    try:
        admin = TopicAdmin(os.path.join(work, "root"))
        admin.create(wc.INPUT, args.partitions)
        admin.create(wc.OUTPUT, args.partitions)
        produce(admin, wc, args.records)
        spark = get_or_create_session("benchmark-checkpoint-writes", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        best: dict[str, dict[str, float]] = {}
        modes = list(MANAGERS)
        for turn in range(args.rounds):
            for mode in modes if turn % 2 == 0 else list(reversed(modes)):
                got = run(spark, wc, work, mode, turn=turn, args=args)
                print(
                    f"  round {turn + 1} {mode:<14} {got['rate']:6.2f} batches/s  "
                    f"batches={got['batches']:.0f}  p50={got['p50'] * 1000:.0f} ms  "
                    f"checkpoint writes {got['writes']:.0f} ms a micro-batch"
                )
                if mode not in best or got["rate"] > best[mode]["rate"]:
                    best[mode] = got
        old, new = best["spark-default"], best["filesystem"]
        print(
            f"\nfilesystem vs spark-default: batches/s {new['rate'] / old['rate']:.2f}x, "
            f"checkpoint writes {old['writes']:.0f} -> {new['writes']:.0f} ms a micro-batch"
        )
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
