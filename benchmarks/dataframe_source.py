"""The word count fed by a DataFrame source against the same records read from a topic.

One input of --records lines is made once, twice: as a topic of --partitions partitions,
and as Parquet files (``key``, ``value``, ``timestamp``) that Spark's file source reads
(``maxFilesPerTrigger`` --files-per-trigger of --files). Then, taking turns for --rounds
rounds in one SparkSession (local[2]), each under exactly_once_v2 from the beginning until
idle, with its own application.id:

* **topic**: ``examples/wordcount.py`` reading the topic;
* **dataframe**: the same application with ``sources={"text-lines": the file stream}``:
  every batch of the stream is written as the topic's files by the executors, where its
  rows are, and only committed by the driver (``runtime.app.dataframe_staging``); the
  application reads the topic as it fills.

Both final counts are checked against the input's. Printed per run: lines/s, seconds,
the stream threads' batches and their p50, and the driver's resident memory (RSS) at each
ingested batch: first, median, last and the largest (goal: flat, whatever the input);
then dataframe / topic (goal: >= 0.8), from each one's best round.

    python benchmarks/dataframe_source.py [--records 1000000] [--partitions 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import load_wordcount, percentile
from produce_consume import machine

from runtime.app.app import StreamsApp
from runtime.spark.session import get_or_create_session
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin

BASE_TS = 1_700_000_000_000


def make_input(wc: Any, args: Any, root: str, files: str) -> Counter[str]:
    """Write the lines to the topic and as Parquet files; return the expected counts."""
    admin = TopicAdmin(root)
    admin.create(wc.INPUT, args.partitions)
    producer = Producer(admin)
    os.makedirs(files)
    expected: Counter[str] = Counter()
    per_file = -(-args.records // args.files)
    for number, start in enumerate(range(0, args.records, per_file)):
        lines = wc.generate(min(per_file, args.records - start), seed=start)
        keys = [k.encode() for k, _ in lines]
        values = [line.encode() for _, line in lines]
        stamps = list(range(BASE_TS + start, BASE_TS + start + len(lines)))
        producer.send_batch(wc.INPUT, keys, values, timestamps=stamps)
        producer.flush()
        pq.write_table(
            pa.table(
                {
                    "key": [k for k, _ in lines],
                    "value": [line for _, line in lines],
                    "timestamp": pa.array(stamps, pa.int64()),
                }
            ),
            os.path.join(files, f"part-{number:05d}.parquet"),
        )
        for _, line in lines:
            expected.update(wc.WORD.findall(line.lower()))
    return expected


def final_counts(root: str, topic: str) -> Counter[str]:
    """The last count of every word the application wrote."""
    reader = TopicReader(root)
    counts: Counter[str] = Counter()
    for partition in reader.end_offsets(topic):
        table = reader.read(topic, partition, 0)
        for key, value in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            counts[key.decode()] = int.from_bytes(value, "big", signed=True)
    return counts


class RssAtBatches:
    """Samples the driver's RSS each time an ingest commits a batch (a thread)."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._app: StreamsApp | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def watch(self, app: StreamsApp) -> None:
        self._app = app
        self._thread.start()

    def _run(self) -> None:
        process, seen = psutil.Process(), 0
        while not self._stop.wait(0.05):
            app = self._app
            batches = sum(i.batches for i in app.ingests) if app and app.ingests else 0
            if batches > seen:
                seen = batches
                self.samples.append(process.memory_info().rss)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def run(spark: Any, wc: Any, work: str, kind: str, *, turn: int, args: Any) -> dict[str, Any]:
    """One round of ``kind`` (topic or dataframe); its figures."""
    root = os.path.join(work, "root" if kind == "topic" else f"root-frame-{turn}")
    admin = TopicAdmin(root)
    admin.create(wc.OUTPUT, args.partitions, if_not_exists=True)
    app_id = f"wc-{kind}-{turn}"  # (a later round's counts come after an earlier's)
    config = {
        **wc.CONFIG,
        "application.id": app_id,
        "processing.guarantee": "exactly_once_v2",
        "topics.root": root,
        "state.dir": os.path.join(work, f"state-{kind}-{turn}"),
        "checkpoint.location": os.path.join(work, f"checkpoint-{kind}-{turn}"),
        "commit.interval.ms": 100,
        "max.poll.records": args.max_poll_records,
        "num.partitions": args.partitions,
        "log.retention.ms": -1,
        "group.initial.rebalance.delay.ms": 0,
    }
    sources = {}
    if kind == "dataframe":
        sources[wc.INPUT] = (
            spark.readStream.schema("key string, value string, timestamp bigint")
            .option("maxFilesPerTrigger", args.files_per_trigger)
            .parquet(os.path.join(work, "files"))
        )
    app = StreamsApp(wc.build_topology(), config, spark=spark, sources=sources)
    rss = RssAtBatches()
    rss.watch(app)
    started = time.perf_counter()
    try:
        app.run_until_idle()
    finally:
        rss.stop()
    elapsed = time.perf_counter() - started
    times = [t for thread in app.threads for t in thread.batch_times]
    return {
        "seconds": elapsed,
        "rate": args.records / elapsed,
        "batches": len(times),
        "p50": percentile(times, 0.5) if times else 0.0,
        "rss": rss.samples,
        "counts": final_counts(root, wc.OUTPUT),
        "ingested": sum(i.batches for i in app.ingests),
    }


def mib(values: list[int]) -> str:
    if not values:
        return "-"
    first, last = values[0] >> 20, values[-1] >> 20
    middle, top = int(statistics.median(values)) >> 20, max(values) >> 20
    return f"first {first} MiB, median {middle}, last {last}, max {top}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--files-per-trigger", type=int, default=4)
    parser.add_argument("--max-poll-records", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(machine())
    print(
        f"word count, {args.records:,} lines: a topic of {args.partitions} partitions, or "
        f"{args.files} Parquet files read {args.files_per_trigger} a batch; "
        f"max.poll.records={args.max_poll_records}, exactly_once_v2, {args.rounds} rounds"
    )
    wc = load_wordcount()
    work = tempfile.mkdtemp(prefix="dataframe-source-")
    try:
        expected = make_input(wc, args, os.path.join(work, "root"), os.path.join(work, "files"))
        spark = get_or_create_session("benchmark-dataframe-source", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        best: dict[str, dict[str, Any]] = {}
        for turn in range(args.rounds):
            kinds = ("topic", "dataframe") if turn % 2 == 0 else ("dataframe", "topic")
            for kind in kinds:
                got = run(spark, wc, work, kind, turn=turn, args=args)
                if got["counts"] != expected:
                    raise SystemExit(f"{kind}: the final counts differ from the input's")
                print(
                    f"  round {turn + 1} {kind:<10} {got['rate']:>9,.0f} lines/s "
                    f"{got['seconds']:6.1f} s  batches={got['batches']} p50={got['p50']:.2f} s"
                    + (
                        f"  ingested batches={got['ingested']}, driver RSS at each: "
                        f"{mib(got['rss'])}"
                        if kind == "dataframe"
                        else ""
                    ),
                    flush=True,
                )
                if kind not in best or got["rate"] > best[kind]["rate"]:
                    best[kind] = got
        ratio = best["dataframe"]["rate"] / best["topic"]["rate"]
        print(f"\ndataframe / topic = {ratio:.2f} (goal: >= 0.8); final counts equal the input's")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
