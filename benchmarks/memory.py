"""Peak memory (RSS) of the driver and the Python workers with many distinct keys.

The word count (``examples/wordcount.py``, exactly_once_v2, RocksDB store) over --records
lines of one word each, drawn from --keys distinct words: the first --keys lines bring
every word into the store, the rest repeat them. While it runs, the resident memory of
the driver (this Python process), of Spark's JVM, and of every other Python process of the
run (Spark's Python workers, and the task hosts that hold the stores, which are forked
detached from a worker but stay in its daemon's process group) is sampled; printed per
batch: the words in the store so far and the peaks. Once every word is in
the store, memory must stay flat: the last line compares the batches after that point.

    python benchmarks/memory.py [--keys 1000000] [--records 2000000] [--partitions 8]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

import psutil  # type: ignore[import-untyped]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import load_wordcount
from produce_consume import machine

from runtime.app.app import StreamsApp
from runtime.spark.session import get_or_create_session
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin

MB = 1024 * 1024


def produce(admin: TopicAdmin, topic: str, records: int, keys: int) -> None:
    """Line ``i`` is the word ``k<i % keys>``."""
    producer = Producer(admin)
    for i in range(records):
        producer.send(topic, b"line-%d" % i, b"k%d" % (i % keys), timestamp=i)
        if i % 100_000 == 99_999:
            producer.flush()
    producer.flush()


class Sampler(threading.Thread):
    """Samples resident memory every ``interval`` seconds; keeps each batch's peaks."""

    def __init__(self, app: StreamsApp, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.app = app
        self.interval = interval
        self.me = psutil.Process()
        self.peaks: dict[int, dict[str, float]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def job_processes(self) -> list[Any]:
        """Every process of this run but this one: its descendants (the JVM, Spark's
        Python workers) and the Python processes of its process group that left the tree
        (a task host server, which a worker forks detached, and its hosts: in the process
        group of the worker's daemon)."""
        found = {p.pid: p for p in self.me.children(recursive=True)}
        groups = {os.getpgid(0)}
        for proc in found.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                groups.add(os.getpgid(proc.pid))
        for proc in psutil.process_iter(["name"]):
            if proc.pid == self.me.pid or proc.pid in found:
                continue
            try:
                if "python" in (proc.info["name"] or "") and os.getpgid(proc.pid) in groups:
                    found[proc.pid] = proc
            except (ProcessLookupError, PermissionError):
                continue
        return list(found.values())

    def sample(self) -> None:
        # the count of batches run (batch_times keeps only the latest 10,000)
        batch = sum(t.batches for t in self.app.threads)
        jvm = python = largest = 0.0
        for child in self.job_processes():
            try:
                rss = child.memory_info().rss / MB
                name = child.name()
            except psutil.Error:  # gone meanwhile
                continue
            if "java" in name:
                jvm += rss
            else:
                python += rss
                largest = max(largest, rss)
        now = {
            "driver": self.me.memory_info().rss / MB,
            "jvm": jvm,
            "python": python,
            "largest": largest,
        }
        peak = self.peaks.setdefault(batch, dict.fromkeys(now, 0.0))
        for name, value in now.items():
            peak[name] = max(peak[name], value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--max-poll-records", type=int, default=25_000)
    args = parser.parse_args()
    print(machine())
    print(
        f"word count, {args.records:,} one-word lines of {args.keys:,} distinct words, "
        f"{args.partitions} partitions, {args.max_poll_records:,} lines per partition per batch"
    )
    wc = load_wordcount()
    work = tempfile.mkdtemp(prefix="memory-")
    try:
        admin = TopicAdmin(os.path.join(work, "root"))
        admin.create(wc.INPUT, args.partitions)
        admin.create(wc.OUTPUT, args.partitions)
        produce(admin, wc.INPUT, args.records, args.keys)
        spark = get_or_create_session("benchmark-memory", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        config = {
            **wc.CONFIG,
            "application.id": "memory",
            "topics.root": os.path.join(work, "root"),
            "state.dir": os.path.join(work, "state"),
            "max.poll.records": args.max_poll_records,
            "log.retention.ms": -1,  # the input's timestamps are synthetic (long past)
            "group.initial.rebalance.delay.ms": 0,
        }
        app = StreamsApp(wc.build_topology(), config, spark=spark)
        sampler = Sampler(app)
        sampler.start()
        started = time.perf_counter()
        app.run_until_idle()
        sampler.stop.set()
        sampler.join()
        sampler.sample()
        report(sampler.peaks, args, time.perf_counter() - started)
        app.close()
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(peaks: dict[int, dict[str, float]], args: Any, seconds: float) -> None:
    """Print the peaks per batch and the growth once every key is stored."""
    per_batch = args.max_poll_records * args.partitions
    print(f"{seconds:.1f} s; peak resident memory (MiB) while each batch ran:")
    head = ("batch", 6), ("words stored", 14), ("driver", 9), ("JVM", 9), ("workers+hosts", 15)
    print("".join(f"{name:>{width}}" for name, width in head) + f"{'largest':>9}")
    for batch in sorted(peaks):
        p = peaks[batch]
        stored = min(args.keys, (batch + 1) * per_batch)
        print(
            f"{batch + 1:>6}{stored:>14,}{p['driver']:>9.0f}{p['jvm']:>9.0f}"
            f"{p['python']:>15.0f}{p['largest']:>9.0f}"
        )
    full = [b for b in sorted(peaks) if b * per_batch >= args.keys]
    if len(full) >= 2:
        first, last = peaks[full[0]], peaks[full[-1]]
        print(
            f"after every word is stored (batches {full[0] + 1}..{full[-1] + 1}): driver "
            f"{last['driver'] - first['driver']:+.0f} MiB, workers+hosts "
            f"{last['python'] - first['python']:+.0f} MiB, "
            f"JVM {last['jvm'] - first['jvm']:+.0f} MiB"
        )


if __name__ == "__main__":
    main()
