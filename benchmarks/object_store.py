"""What a restart reads from an object store, one request at a time against several at once.

A restarted instance reads, before its first commit, the Delta log of every topic since
its offset index's newest snapshot, the transaction logs of every transactional id (the
stable offset fetch), and each task's changelog since its store's snapshot: many small
objects, whose time on an object store is its latency. This starts the S3-compatible
server with the fault proxy in front of it, adding ``--latency-ms`` to every request (a
store in another zone, or a loaded one), writes a topic of ``--files`` small data files
and ``--ids`` transaction logs, and times, in one run:

* reading the topic's records (a changelog replay): files one after another
  (``REMOTE_READERS`` = 1) against ``REMOTE_READERS`` at once;
* listing the transactions: each log read twice one after another (as before) against
  each once, several at once;

and prints the times, the requests each made and the ratios, with the machine it ran on.

    python benchmarks/object_store.py [--files 100] [--ids 8] [--latency-ms 50]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from produce_consume import machine

from runtime.storage import reader as reader_module
from runtime.storage.fs import register_storage_options
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from streams.crash.s3proxy import FaultProxy, FaultRule
from streams.crash.s3server import start_server


def timed(proxy: FaultProxy, work: Callable[[], Any]) -> tuple[float, int]:
    """Run ``work``; return its seconds and the requests it made."""
    proxy.requests.clear()
    started = time.perf_counter()
    work()
    return time.perf_counter() - started, sum(proxy.requests.values())


def listed_twice(coordinator: TransactionCoordinator) -> list[Any]:
    """The transactions listed as before: every id's log read to name it, then again."""
    return [coordinator.load(tid) for tid in coordinator.transactional_ids()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--ids", type=int, default=8)
    parser.add_argument("--latency-ms", type=int, default=50)
    args = parser.parse_args()
    process, server = start_server()
    try:
        with FaultProxy(server.endpoint, seed=1) as proxy:
            root = f"s3://{server.new_bucket()}/root"
            register_storage_options(root, {**server.options(), "AWS_ENDPOINT_URL": proxy.endpoint})
            admin = TopicAdmin(root)
            admin.create("changelog", 1)
            producer = Producer(admin)
            for n in range(args.files):  # one small file per commit, as a batch writes
                producer.send("changelog", f"k{n}".encode(), b"v" * 100)
                producer.flush()
            coordinator = TransactionCoordinator(admin)
            for n in range(args.ids):
                coordinator.init_producer_id(f"bench-p{n}-1", 60_000)
            proxy.add(FaultRule("latency", latency_ms=args.latency_ms))
            reader = TopicReader(admin)
            reader.index("changelog")

            def replay() -> None:
                assert reader.read("changelog", 0, 0).num_rows == args.files

            parallel = reader_module.REMOTE_READERS
            reader_module.REMOTE_READERS = 1
            try:
                one_s, one_n = timed(proxy, replay)
            finally:
                reader_module.REMOTE_READERS = parallel
            many_s, many_n = timed(proxy, replay)
            twice_s, twice_n = timed(proxy, lambda: listed_twice(TransactionCoordinator(admin)))
            once_s, once_n = timed(proxy, lambda: TransactionCoordinator(admin).list())
    finally:
        process.terminate()
        process.wait(10)
    print(f"machine: {machine()}")
    print(f"latency added to every request: {args.latency_ms} ms")
    print(
        f"changelog replay of {args.files} files: one at a time {one_s:.2f} s ({one_n} "
        f"requests), {parallel} at once {many_s:.2f} s ({many_n} requests): "
        f"{one_s / many_s:.1f}x faster"
    )
    print(
        f"transactions listed ({args.ids} ids): each log read twice {twice_s:.2f} s ({twice_n} "
        f"requests), once and side by side {once_s:.2f} s ({once_n} requests): "
        f"{twice_s / once_s:.1f}x faster"
    )


if __name__ == "__main__":
    main()
