"""The versioned key-value store (KIP-889) in a task's store stack: real RocksDB, KIP-892
transactions, a real Delta changelog, snapshots, and restoration after a SIGKILL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from common.serdes import Serdes
from runtime.state.adapters import (
    CoordinatorTransactionOutcomes,
    ProducerChangelogCollector,
    RootSnapshotStorage,
    TopicChangelogReader,
    create_changelog_topics,
)
from runtime.storage.topics import TopicAdmin
from runtime.txn.producer import TransactionalProducer
from runtime.txn.state import TransactionState
from statestores.api import PUT_RETURN_CODE_NOT_PUT, VersionedRecord
from statestores.bytes_layer import bottom
from statestores.context import RecordingCollector, StandaloneContext
from statestores.state_manager import ProcessorStateManager
from statestores.stores import Stores

APP = "app"
STORE = "prices"
TID = "app-tid"
ROOT_DIR = Path(__file__).resolve().parents[2]


class VersionedTask:
    """One task (partition 0) with the versioned store ``prices`` (str -> str, 1000 ms of
    history), wired to a Delta changelog as the runtime wires it."""

    def __init__(self, root: str, state_dir: str, *, config: dict[str, Any] | None = None):
        self.admin = TopicAdmin(root)
        create_changelog_topics(self.admin, APP, {STORE: {"cleanup.policy": "compact"}}, 1)
        self.producer = TransactionalProducer(self.admin, TID)
        self.producer.init_transactions()
        self.reader = TopicChangelogReader(self.admin)
        self.manager = ProcessorStateManager(
            application_id=APP,
            task_id="0_0",
            partition=0,
            state_dir=state_dir,
            app_config=dict(config or {}),
            changelog=ProducerChangelogCollector(self.producer, APP, 0),
            changelog_reader=self.reader,
            transaction_outcomes=CoordinatorTransactionOutcomes(
                self.producer.coordinator, [f"{APP}-{STORE}-changelog"]
            ),
            snapshots=RootSnapshotStorage(root),
            transactional=True,
        )
        supplier = Stores.persistent_versioned_key_value_store(STORE, 1_000, 100)
        self.store: Any = Stores.versioned_key_value_store_builder(
            supplier, Serdes.String(), Serdes.String()
        ).build()
        self.store.init(self.manager)

    def prepare(self) -> None:
        snap = self.producer.coordinator.load(TID)
        assert snap is not None
        ongoing = snap.meta.state is TransactionState.ONGOING
        self.manager.prepare_commit(TID, snap.meta.txn_sequence + (0 if ongoing else 1))

    def write(self, puts: list[tuple[str, str | None, int]]) -> None:
        self.producer.begin_transaction()
        for key, value, ts in puts:
            self.store.put(key, value, ts)
        self.prepare()
        self.producer.commit_transaction()
        self.manager.commit()

    def history(self, keys: str = "abc") -> dict[str, list[VersionedRecord[str]]]:
        return {k: self.store.get_versions(k, ascending=True) for k in keys}

    def close(self) -> None:
        self.manager.close()
        self.producer.close()


def _batches() -> list[list[tuple[str, str | None, int]]]:
    """Ten transactions of versions of keys a, b, c, some out of order, some tombstones."""
    out = []
    for n in range(10):
        out.append(
            [
                ("abc"[i % 3], None if (n + i) % 5 == 4 else f"v{n}.{i}", 100 * n + 37 * i % 90)
                for i in range(6)
            ]
        )
    return out


def _standalone(path: Path, collector: RecordingCollector) -> Any:
    context = StandaloneContext(state_dir=str(path), changelog=collector)
    supplier = Stores.persistent_versioned_key_value_store("v", 100, 50)
    store: Any = Stores.versioned_key_value_store_builder(
        supplier, Serdes.String(), Serdes.String()
    ).build()
    store.init(context)
    return store


def test_abort_drops_versions_and_stream_time(tmp_path: Path) -> None:
    store = _standalone(tmp_path, RecordingCollector())
    store.put("k", "a", 10)
    store.flush()  # no task manages it: a flush commits
    store.put("k", "b", 500)
    assert store.observed_stream_time() == 500
    store.abort()
    assert store.observed_stream_time() == 10
    assert store.get("k") == VersionedRecord("a", 10)
    store.close()


def test_changelog_records_carry_the_version_timestamp(tmp_path: Path) -> None:
    collector = RecordingCollector()
    store = _standalone(tmp_path / "a", collector)
    store.put("k", "a", 10)
    store.put("k", "b", 500)
    assert store.put("k", "late", 300) == PUT_RETURN_CODE_NOT_PUT  # writes nothing
    assert store.delete("k", 600) == VersionedRecord("b", 500)
    stamps = [ts for _, _, _, ts in collector.records]
    assert stamps == sorted(stamps) and set(stamps) == {10, 500, 600}
    store.close()
    # the changelog replayed into an empty store gives the same versions
    copy = _standalone(tmp_path / "b", RecordingCollector())
    bottom(copy).restore_batch([(k, v) for _, k, v, _ in collector.records], 100)
    copy.on_restored()
    assert copy.observed_stream_time() == 600
    assert copy.get("k") is None
    assert copy.get_versions("k") == [VersionedRecord("b", 500, 600), VersionedRecord("a", 10, 500)]
    assert copy.get("k", 550) == VersionedRecord("b", 500, 600)
    copy.close()


def test_restores_from_the_changelog_after_the_directory_is_lost(root: str, tmp_path: Path) -> None:
    state_dir = str(tmp_path / "state")
    task = VersionedTask(root, state_dir, config={"statestore.snapshot.interval": 0})
    for batch in _batches():
        task.write(batch)
    expected = task.history()
    latest = {k: task.store.get(k) for k in "abc"}
    time = task.store.observed_stream_time()
    task.close()
    shutil.rmtree(state_dir)

    rebuilt = VersionedTask(root, state_dir, config={"statestore.snapshot.interval": 0})
    end = rebuilt.reader.offsets(f"{APP}-{STORE}-changelog", 0)
    assert end is not None and rebuilt.manager.restored[STORE] == end[1]  # all of it
    assert rebuilt.history() == expected
    assert {k: rebuilt.store.get(k) for k in "abc"} == latest
    assert rebuilt.store.observed_stream_time() == time
    rebuilt.close()


def test_rebuilds_from_snapshot_and_changelog_tail(root: str, tmp_path: Path) -> None:
    state_dir = str(tmp_path / "state")
    config = {"statestore.snapshot.interval": 4}
    task = VersionedTask(root, state_dir, config=config)
    for batch in _batches():
        task.write(batch)
    expected = task.history()
    task.close()
    shutil.rmtree(state_dir)

    rebuilt = VersionedTask(root, state_dir, config=config)
    assert rebuilt.manager.sources[STORE].startswith("snapshot")
    snapshots = rebuilt.manager.snapshots
    assert snapshots is not None
    newest = snapshots.list(STORE)[-1].offset
    end = rebuilt.reader.offsets(f"{APP}-{STORE}-changelog", 0)
    assert end is not None and rebuilt.manager.restored[STORE] == end[1] - newest  # the tail
    assert rebuilt.history() == expected
    # still a working store: an out-of-order put lands in the history
    rebuilt.write([("a", "late", 850)])
    assert rebuilt.store.get("a", 851) == VersionedRecord("late", 850, 900)
    rebuilt.close()


def _crash_run(root: str, state_dir: str, point: str) -> None:
    """Commit the first five transactions, then write the sixth and die at ``point``."""
    task = VersionedTask(root, state_dir)
    batches = _batches()
    for batch in batches[:5]:
        task.write(batch)
    task.producer.begin_transaction()
    for key, value, ts in batches[5]:
        task.store.put(key, value, ts)
    task.prepare()
    if point == "before_commit":
        os.kill(os.getpid(), signal.SIGKILL)
    task.producer.commit_transaction()
    os.kill(os.getpid(), signal.SIGKILL)  # committed, the store's batch not applied


@pytest.mark.parametrize(("point", "committed"), [("before_commit", 5), ("after_commit", 6)])
def test_sigkill_leaves_the_versions_of_the_committed_transactions(
    root: str, tmp_path: Path, point: str, committed: int
) -> None:
    state_dir = str(tmp_path / "state")
    code = (
        "from tests.statestores.test_versioned_store import _crash_run; "
        f"_crash_run({root!r}, {state_dir!r}, {point!r})"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT_DIR,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    reference_dir = str(tmp_path / "reference")
    reference = VersionedTask(str(tmp_path / "reference-root"), reference_dir)
    for batch in _batches()[:committed]:
        reference.write(batch)
    expected = reference.history()
    reference.close()

    task = VersionedTask(root, state_dir)
    assert task.history() == expected
    assert task.manager.corrupted == set()
    task.write(_batches()[committed])  # it goes on from there
    task.close()
