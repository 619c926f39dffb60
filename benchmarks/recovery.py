"""Measure how long the word count takes to recover from a SIGKILL, by size of its state.

For each state size (distinct words in the ``word-counts`` RocksDB store):

1. fill: one run of ``examples/wordcount.py`` over lines holding that many distinct words
   (200 a line, ``max.poll.records`` at its default of 1,000 lines), without a rebalance;
   each size's fill is also given against the smallest's as new keys a second per core
   (the difference of the sizes over the difference of the times: the JVM's start and the
   application's set-up cancel out);
2. ``--repeats`` times: produce a few more lines, start the application with a fault point
   armed (alternately ``after_prepare``, rolled forward on restart, and ``before_prepare``,
   aborted on restart) so it SIGKILLs itself in its first commit, then start it again and
   time the restart until its first commit (recovery: Spark start, transaction recovery,
   stores applying or dropping the prepared batch, the first batch).

    python benchmarks/recovery.py [--keys 10000 1000000] [--repeats 3]

Each run is a real process on local Spark, as under ``streams-eos crashtest``; the figures
include the JVM start (``JDK_JAVA_OPTIONS=-XX:TieredStopAtLevel=1`` is set, as in the
tests). The driver JVM's class-data-sharing archive (:mod:`runtime.spark.cds`) is kept in
the size's own work directory, so the fill run writes it and the timed restarts use it,
as on a machine where the application ran once; ``STREAMS_CDS_DIR=off`` measures without
it. Prints one line per size; ``--json`` also writes them to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from produce_consume import machine

from runtime.spark.cds import CDS_DIR_ENV
from runtime.storage.producer import Producer
from streams.crash.check import InputRecord
from streams.crash.harness import BASE_TIMESTAMP, CrashTest
from streams.crash.plan import Kill

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
WORDS_PER_LINE = 200
FAST_JVM = {"JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1"}
#: Kafka Streams' default ``max.poll.records`` (its consumer override of 500), also ours.
MAX_POLL_RECORDS = 1000


def fill_lines(keys: int) -> list[InputRecord]:
    """Lines that together hold ``keys`` distinct words, each word once."""
    lines = []
    for start in range(0, keys, WORDS_PER_LINE):
        words = " ".join(f"w{j:08d}" for j in range(start, min(keys, start + WORDS_PER_LINE)))
        lines.append(InputRecord("text-lines", f"line-{start}", words, BASE_TIMESTAMP + start))
    return lines


def measure(keys: int, repeats: int, workdir: str) -> dict[str, Any]:
    """Fill the store with ``keys`` words, then kill and restart ``repeats`` times."""
    test = CrashTest(
        os.path.join(EXAMPLE, "wordcount.py"),
        inputs=fill_lines(keys),
        workdir=workdir,
        config={"commit.interval.ms": "100", "max.poll.records": str(MAX_POLL_RECORDS)},
        env={**FAST_JVM, CDS_DIR_ENV: os.environ.get(CDS_DIR_ENV, os.path.join(workdir, "cds"))},
    )
    test.setup()
    started = time.monotonic()
    fill = test.wait(test.spawn())
    if fill.error:
        raise SystemExit(fill.error)
    fill_s = time.monotonic() - started
    recoveries = []
    for r in range(repeats):
        producer = Producer(test.admin)
        for i in range(40):  # words already counted: the store's size stays
            words = " ".join(f"w{(r * 997 + i * 31 + j) % keys:08d}" for j in range(20))
            producer.send("text-lines", f"more-{r}-{i}".encode(), words.encode())
        producer.flush()
        point = "after_prepare" if r % 2 == 0 else "before_prepare"
        kill = Kill("fault", point=point)
        test.wait(test.spawn({"STREAMS_FAULT_POINT": point}), kill)
        restart = test.wait(test.spawn())
        if restart.error or restart.recovery_s is None:
            raise SystemExit(restart.error or "the restart made no commit")
        recoveries.append(restart.recovery_s)
        print(f"  keys={keys} kill at {point}: recovered in {restart.recovery_s:.2f}s", flush=True)
    return {
        "keys": keys,
        "fill_s": round(fill_s, 2),
        "recovery_s": recoveries,
        "recovery_p50_s": round(statistics.median(recoveries), 2) if recoveries else None,
        "recovery_max_s": round(max(recoveries), 2) if recoveries else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3, help="0: measure the fill only")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    print(machine())
    results = []
    for keys in args.keys:
        with tempfile.TemporaryDirectory(prefix=f"recovery-{keys}-") as work:
            result = measure(keys, args.repeats, work)
        results.append(result)
        recovery = (
            f" recovery p50={result['recovery_p50_s']}s max={result['recovery_max_s']}s"
            if args.repeats
            else ""
        )
        print(f"keys={keys:>9,} fill={result['fill_s']}s{recovery}", flush=True)
    smallest = min(results, key=lambda r: int(r["keys"]))
    for result in results:
        if result is smallest:
            continue
        keys = int(result["keys"]) - int(smallest["keys"])
        seconds = float(result["fill_s"]) - float(smallest["fill_s"])
        rate = keys / seconds if seconds > 0 else float("inf")
        result["fill_keys_per_s_per_core"] = round(rate / (os.cpu_count() or 1))
        print(
            f"fill of {result['keys']:,} keys against {smallest['keys']:,}: {keys:,} more keys"
            f" in {seconds:.1f} s more, {rate:,.0f} keys/s, "
            f"{result['fill_keys_per_s_per_core']:,} keys/s per core ({os.cpu_count()} cores)",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
