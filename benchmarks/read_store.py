"""How fast a store reads as a DataFrame (``streams.read_store``), against the driver's
interactive query of the same store.

The word count runs until idle over lines holding --keys distinct words (--partitions
partitions, exactly_once_v2); then, in the same SparkSession (local[2]):

* **read_store**: ``read_store(...).count()`` and ``.collect()``, each partition restored
  and read on an executor;
* **query**: ``app.store(...).all()`` on the driver (a standby replica per partition).

Printed: each one's seconds and entries a second, and their ratio; the counts are checked
against each other.

    python benchmarks/read_store.py [--keys 1000000] [--partitions 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import load_wordcount
from produce_consume import machine

from runtime.app.app import StreamsApp
from runtime.app.read_store import read_store
from runtime.spark.session import get_or_create_session
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin

WORDS_PER_LINE = 200


def produce_words(admin: TopicAdmin, topic: str, keys: int) -> None:
    """Lines of ``WORDS_PER_LINE`` distinct words, ``keys`` words in all."""
    producer = Producer(admin)
    for start in range(0, keys, WORDS_PER_LINE):
        words = " ".join(f"w{j:08d}" for j in range(start, min(keys, start + WORDS_PER_LINE)))
        producer.send(topic, f"line-{start}".encode(), words.encode())
    producer.flush()


def bench_config(wc: Any, application_id: str, root: str, work: str) -> dict[str, Any]:
    """The word count's configuration for a benchmark (exactly_once_v2)."""
    return {
        **wc.CONFIG,
        "application.id": application_id,
        "topics.root": root,
        "state.dir": os.path.join(work, "state"),
        "processing.guarantee": "exactly_once_v2",
        "group.initial.rebalance.delay.ms": 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    print(machine())
    wc = load_wordcount()
    work = tempfile.mkdtemp(prefix="read-store-")
    try:
        root = os.path.join(work, "root")
        admin = TopicAdmin(root)
        admin.create(wc.INPUT, args.partitions)
        admin.create(wc.OUTPUT, args.partitions)
        produce_words(admin, wc.INPUT, args.keys)
        config = bench_config(wc, "read-store-bench", root, work)
        spark = get_or_create_session()
        app = StreamsApp(wc.build_topology(), config, spark=spark)
        began = time.perf_counter()
        app.run_until_idle()
        print(
            f"filled {args.keys:,} keys in {args.partitions} partitions in "
            f"{time.perf_counter() - began:.1f} s"
        )

        began = time.perf_counter()
        counted = read_store(spark, "read-store-bench", wc.STORE, root=root).count()
        count_s = time.perf_counter() - began
        began = time.perf_counter()
        rows = read_store(spark, "read-store-bench", wc.STORE, root=root).collect()
        collect_s = time.perf_counter() - began
        began = time.perf_counter()
        with app.store(wc.STORE) as query:
            queried = sum(1 for _ in query.all())
        query_s = time.perf_counter() - began
        assert counted == len(rows) == queried == args.keys, (counted, len(rows), queried)
        print(f"read_store count   {count_s:6.1f} s  {counted / count_s:>10,.0f} entries/s")
        print(f"read_store collect {collect_s:6.1f} s  {len(rows) / collect_s:>10,.0f} entries/s")
        print(f"driver query all   {query_s:6.1f} s  {queried / query_s:>10,.0f} entries/s")
        print(f"read_store count / driver query = {query_s / count_s:.2f}x the speed")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
