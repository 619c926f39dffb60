"""A fused batch's plan travels to its Spark task through a file: the thread plan (with
the topology's functions) once, the batch's own fields at every batch."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.tasks.contract import BatchPlan, thread_plan
from runtime.tasks.plan_files import plan_path, read_plan, remove_plans, write_plan
from topology import StreamsBuilder


def _plan(tmp_path: Path, owner: str, batch: int) -> BatchPlan:
    b = StreamsBuilder()
    b.stream("in").map_values(lambda v: v[::-1]).to("out")
    config = StreamsConfig.from_dict(
        {"application.id": "plans", "topics.root": str(tmp_path), "state.dir": str(tmp_path)}
    )
    return BatchPlan(
        thread=thread_plan(b.build(), config, str(tmp_path), owner),
        outputs={},
        staging_dir=f"staging/{batch}",
        sources={"in": 0},
        positions={("in", 0): 10 * batch},
        transaction=("plans-1", batch),
        visit=frozenset({"0_0"}),
        batch=batch,
    )


def test_the_last_batch_plan_written_is_read_with_its_thread_plan(tmp_path: Path) -> None:
    first = _plan(tmp_path, "owner-a", 1)
    path = plan_path(first.thread)
    write_plan(path, first)
    second = dataclasses.replace(first, batch=2, positions={("in", 0): 20})
    write_plan(path, second)
    got = read_plan(path)
    assert got.batch == 2 and got.positions == {("in", 0): 20}
    assert got.transaction == ("plans-1", 1) and got.visit == frozenset({"0_0"})
    assert got.thread.key == first.thread.key and got.thread.owner == "owner-a"
    assert got.thread.topology.describe() == first.thread.topology.describe()
    other = _plan(tmp_path, "owner-b", 7)
    assert plan_path(other.thread) != path  # each thread instance has its own file
    write_plan(plan_path(other.thread), other)
    assert read_plan(plan_path(other.thread)).thread.owner == "owner-b"
    assert read_plan(path).batch == 2


def test_a_closed_thread_leaves_no_plan_file_and_a_missing_plan_says_so(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "owner-c", 3)
    path = plan_path(plan.thread)
    write_plan(path, plan)
    directory = os.path.dirname(path)
    assert sorted(n.split("-")[0] for n in os.listdir(directory) if n.endswith(".pickle")) == [
        "batch",
        "thread",
    ]
    remove_plans(plan.thread)
    remove_plans(plan.thread)  # twice: nothing left to delete
    assert not [n for n in os.listdir(directory) if n.endswith(".pickle")]
    with pytest.raises(StreamsError, match="cannot read the batch plan"):
        read_plan(path)
