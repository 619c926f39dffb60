"""The word count's batch time as the partition count grows, with the same lines per batch.

Each case produces --batches batches' worth of lines (--batch-lines each) into a topic of
its partition count and runs ``examples/wordcount.py`` under exactly_once_v2 until idle,
reading ``max.poll.records`` = --batch-lines / partitions lines per partition, so every
case's batches hold about the same lines however many partitions share them. The cases
run in one SparkSession (local[2]) and, for the small counts (--partitions), take turns
for --rounds rounds so they meet the same machine noise; each case's figure is its best
round. Printed per case: batches, batch latency p50/p99 (the first --warm-up batches of a
run left out: they build the tasks), and the ratio of each count's p50 to the smallest
count's (the goal for 64 against 4: at most 1.5).

The large count (--large, one run) shows that a topic of many partitions stays usable:
its batch p50, its planning (poll) and commit latency as the thread measured them, the
time ``streams-eos status`` takes to collect the application's status from storage, and
the driver's resident memory.

    python benchmarks/partitions.py [--partitions 4,64] [--large 1000] [--batch-lines 200]
                                    [--config task.hosts.max=8 ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import bench_config, load_wordcount, percentile, produce
from produce_consume import machine

from runtime.app.app import StreamsApp
from runtime.spark.session import get_or_create_session
from runtime.storage.topics import TopicAdmin
from runtime.thread.progress import BatchProgress
from streams.cli.status import collect

THREAD_GROUP = "stream-thread-metrics"


def run_case(
    spark: Any, wc: Any, work: str, partitions: int, *, turn: int, args: Any
) -> dict[str, Any]:
    """Run the word count over a fresh topic of ``partitions`` partitions; return its
    figures."""
    root = os.path.join(work, f"root-{partitions}-{turn}")
    admin = TopicAdmin(root)
    admin.create(wc.INPUT, partitions)
    admin.create(wc.OUTPUT, partitions)
    produce(admin, wc, args.batches * args.batch_lines)
    app_id = f"wc-partitions-{partitions}-{turn}"
    config = bench_config(
        wc.CONFIG,
        app_id,
        work,
        **{
            "commit.interval.ms": args.commit_interval_ms,
            "processing.guarantee": "exactly_once_v2",
            "topics.root": root,
            "state.dir": os.path.join(work, f"state-{partitions}-{turn}"),
            "max.poll.records": max(1, -(-args.batch_lines // partitions)),
            **dict(item.split("=", 1) for item in args.config),
        },
    )
    app = StreamsApp(wc.build_topology(), config, spark=spark)
    progress: list[BatchProgress] = []
    app.add_progress_listener(progress.append)
    started = time.perf_counter()
    app.run_until_idle()
    elapsed = time.perf_counter() - started
    metrics = app.metrics()
    asked = time.perf_counter()
    collect(admin, app_id)
    status_s = time.perf_counter() - asked
    worked = [p for p in progress if p.records_in][args.warm_up :] or progress
    times = [p.batch_ms / 1000 for p in worked]
    return {
        "partitions": partitions,
        "seconds": elapsed,
        "batches": len(progress),
        "lines": sum(p.records_in for p in worked) / max(len(worked), 1),
        "p50": percentile(times, 0.5),
        "p99": percentile(times, 0.99),
        "commit_p50": percentile([p.commit_ms / 1000 for p in worked], 0.5),
        "poll_avg": metrics.total("poll-latency-avg", THREAD_GROUP) / 1000,
        "status": status_s,
        "rss_mb": _rss_mb(),
    }


def _rss_mb() -> float:
    """The driver process's resident memory now (MB); its peak where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="4,64")
    parser.add_argument("--large", type=int, default=1000, help="0: no large run")
    parser.add_argument("--batch-lines", type=int, default=200)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--large-batches", type=int, default=8)
    parser.add_argument("--warm-up", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    parser.add_argument(
        "--config", action="append", default=[], help="KEY=VALUE: a configuration key for every run"
    )
    args = parser.parse_args()
    for item in args.config:
        if "=" not in item:
            parser.error(f"--config {item!r}: give KEY=VALUE, e.g. task.hosts.max=8")
    counts = [int(p) for p in args.partitions.split(",")]
    print(machine())
    print(
        f"word count, exactly_once_v2, about {args.batch_lines} lines a batch, "
        f"{args.batches} batches per run, partitions {counts} ({args.rounds} rounds)"
        + (f", then {args.large} partitions once" if args.large else "")
    )
    wc = load_wordcount()
    work = tempfile.mkdtemp(prefix="partitions-")
    try:
        spark = get_or_create_session("benchmark-partitions", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        best: dict[int, dict[str, Any]] = {}
        for turn in range(args.rounds):
            for count in counts if turn % 2 == 0 else list(reversed(counts)):
                got = run_case(spark, wc, work, count, turn=turn, args=args)
                print(
                    f"  round {turn + 1} {count:>5} partitions: batches={got['batches']} "
                    f"lines/batch={got['lines']:.0f} p50={got['p50'] * 1000:.0f} ms "
                    f"p99={got['p99'] * 1000:.0f} ms commit p50={got['commit_p50'] * 1000:.0f} "
                    f"ms poll avg={got['poll_avg'] * 1000:.1f} ms",
                    flush=True,
                )
                if count not in best or got["p50"] < best[count]["p50"]:
                    best[count] = got
        print("\nbest round per partition count:")
        versus = f"vs {counts[0]}"
        print(f"{'partitions':>10}{'p50 ms':>9}{'p99 ms':>9}{'commit ms':>11}{versus:>9}")
        base = best[counts[0]]["p50"]
        for count in counts:
            got = best[count]
            print(
                f"{count:>10}{got['p50'] * 1000:>9.0f}{got['p99'] * 1000:>9.0f}"
                f"{got['commit_p50'] * 1000:>11.0f}{got['p50'] / base:>9.2f}"
            )
        if len(counts) > 1:
            ratio = best[counts[-1]]["p50"] / base
            print(f"\np50 {counts[-1]} / {counts[0]} partitions = {ratio:.2f} (goal <= 1.5)")
        if args.large:
            large = argparse.Namespace(**{**vars(args), "batches": args.large_batches})
            got = run_case(spark, wc, work, args.large, turn=0, args=large)
            print(
                f"\n{args.large} partitions: batches={got['batches']} "
                f"lines/batch={got['lines']:.0f} p50={got['p50'] * 1000:.0f} ms "
                f"p99={got['p99'] * 1000:.0f} ms; planning (poll) avg="
                f"{got['poll_avg'] * 1000:.1f} ms; commit p50={got['commit_p50'] * 1000:.0f} ms; "
                f"status collected in {got['status'] * 1000:.0f} ms; driver RSS "
                f"{got['rss_mb']:.0f} MB"
            )
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
