"""A task host and the TopologyTestDriver commit a task through the same task-commit code.

The host's side runs :class:`runtime.tasks.manager.TaskManager` as a task host process runs
it (one visit per batch, the batch's plan as the driver sends it, real RocksDB stores,
staged files on a real storage root); the driver's side pipes the same records through a
:class:`~streams.testing.TopologyTestDriver`. Both are watched at the task-commit classes
themselves (:mod:`topology.engine.task_commit`, wrapped, still run): each side must end
its batches and settle its transactions there, with the class of the guarantee, and the
stores must hold the same counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from common.config import StreamsConfig
from runtime.app.internal_topics import plan_topics
from runtime.storage.topics import TopicAdmin
from runtime.tasks.contract import PACKED_SCHEMA, PREPARED, BatchPlan, thread_plan
from runtime.tasks.manager import TaskManager
from streams.serdes import Serdes
from streams.testing import TopologyTestDriver
from topology import Consumed, Materialized, Produced, StreamsBuilder, Topology
from topology.engine import task_commit
from topology.engine.task_commit import AtLeastOnceTaskCommit, TransactionalTaskCommit

WORDS = ["a", "b", "a", "c", "a", "b"]

Calls = list[tuple[str, str, str]]


def counting() -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream("words", Consumed.with_(Serdes.String(), Serdes.String()))
        .group_by_key()
        .count(Materialized.as_("counts"))
        .to_stream()
        .to("counts-out", Produced.with_(Serdes.String(), Serdes.Long()))
    )
    return builder.build()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    """Every call of a task commit's methods: (class, method, task id)."""
    seen: Calls = []
    for cls in (AtLeastOnceTaskCommit, TransactionalTaskCommit):
        for name in ("end_batch", "settle"):
            real = getattr(cls, name)

            def spy(self, task, *args, _real=real, _name=name, _cls=cls.__name__, **kwargs):  # type: ignore[no-untyped-def]
                seen.append((_cls, _name, task.task_id))
                return _real(self, task, *args, **kwargs)

            monkeypatch.setattr(cls, name, spy)
    yield seen


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


@pytest.mark.parametrize(
    ("guarantee", "commit_class"),
    [("at_least_once", AtLeastOnceTaskCommit), ("exactly_once_v2", TransactionalTaskCommit)],
)
def test_a_task_host_and_the_driver_commit_through_one_task_commit(
    tmp_path: Path, calls: Calls, guarantee: str, commit_class: type
) -> None:
    topology = counting()
    root = str(tmp_path / "root")
    config = StreamsConfig(
        **{
            "application.id": "commits",
            "topics.root": root,
            "processing.guarantee": guarantee,
            "state.dir": str(tmp_path / "state"),
        }
    )
    eos = guarantee != "at_least_once"
    admin = TopicAdmin(root)
    admin.create("words", 1)
    admin.create("counts-out", 1)
    topics = plan_topics(topology, admin, config.application_id, config=config)
    thread = thread_plan(topology, config, root, owner="commits-1-owner")

    # the host's side: two batches, the second settling the first's transaction
    manager = TaskManager()
    positions: dict[tuple[str, int], int] = {}
    for batch, words in enumerate((WORDS[:3], WORDS[3:]), start=1):
        plan = BatchPlan(
            thread=thread,
            outputs=topics.outputs,
            staging_dir=f"staging/batch-{batch}",
            sources=topics.sources,
            positions=positions,
            transaction=("commits-1", batch) if eos else None,
            outcomes={("commits-1", batch - 1): True} if eos and batch > 1 else {},
            visit=frozenset({"0_0"}),
            batch=batch,
        )
        table = pa.Table.from_batches(
            manager.run(plan, 0, 0, {"words": records(words, 3 * (batch - 1))}, ["words"])
        )
        kinds = table.column("kind").to_pylist()
        assert (PREPARED in kinds) is eos
        positions = {("words", 0): 3 * batch}
    host_store = manager.live["0_0"].task.stores["counts"]
    host_counts = {w: host_store.get(w).value for w in "abc"}  # a timestamped store
    host_calls = list(calls)
    manager.close_all()

    # the driver's side
    calls.clear()
    with TopologyTestDriver(topology, config) as driver:
        source = driver.create_input_topic("words", Serdes.String(), Serdes.String())
        for word in WORDS:
            source.pipe_input(word, word)
        store = driver.get_key_value_store("counts")
        driver_counts = {w: store.get(w) for w in "abc"}
    driver_calls = list(calls)

    name = commit_class.__name__
    expected = {(name, "end_batch"), *([(name, "settle")] if eos else [])}
    assert {(c, m) for c, m, _ in host_calls} == expected
    assert {(c, m) for c, m, _ in driver_calls} == expected
    assert {t for _, _, t in host_calls} == {t for _, _, t in driver_calls} == {"0_0"}
    assert host_counts == driver_counts == {"a": 3, "b": 2, "c": 1}
    # the only task commits there are: the module's two classes
    assert {task_commit.task_commit(False).__class__, task_commit.task_commit(True).__class__} == {
        AtLeastOnceTaskCommit,
        TransactionalTaskCommit,
    }
