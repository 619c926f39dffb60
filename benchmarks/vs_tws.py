"""Per-key deduplication: a Processor-API topology against Spark's ``transformWithStateInPandas``.

One input of --records events in --partitions partitions is produced once, as a topic: the
key of each is one of --keys users, drawn at random (so most keys come several times,
spread over the batches), its value names the event, and its timestamp is its place in
the input (``BASE_MS + i``), unique. Both systems forward the first event of each key and
drop the later ones while the key is remembered; an entry is forgotten --ttl-ms of wall
clock after it was stored.

* **streams**: :class:`Dedup`, a Processor-API node (``KStream.process``) over two RocksDB
  key-value stores, under exactly_once_v2 until idle: ``seen`` (key -> when it was
  stored, wall clock) and ``seen-by-time`` (``<ms>|<key>`` -> key, the expiry index); a
  WALL_CLOCK_TIME punctuator every --punctuate-ms deletes the entries older than the TTL
  from both. A record whose key ``seen`` holds is dropped; else it is stored and
  forwarded to the output topic.
* **spark**: the same in Structured Streaming's ``transformWithStateInPandas``
  (processing time, RocksDB state store provider, which it requires): a
  :class:`SparkDedup` ``StatefulProcessor`` with a ``ValueState`` whose TTL is --ttl-ms
  (Spark keeps a TTL index beside the state and evicts expired entries after each batch);
  a key with no state emits its earliest event of the batch (within a batch Spark hands a
  key's rows in no given order) and stores it. Input: the topic's Parquet data files,
  copied aside once produced, read by the file source with ``maxFilesPerTrigger``;
  output: ``foreachBatch`` appending to a Parquet directory;
  ``spark.sql.shuffle.partitions`` = the input's partitions; ``trigger(availableNow)``.

Both read the input in batches of about --batch-lines records (as in
``benchmarks/vs_spark.py``: ``maxFilesPerTrigger`` is the share of the files holding that
many, ``max.poll.records`` the largest partition's records over Spark's batches). This
library's stream thread reaches ``max.poll.records`` by doubling from 1,000 records per
partition (``runtime/thread/batch_size.py``), so it reads the input in a few more, smaller
batches than Spark; the batches counted are those that read input (``of N``: all its
batches, with those run only for a due wall-clock punctuator). The TTL
(default one hour) is longer than any run, so no entry expires from under the data and
both outputs must be exactly the first event of every key, each once: both are checked
against that, computed from the input. The two take turns for --rounds rounds in one
SparkSession (local[2]); each system's figure is its best round. Printed: input
records/s, batches, batch latency p50/p99, the ratio streams / spark (issue 40's
acceptance: >= 2.0), and the machine.

Spark's ``transformWithStateInPandas`` talks to its state server in protobuf messages:
it needs the ``protobuf`` package (>= the version its generated code names, 6.33.5 for
PySpark 4.2), which ``pyspark[sql]`` does not bring.

    python benchmarks/vs_tws.py [--records 1000000] [--keys 250000] [--partitions 4]
                                [--rounds 2] [--batch-lines 200000] [--ttl-ms 3600000]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import bench_config, percentile, polling
from produce_consume import machine
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from vs_spark_kit import (
    chunk_of,
    files_per_trigger_of,
    max_poll_records_of,
    parquet_files,
    report,
    spark_input,
)

from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.spark.session import get_or_create_session
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.thread.progress import BatchProgress
from statestores.stores import Stores
from topology import Processor, Produced, PunctuationType, Record, StreamsBuilder, Topology

INPUT = "events"
OUTPUT = "first-events"
SEEN = "seen"
BY_TIME = "seen-by-time"
#: The first event's timestamp (2023-11-14T22:13:20Z); event ``i`` has ``BASE_MS + i``.
BASE_MS = 1_700_000_000_000
#: The state store provider ``transformWithStateInPandas`` requires.
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: A topic's Parquet data files, as Spark's file source reads them.
INPUT_SCHEMA = (
    "key binary, value binary, timestamp bigint, "
    "headers array<struct<key: string, value: binary>>, partition int"
)
#: What Spark's ``transformWithStateInPandas`` emits: the input's fields.
OUTPUT_SCHEMA = "key binary, value binary, timestamp bigint"

#: Each key's first event: key -> (value, timestamp).
Firsts = dict[str, tuple[str, int]]


def events(start: int, n: int, keys: int) -> tuple[list[bytes], list[bytes], list[int]]:
    """Events ``start .. start + n - 1``: keys drawn from ``keys`` users (seeded by
    ``start``), values naming the event, timestamps ``BASE_MS + i``."""
    ids = np.random.default_rng(start).integers(0, keys, n)
    return (
        [b"user-%07d" % k for k in ids.tolist()],
        [b"event-%09d" % i for i in range(start, start + n)],
        list(range(BASE_MS + start, BASE_MS + start + n)),
    )


def produce_input(admin: TopicAdmin, args: Any) -> None:
    """Write the events, :func:`chunk_of` at a time, partitioned by key."""
    producer = Producer(admin)
    chunk = chunk_of(args)
    for start in range(0, args.records, chunk):
        keys, values, timestamps = events(start, min(chunk, args.records - start), args.keys)
        producer.send_batch(INPUT, keys, values, timestamps=timestamps)
        producer.flush()


def expected_firsts(args: Any) -> Firsts:
    """The first event of every key in the input."""
    firsts: Firsts = {}
    chunk = chunk_of(args)
    for start in range(0, args.records, chunk):
        keys, values, timestamps = events(start, min(chunk, args.records - start), args.keys)
        for key, value, ts in zip(keys, values, timestamps, strict=True):
            k = key.decode()
            if k not in firsts:
                firsts[k] = (value.decode(), ts)
    return firsts


class Dedup(Processor[str, str, str, str]):
    """Forwards a record only when its key is not remembered; remembers each forwarded
    key for ``ttl_ms`` of wall clock (a punctuator every ``punctuate_ms`` forgets it)."""

    def __init__(self, ttl_ms: int, punctuate_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self.punctuate_ms = punctuate_ms
        self.punctuations = 0

    def init(self, context: Any) -> None:
        super().init(context)
        self.seen = context.get_state_store(SEEN)
        self.by_time = context.get_state_store(BY_TIME)
        context.schedule(self.punctuate_ms, PunctuationType.WALL_CLOCK_TIME, self.expire)

    def process(self, record: Record[str, str]) -> None:
        key = record.key
        if self.seen.get(key) is not None:
            return
        now = self.context.current_system_time_ms()
        self.seen.put(key, now)
        self.by_time.put(f"{now:013d}|{key}", key)
        self.context.forward(record)

    def expire(self, now: int) -> None:
        """Forget the keys stored more than ``ttl_ms`` before ``now``."""
        self.punctuations += 1
        due = list(self.by_time.range(None, f"{now - self.ttl_ms:013d}|~"))
        for index_key, key in due:
            self.seen.delete(key)
            self.by_time.delete(index_key)


class DedupJob:
    """The streams side, shaped like an example module (``run_mode`` runs it)."""

    CONFIG = {
        "application.id": "dedup",
        "processing.guarantee": "exactly_once_v2",
        "default.key.serde": "string",
        "default.value.serde": "string",
    }

    def __init__(self, args: Any) -> None:
        self.args = args

    def build_topology(self) -> Topology:
        """The input's events, deduplicated per key, to the output topic."""
        ttl_ms, punctuate_ms = int(self.args.ttl_ms), int(self.args.punctuate_ms)
        strings, longs = Serdes.String(), Serdes.Long()
        b = StreamsBuilder()
        b.add_state_store(
            Stores.key_value_store_builder(Stores.persistent_key_value_store(SEEN), strings, longs)
        )
        b.add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store(BY_TIME), strings, strings
            )
        )
        b.stream(INPUT).process(lambda: Dedup(ttl_ms, punctuate_ms), SEEN, BY_TIME).to(
            OUTPUT, Produced.with_(strings, strings)
        )
        return b.build()


def run_streams(spark: Any, work: str, *, turn: int, args: Any) -> dict[str, Any]:
    """Run :class:`DedupJob` under exactly_once_v2 until idle; time it. Its batches and
    their latencies are those that read input, as Spark's (a batch run only for a due
    wall-clock punctuator, or the tasks' first, reads none); ``all_batches`` counts all."""
    config = bench_config(DedupJob.CONFIG, f"dedup-{turn}", work, **polling(args))
    app = StreamsApp(DedupJob(args).build_topology(), config, spark=spark)
    batches: list[BatchProgress] = []
    app.add_progress_listener(batches.append)
    started = time.perf_counter()
    app.run_until_idle()
    elapsed = time.perf_counter() - started
    times = [b.batch_ms / 1000 for b in batches if b.records_in > 0]
    return {**timing(elapsed, times, args), "all_batches": len(batches)}


def streams_firsts(root: str, since: dict[int, int]) -> tuple[Firsts, int]:
    """What this library's output topic holds from the offsets ``since`` on (a round's
    output): key -> (value, timestamp), and the number of records."""
    reader = TopicReader(root)
    got: Firsts = {}
    records = 0
    for partition in reader.end_offsets(OUTPUT):
        table = reader.read(OUTPUT, partition, since.get(partition, 0))
        records += table.num_rows
        columns = (table.column(c).to_pylist() for c in ("key", "value", "timestamp"))
        for key, value, ts in zip(*columns, strict=True):
            got[key.decode()] = (value.decode(), ts)
    return got, records


class SparkDedup(StatefulProcessor):
    """The same deduplication in ``transformWithStateInPandas``: a key's state (the
    timestamp of its first event) lives ``ttl_ms`` of processing time."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.seen = handle.getValueState("seen", "timestamp bigint", self.ttl_ms)

    def handleInputRows(  # noqa: N802 - Spark's name
        self,
        key: Any,
        rows: Iterator[pd.DataFrame],
        timerValues: Any,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        if self.seen.exists():
            return
        frames = list(rows)
        batch = frames[0] if len(frames) == 1 else pd.concat(frames)
        timestamps = batch["timestamp"].to_numpy()
        i = int(timestamps.argmin())  # (pandas' nsmallest costs a few ms a call)
        self.seen.update((int(timestamps[i]),))
        yield batch.iloc[i : i + 1]

    def close(self) -> None:
        """Nothing to release."""


def run_spark(spark: Any, work: str, input_dir: str, *, turn: int, args: Any) -> dict[str, Any]:
    """Run the deduplication in ``transformWithStateInPandas`` over every input file;
    time it."""
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    files_per_trigger = files_per_trigger_of(parquet_files(input_dir), args)
    firsts = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(input_dir)
        .select("key", "value", "timestamp")
        .groupBy("key")
        .transformWithStateInPandas(
            SparkDedup(int(args.ttl_ms)), OUTPUT_SCHEMA, "Append", "ProcessingTime"
        )
    )
    out = os.path.join(work, f"spark-out-{turn}")

    def sink(batch: Any, _batch_id: int) -> None:
        batch.write.mode("append").parquet(out)

    started = time.perf_counter()
    query = (
        firsts.writeStream.outputMode("append")
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
    got: Firsts = {}
    records = 0
    if os.path.isdir(out):
        rows = spark.read.parquet(out).collect()
        records = len(rows)
        got = {r["key"].decode(): (r["value"].decode(), r["timestamp"]) for r in rows}
    return {
        **timing(elapsed, times, args),
        "firsts": got,
        "records": records,
        "files_per_trigger": files_per_trigger,
    }


def timing(elapsed: float, times: list[float], args: Any) -> dict[str, Any]:
    """A round's throughput and batch latencies."""
    return {
        "seconds": elapsed,
        "rate": args.records / elapsed,
        "batches": len(times),
        "p50": percentile(times, 0.5),
        "p99": percentile(times, 0.99),
    }


def checked(system: str, got: dict[str, Any], expected: Firsts) -> str:
    """Check a round's output against the input's first events, each once; describe the
    round."""
    firsts: Firsts = got["firsts"]
    if got["records"] != len(firsts):
        raise SystemExit(f"{system}: {got['records']:,} records for {len(firsts):,} keys")
    if firsts != expected:
        missing = sorted(expected.keys() - firsts.keys())
        extra = sorted(firsts.keys() - expected.keys())
        wrong = sorted(k for k in firsts.keys() & expected.keys() if firsts[k] != expected[k])
        some = [f"{k}={firsts[k]} (not {expected[k]})" for k in wrong[:3]]
        raise SystemExit(
            f"{system}: the output is not each key's first event: {len(missing)} missing "
            f"{missing[:3]}, {len(extra)} extra {extra[:3]}, {len(wrong)} wrong {some}"
        )
    all_batches = f" (of {got['all_batches']})" if "all_batches" in got else ""
    return (
        f"{got['rate']:>9,.0f} records/s  {got['seconds']:6.1f} s  batches={got['batches']}"
        f"{all_batches}  "
        f"p50={got['p50']:.2f} s  p99={got['p99']:.2f} s  output ok ({got['records']:,} firsts)"
    )


def run_round(spark: Any, work: str, input_dir: str, turn: int, args: Any) -> dict[str, Any]:
    """One round: each system once, alternating which goes first; return their results."""
    root = os.path.join(work, "root")
    results: dict[str, Any] = {}
    for system in ("streams", "spark") if turn % 2 == 0 else ("spark", "streams"):
        if system == "streams":
            # Rounds append to one output topic: a round's output is after the offsets
            # its run starts from.
            since = TopicReader(root).end_offsets(OUTPUT)
            got = run_streams(spark, work, turn=turn, args=args)
            got["firsts"], got["records"] = streams_firsts(root, since)
        else:
            got = run_spark(spark, work, input_dir, turn=turn, args=args)
        results[system] = got
    return results


def parse_args() -> Any:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=250_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-lines", type=int, default=200_000)
    parser.add_argument("--max-poll-records", type=int, default=None)
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    parser.add_argument("--ttl-ms", type=int, default=3_600_000)
    parser.add_argument("--punctuate-ms", type=int, default=1_000)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if importlib.util.find_spec("google.protobuf") is None:
        raise SystemExit(
            "Spark's transformWithStateInPandas needs the protobuf package: "
            "pip install 'protobuf>=6.33.5,<7'"
        )
    print(machine())
    print(
        f"per-key deduplication, {args.records:,} events of {args.keys:,} keys in "
        f"{args.partitions} partitions, batches of about {args.batch_lines:,} records, "
        f"TTL {args.ttl_ms:,} ms (punctuator every {args.punctuate_ms:,} ms), "
        f"{args.rounds} rounds"
    )
    work = tempfile.mkdtemp(prefix="vs-tws-")
    try:
        admin = TopicAdmin(os.path.join(work, "root"))
        admin.create(INPUT, args.partitions)
        admin.create(OUTPUT, args.partitions)
        started = time.perf_counter()
        produce_input(admin, args)
        print(f"input produced in {time.perf_counter() - started:.1f} s")
        input_dir = spark_input(admin, INPUT, work)
        if args.max_poll_records is None:
            args.max_poll_records = max_poll_records_of(admin, INPUT, args)
        print(f"streams: max.poll.records={args.max_poll_records:,} per partition")
        expected = expected_firsts(args)
        print(f"expected output: the first event of each of {len(expected):,} keys")
        spark = get_or_create_session("benchmark-vs-tws", master="local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        best: dict[str, dict[str, Any]] = {}
        for turn in range(args.rounds):
            results = run_round(spark, work, input_dir, turn, args)
            for system, got in results.items():
                if got["seconds"] * 1000 >= args.ttl_ms:
                    raise SystemExit(f"{system}: the run outlasted the TTL: raise --ttl-ms")
                print(f"  round {turn + 1} {system:<8} {checked(system, got, expected)}")
                if system not in best or got["rate"] > best[system]["rate"]:
                    best[system] = got
        report(best, "records", spark="spark (transformWithStateInPandas)", goal=">= 2.0")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
