"""Recovery beyond plain kills: a zombie fenced by its successor, a lost Spark checkpoint."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from runtime.app.process_id import PROCESS_FILE
from runtime.txn import faults
from runtime.txn.coordinator import TransactionCoordinator
from streams.crash.harness import CrashTest, crashtest
from tests.crash.conftest import FAST_JVM, RUN_CONFIG, example

CONFIG = {**RUN_CONFIG, "max.poll.records": "5"}


def _wait_for(what: str, condition: object, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not callable(condition) or not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_second_instance_fences_a_stalled_one_and_output_stays_exactly_once(
    tmp_path: Path,
) -> None:
    """Instance A stalls before its PrepareCommit; B starts with the same application.id
    and processId (A's state directory moved to another machine: its process metadata,
    not its lock), fences A and processes everything; A wakes up, its commit is refused
    and it stops with TaskMigratedError. A second instance on A's very state directory is
    refused while A lives."""
    test = CrashTest(
        example("wordcount"), generate=60, workdir=tmp_path, config=CONFIG, env=FAST_JVM
    )
    test.setup()
    release = tmp_path / "release"
    zombie = test.spawn({faults.ENV_STALL: "before_prepare:900", faults.ENV_RELEASE: str(release)})
    log = Path(zombie.log)
    _wait_for("the stall", lambda: "fault stall at before_prepare" in log.read_text())
    coordinator = TransactionCoordinator(test.admin)
    (tid,) = coordinator.transactional_ids()
    stalled = coordinator.load(tid)
    assert stalled is not None
    refused = test.wait(test.spawn(), expect_failure=True)
    assert refused.exit_code == 1, Path(refused.log).read_text()[-3000:]
    assert "is in use by another running instance" in Path(refused.log).read_text()
    moved = tmp_path / "moved-state" / "wordcount"
    moved.mkdir(parents=True)
    shutil.copy(Path(test.state_dir) / "wordcount" / PROCESS_FILE, moved / PROCESS_FILE)
    successor = test.spawn(state_dir=str(moved.parent))
    _wait_for(
        "the successor's fence",
        lambda: coordinator.load(tid).meta.producer_epoch > stalled.meta.producer_epoch,  # type: ignore[union-attr]
    )
    release.touch()
    fenced = test.wait(zombie, expect_failure=True)
    assert fenced.exit_code == 1, log.read_text()[-3000:]
    text = log.read_text()
    assert "TaskMigratedError" in text and "fenced by a newer instance" in text
    done = test.wait(successor)
    assert done.error is None and done.exit_code == 0
    report = test.check()
    assert report.exactly_once, report.text()
    assert report.records_out == report.records_expected > 0


def test_a_lost_spark_checkpoint_resumes_from_the_committed_offsets(tmp_path: Path) -> None:
    report = crashtest(
        example("wordcount"),
        generate=60,
        kills=1,
        kinds=["fault"],
        points=["after_complete"],
        lose_checkpoint=True,
        workdir=tmp_path,
        config=CONFIG,
        env=FAST_JVM,
    )
    assert "Spark checkpoint deleted after run 0" in report.notes
    assert report.exactly_once, report.text()
    assert report.duplicates == report.losses == 0
    assert report.records_out == report.records_expected > 0
    assert os.path.isdir(os.path.join(tmp_path, "root", "_apps", "wordcount", "checkpoint"))
