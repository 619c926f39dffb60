"""A full state directory: batches stop, the thread waits, and goes on once space returns.

The state directory is a small filesystem of its own (mounting one needs root), filled to
the last byte while records arrive; the word count's batches fail where their stores
write, are aborted and tried again; once the filler is deleted they commit, and the counts
are exactly the driver's. With the root on an object store, Spark's own checkpoint lives
in the state directory too: the query that cannot write it ends, and the thread is
started again (its checkpoint is disposable) once the wait is over.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.errors import CommitOutcomeUnknownError, StorageError
from runtime.app.app import StreamsApp
from runtime.storage.topics import TopicAdmin
from runtime.tasks.errors import TaskFailedError, guarded, task_error
from runtime.thread import disk_full as disk_full_module
from runtime.thread.disk_full import NO_SPACE, DiskFullBackoff, disk_full, storage_failing
from runtime.txn.offsets import OffsetsStore
from streams.crash.nemesis import fill, mount_small_disk, unmount
from tests.runtime.spark.test_app import (
    load_example,
    output_counts,
    produce_lines,
    reference_counts,
)
from tests.s3server import S3Server, s3_root, s3_server  # noqa: F401 - fixtures


def test_what_counts_as_a_full_disk() -> None:
    assert disk_full(OSError(28, "No space left on device"))
    wrapped = RuntimeError("the batch's Spark job failed")
    wrapped.__cause__ = Exception(f"IO error: {NO_SPACE}: While appending to file: 000004.log")
    assert disk_full(wrapped)
    assert not disk_full(OSError(13, "Permission denied"))


def test_what_counts_as_a_failing_storage() -> None:
    """An object store failing past its retries is waited out as a full disk is; an error
    of unknown outcome (a lost answer of a conditional write) never is."""
    slow_down = StorageError("cannot write x: AWS Error SLOW_DOWN during PutObject operation")
    assert storage_failing(slow_down)
    wrapped = RuntimeError("the batch's commit failed")
    wrapped.__cause__ = slow_down
    assert storage_failing(wrapped)
    unknown = CommitOutcomeUnknownError("the answer of a conditional write was lost")
    unknown.__cause__ = StorageError("reset")
    assert not storage_failing(unknown)
    assert not storage_failing(ValueError("a bug"))
    full = StorageError(f"cannot write x: {NO_SPACE}")
    assert disk_full(full) and not storage_failing(full)
    # a batch's task failed on an executor: Spark carries it to the driver as text only
    carried = None
    try:
        list(guarded(iter_failing(slow_down)))
    except TaskFailedError as exc:
        carried = task_error(Py4JLikeError(f"Job aborted: PythonException: {exc}"))
    assert isinstance(carried, StorageError) and storage_failing(carried)


class Py4JLikeError(Exception):
    """What a failed Spark job raises on the driver: the task's error as text."""


def iter_failing(exc: BaseException) -> Iterator[Any]:
    raise exc
    yield


@pytest.fixture(params=["local root", "root on an object store"])
def where(request: pytest.FixtureRequest, root: str) -> tuple[str, dict[str, str]]:
    """The storage root and the settings that reach it."""
    if request.param == "local root":
        return root, {}
    server: S3Server = request.getfixturevalue("s3_server")
    return request.getfixturevalue("s3_root"), server.config()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small filesystem needs root")
def test_a_full_state_dir_stops_the_batches_until_space_returns(
    spark: SparkSession,
    where: tuple[str, dict[str, str]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root, reach = where
    admin = TopicAdmin(root)
    example = load_example("wordcount")
    lines = example.generate(600)
    admin.create(example.INPUT, 2)
    admin.create(example.OUTPUT, 2)
    state = tmp_path / "state"
    mount_small_disk(str(state), 64)
    config: dict[str, Any] = {
        **example.CONFIG,
        "topics.root": root,
        "state.dir": str(state),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,
        "max.poll.records": 50,
        "statestore.cache.max.bytes": 0,
        **reach,
    }
    app = StreamsApp(example.build_topology(), config, spark=spark)
    positions = OffsetsStore(admin)

    def consumed(n: int) -> bool:
        return sum(v for (t, _), v in positions.fetch(app.application_id).items()
                   if t == example.INPUT) >= n  # fmt: skip

    try:
        produce_lines(admin, example.INPUT, lines[:200])
        app.start()
        deadline = time.monotonic() + 120
        while not consumed(200) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert consumed(200)
        filler = state / ".filler"
        with caplog.at_level(logging.WARNING, logger="runtime.thread.disk_full"):
            assert fill(str(filler)) > 0
            produce_lines(admin, example.INPUT, lines[200:])
            deadline = time.monotonic() + 120
            while "the disk is full" not in caplog.text and time.monotonic() < deadline:
                app.await_termination(0.2)
            assert "the disk is full" in caplog.text, "no batch failed on the full disk"
            assert not consumed(600)  # nothing of the failed batches committed
            os.remove(filler)
            deadline = time.monotonic() + 120
            while not consumed(600) and time.monotonic() < deadline:
                app.await_termination(0.2)  # where a query ended on the full disk is seen
            assert consumed(600)
            assert app.state.name in ("RUNNING", "REBALANCING")
            assert "space is back" in caplog.text or "thread starts again" in caplog.text
    finally:
        app.close()
        unmount(str(state))
    latest, records = output_counts(root, example.OUTPUT)
    assert latest == reference_counts(example, lines)
    per_word: dict[str, list[int]] = {}
    for word, count in records:
        per_word.setdefault(word, []).append(count)
    for word, counts in per_word.items():
        assert counts == sorted(set(counts)), f"{word}: a count repeats or goes back: {counts}"


def test_a_thread_failing_on_the_storage_outside_a_batch_starts_again_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its start or rejoin could not read its positions: it is started again (2 s doubling
    to 30 s) for about 5 minutes of failures in a row, then it fails; a batch that commits
    starts the count afresh; an error of unknown outcome never waits."""
    monkeypatch.setattr(
        disk_full_module, "time", type("T", (), {"sleep": staticmethod(lambda s: None)})
    )
    backoff = DiskFullBackoff("t")
    failing = StorageError("cannot read data file x: AWS Error SLOW_DOWN during HeadObject")
    starts = 0
    while backoff.storage_failed(failing):
        starts += 1
    assert starts == disk_full_module.GIVE_UP_AFTER
    backoff.committed(7)
    assert backoff.storage_failed(failing)
    assert not backoff.storage_failed(CommitOutcomeUnknownError("lost answer"))
    assert not backoff.storage_failed(ValueError("a bug"))
