"""Run examples on a Spark cluster master in this process (``SPARK_MASTER``), for
``test_cluster.py``; print one JSON line per run with its metrics and where its tasks ran.

    python -m tests.runtime.spark.cluster_app ROOT STATE_DIR N EXAMPLE... [--kill-executor]

Each example's ``generate(N)`` is produced, then the example runs until idle. With
``--kill-executor`` the word count (only) runs with a mapper that, at the line ``slow``,
says which executor it runs on and sleeps; this script then kills that executor's JVM and
every process under it with SIGKILL, in the middle of the batch.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.app.read_store import read_store
from runtime.app.savepoints import create_savepoint
from runtime.app.topology_file import build_config
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from tests.examples.harness import load_example, produce
from topology import Materialized, Produced, StreamsBuilder, Topology


def slow_once(marker: str) -> Any:
    """A value mapper that, at the line "slow", writes its executor's id to ``marker`` and
    sleeps, once."""

    def mapper(line: str) -> str:
        if line == "slow" and not os.path.exists(marker):
            Path(marker).write_text(os.environ.get("STREAMS_EXECUTOR_ID", "?"))
            time.sleep(6)
        return line

    return mapper


def killable_wordcount(example: Any, marker: str) -> Topology:
    """The word count, with :func:`slow_once` before the split."""
    builder = StreamsBuilder()
    (
        builder.stream(example.INPUT)
        .map_values(slow_once(marker))
        .flat_map_values(lambda line: example.WORD.findall(line.lower()))
        .group_by(lambda _key, word: word)
        .count(Materialized.as_(example.STORE))
        .to_stream()
        .to(example.OUTPUT, Produced.with_(Serdes.String(), Serdes.Long()))
    )
    return builder.build()


def executor_jvm(executor: str) -> int | None:
    """The pid of the JVM of executor ``executor`` (its command line names it)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            args = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--executor-id" in args and args[args.index(b"--executor-id") + 1] == executor.encode():
            return int(name)
    return None


def descendants(pid: int) -> list[int]:
    """``pid``'s children, their children, and so on."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_bytes()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
            parents.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def python_daemons(executor: str) -> int:
    """How many Python worker daemons the JVM of ``executor`` started (one per worker
    environment)."""
    jvm = executor_jvm(executor)
    if jvm is None:
        return 0
    count = 0
    for pid in descendants(jvm):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        count += ppid == jvm and any(a.endswith(b"daemon") for a in args)
    return count


def kill_when_marked(marker: str, killed: dict[str, Any]) -> None:
    """Wait for ``marker``; SIGKILL the executor it names, JVM and Python workers."""
    while not os.path.exists(marker):
        time.sleep(0.05)
    time.sleep(0.5)
    executor = Path(marker).read_text()
    jvm = executor_jvm(executor)
    if jvm is None:
        killed["error"] = f"no JVM of executor {executor}"
        return
    victims = [jvm, *descendants(jvm)]
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    killed.update(executor=executor, processes=len(victims))


def slow_then_kill(  # noqa: PLR0917 - one run's parts
    app: StreamsApp, admin: TopicAdmin, example: Any, n: int, marker: str, killed: dict[str, Any]
) -> None:
    """Once two batches committed (every task placed on an executor), produce the line
    "slow" and ``n`` more; kill the executor that processes "slow" in its batch."""
    while app.thread is None or app.thread.batches < 2:
        time.sleep(0.05)
    producer = Producer(admin)
    producer.send(example.INPUT, b"slow", b"slow")
    producer.flush()
    produce(admin, example, n)
    kill_when_marked(marker, killed)


def main(argv: list[str]) -> int:
    """Run each example (see the module's docstring); stop Spark at the end."""
    kill = "--kill-executor" in argv
    root, state, n, *names = [a for a in argv if a != "--kill-executor"]
    for name in names:
        example = load_example(name)
        config = build_config(
            example,
            root=root,
            properties=None,
            overrides=[f"state.dir={state}", "commit.interval.ms=100", "max.poll.records=100"],
        )
        admin = TopicAdmin(config.topics_root)
        produce(admin, example, int(n))
        killed: dict[str, Any] = {}
        marker = os.path.join(state, "slow.marker")
        kills = kill and name == "wordcount"
        topology = killable_wordcount(example, marker) if kills else example.build_topology()
        app = StreamsApp(topology, config)
        if kills:
            feed = (app, admin, example, int(n), marker, killed)
            threading.Thread(target=slow_then_kill, args=feed, daemon=True).start()
        started = time.perf_counter()
        app.run_until_idle()
        executors: dict[str, list[str]] = {}
        for thread in app.threads:
            for executor, tasks in thread.placement.by_executor().items():
                executors.setdefault(executor, []).extend(tasks)
        daemons = {executor: python_daemons(executor) for executor in executors}
        store = getattr(example, "STORE", None)
        if store is not None:  # the store as data, read on the executors: now, and as a
            # savepoint taken now holds it
            frame = read_store(app.spark, config.application_id, store, root=root)
            stored = {row.key: row.value for row in frame.collect()}
            create_savepoint(TopicAdmin(root), config.application_id, f"after-{name}")
            saved = read_store(
                app.spark, config.application_id, store, as_of=f"after-{name}", root=root
            )
            assert {row.key: row.value for row in saved.collect()} == stored
        line = {
            "example": name,
            "store": stored if store is not None else None,
            "master": app.spark.sparkContext.master,
            "seconds": round(time.perf_counter() - started, 1),
            "metrics": app.metrics().by_name("stream-thread-metrics"),
            "executors": executors,
            "daemons": daemons,
            "killed": killed,
        }
        print(json.dumps(line), flush=True)
        spark = app.spark
    spark.stop()  # the executors are released, not lost with the driver
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
