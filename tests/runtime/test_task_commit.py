"""A task host and the TopologyTestDriver commit a task through the same task-commit code.

The host's side runs :class:`runtime.tasks.manager.TaskManager`, the code a task host
process runs for every visit (one visit per batch, the batch's plan as the driver sends
it, real RocksDB stores, staged files on a real storage root), first in this process and
then in a real task host: forked by a host server, reached over its socket by
:func:`runtime.tasks.client.run_on_host`, as a Spark worker reaches it. (The server is
started as a fresh interpreter, as a worker's daemon is, not forked from this process:
a fork of a process that opened RocksDB cannot close a store.) The driver's side
pipes the same records through a :class:`~streams.testing.TopologyTestDriver`. Both are
watched at the task-commit classes themselves (:mod:`topology.engine.task_commit`,
wrapped, still run; the host server, a fresh interpreter here, wraps them before it forks
its hosts, which write what they saw to a file): each side must end its batches and
settle its transactions there, with the class of the guarantee, and the stores must hold
the same counts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from common.config import StreamsConfig
from runtime.app.internal_topics import TopicPlan, plan_topics
from runtime.storage.topics import TopicAdmin
from runtime.tasks.client import run_on_host, shutdown_hosts
from runtime.tasks.contract import (
    PACKED_SCHEMA,
    PREPARED,
    ROW_SCHEMA,
    BatchPlan,
    ThreadPlan,
    thread_plan,
)
from runtime.tasks.manager import TaskManager
from runtime.tasks.protocol import SERVER_SOCKET, socket_dir
from runtime.tasks.server import main as server_main
from streams.serdes import Serdes
from streams.testing import TopologyTestDriver
from topology import Consumed, Materialized, Produced, StreamsBuilder, Topology
from topology.engine.task_commit import (
    AtLeastOnceTaskCommit,
    TransactionalTaskCommit,
    task_commit,
)

WORDS = ["a", "b", "a", "c", "a", "b"]
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

Calls = list[tuple[str, str, str]]


def counting() -> Topology:
    """Words counted by key."""
    builder = StreamsBuilder()
    (
        builder.stream("words", Consumed.with_(Serdes.String(), Serdes.String()))
        .group_by_key()
        .count(Materialized.as_("counts"))
        .to_stream()
        .to("counts-out", Produced.with_(Serdes.String(), Serdes.Long()))
    )
    return builder.build()


COUNTING = counting()


def watch_commits(record: Callable[[str, str, str], None]) -> list[tuple[type, str, Any]]:
    """Wrap the task-commit classes' methods so that each call is first given to
    ``record`` as (class, method, task id); return what to put back."""
    undo = []
    for cls in (AtLeastOnceTaskCommit, TransactionalTaskCommit):
        for name in ("end_batch", "settle"):
            real = getattr(cls, name)

            def spy(self, task, *args, _real=real, _name=name, _cls=cls.__name__, **kwargs):  # type: ignore[no-untyped-def]
                record(_cls, _name, task.task_id)
                return _real(self, task, *args, **kwargs)

            undo.append((cls, name, real))
            setattr(cls, name, spy)
    return undo


def serve_watched(directory: str, log: str) -> int:
    """Run a task host server (``python -c``: a fresh interpreter, as a Spark worker's
    daemon is) whose hosts write their task-commit calls to ``log``."""

    def record(cls: str, method: str, task_id: str) -> None:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{cls} {method} {task_id}\n")

    watch_commits(record)
    return server_main([directory, str(os.getppid())])


@pytest.fixture
def calls() -> Iterator[Calls]:
    """Every call of a task commit's methods in this process: (class, method, task id)."""
    seen: Calls = []
    undo = watch_commits(lambda *call: seen.append(call))
    yield seen
    for cls, name, real in undo:
        setattr(cls, name, real)


def host_server(config: StreamsConfig, log: Path) -> subprocess.Popen[bytes]:
    """Start the host server of ``config``'s state directory, its hosts watched."""
    directory = socket_dir(config.state_dir, config.application_id)
    code = (
        f"import sys; sys.path[:0] = {[str(ROOT), str(HERE)]!r}; import test_task_commit as t; "
        f"sys.exit(t.serve_watched({directory!r}, {str(log)!r}))"
    )
    server = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(directory, SERVER_SOCKET)):
        assert server.poll() is None and time.monotonic() < deadline, "no host server"
        time.sleep(0.05)
    return server


def records(words: list[str], start: int) -> pa.Table:
    """``words`` as a task's input records (keyed by the word), offsets from ``start``."""
    keys = [w.encode() for w in words]
    return pa.table(
        {
            "offset": list(range(start, start + len(words))),
            "key": keys,
            "value": keys,
            "timestamp": [1_000 + i for i in range(len(words))],
            "headers": [[] for _ in words],
        },
        schema=PACKED_SCHEMA,
    )


def application(
    tmp_path: Path, guarantee: str, state: str
) -> tuple[StreamsConfig, ThreadPlan, TopicPlan]:
    """The application's configuration (its state in ``state``), thread plan and topics."""
    root = str(tmp_path / "root")
    config = StreamsConfig(
        **{
            "application.id": "commits",
            "topics.root": root,
            "processing.guarantee": guarantee,
            "state.dir": str(tmp_path / state),
        }
    )
    admin = TopicAdmin(root)
    for topic in ("words", "counts-out"):
        if not admin.exists(topic):
            admin.create(topic, 1)
    topics = plan_topics(COUNTING, admin, config.application_id, config=config)
    return config, thread_plan(COUNTING, config, root, owner=f"{state}-owner"), topics


def plans(thread: ThreadPlan, topics: TopicPlan, eos: bool) -> Iterator[tuple[BatchPlan, pa.Table]]:
    """Two batches of the words and their plans, the second settling the first's
    transaction."""
    positions: dict[tuple[str, int], int] = {}
    for batch, words in enumerate((WORDS[:3], WORDS[3:]), start=1):
        plan = BatchPlan(
            thread=thread,
            outputs=topics.outputs,
            staging_dir=f"staging/{thread.owner}-{batch}",
            sources=topics.sources,
            positions=positions,
            transaction=("commits-1", batch) if eos else None,
            outcomes={("commits-1", batch - 1): True} if eos and batch > 1 else {},
            visit=frozenset({"0_0"}),
            batch=batch,
        )
        yield plan, records(words, 3 * (batch - 1))
        positions = {("words", 0): 3 * batch}


@pytest.mark.parametrize(
    ("guarantee", "commit_class"),
    [("at_least_once", AtLeastOnceTaskCommit), ("exactly_once_v2", TransactionalTaskCommit)],
)
def test_a_task_host_and_the_driver_commit_through_one_task_commit(
    tmp_path: Path, calls: Calls, guarantee: str, commit_class: type
) -> None:
    eos = guarantee != "at_least_once"
    name = commit_class.__name__
    expected = {(name, "end_batch"), *([(name, "settle")] if eos else [])}

    # the host's code, in this process
    _, thread, topics = application(tmp_path, guarantee, "state")
    manager = TaskManager()
    for plan, batch in plans(thread, topics, eos):
        rows = pa.Table.from_pylist(
            manager.run(plan, 0, 0, {"words": batch}, ["words"]), schema=ROW_SCHEMA
        )
        assert (PREPARED in rows.column("kind").to_pylist()) is eos
    host_store = manager.live["0_0"].task.stores["counts"]
    host_counts = {w: host_store.get(w).value for w in "abc"}  # a timestamped store
    host_calls = list(calls)
    manager.close_all()

    # a task host process, reached as a Spark worker reaches it
    config, thread, topics = application(tmp_path, guarantee, "state-host")
    log = tmp_path / "host-calls.log"
    server = host_server(config, log)
    try:
        for plan, batch in plans(thread, topics, eos):
            out, _ = run_on_host(plan, 0, 0, [("words", batch)], ["words"])
            rows = pa.Table.from_pylist(out, schema=ROW_SCHEMA)
            assert (PREPARED in rows.column("kind").to_pylist()) is eos
    finally:
        shutdown_hosts(config.state_dir, config.application_id)
        server.wait(timeout=60)
    process_calls = [tuple(line.split()) for line in log.read_text().splitlines()]

    # the driver's side
    calls.clear()
    with TopologyTestDriver(COUNTING, config) as driver:
        source = driver.create_input_topic("words", Serdes.String(), Serdes.String())
        for word in WORDS:
            source.pipe_input(word, word)
        store = driver.get_key_value_store("counts")
        driver_counts = {w: store.get(w) for w in "abc"}
    driver_calls = list(calls)

    for seen in (host_calls, process_calls, driver_calls):
        assert {(c, m) for c, m, _ in seen} == expected
        assert {t for _, _, t in seen} == {"0_0"}
    assert host_counts == driver_counts == {"a": 3, "b": 2, "c": 1}
    # the only task commits there are: the module's two classes
    assert {task_commit(False).__class__, task_commit(True).__class__} == {
        AtLeastOnceTaskCommit,
        TransactionalTaskCommit,
    }
