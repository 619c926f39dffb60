"""What savepoints, rewinds and initial loads cost on a large store.

The word count fills a store of --keys distinct words (--partitions partitions,
exactly_once_v2); then, in one SparkSession (local[2]):

* **savepoint**: ``streams-eos savepoint create`` of the stopped application (the cut,
  the pins, a snapshot of every store partition restored to the cut);
* **more input**: the same words again, every key updated (the run the rewind takes back);
* **rewind**: back to the savepoint (a commit per topic, positions, snapshots);
* **rerun**: the same input again after the rewind, checked to give the same counts;
* **read as of**: ``read_store(..., as_of=savepoint).count()``;
* **initial load**: the store's entries as a Delta table, loaded as another application's
  initial state (one commit), and its first batch.

Printed: each step's seconds and keys a second, against the fill's keys a second.

    python benchmarks/savepoints.py [--keys 1000000] [--partitions 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import load_wordcount
from produce_consume import machine
from read_store import bench_config, produce_words

from runtime.app.app import StreamsApp
from runtime.app.initial_state import InitialState
from runtime.app.read_store import read_store
from runtime.app.rewind import apply_rewind, plan_rewind
from runtime.app.savepoints import create_savepoint
from runtime.spark.session import get_or_create_session
from runtime.storage.topics import TopicAdmin

APP = "savepoint-bench"


def timed(what: str, keys: int, fn, base: float | None = None) -> float:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    fn()
    seconds = time.perf_counter() - began
    rate = keys / seconds
    versus = f"  {rate / base:.2f}x the fill's rate" if base else ""
    print(f"{what:<14} {seconds:7.1f} s  {rate:>10,.0f} keys/s{versus}")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    print(machine())
    wc = load_wordcount()
    work = tempfile.mkdtemp(prefix="savepoint-bench-")
    try:
        root = os.path.join(work, "root")
        admin = TopicAdmin(root)
        admin.create(wc.INPUT, args.partitions)
        admin.create(wc.OUTPUT, args.partitions)
        produce_words(admin, wc.INPUT, args.keys)
        config = bench_config(wc, APP, root, work)
        spark = get_or_create_session()

        def run(conf: dict = config, **kw: object) -> None:  # type: ignore[type-arg]
            StreamsApp(wc.build_topology(), conf, spark=spark, **kw).run_until_idle()  # type: ignore[arg-type]

        fill = timed("fill", args.keys, run)
        timed("savepoint", args.keys, lambda: create_savepoint(admin, APP, "sp"), fill)
        produce_words(admin, wc.INPUT, args.keys)
        timed("more input", args.keys, run, fill)
        timed("rewind", args.keys, lambda: apply_rewind(admin, plan_rewind(admin, APP, "sp")), fill)
        timed("rerun", args.keys, run, fill)
        after = {r.key: r.value for r in read_store(spark, APP, wc.STORE, root=root).collect()}
        assert len(after) == args.keys and set(after.values()) == {2}, "counts after the rerun"
        frame = read_store(spark, APP, wc.STORE, as_of="sp", root=root)
        timed("read as of", args.keys, frame.count, fill)
        seed = os.path.join(work, "seed")
        frame.select("key", "value").write.format("parquet").save(seed)
        seeded = InitialState.dataframe(spark.read.parquet(seed), key="key", value="value")
        other = {**config, "application.id": APP + "-seeded"}
        timed("initial load", args.keys, lambda: run(other, initial_state={wc.STORE: seeded}), fill)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
