"""Where the driver places a thread's tasks on a cluster: the tasks no live executor holds
go, partition by partition, to the executors whose host servers the warm-up found, each
partition to the one with fewest tasks; the tasks of a live executor stay there."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from common.config import StreamsConfig
from runtime.spark import executors
from runtime.thread.placement import TaskPlacement

TASKS = [f"{sub}_{p}" for sub in (0, 1) for p in range(4)]


def placement(monkeypatch: pytest.MonkeyPatch, live: list[str]) -> TaskPlacement:
    """A thread's placement on a cluster whose registered executors are ``live``, whose
    warm-up found a server on executors 0, 1 and 2."""
    monkeypatch.setattr(executors, "registered", lambda _context: sorted(live))
    placed = TaskPlacement(StreamsConfig.from_dict({"application.id": "a", "topics.root": "/x"}))
    placed.warmed = {"0": "10.0.0.1:7000", "1": "10.0.0.2:7000", "2": "10.0.0.3:7000"}
    return placed


def by_executor(plan: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for task, (executor, _) in sorted(plan["placement"].items()):
        out.setdefault(executor, []).append(task)
    return out


def test_new_tasks_spread_partition_by_partition_over_the_live_executors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    placed = placement(monkeypatch, ["0", "1"])  # executor 2 answered the warm-up, then left
    placed.assign(TASKS)
    plan = placed.for_plan()
    assert by_executor(plan) == {
        "0": ["0_0", "0_2", "1_0", "1_2"],
        "1": ["0_1", "0_3", "1_1", "1_3"],
    }
    assert plan["placement"]["0_1"] == ("1", "10.0.0.2:7000")
    assert placed.placed == {}  # nothing is placed for good before a batch commits


def test_a_lost_executors_tasks_go_to_the_live_executor_with_fewest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    placed = placement(monkeypatch, ["0", "1", "2"])
    old = {"0": "10.0.0.1:7000", "1": "10.0.0.2:7000", "5": "10.0.0.9:7000"}
    home = {"0_0": "0", "0_1": "0", "1_0": "0", "1_1": "1", "0_2": "5", "1_2": "5"}
    placed.placed = {task: (e, old[e]) for task, e in home.items()}
    placed.assign(TASKS)
    assigned = placed.for_plan()["placement"]
    for task, executor in home.items():  # the live executors keep theirs
        if executor != "5":
            assert assigned[task][0] == executor
    # executor 5 is gone: partition 2 to executor 2 (no tasks), then partition 3 (never
    # placed) to executor 1 (one task; executor 2 has two now)
    assert {t: assigned[t][0] for t in ("0_2", "1_2", "0_3", "1_3")} == {
        "0_2": "2",
        "1_2": "2",
        "0_3": "1",
        "1_3": "1",
    }


def test_without_the_warm_ups_answers_tasks_live_where_they_first_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    placed = placement(monkeypatch, ["0", "1"])
    placed.warmed = {}
    placed.assign(TASKS)
    assert placed.for_plan()["placement"] == {}


def test_a_first_batch_waits_for_the_warm_ups_answers_and_no_longer() -> None:
    record = executors.warming("placement-test")
    assert executors.warmed("placement-test") is record
    started = time.monotonic()
    assert record.wait(0.2) == {}  # no answer in time: none
    assert time.monotonic() - started >= 0.2
    threading.Timer(0.1, record.found, [{"0": "h:1"}]).start()
    assert record.wait(30.0) == {"0": "h:1"}


def test_a_batch_waits_for_restorations_up_to_its_target_only_when_no_other_task_could_run() -> (
    None
):
    def wait(restore_wait_ms: int, ran: set[str], restoring: set[str], reading: bool) -> int:
        config = {"application.id": "a", "topics.root": "/x", "restore.wait.ms": restore_wait_ms}
        placed = TaskPlacement(StreamsConfig.from_dict(config))
        placed.ran, placed.restoring = ran, frozenset(restoring)
        placed.opens(["0_0", "1_0"])
        return int(placed.for_plan(reading=reading, target_s=12.0)["restore_wait_ms"])

    assert wait(2000, set(), set(), reading=True) == 12_000  # a start: every task opens
    assert wait(2000, {"0_0", "1_0"}, {"1_0"}, reading=False) == 12_000  # only restorations
    assert wait(20_000, {"0_0", "1_0"}, {"1_0"}, reading=False) == 20_000  # never below
    assert wait(2000, {"0_0", "1_0"}, {"1_0"}, reading=True) == -1  # 0_0 has records
    assert wait(2000, {"0_0"}, set(), reading=True) == -1  # a new task beside a running one
    assert wait(0, set(), set(), reading=True) == -1  # 0: never waits


def test_a_batch_whose_tasks_all_have_a_place_asks_the_cluster_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No JVM call at every batch: the registered executors are asked only when a task has
    no place yet (a lost executor's tasks move at the first visit that cannot reach it)."""
    asked: list[int] = []
    placed = placement(monkeypatch, ["0", "1"])
    monkeypatch.setattr(executors, "registered", lambda _c: asked.append(1) or ["1"])
    placed.placed = {t: ("0", "10.0.0.1:7000") for t in TASKS}  # executor 0 since lost
    placed.assign(TASKS)
    assert asked == [] and placed.for_plan()["placement"] == placed.placed
    del placed.placed["1_3"]
    placed.assign(TASKS)  # a task without a place: asked, and executor 0's tasks move too
    assert asked == [1]
    assert {e for e, _ in placed.for_plan()["placement"].values()} == {"1"}
