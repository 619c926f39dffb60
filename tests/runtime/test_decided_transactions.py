"""A transaction decided as committed always completes: when its commit phase fails (a
participant's Delta log unwritable for a moment), the coordinator's sweep completes it once
the storage is back, and ``--abort`` says so truly."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from common.errors import StreamsError
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn import coordinator as coordinator_module
from runtime.txn import faults
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OffsetsStore
from runtime.txn.producer import TransactionalProducer
from runtime.txn.state import TransactionState
from tests.clitools import cli


def _wait_for(predicate: object, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


def _commit_stalled_after_prepare(
    producer: TransactionalProducer, release: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``producer``'s commit on a thread that stalls after its PrepareCommit until
    ``release`` exists; return the thread and the errors it met."""
    monkeypatch.setenv(faults.ENV_RELEASE, str(release))
    faults.arm_stall("after_prepare", 30.0)
    failed: list[BaseException] = []

    def commit() -> None:
        try:
            producer.commit_transaction()
        except Exception as exc:
            failed.append(exc)

    committing = threading.Thread(target=commit)
    committing.start()
    return committing, failed


def test_a_failed_commit_phase_is_completed_by_the_sweep(
    admin: TopicAdmin, root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin.create("t", 1)
    producer = TransactionalProducer(admin, "app-1", transaction_timeout_ms=60_000)
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(5):
        producer.send("t", b"k", b"v%d" % i)
    release = tmp_path / "release"
    committing, failed = _commit_stalled_after_prepare(producer, release, monkeypatch)
    coordinator = TransactionCoordinator(TopicAdmin(root))

    def prepared() -> bool:
        snap = coordinator.load("app-1")
        return snap is not None and snap.meta.state is TransactionState.PREPARE_COMMIT

    _wait_for(prepared)
    log_dir = Path(admin.table_path("t")) / "_delta_log"
    shutil.move(log_dir, tmp_path / "moved")  # the participant's log is unwritable now
    log_dir.write_text("in the way")
    release.touch()
    committing.join(60)
    faults.arm_stall(None)
    assert failed, "the commit phase should have failed on the unwritable log"
    assert isinstance(failed[0], StreamsError), repr(failed[0])
    assert "\x1b[" not in str(failed[0]) and "\n" not in str(failed[0])  # one plain line

    aborted = cli(root, "transactions", "--abort", "--transactional-id", "app-1")
    assert aborted.returncode == 1 and "first sweep 10 s after its decision" in aborted.stderr
    swept = coordinator.sweep(orphans=False)
    assert swept.completed == [] and swept.stuck == {}  # within the grace: its producer's
    later = TransactionCoordinator(
        TopicAdmin(root),
        clock=lambda: coordinator_module.now_ms() + coordinator_module.DECIDED_GRACE_MS + 1,
    )
    still = later.sweep(orphans=False)
    assert list(still.stuck) == ["app-1"]  # the log is still unwritable: retried next sweep
    os.remove(log_dir)
    shutil.move(tmp_path / "moved", log_dir)
    done = later.sweep(orphans=False)
    assert done.completed == ["app-1"] and done.stuck == {}
    snap = later.load("app-1")
    assert snap is not None and snap.meta.state is TransactionState.COMPLETE_COMMIT
    values = [r.value for r in TopicReader(TopicAdmin(root)).records("t", 0, 0)]
    assert values == [b"v%d" % i for i in range(5)]
    again = later.sweep(orphans=False)
    assert again.completed == []  # complete: nothing twice
    assert [r.value for r in TopicReader(TopicAdmin(root)).records("t", 0, 0)] == values


def test_a_producer_paused_past_its_prepare_commit_commits_nothing_twice(
    admin: TopicAdmin, root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zombie after the point of no return: another instance completes its decided
    transaction and commits on past it (outputs and the group's positions); when the zombie
    resumes, its commit phase finds each participant holding the transaction and commits
    nothing again: no record twice, no position moved back."""
    admin.create("t", 1)
    producer = TransactionalProducer(admin, "app-1", transaction_timeout_ms=60_000)
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(5):
        producer.send("t", b"k", b"a%d" % i)
    producer.send_offsets_to_transaction({("in", 0): 5}, "g")
    release = tmp_path / "release"
    committing, failed = _commit_stalled_after_prepare(producer, release, monkeypatch)
    other = TopicAdmin(root)
    coordinator = TransactionCoordinator(other)

    def prepared() -> bool:
        snap = coordinator.load("app-1")
        return snap is not None and snap.meta.state is TransactionState.PREPARE_COMMIT

    _wait_for(prepared)
    snap = coordinator.load("app-1")
    assert snap is not None
    coordinator.finish(snap)  # the instance taking the tasks rolls it forward
    successor = TransactionalProducer(other, "app-2", transaction_timeout_ms=60_000)
    successor.init_transactions()
    successor.begin_transaction()
    for i in range(3):
        successor.send("t", b"k", b"b%d" % i)
    successor.send_offsets_to_transaction({("in", 0): 8}, "g")
    successor.commit_transaction()
    successor.close()
    release.touch()
    committing.join(60)
    faults.arm_stall(None)
    assert failed == []
    producer.begin_transaction()  # its own CompleteCommit, written by another, is adopted
    producer.abort_transaction()
    producer.close()
    values = [r.value for r in TopicReader(TopicAdmin(root)).records("t", 0, 0)]
    assert values == [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(3)]
    assert OffsetsStore(TopicAdmin(root)).fetch("g") == {("in", 0): 8}
