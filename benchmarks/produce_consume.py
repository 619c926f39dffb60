"""Produce records to a topic and read them back; compare with plain parquet in one run.

Writes N records (value of --value-bytes, a 10-byte key) to a topic of --partitions
partitions through the Producer (batch path: ``send_batch`` in chunks, one Delta commit per
chunk; and the per-record ``send()`` path on a tenth of the data), reads every partition
back through the TopicReader in offset order, then writes and reads the same records as
plain parquet with pyarrow. Prints records/s and MB/s both ways and the ratios, with the
machine it ran on. Ratios are what to compare across runs: these machines are noisy.

    python benchmarks/produce_consume.py [--records 1000000] [--partitions 8]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from runtime.storage.producer import ROW_GROUP_SIZE, Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin


def machine() -> str:
    """Describe the machine: CPU model, cores, memory, Python and library versions."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}, pyarrow {pa.__version__}, "
        f"deltalake {deltalake.__version__}"
    )


def make_data(n: int, value_bytes: int) -> tuple[pa.Array, pa.Array]:
    """Return ``n`` distinct 10-byte keys and random values of ``value_bytes`` each."""
    rng = np.random.default_rng(42)
    keys = pa.array([b"key-%06d" % (i % 1_000_000) for i in range(n)], pa.binary())
    raw = rng.integers(0, 256, size=n * value_bytes, dtype=np.uint8).tobytes()
    offsets = pa.array(np.arange(0, (n + 1) * value_bytes, value_bytes, dtype=np.int32))
    values = pa.BinaryArray.from_buffers(
        pa.binary(), n, [None, offsets.buffers()[1], pa.py_buffer(raw)]
    )
    return keys, values


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def line(label: str, n: int, nbytes: int, seconds: float) -> str:
    return (
        f"  {label:<38} {n / seconds:>12,.0f} records/s {nbytes / seconds / 2**20:>9.1f} "
        f"MB/s  ({seconds:.2f} s)"
    )


def run_topic(
    args: argparse.Namespace, keys: pa.Array, values: pa.Array, work: str
) -> dict[str, float]:
    """Produce through the Producer (batch and per record) and read back; return seconds."""
    n = args.records
    admin = TopicAdmin(os.path.join(work, "storage"))
    admin.create("bench", args.partitions)
    admin.create("bench-send", args.partitions)

    def produce() -> None:
        producer = Producer(admin)
        for start in range(0, n, args.chunk):
            producer.send_batch(
                "bench", keys.slice(start, args.chunk), values.slice(start, args.chunk)
            )
            producer.flush()

    n_send = n // 10
    send_keys = keys.slice(0, n_send).to_pylist()
    send_values = values.slice(0, n_send).to_pylist()

    def produce_per_record() -> None:
        producer = Producer(admin)
        for i, (k, v) in enumerate(zip(send_keys, send_values, strict=True)):
            producer.send("bench-send", k, v)
            if i % args.chunk == args.chunk - 1:
                producer.flush()
        producer.flush()

    read_rows = []

    def consume() -> None:
        reader = TopicReader(os.path.join(work, "storage"))
        read_rows.append(sum(reader.read("bench", p, 0).num_rows for p in range(args.partitions)))

    times = {
        "produce": timed(produce),
        "send": timed(produce_per_record),
        "consume": timed(consume),
    }
    if read_rows != [n]:
        raise SystemExit(f"read back {read_rows} records, wrote {n}")
    return times


def run_plain(keys: pa.Array, values: pa.Array, work: str) -> dict[str, float]:
    """Write and read the same records as plain parquet; return seconds."""
    plain = pa.table(
        {"key": keys, "value": values, "timestamp": pa.array(np.full(len(keys), 1, dtype=np.int64))}
    )
    path = os.path.join(work, "plain.parquet")
    same = os.path.join(work, "same-settings.parquet")
    return {
        "write": timed(lambda: pq.write_table(plain, path)),
        "read": timed(lambda: pq.read_table(path)),
        "same_write": timed(
            lambda: pq.write_table(
                plain,
                same,
                compression="snappy",
                use_dictionary=False,
                row_group_size=ROW_GROUP_SIZE,
            )
        ),
        "same_read": timed(lambda: pq.read_table(same)),
    }


def report(
    args: argparse.Namespace, nbytes: int, topic: dict[str, float], plain: dict[str, float]
) -> None:
    """Print the figures and the ratios."""
    n, n_send = args.records, args.records // 10
    print(f"machine: {machine()}")
    print(
        f"data: {n:,} records, {args.value_bytes}-byte values + 10-byte keys "
        f"({nbytes / 2**20:.0f} MB), {args.partitions} partitions, "
        f"{args.chunk:,} records per commit"
    )
    print("produce")
    print(line("topic, send_batch (Delta commits)", n, nbytes, topic["produce"]))
    print(line(f"topic, send() per record ({n_send:,})", n_send, nbytes // 10, topic["send"]))
    print(line("plain parquet, pyarrow defaults", n, nbytes, plain["write"]))
    print(line("plain parquet, topic file settings", n, nbytes, plain["same_write"]))
    print("consume")
    print(line("topic, TopicReader in offset order", n, nbytes, topic["consume"]))
    print(line("plain parquet, pyarrow defaults", n, nbytes, plain["read"]))
    print(line("plain parquet, topic file settings", n, nbytes, plain["same_read"]))
    per_send = topic["send"] / n_send * n
    print("ratios: topic throughput / plain parquet throughput (pyarrow defaults | same settings)")
    print(
        f"  produce, send_batch  {plain['write'] / topic['produce']:.2f} | "
        f"{plain['same_write'] / topic['produce']:.2f}"
    )
    print(
        f"  produce, send()      {plain['write'] / per_send:.2f} | "
        f"{plain['same_write'] / per_send:.2f}"
    )
    print(
        f"  consume              {plain['read'] / topic['consume']:.2f} | "
        f"{plain['same_read'] / topic['consume']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=100_000, help="records per commit")
    args = parser.parse_args()
    keys, values = make_data(args.records, args.value_bytes)
    work = tempfile.mkdtemp(prefix="bench-produce-consume-")
    try:
        topic = run_topic(args, keys, values, work)
        plain = run_plain(keys, values, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(args, keys.nbytes + values.nbytes, topic, plain)


if __name__ == "__main__":
    main()
