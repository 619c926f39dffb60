"""at_least_once commits a batch's outputs as it ends and the positions every
commit.interval.ms: a poll is not a commit."""

from __future__ import annotations

import time
from typing import Any

import pytest

from common.config import StreamsConfig
from common.errors import GenerationFencedError
from runtime.storage.topics import TopicAdmin
from runtime.tasks.contract import POSITION
from runtime.thread.commit import Batch
from runtime.thread.commit_alos import AtLeastOnce
from runtime.txn.offsets import OffsetsStore


def strategy(admin: TopicAdmin, interval_ms: int) -> AtLeastOnce:
    config = StreamsConfig(
        **{
            "application.id": "app",
            "topics.root": admin.root.uri,
            "commit.interval.ms": interval_ms,
        }
    )
    return AtLeastOnce(admin, config, "app-p-1")


def batch(offset: int, validate: Any = lambda: None) -> Batch:
    rows = [{"kind": POSITION, "task": "0_0", "topic": "lines", "partition": 0, "offset": offset}]
    return Batch(offset, ["out"], lambda staging, txn, tasks: rows, validate)


def committed(admin: TopicAdmin) -> dict[tuple[str, int], int]:
    return OffsetsStore(admin).fetch("app")


def test_positions_are_committed_when_the_interval_has_passed(admin: TopicAdmin) -> None:
    alos = strategy(admin, 300)
    assert alos.trigger_interval_ms == 0  # batches back to back
    done = alos.commit_batch(batch(10))
    assert done.positions == {("lines", 0): 10} and not done.committed
    assert committed(admin) == {} and alos.commit_due_ms() is not None
    assert not alos.commit_pending(lambda: None, force=False)  # not due yet
    time.sleep(0.35)
    done = alos.commit_batch(batch(20))
    assert done.committed and committed(admin) == {("lines", 0): 20}
    assert alos.commit_due_ms() is None  # nothing waits
    alos.commit_batch(batch(30))
    assert alos.commit_pending(lambda: None, force=True)  # a rejoin, a close
    assert committed(admin) == {("lines", 0): 30}


def test_a_stale_generation_drops_the_positions_a_storage_error_keeps_them(
    admin: TopicAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    alos = strategy(admin, 50_000)
    alos.commit_batch(batch(10))

    def broken(group: str, offsets: object) -> None:
        raise OSError("the storage is away")

    monkeypatch.setattr(alos.offsets, "commit", broken)
    assert not alos.commit_pending(lambda: None, force=True)
    assert alos.pending == {("lines", 0): 10}  # waits for the next commit
    monkeypatch.undo()

    def fenced() -> None:
        raise GenerationFencedError("member m of group 'app' (generation 1) may not commit")

    assert not alos.commit_pending(fenced, force=True)
    assert alos.pending == {} and committed(admin) == {}  # the next owner reads them again
    # after a rejoin whose commit failed, waiting positions are never committed later
    alos.commit_batch(batch(15))
    assert alos.assigned(["0_0"]) == {} and alos.pending == {}
    assert not alos.commit_pending(lambda: None, force=True)
    # inside a batch whose commit falls due, a stale generation stops the thread
    # (TaskMigratedError): the batch's outputs are committed, its positions never are
    quick = strategy(admin, 1)
    time.sleep(0.01)
    with pytest.raises(GenerationFencedError):
        quick.commit_batch(batch(20, fenced))
    assert committed(admin) == {}
