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
from runtime.txn.producer import TransactionalProducer
from runtime.txn.state import TransactionState
from tests.clitools import cli


def _wait_for(predicate: object, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


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
