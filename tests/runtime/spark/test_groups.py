"""Several instances of one application share its tasks through the consumer group:
two real ``streams-eos run`` processes split the word count's tasks; SIGKILLing one moves its
tasks to the other within the session timeout; a member paused past its session timeout
cannot commit when it resumes (KIP-447): its batch ends with TaskMigratedError and its
thread rejoins the group, as Kafka's does; one paused past
its PrepareCommit finds its transaction completed by the instance that took its tasks,
commits nothing twice, and rejoins for tasks whose state others moved on meanwhile. The
output stays exactly once throughout."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.group.coordinator import GroupCoordinator, GroupDescription, GroupState
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.offsets import OffsetsStore

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "wordcount.py"
APP = "wordcount"
INPUT = "text-lines"
OUTPUT = "word-counts-out"
PARTITIONS = 8
TASKS = 2 * PARTITIONS  # the word count has two sub-topologies (split, then count)
SESSION_MS = 6000
TXN_TIMEOUT_MS = 5000
WORDS = ["exactly", "once", "stream", "table", "state", "store", "topic", "spark", "delta"]
CONFIG = {
    "commit.interval.ms": "200",
    "max.poll.records": "40",
    "session.timeout.ms": str(SESSION_MS),
    "heartbeat.interval.ms": "500",
    "transaction.timeout.ms": str(TXN_TIMEOUT_MS),
    "group.initial.rebalance.delay.ms": "3000",
}


class Instance:
    """One ``streams-eos run`` process of the word count."""

    def __init__(self, name: str, root: str, tmp: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log = tmp / f"{name}.log"
        args = [
            str(Path(sys.executable).with_name("streams-eos")),
            "run",
            "--verbose",
            str(EXAMPLE),
        ]
        for key, value in {
            **CONFIG,
            "topics.root": root,
            "state.dir": str(tmp / f"state-{name}"),
        }.items():
            args += ["--config", f"{key}={value}"]
        full_env = {
            **os.environ,
            "STREAMS_ROOT": root,
            "PYSPARK_PYTHON": sys.executable,
            "JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1",
            **(env or {}),
        }
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=full_env)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def produce_lines(admin: TopicAdmin, start: int, count: int) -> Counter[str]:
    producer = Producer(admin)
    words: Counter[str] = Counter()
    for i in range(start, start + count):
        line = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(i % 5 + 1))
        words.update(line.split())
        producer.send(INPUT, None, line.encode(), partition=i % PARTITIONS)
    producer.flush()
    return words


def wait_for(what: str, check: Callable[[], bool], timeout: float, *procs: Instance) -> float:
    """Wait until ``check()``; return when it held (monotonic)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        for inst in procs:
            if inst.proc.poll() is not None:
                pytest.fail(f"{inst.name} exited while waiting for {what}:\n{inst.text()[-4000:]}")
        time.sleep(0.2)
    logs = "\n".join(f"--- {i.name}:\n{i.text()[-3000:]}" for i in procs)
    pytest.fail(f"timed out after {timeout} s waiting for {what}\n{logs}")


def group(root: str) -> GroupDescription:
    return GroupCoordinator(TopicAdmin(root)).describe(APP)


def tasks_of(description: GroupDescription) -> dict[str, list[str]]:
    return {
        m.member_id: sorted(str(t) for t in m.assignment.user_data.get("tasks", []))
        for m in description.members
    }


def split_evenly(root: str, members: int) -> bool:
    d = group(root)
    counts = [len(t) for t in tasks_of(d).values()]
    return (
        d.state is GroupState.STABLE
        and len(counts) == members
        and sum(counts) == TASKS
        and max(counts) - min(counts) <= 1
    )


def committed(root: str) -> dict[tuple[str, int], int]:
    return OffsetsStore(TopicAdmin(root)).fetch(APP)


def task_inputs(tasks: list[str]) -> list[tuple[str, int]]:
    """The input partition of each word-count task (split: the lines; count: the
    repartition topic)."""
    topic = {"0": INPUT, "1": f"{APP}-word-counts-repartition"}
    return [(topic[t.split("_")[0]], int(t.split("_")[1])) for t in tasks]


def consumed(root: str) -> bool:
    """Whether the group's positions reached the end of the lines and of the repartition
    topic (two instances may split the split and the count tasks)."""
    admin = TopicAdmin(root)
    positions = OffsetsStore(admin).fetch(APP)
    for topic in (INPUT, f"{APP}-word-counts-repartition"):
        ends = TopicReader(admin).end_offsets(topic)
        if not all(positions.get((topic, p), 0) >= end for p, end in ends.items()):
            return False
    return True


def assert_exactly_once(root: str, expected: Counter[str]) -> None:
    """Each word's counts only grow (a record counted twice would repeat or overshoot) and
    end at the reference."""
    reader = TopicReader(root)
    seen: dict[str, list[int]] = {}
    for partition in range(reader.index(OUTPUT).num_partitions):
        table = reader.read(OUTPUT, partition, 0)
        for key, value in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            seen.setdefault(key.decode(), []).append(int.from_bytes(value, "big", signed=True))
    assert {w: counts[-1] for w, counts in seen.items()} == dict(expected)
    for word, counts in seen.items():
        assert counts == sorted(set(counts)), f"{word}: counts repeat or go back: {counts}"


def pause_b_in_a_commit(root: str, tmp_path: Path, stall: str) -> tuple[Instance, Instance, Path]:
    """Start a and b; once they split the tasks, b stalls at ``stall``
    (``point:seconds:hit``) and is paused (SIGSTOP: b and its heartbeat thread) until a owns
    every task and consumed every line. Return a, b (still paused) and b's release file."""
    release = tmp_path / "release"
    a = Instance("a", root, tmp_path)
    b = Instance(
        "b",
        root,
        tmp_path,
        env={"STREAMS_FAULT_STALL": stall, "STREAMS_FAULT_RELEASE": str(release)},
    )
    try:
        wait_for("a 2-member split", lambda: split_evenly(root, 2), 180, a, b)
        wait_for("b stalling in a commit", lambda: "fault stall at" in b.text(), 120, a, b)
        os.kill(b.proc.pid, signal.SIGSTOP)
        wait_for("a owning every task", lambda: split_evenly(root, 1), 60, a)
        wait_for("every line", lambda: consumed(root), 90, a)
    except BaseException:
        release_and_stop(a, b, release)
        raise
    return a, b, release


def release_and_stop(a: Instance, b: Instance, release: Path) -> None:
    """Release and resume a stalled and paused b; stop both."""
    release.touch()
    if b.proc.poll() is None:
        os.kill(b.proc.pid, signal.SIGCONT)
    a.stop()
    b.stop()


@pytest.fixture
def topics(root: str) -> TopicAdmin:
    admin = TopicAdmin(root)
    admin.create(INPUT, PARTITIONS)
    admin.create(OUTPUT, 4)
    return admin


def test_two_instances_split_the_tasks_and_one_takes_over_after_a_kill(
    root: str, topics: TopicAdmin, tmp_path: Path
) -> None:
    expected = produce_lines(topics, 0, 400)
    a, b = Instance("a", root, tmp_path), Instance("b", root, tmp_path)
    try:
        wait_for("a 2-member split", lambda: split_evenly(root, 2), 180, a, b)
        per_member = tasks_of(group(root))
        assert sorted(len(t) for t in per_member.values()) == [TASKS // 2, TASKS // 2]
        wait_for("the first 400 lines", lambda: consumed(root), 120, a, b)
        start = committed(root)
        expected += produce_lines(topics, 400, 1600)  # 200 a partition: 5 batches each
        before_kill = tasks_of(group(root))
        # kill b while the instances process them (a position moved: four batches to go)
        lines = [(INPUT, p) for p in range(PARTITIONS)]
        wait_for(
            "the new lines being processed",
            lambda: any(committed(root)[tp] > start[tp] for tp in lines),
            60,
            a,
            b,
        )
        b.proc.kill()
        killed = time.monotonic()
        at_kill = committed(root)
        owned = wait_for("a owning every task", lambda: split_evenly(root, 1), 60, a)
        (survivor,) = tasks_of(group(root))
        b_parts = [
            tp
            for member, tasks in before_kill.items()
            if member != survivor
            for tp in task_inputs(tasks)
        ]
        assert len(b_parts) == TASKS // 2
        moved = wait_for(
            "a batch of b's former tasks",
            lambda: any(committed(root).get(tp, 0) > at_kill.get(tp, 0) for tp in b_parts),
            60,
            a,
        )
        done = wait_for("every line", lambda: consumed(root), 120, a)
        print(
            f"takeover: all tasks owned {owned - killed:.1f} s after the kill, the first "
            f"batch of b's tasks committed {moved - killed:.1f} s after it, the input caught "
            f"up {done - killed:.1f} s after it (session.timeout.ms={SESSION_MS}, "
            f"transaction.timeout.ms={TXN_TIMEOUT_MS})"
        )
        # the session timeout, a heartbeat and a rebalance round
        assert owned - killed < SESSION_MS / 1000 + 5
        # plus (if b died in an open transaction holding offsets) its timeout, and a batch
        assert moved - killed < SESSION_MS / 1000 + TXN_TIMEOUT_MS / 1000 + 5
    finally:
        a.stop()
        b.stop()
    assert_exactly_once(root, expected)


@pytest.mark.slow  # two instances and a minute of waiting for the session to expire
def test_a_member_paused_past_its_session_cannot_commit(
    root: str, topics: TopicAdmin, tmp_path: Path
) -> None:
    expected = produce_lines(topics, 0, 400)
    a, b, release = pause_b_in_a_commit(root, tmp_path, "before_prepare:120:3")
    try:
        release.touch()
        os.kill(b.proc.pid, signal.SIGCONT)
        rejoins = "rejoins the group with its tasks closed after TaskMigratedError"
        wait_for("b's thread fenced", lambda: rejoins in b.text(), 60, a, b)
        assert re.search(r"generation|fenced", b.text()), b.text()[-4000:]
        # as Kafka's thread does, b's rejoins (a new thread) and shares the tasks again
        wait_for("b back in the group", lambda: split_evenly(root, 2), 120, a, b)
        expected += produce_lines(topics, 400, 100)
        wait_for("the last lines", lambda: consumed(root), 90, a, b)
    finally:
        release_and_stop(a, b, release)
    assert_exactly_once(root, expected)


def test_a_member_paused_past_its_prepare_commit_commits_nothing_twice(
    root: str, topics: TopicAdmin, tmp_path: Path
) -> None:
    """b pauses after PrepareCommit (its transaction decided); a takes every task and
    completes b's transaction before it reads the group's positions. Resumed, b's commit
    phase finds every participant holding the transaction (nothing twice, no position moved
    back), and b, having lost its tasks, rejoins: the tasks it gets back were committed by
    a meanwhile, so their stores are built again from the changelog."""
    expected = produce_lines(topics, 0, 400)
    a, b, release = pause_b_in_a_commit(root, tmp_path, "after_prepare:120:2")
    try:
        assert "completed" in a.text() and "decided transaction" in a.text()
        release.touch()
        os.kill(b.proc.pid, signal.SIGCONT)
        done = "was completed by another process while this producer was paused"
        wait_for("b's commit to end", lambda: done in b.text(), 60, a, b)
        wait_for("b back in the group", lambda: split_evenly(root, 2), 120, a, b)
        expected += produce_lines(topics, 400, 200)
        wait_for("the last lines", lambda: consumed(root), 120, a, b)
    finally:
        release_and_stop(a, b, release)
    assert_exactly_once(root, expected)
