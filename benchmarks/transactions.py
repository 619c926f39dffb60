"""Measure transaction commit latency and transactional vs plain produce throughput.

1. Commit latency (p50, p99) of transactions that write a few records to each of 1, 4 and
   16 participant topics, plus the consumed offsets (one more participant).
2. Throughput: --records records of --value-bytes in transactions of --txn-size records,
   against the plain (non-transactional) producer committing the same records every
   --txn-size records (one Delta commit per batch either way), as a ratio in one run.
3. The coordinators' logs (transaction states, group generations): appends one after
   another and reads of the newest version, per backend (``file``: one file per version,
   created exclusively; ``delta``: a Delta table, for object stores).

    python benchmarks/transactions.py [--records 1000000] [--txn-size 10000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from produce_consume import machine

from runtime.storage.fs import StorageRoot
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from runtime.txn.cas_log import Backend, CasLog
from runtime.txn.producer import TransactionalProducer


def percentile(values: list[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def commit_latencies(work: str, participants: int, txns: int) -> list[float]:
    """Run ``txns`` transactions over ``participants`` topics; return commit seconds."""
    admin = TopicAdmin(os.path.join(work, f"latency-{participants}"))
    topics = [f"t{i:02d}" for i in range(participants)]
    for topic in topics:
        admin.create(topic, 4)
    producer = TransactionalProducer(admin, f"bench-{participants}")
    producer.init_transactions()
    out = []
    for n in range(txns):
        producer.begin_transaction()
        for topic in topics:
            for i in range(10):
                producer.send(topic, b"key-%d" % i, b"value-%d-%d" % (n, i))
        producer.send_offsets_to_transaction({("input", 0): n + 1}, "bench-group")
        start = time.perf_counter()
        producer.commit_transaction()
        out.append(time.perf_counter() - start)
    return out


def make_values(n: int, size: int) -> tuple[pa.Array, pa.Array]:
    """Return ``n`` keys and random ``size``-byte values."""
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=n * size, dtype=np.uint8).tobytes()
    offsets = pa.array(np.arange(0, (n + 1) * size, size, dtype=np.int32))
    values = pa.BinaryArray.from_buffers(
        pa.binary(), n, [None, offsets.buffers()[1], pa.py_buffer(raw)]
    )
    keys = pa.array([b"key-%06d" % (i % 100_000) for i in range(n)], pa.binary())
    return keys, values


def throughput(work: str, args: argparse.Namespace) -> dict[str, float]:
    """Produce the same records plainly and in transactions; return seconds of each.

    The two alternate batch by batch (each into its own topic), so both meet the same
    table sizes and the same machine noise; each side's time is the sum of its batches.
    """
    keys, values = make_values(args.records, args.value_bytes)
    admin = TopicAdmin(os.path.join(work, "throughput"))
    admin.create("plain", args.partitions)
    admin.create("txn", args.partitions)
    plain = Producer(admin)
    txn = TransactionalProducer(admin, "bench-throughput")
    txn.init_transactions()
    size = args.txn_size
    times = {"plain": 0.0, "txn": 0.0}
    for start in range(0, args.records, size):
        k, v = keys.slice(start, size), values.slice(start, size)
        t0 = time.perf_counter()
        plain.send_batch("plain", k, v)
        plain.flush()
        t1 = time.perf_counter()
        txn.begin_transaction()
        txn.send_batch("txn", k, v)
        txn.commit_transaction()
        t2 = time.perf_counter()
        times["plain"] += t1 - t0
        times["txn"] += t2 - t1
    return times


def cas_log_rates(work: str, backend: Backend, appends: int) -> tuple[float, float]:
    """Append ``appends`` versions in a row, then read the newest as often; return the
    milliseconds per append and per read."""
    log = CasLog(StorageRoot(work), ("bench", backend), backend=backend)
    document = {"producerId": 4711, "epoch": 3, "state": "Ongoing", "partitions": ["t-0"]}
    start = time.perf_counter()
    for version in range(appends):
        if not log.append(version - 1, document):
            raise SystemExit(f"{backend}: append {version} refused")
    append_ms = (time.perf_counter() - start) / appends * 1000
    start = time.perf_counter()
    for _ in range(appends):
        log.read_latest()
    return append_ms, (time.perf_counter() - start) / appends * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--txn-size", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--latency-txns", type=int, default=60)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-transactions-")
    try:
        print(f"machine: {machine()}")
        print(
            "commit latency: 10 records per participant topic + offsets, "
            f"{args.latency_txns} transactions each"
        )
        for participants in (1, 4, 16):
            lat = commit_latencies(work, participants, args.latency_txns)
            p50 = percentile(lat, 0.5) * 1000
            print(
                f"  {participants:>2} topics (+offsets)  p50 {p50:7.1f} ms"
                f"   p99 {percentile(lat, 0.99) * 1000:7.1f} ms"
                f"   mean {statistics.mean(lat) * 1000:7.1f} ms"
            )
        times = throughput(work, args)
        n = args.records
        print(
            f"throughput: {n:,} records of {args.value_bytes} bytes, {args.partitions} "
            f"partitions, {args.txn_size:,} records per transaction / per plain commit"
        )
        for name, label in (("plain", "plain producer"), ("txn", "transactional producer")):
            print(f"  {label:<24} {n / times[name]:>12,.0f} records/s  ({times[name]:.2f} s)")
        ratio = times["plain"] / times["txn"]
        print(f"  ratio transactional / plain: {ratio:.2f}  (target >= 0.9)")
        print("coordinator logs: appends in a row, then reads of the newest version")
        sizes: tuple[tuple[Backend, int], ...] = (("file", 2000), ("delta", 200))
        for backend, appends in sizes:
            append_ms, read_ms = cas_log_rates(work, backend, appends)
            print(
                f"  {backend:<6} {appends:>5} appends  {append_ms:7.3f} ms each "
                f"({1000 / append_ms:,.0f}/s)   read newest {read_ms:7.3f} ms"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
