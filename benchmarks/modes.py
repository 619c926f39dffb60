"""The word count on local Spark under at_least_once, exactly_once and exactly_once_v2.

One input of --records lines in --partitions partitions is produced once; each mode then
processes all of it from the beginning with its own application.id (its own state, offsets
and transactional ids), until idle. The modes take turns for --rounds rounds so they meet
the same machine noise (and the first run's JVM and Python-worker warm-up, which the
alternating order spreads); each mode's figure is its best round. Printed per mode: input
records/s, batches, batch latency p50/p99; then the ratios to at_least_once (target for
exactly_once_v2: >= 0.9).

    python benchmarks/modes.py [--records 1000000] [--partitions 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from produce_consume import machine

from runtime.app.app import StreamsApp
from runtime.spark.session import get_or_create_session
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin

MODES = ("at_least_once", "exactly_once", "exactly_once_v2")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "wordcount.py"


def load_wordcount() -> Any:
    spec = importlib.util.spec_from_file_location("wordcount_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def percentile(values: list[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def produce(admin: TopicAdmin, wc: Any, records: int, chunk: int = 100_000) -> None:
    """Write ``records`` lines, flushed every ``chunk`` lines (one file per partition each)."""
    producer = Producer(admin)
    for start in range(0, records, chunk):
        for key, line in wc.generate(min(chunk, records - start), seed=start):
            producer.send(wc.INPUT, key.encode(), line.encode(), timestamp=1)
        producer.flush()


def bench_config(
    base: dict[str, Any], application_id: str, work: str, **extra: Any
) -> dict[str, Any]:
    """A benchmark application's configuration: ``base`` (an example's), its id, topics and
    state under ``work``, no snapshots, no retention and no rebalance delay; ``extra``
    adds or overrides keys (given as keyword arguments with dots: ``**{"a.b": 1}``)."""
    return {
        **base,
        "application.id": application_id,
        "topics.root": os.path.join(work, "root"),
        "state.dir": os.path.join(work, "state"),
        "statestore.snapshot.interval": 0,
        "log.retention.ms": -1,  # the input's timestamps are synthetic (long past)
        "group.initial.rebalance.delay.ms": 0,  # one instance: no one to wait for
        **extra,
    }


def polling(args: Any) -> dict[str, Any]:
    """``args``' commit interval and ``max.poll.records`` as configuration keys."""
    return {
        "commit.interval.ms": args.commit_interval_ms,
        "max.poll.records": args.max_poll_records,
    }


def run_mode(spark: Any, wc: Any, work: str, mode: str, *, turn: int, args: Any) -> dict[str, Any]:
    app_id = f"wc-{mode.replace('_', '-')}-{turn}"
    config = bench_config(
        wc.CONFIG, app_id, work, **polling(args), **{"processing.guarantee": mode}
    )
    app = StreamsApp(wc.build_topology(), config, spark=spark)
    started = time.perf_counter()
    app.run_until_idle()
    elapsed = time.perf_counter() - started
    times = [t for thread in app.threads for t in thread.batch_times]
    return {
        "seconds": elapsed,
        "rate": args.records / elapsed,
        "batches": len(times),
        "p50": percentile(times, 0.5),
        "p99": percentile(times, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-poll-records", type=int, default=25_000)
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    modes = args.modes.split(",")
    print(machine())
    print(
        f"word count, {args.records:,} lines in {args.partitions} partitions, "
        f"max.poll.records={args.max_poll_records} per partition, {args.rounds} rounds"
    )
    wc = load_wordcount()
    work = tempfile.mkdtemp(prefix="modes-")
    try:
        admin = TopicAdmin(os.path.join(work, "root"))
        admin.create(wc.INPUT, args.partitions)
        admin.create(wc.OUTPUT, args.partitions)
        started = time.perf_counter()
        produce(admin, wc, args.records)
        print(f"input produced in {time.perf_counter() - started:.1f} s")
        spark = get_or_create_session("benchmark-modes", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        best: dict[str, dict[str, Any]] = {}
        for turn in range(args.rounds):
            for mode in modes if turn % 2 == 0 else list(reversed(modes)):
                got = run_mode(spark, wc, work, mode, turn=turn, args=args)
                print(
                    f"  round {turn + 1} {mode:<16} {got['rate']:>9,.0f} lines/s  "
                    f"{got['seconds']:6.1f} s  batches={got['batches']}  "
                    f"p50={got['p50']:.2f} s  p99={got['p99']:.2f} s"
                )
                if mode not in best or got["rate"] > best[mode]["rate"]:
                    best[mode] = got
        print("\nbest round per mode:")
        print(f"{'mode':<18}{'lines/s':>10}{'batches':>9}{'p50 s':>8}{'p99 s':>8}{'vs ALOS':>9}")
        base = best.get("at_least_once", {}).get("rate")
        for mode in modes:
            got = best[mode]
            ratio = f"{got['rate'] / base:.2f}" if base else "-"
            print(
                f"{mode:<18}{got['rate']:>10,.0f}{got['batches']:>9}"
                f"{got['p50']:>8.2f}{got['p99']:>8.2f}{ratio:>9}"
            )
        if base and "exactly_once_v2" in best:
            ratio = best["exactly_once_v2"]["rate"] / base
            print(f"\nexactly_once_v2 / at_least_once = {ratio:.2f} (target >= 0.9)")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
