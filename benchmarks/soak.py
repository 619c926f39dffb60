"""Soak: the word count for many small batches; does anything grow that should not?

The word count (``examples/wordcount.py``, exactly_once_v2, RocksDB store, --words distinct
words) runs as a long-lived application while a feeder writes --lines lines at a time to
its input topic, each chunk as soon as the batch before has planned its reads (so the
application never waits for the feeder, and every chunk is one batch), for --batches
batches. Retention, merging, purging and vacuuming run as the application
configures them, on intervals of seconds (``--config key=value`` overrides); the input and
output topics keep --retention-ms of records, the Delta logs ten minutes of commits.

Printed per tenth of the run: batch latency p50/p99; live files and bytes of every topic,
of ``state.dir``, of the transaction and group logs and of the store snapshots, at the end
of the tenth and at their most within it (sampled twenty times a tenth: the logs that are
compacted every so many versions go up and down like a saw, and one sample falls anywhere
on its teeth); the resident memory of the driver, of Spark's JVM and of the Python
workers and task hosts. The last lines compare the last tenth with the second (latency)
and the middle one (files, bytes, memory).

A run stopped part-way (the machine went away, Ctrl-C) goes on with ``--resume`` and the
same ``--work``: the application restarts from its committed state, as after a crash, and
the feeder from the last tenth it sampled (the tenths sampled before are kept in
``<work>/soak-progress.json``; the batches of the interrupted tenth were processed but are
not sampled, so the application runs somewhat more than --batches batches in all).

    python benchmarks/soak.py [--batches 20000] [--lines 200] [--words 1000]
                              [--work DIR [--resume]]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory import MB, Sampler
from modes import load_wordcount, percentile
from produce_consume import machine

from runtime.app.app import StreamsApp
from runtime.spark.session import get_or_create_session
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin


def dir_usage(path: str) -> tuple[int, int]:
    """Return (files, bytes) under ``path`` (0, 0 when it does not exist)."""
    files = size = 0
    for base, _dirs, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(base, name)).st_size
            except FileNotFoundError:  # removed while walking
                continue
            files += 1
    return files, size


def usage(root: str, state: str) -> dict[str, tuple[int, int]]:
    """Files and bytes of every topic, of state.dir and of the root's other directories."""
    out: dict[str, tuple[int, int]] = {}
    topics = os.path.join(root, "topics")
    for name in sorted(os.listdir(topics)) if os.path.isdir(topics) else []:
        out[f"topic {name}"] = dir_usage(os.path.join(topics, name))
    for name in sorted(os.listdir(root)):
        if name != "topics" and os.path.isdir(os.path.join(root, name)):
            out[name] = dir_usage(os.path.join(root, name))
    out["state.dir"] = dir_usage(state)
    return out


class Lines:
    """Lines of 3 to 12 words drawn from ``words`` distinct words."""

    def __init__(self, words: int, seed: int = 7) -> None:
        self.words = [f"w{i}" for i in range(words)]
        self.rng = random.Random(seed)
        self.n = 0

    def chunk(self, n: int) -> list[tuple[bytes, bytes]]:
        out = []
        for _ in range(n):
            k = self.rng.randint(3, 12)
            out.append((b"line-%d" % self.n, " ".join(self.rng.choices(self.words, k=k)).encode()))
            self.n += 1
        return out


def batches_done(app: StreamsApp) -> int:
    return sum(t.batches for t in app.threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--lines", type=int, default=200, help="lines per batch")
    parser.add_argument("--words", type=int, default=1000, help="distinct words")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--retention-ms", type=int, default=600_000, help="of the input and output topics"
    )
    parser.add_argument("--work", help="keep the run's files here (default: a temp dir)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--resume", action="store_true", help="go on with the stopped run in --work"
    )
    args = parser.parse_args()
    if args.resume and not args.work:
        parser.error("--resume needs the --work directory of the run to go on with")
    print(machine())
    print(
        f"soak: word count, {args.batches:,} batches of {args.lines} lines, {args.words:,} "
        f"distinct words, {args.partitions} partitions; input retention.ms={args.retention_ms}"
    )
    wc = load_wordcount()
    work = args.work or tempfile.mkdtemp(prefix="soak-")
    root, state = os.path.join(work, "root"), os.path.join(work, "state")
    try:
        admin = TopicAdmin(root)
        kept = {"retention.ms": str(args.retention_ms)}
        progress = load_progress(work) if args.resume else None
        if progress is None and os.path.exists(progress_path(work)):
            raise SystemExit(f"{work} holds a run already: add --resume, or choose a new --work")
        if progress is not None:
            print(
                f"resuming after tenth {len(progress['rows'])} "
                f"({progress['fed']:,} batches fed; run {progress['runs'] + 1})"
            )
            for row in progress["rows"]:
                print_row(row, header=row["tenth"] == 1)
        admin.create(wc.INPUT, args.partitions, configs=kept, if_not_exists=True)
        admin.create(wc.OUTPUT, args.partitions, configs=kept, if_not_exists=True)
        spark = get_or_create_session("benchmark-soak", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        config: dict[str, Any] = {
            **wc.CONFIG,
            "application.id": "soak",
            "topics.root": root,
            "state.dir": state,
            "commit.interval.ms": 10,
            "poll.ms": 10,  # the next batch starts as soon as its chunk is written
            "group.initial.rebalance.delay.ms": 0,
            # a month's cleaning in an hour: the cleaner's intervals and delays in seconds
            "log.retention.check.interval.ms": 30_000,
            "log.cleaner.backoff.ms": 10_000,
            "log.segment.delete.delay.ms": 30_000,
            "log.delta.retention.ms": 600_000,
        }
        for item in args.config:
            key, _, value = item.partition("=")
            config[key.strip()] = value.strip()
        print("config: " + ", ".join(f"{k}={v}" for k, v in sorted(config.items())))
        app = StreamsApp(wc.build_topology(), config, spark=spark)
        app.start()
        sampler = Sampler(app, interval=1.0)
        sampler.start()
        try:
            rows = feed(
                app, admin, wc.INPUT, args, dirs=(root, state), sampler=sampler, progress=progress
            )
        finally:
            sampler.stop.set()
            app.close()
        report(rows)
        spark.stop()
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def feed(
    app: StreamsApp,
    admin: TopicAdmin,
    topic: str,
    args: Any,
    *,
    dirs: tuple[str, str],
    sampler: Sampler,
    progress: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """Write one chunk per batch, the next while the last is processed; sample at every
    tenth (and save the progress there)."""
    producer = Producer(admin)
    runs = 0 if progress is None else progress["runs"] + 1
    lines = Lines(args.words, seed=7 + runs)
    tenth = max(1, args.batches // 10)
    rows: list[dict[str, Any]] = [] if progress is None else progress["rows"]
    first = 0 if progress is None else progress["fed"]
    lines.n = 0 if progress is None else progress["lines"]
    before_elapsed = rows[-1]["elapsed"] if rows else 0.0
    started = time.perf_counter() - before_elapsed
    mark = 0
    work = os.path.dirname(dirs[0])
    every = max(1, tenth // 20)
    peak: dict[str, tuple[int, int]] = {}
    thread = app.threads[0]  # one stream thread: every chunk is one of its batches
    base = batches_done(app) - first  # batch i is processed once batches_done > base + i
    chunk: dict[tuple[str, int], int] = {}  # the log ends after the chunk of batch i
    if first < args.batches:
        chunk = write_chunk(producer, topic, lines, args.lines)
    for i in range(first, args.batches):
        ends = chunk
        # the next chunk is written as soon as this batch has fixed what it reads (or is
        # done): the application never waits for the feeder, and each chunk is one batch
        wait_for(
            app,
            i,
            lambda: batches_done(app) > base + i or planned(thread.reads.ends, ends),  # noqa: B023
            "planned",
        )
        if i + 1 < args.batches:
            chunk = write_chunk(producer, topic, lines, args.lines)
        wait_for(app, i, lambda: batches_done(app) > base + i, "processed")  # noqa: B023
        if (i + 1) % every == 0:
            peak = most(peak, usage(*dirs))
        if (i + 1) % tenth == 0:
            done = batches_done(app)
            times = list(app.threads[0].batch_times)[-(done - mark) :]  # one thread
            rows.append(
                sample(
                    len(rows) + 1,
                    i + 1,
                    times,
                    dirs=dirs,
                    sampler=sampler,
                    started=started,
                    since=mark,
                )
            )
            mark = done
            rows[-1]["run"] = runs + 1
            rows[-1]["peak"] = most(peak, rows[-1]["usage"])
            peak = {}
            print_row(rows[-1], header=len(rows) == 1)
            save_progress(work, {"rows": rows, "fed": i + 1, "lines": lines.n, "runs": runs})
    return rows


def write_chunk(producer: Producer, topic: str, lines: Lines, n: int) -> dict[tuple[str, int], int]:
    """Write one chunk of ``n`` lines; return the log end of each partition it reached."""
    for key, line in lines.chunk(n):
        producer.send(topic, key, line, timestamp=int(time.time() * 1000))
    return {(r.topic, r.partition): r.last_offset + 1 for r in producer.flush()}


def planned(ends: dict[tuple[str, int], int], written: dict[tuple[str, int], int]) -> bool:
    """Whether a batch planned up to ``ends`` reads all of the chunk that ended at
    ``written``."""
    return all(ends.get(tp, 0) >= end for tp, end in written.items())


def wait_for(app: StreamsApp, batch: int, done: Any, what: str) -> None:
    """Wait until ``done()``; stop the soak when the application stopped or when nothing
    happened for two minutes."""
    deadline = time.monotonic() + 120
    while not done():
        if app.state.is_terminal():
            raise SystemExit(f"the application stopped: {app.state.name}")
        if time.monotonic() > deadline:
            raise SystemExit(f"batch {batch}: not {what} after 120 s")
        time.sleep(0.002)


def most(
    a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """The larger files and the larger bytes of each directory in ``a`` or ``b``."""
    out = dict(a)
    for name, (files, size) in b.items():
        f0, s0 = out.get(name, (0, 0))
        out[name] = (max(f0, files), max(s0, size))
    return out


def progress_path(work: str) -> str:
    return os.path.join(work, "soak-progress.json")


def load_progress(work: str) -> dict[str, Any] | None:
    """The tenths a stopped run sampled (None: it sampled none)."""
    try:
        with open(progress_path(work)) as f:
            progress: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return None
    for row in progress["rows"]:
        for key in ("usage", "peak"):
            if key in row:
                row[key] = {k: tuple(v) for k, v in row[key].items()}
    return progress


def save_progress(work: str, progress: dict[str, Any]) -> None:
    path = progress_path(work)
    with open(path + ".tmp", "w") as f:
        json.dump(progress, f)
    os.replace(path + ".tmp", path)


def sample(
    n: int,
    done: int,
    times: list[float],
    *,
    dirs: tuple[str, str],
    sampler: Sampler,
    started: float,
    since: int,
) -> dict[str, Any]:
    root, state = dirs
    sampler.sample()
    # the sampler's peaks of each batch since the last tenth (it samples every second):
    # their median is the tenth's level, their largest its worst moment
    peaks = dict(sampler.peaks)  # one copy: the sampler's thread adds batches meanwhile
    window = [peak for batch, peak in peaks.items() if batch > since] or [{}]
    for batch in peaks:
        if batch <= since:
            sampler.peaks.pop(batch, None)  # the soak's own bookkeeping stays bounded
    names = ("driver", "jvm", "python")
    return {
        "tenth": n,
        "batches": done,
        "elapsed": time.perf_counter() - started,
        "p50": percentile(times, 0.5) if times else 0.0,
        "p99": percentile(times, 0.99) if times else 0.0,
        "usage": usage(root, state),
        "rss": {k: statistics.median(p.get(k, 0.0) for p in window) for k in names},
        "rss_most": {k: max(p.get(k, 0.0) for p in window) for k in names},
        "cleaner": dict(manager.totals) if (manager := sampler.app.log_manager) else {},
    }


def print_row(row: dict[str, Any], header: bool) -> None:
    if header:
        print(
            f"{'tenth':>5} {'batches':>8} {'elapsed s':>9} {'p50 ms':>7} {'p99 ms':>7}  "
            "RSS MiB driver/JVM/workers: median (most)  run"
        )
    rss, top = row["rss"], row.get("rss_most", row["rss"])
    print(
        f"{row['tenth']:>5} {row['batches']:>8} {row['elapsed']:>9.0f} "
        f"{row['p50'] * 1000:>7.0f} {row['p99'] * 1000:>7.0f}  "
        f"{rss['driver']:.0f}/{rss['jvm']:.0f}/{rss['python']:.0f} "
        f"({top['driver']:.0f}/{top['jvm']:.0f}/{top['python']:.0f})  {row.get('run', 1)}"
    )
    peak = row.get("peak", {})  # absent in tenths sampled before peaks were
    for name, (files, size) in row["usage"].items():
        most_files, most_size = peak.get(name, (files, size))
        print(
            f"{'':>8}{name:<44} {files:>8} files {size / MB:>10.1f} MB"
            f"   (most {most_files} files {most_size / MB:.1f} MB)"
        )
    done = ", ".join(f"{k} {v}" for k, v in sorted(row["cleaner"].items()))
    print(f"{'':>8}log cleaner so far: {done or 'nothing'}")
    sys.stdout.flush()


def report(rows: list[dict[str, Any]]) -> None:
    """Compare the last tenth with the second (latency) and the middle one (growth)."""
    if len(rows) < 3:
        return
    second, middle, last = rows[1], rows[len(rows) // 2 - 1], rows[-1]
    runs = sorted({row.get("run", 1) for row in rows})
    if len(runs) > 1:
        print(
            f"\nthe run went on {len(runs) - 1} time(s) with --resume (the application "
            "restarted from its committed state); tenths by run: "
            + ", ".join(
                f"run {r}: {[row['tenth'] for row in rows if row.get('run', 1) == r]}" for r in runs
            )
        )
    print(
        f"\nlast tenth vs second: batch p50 {last['p50'] / second['p50']:.2f}x "
        f"(goal <= 1.1), p99 {last['p99'] / second['p99']:.2f}x"
    )
    # the most within each tenth where both have it, else the tenths' last samples
    key = "peak" if "peak" in last and "peak" in middle else "usage"
    what = "at their most within the tenth" if key == "peak" else "at the tenth's end"
    print(f"last tenth vs tenth {middle['tenth']}, {what} (goal <= 1.2 each):")
    worst = 0.0
    for name, (files, size) in last[key].items():
        mfiles, msize = middle[key].get(name, (0, 0))
        fr = files / mfiles if mfiles else float("inf") if files else 1.0
        br = size / msize if msize else float("inf") if size else 1.0
        worst = max(worst, fr, br)
        print(f"  {name:<44} files {fr:5.2f}x  bytes {br:5.2f}x")
    for name in ("driver", "jvm", "python"):
        a, b = middle["rss"][name], last["rss"][name]
        ratio = f"{b / a if a else 1.0:5.2f}x ({a:.0f} -> {b:.0f} MiB"
        if "rss_most" in middle and "rss_most" in last:
            ratio += f"; most {middle['rss_most'][name]:.0f} -> {last['rss_most'][name]:.0f}"
        print(f"  RSS {name:<40} {ratio})")
    print(f"worst directory growth: {worst:.2f}x")


if __name__ == "__main__":
    threading.current_thread().name = "soak"
    main()
