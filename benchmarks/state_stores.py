"""Measure the state stores against raw rocksdict, and restore from snapshot vs full replay.

1. Puts then gets of --records random 16-byte keys with --value-bytes values: raw rocksdict
   (same options), our transactional RocksDB store (prepare + commit every --commit-every
   puts, as a task commits), the full typed stack over it (metered with bytes serdes →
   change-logging → transactional), and the in-memory store; each as a ratio of raw
   rocksdict's throughput (1.0 = as fast).
2. Restore of a --restore-gb store: a full replay of its changelog (a Delta topic) against
   the newest snapshot + the changelog tail (--tail changes after the snapshot).

    python benchmarks/state_stores.py [--records 1000000] [--restore-gb 1.0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from rocksdict import Rdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from produce_consume import machine

from runtime.state.adapters import RootSnapshotStorage, TopicChangelogReader
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from statestores.context import StandaloneContext
from statestores.logging_layer import ChangeLoggingBytesStore
from statestores.metered import MeteredKeyValueStore
from statestores.protocols import SnapshotStorage
from statestores.rocksdb_options import store_options
from statestores.snapshots import LocalSnapshotStorage, SnapshotManager
from statestores.state_manager import ProcessorStateManager
from statestores.stores import Stores
from statestores.transactional import TransactionalBytesStore
from streams.serdes import Serdes

APP = "bench"


class _ManagedContext(StandaloneContext):
    """A context whose stores commit only when told (as under a task)."""

    def manages_transactions(self) -> bool:
        return True


class _NullCollector:
    def send_change(self, store: str, key: bytes, value: bytes | None, timestamp: int) -> None:
        return None


def make_data(n: int, value_bytes: int) -> tuple[list[bytes], list[bytes]]:
    """Return ``n`` random 16-byte keys and as many random values."""
    rng = np.random.default_rng(7)
    raw_keys = rng.integers(0, 256, size=n * 16, dtype=np.uint8).tobytes()
    raw_values = rng.integers(0, 256, size=n * value_bytes, dtype=np.uint8).tobytes()
    keys = [raw_keys[i * 16 : (i + 1) * 16] for i in range(n)]
    values = [raw_values[i * value_bytes : (i + 1) * value_bytes] for i in range(n)]
    return keys, values


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_raw(work: str, keys: list[bytes], values: list[bytes]) -> tuple[float, float]:
    db = Rdict(os.path.join(work, "raw"), store_options("raw", {}))
    put, get = db.put, db.get

    def puts() -> None:
        for k, v in zip(keys, values, strict=True):
            put(k, v)

    def gets() -> None:
        for k in keys:
            get(k)

    result = timed(puts), timed(gets)
    db.close()
    return result


def bench_store(
    put: Callable[..., None],
    get: Callable[..., object],
    keys: list[bytes],
    values: list[bytes],
    *,
    commit: Callable[[], None],
    every: int,
) -> tuple[float, float]:
    def puts() -> None:
        n = 0
        for k, v in zip(keys, values, strict=True):
            put(k, v)
            n += 1
            if n == every:
                commit()
                n = 0
        commit()

    def gets() -> None:
        for k in keys:
            get(k)

    return timed(puts), timed(gets)


def bench_transactional(
    work: str, keys: list[bytes], values: list[bytes], every: int, *, persistent: bool
) -> tuple[float, float]:
    store = TransactionalBytesStore("s", persistent=persistent)
    store.init(_ManagedContext(state_dir=os.path.join(work, f"txn-{persistent}")))
    seq = iter(range(1 << 30))

    def commit() -> None:
        store.prepare("bench-tid", next(seq))
        store.commit()

    result = bench_store(store.put, store.get, keys, values, commit=commit, every=every)
    store.close()
    return result


def bench_typed(
    work: str, keys: list[bytes], values: list[bytes], every: int
) -> tuple[float, float]:
    inner = ChangeLoggingBytesStore(TransactionalBytesStore("t", persistent=True))
    store: MeteredKeyValueStore[bytes, bytes] = MeteredKeyValueStore(
        inner, Serdes.Bytes(), Serdes.Bytes()
    )
    context = _ManagedContext(state_dir=os.path.join(work, "typed"), changelog=_NullCollector())
    store.init(context)
    bottom = inner.wrapped
    assert isinstance(bottom, TransactionalBytesStore)
    seq = iter(range(1 << 30))

    def commit() -> None:
        bottom.prepare("bench-tid", next(seq))
        bottom.commit()

    result = bench_store(store.put, store.get, keys, values, commit=commit, every=every)
    store.close()
    return result


def report(name: str, times: tuple[float, float], raw: tuple[float, float], n: int) -> None:
    total, raw_total = sum(times), sum(raw)
    print(
        f"  {name:<44} put {n / times[0] / 1e3:7.0f} k/s  get {n / times[1] / 1e3:7.0f} k/s  "
        f"total {total:6.2f} s  ratio to raw {raw_total / total:5.2f}"
    )


# -- restore -------------------------------------------------------------------------------


def write_changelog(
    admin: TopicAdmin, topic: str, n: int, value_bytes: int, *, chunk: int, start: int = 0
) -> None:
    """Write ``n`` records (keys ``start..start+n`` as 16 bytes) to ``topic`` partition 0."""
    producer = Producer(admin, buffer_memory=1 << 30)
    rng = np.random.default_rng(start + 1)
    for base in range(start, start + n, chunk):
        count = min(chunk, start + n - base)
        ids = np.arange(base, base + count, dtype=">u8")
        key_bytes = np.zeros((count, 16), dtype=np.uint8)
        key_bytes[:, 8:] = ids.view(np.uint8).reshape(count, 8)
        keys = pa.BinaryArray.from_buffers(
            pa.binary(),
            count,
            [
                None,
                pa.array(np.arange(0, (count + 1) * 16, 16, dtype=np.int32)).buffers()[1],
                pa.py_buffer(key_bytes.tobytes()),
            ],
        )
        raw = rng.integers(0, 256, size=count * value_bytes, dtype=np.uint8).tobytes()
        values = pa.BinaryArray.from_buffers(
            pa.binary(),
            count,
            [
                None,
                pa.array(
                    np.arange(0, (count + 1) * value_bytes, value_bytes, dtype=np.int32)
                ).buffers()[1],
                pa.py_buffer(raw),
            ],
        )
        producer.send_batch(
            topic, keys, values, timestamps=0, partitions=pa.array(np.zeros(count, dtype=np.int32))
        )
        producer.flush()


def open_task(
    root: str, state_dir: str, snapshots: SnapshotStorage | None
) -> tuple[ProcessorStateManager, float]:
    manager = ProcessorStateManager(
        application_id=APP,
        task_id="0_0",
        partition=0,
        state_dir=state_dir,
        app_config={"statestore.snapshot.interval": 0},
        changelog=_NullCollector(),
        changelog_reader=TopicChangelogReader(root),
        snapshots=snapshots,
        transactional=True,
    )
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("big"), Serdes.Bytes(), Serdes.Bytes()
    ).build()
    start = time.perf_counter()
    store.init(manager)
    return manager, time.perf_counter() - start


def bench_restore(work: str, gb: float, value_bytes: int, tail: int) -> None:
    root = os.path.join(work, "root")
    admin = TopicAdmin(root)
    topic = f"{APP}-big-changelog"
    admin.create(topic, 1)
    n = int(gb * 2**30 / (16 + value_bytes))
    start = time.perf_counter()
    write_changelog(admin, topic, n, value_bytes, chunk=500_000)
    print(
        f"  changelog of {n:,} records ({gb:.2f} GiB of keys+values) written in "
        f"{time.perf_counter() - start:.1f} s"
    )
    manager, full = open_task(root, os.path.join(work, "full"), None)
    restored = manager.restored["big"]
    # take the snapshot of the fully restored store, then append a tail
    manager.snapshots = SnapshotManager(RootSnapshotStorage(root), APP, "0_0")
    start = time.perf_counter()
    manager.snapshot()
    snap_s = time.perf_counter() - start
    manager.close()
    write_changelog(admin, topic, tail, value_bytes, chunk=tail, start=n // 2)
    manager, fast = open_task(root, os.path.join(work, "linked"), RootSnapshotStorage(root))
    tail_restored = manager.restored["big"]
    manager.close()
    # the same snapshot with every file copied, as from an object store
    manager, copied = open_task(root, os.path.join(work, "copied"), LocalSnapshotStorage(root))
    manager.close()
    print(
        f"  full changelog replay: {restored:,} records in {full:.2f} s "
        f"({restored / full / 1e3:.0f} k records/s)"
    )
    print(f"  snapshot upload: {snap_s:.2f} s")
    print(f"  snapshot + tail ({tail_restored:,} records), SST files hard-linked: {fast:.2f} s")
    print(f"  snapshot + tail ({tail_restored:,} records), all files copied: {copied:.2f} s")
    print(
        f"  restore speed-up vs full replay: {full / fast:.1f}x linked (local root), "
        f"{full / copied:.1f}x copied (target >= 10x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--commit-every", type=int, default=10_000)
    parser.add_argument(
        "--restore-gb", type=float, default=1.0, help="store size to restore (0 skips)"
    )
    parser.add_argument("--tail", type=int, default=10_000)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    work = tempfile.mkdtemp(prefix="bench-stores-")
    try:
        keys, values = make_data(args.records, args.value_bytes)
        n = args.records
        print(
            f"{n:,} puts then {n:,} gets, 16-byte keys, {args.value_bytes}-byte values, "
            f"commit every {args.commit_every:,}:"
        )
        raw = bench_raw(work, keys, values)
        report("raw rocksdict", raw, raw, n)
        txn = bench_transactional(work, keys, values, args.commit_every, persistent=True)
        report("transactional RocksDB store (prepare+commit)", txn, raw, n)
        typed = bench_typed(work, keys, values, args.commit_every)
        report("typed stack: metered > logging > transactional", typed, raw, n)
        memory = bench_transactional(work, keys, values, args.commit_every, persistent=False)
        report("in-memory store", memory, raw, n)
        print(
            "  transactional RocksDB store vs raw rocksdict: "
            f"{sum(raw) / sum(txn):.2f} (target >= 0.5)"
        )
        if args.restore_gb > 0:
            print(f"restore of a {args.restore_gb:g} GiB store:")
            bench_restore(work, args.restore_gb, args.value_bytes, args.tail)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
