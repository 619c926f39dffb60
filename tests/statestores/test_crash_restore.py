"""Crash consistency and restoration against real Delta changelogs (acceptance 2, 3, 4)."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import RestorationCancelledError, StoreCorruptedError
from statestores.bytes_layer import bottom
from statestores.state_manager import RESTORE_BATCH
from statestores.transactional import OFFSET_KEY
from tests.statestores.harness import APP, STORE, Task

V1 = {f"k{i:03d}": "v1" for i in range(100)}
V2 = {**{f"k{i:03d}": "v2" for i in range(1, 150)}}
ROOT_DIR = Path(__file__).resolve().parents[2]


def crash(root: str, state_dir: str, point: str, fault: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "STREAMS_FAULT_POINT"}
    if fault:
        env["STREAMS_FAULT_POINT"] = fault
        env["STREAMS_FAULT_HIT"] = "2"  # in the second transaction
    done = subprocess.run(
        [sys.executable, "-m", "tests.statestores.harness", root, state_dir, point],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT_DIR,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    ("point", "fault", "expected"),
    [
        ("before_commit", None, V1),  # (a) killed before the transaction commits
        ("none", "after_prepare", V2),  # killed at the point of no return: rolled forward
        ("after_commit", None, V2),  # (b) killed after it commits, before the store applies
    ],
)
@pytest.mark.parametrize("outcomes", [True, False])
def test_sigkill_leaves_exactly_the_last_committed_state(
    root: str,
    tmp_path: Path,
    *,
    point: str,
    fault: str | None,
    expected: dict[str, str],
    outcomes: bool,
) -> None:
    state_dir = str(tmp_path / "state")
    assert "committed" not in crash(root, state_dir, point, fault)
    task = Task(root, state_dir, outcomes=outcomes)
    assert task.state() == expected
    assert task.manager.corrupted == set()
    # With the transaction log's answer the prepared batch is applied and nothing is
    # replayed; without it the batch is dropped and only the tail (150 changes) replayed.
    replayed = task.manager.restored[STORE]
    assert replayed == (0 if outcomes or expected is V1 else 151)
    # the store keeps working and its offset agrees with the changelog
    task.write({"after": "x"})
    task.close()
    again = Task(root, state_dir)
    assert again.state() == {**expected, "after": "x"} and again.manager.restored[STORE] == 0
    again.close()


@pytest.mark.parametrize(
    "keys", [200_000, pytest.param(1_000_000, marks=pytest.mark.slow, id="1M-keys")]
)
def test_restore_replays_only_what_is_missing(root: str, tmp_path: Path, keys: int) -> None:
    state_dir = str(tmp_path / "state")
    task = Task(root, state_dir, snapshots=False)
    task.write({f"key-{i:07d}": f"value-{i}" for i in range(keys)})
    # 1,000 keys change; the changelog commits them but the store never applies them
    task.begin()
    for i in range(0, keys, keys // 1000):
        task.store.put(f"key-{i:07d}", "changed")
    task.prepare()
    task.producer.commit_transaction()
    task.manager.close()  # as a crash: the overlay and prepared batch are not applied
    task.producer.close()

    reopened = Task(root, state_dir, outcomes=False, snapshots=False)
    assert reopened.reader.records_read == 1000
    assert reopened.manager.restored[STORE] == 1000
    assert reopened.store.get("key-0000000") == "changed"
    assert reopened.store.get("key-0000001") == "value-1"
    reopened.close()


def _history(task: Task, commits: int) -> dict[str, str]:
    expected: dict[str, str] = {}
    for n in range(commits):
        batch: dict[str, str | None] = {f"k{(n * 7 + i) % 300:03d}": f"v{n}-{i}" for i in range(50)}
        batch[f"k{n:03d}"] = None
        task.write(batch)
        for key, value in batch.items():
            if value is None:
                expected.pop(key, None)
            else:
                expected[key] = value
    return expected


def test_removed_task_directory_is_rebuilt_from_snapshot_and_tail(
    root: str, tmp_path: Path
) -> None:
    state_dir = str(tmp_path / "state")
    task = Task(root, state_dir, config={"statestore.snapshot.interval": 4})
    expected = _history(task, 10)  # snapshots after commits 4 and 8, then 2 more commits
    assert task.state() == expected
    snapshots = task.manager.snapshots
    assert snapshots is not None
    offsets = [s.offset for s in snapshots.list(STORE)]
    assert len(offsets) == 2  # pruned to the newest two (after commits 4 and 8)
    end = task.reader.offsets(f"{APP}-{STORE}-changelog", 0)
    assert end is not None and 0 < offsets[0] < offsets[1] < end[1]
    task.close()
    shutil.rmtree(state_dir)

    rebuilt = Task(root, state_dir)
    assert rebuilt.state() == expected
    assert rebuilt.manager.restored[STORE] == end[1] - offsets[1]  # only the tail
    rebuilt.close()


@pytest.mark.parametrize("damage", ["garbage_files", "offset_ahead"])
def test_corrupted_task_directory_is_rebuilt(root: str, tmp_path: Path, damage: str) -> None:
    state_dir = str(tmp_path / "state")
    task = Task(root, state_dir, config={"statestore.snapshot.interval": 3})
    expected = _history(task, 7)
    db_dir = bottom(task.store).path
    assert db_dir is not None
    if damage == "offset_ahead":
        bottom(task.store).set_committed_offset(10**6)
    task.close()
    if damage == "garbage_files":
        for name in os.listdir(db_dir):
            if name.startswith(("MANIFEST", "CURRENT")):
                Path(db_dir, name).write_bytes(b"\x00garbage")

    rebuilt = Task(root, state_dir)
    assert rebuilt.manager.corrupted == {STORE}
    assert rebuilt.state() == expected
    offsets = rebuilt.reader.offsets(f"{APP}-{STORE}-changelog", 0)
    assert offsets is not None and bottom(rebuilt.store).committed_offset() == offsets[1]
    rebuilt.close()


def test_at_least_once_writes_a_kafka_checkpoint_file(root: str, tmp_path: Path) -> None:
    state_dir = str(tmp_path / "state")
    task = Task(root, state_dir, eos=False)
    task.write({"a": "1", "b": "2"})
    text = Path(state_dir, ".checkpoint").read_text()
    assert text == f"0\n1\n{APP}-{STORE}-changelog 0 2\n"
    task.close()
    assert struct.unpack(">q", struct.pack(">q", 2)) == (2,)
    assert OFFSET_KEY == b"changelog_offset"


def _damage(path: str) -> None:
    """Overwrite 64 bytes in the middle of ``path`` (a data block of an SST file)."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 3)
        f.write(b"\xff" * 64)


def _big_history(task: Task, commits: int, keys: int = 3000) -> dict[str, str]:
    """``commits`` commits of ``keys`` keys each (enough for SST files of several blocks)."""
    expected: dict[str, str] = {}
    for n in range(commits):
        items = {f"key-{i:06d}": f"value-{n}-{i}" * 3 for i in range(keys)}
        task.write(dict(items))
        expected.update(items)
    return expected


def test_a_corrupt_sst_file_is_found_after_open_and_the_store_rebuilt(
    root: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state_dir = str(tmp_path / "state")
    task = Task(root, state_dir, config={"statestore.snapshot.interval": 2})
    expected = _big_history(task, 3)  # a snapshot after commit 2, one more commit
    db_dir = bottom(task.store).path
    assert db_dir is not None
    task.close()
    local = sorted(Path(db_dir).glob("*.sst"), key=lambda p: p.stat().st_size)[-1]
    snapshots = [p for p in Path(root, "snapshots").rglob("*.sst")]
    assert snapshots and all(p.stat().st_ino != local.stat().st_ino for p in snapshots)
    _damage(str(local))

    damaged = Task(root, state_dir)  # opens at once: the blocks are read in the background
    found = bottom(damaged.store)._base.verification.wait(60)  # type: ignore[attr-defined]
    assert found is not None and "block checksum mismatch" in found
    with pytest.raises(StoreCorruptedError, match="block checksum mismatch"):
        damaged.write({"k000": "never"})  # its prepare fails: nothing is committed
    damaged.producer.abort_transaction()
    damaged.close()
    with caplog.at_level("WARNING"):
        rebuilt = Task(root, state_dir)
    assert rebuilt.manager.corrupted == {STORE}
    assert rebuilt.state() == expected
    lines = [r.getMessage() for r in caplog.records if "was unusable" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "block checksum mismatch" in lines[0] and "snapshot at offset" in lines[0]
    rebuilt.close()


def test_a_damaged_snapshot_is_skipped_for_an_older_one(
    root: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state_dir = str(tmp_path / "state")
    task = Task(root, state_dir, config={"statestore.snapshot.interval": 2})
    expected = _big_history(task, 5)  # snapshots after commits 2 and 4
    snapshots = task.manager.snapshots
    assert snapshots is not None
    older, newest = snapshots.list(STORE)
    task.close()
    shutil.rmtree(state_dir)
    # damage a file only the newest snapshot has
    only_newest = sorted(set(newest.files) - set(older.files))
    assert only_newest
    _damage(os.path.join(root, *only_newest[-1].split("/")))

    with caplog.at_level("WARNING"):
        rebuilt = Task(root, state_dir)
    assert rebuilt.state() == expected
    assert rebuilt.manager.sources[STORE] == f"snapshot at offset {older.offset}"
    skipped = [r.getMessage() for r in caplog.records if "is unusable" in r.getMessage()]
    assert len(skipped) == 1 and f"offset {newest.offset}" in skipped[0], skipped
    end = rebuilt.reader.offsets(f"{APP}-{STORE}-changelog", 0)
    assert end is not None and rebuilt.manager.restored[STORE] == end[1] - older.offset
    rebuilt.close()


def test_a_restoration_stops_between_changelog_reads_when_cancelled(
    root: str, tmp_path: Path
) -> None:
    """A task that leaves its host while it restores (Kafka's state updater removing it)
    stops between two changelog reads; its next restoration, wherever it happens, starts
    from what is committed and restores it all."""
    task = Task(root, str(tmp_path / "first"), snapshots=False)
    expected = {f"key-{i:06d}": f"value-{i}" for i in range(3 * RESTORE_BATCH)}
    task.write(expected)
    task.close()

    checks = 0

    def cancelled() -> bool:  # cancelled once the second read of the changelog is done
        nonlocal checks
        checks += 1
        return checks > 3  # the store's check, then one before each read

    state_dir = str(tmp_path / "second")
    with pytest.raises(RestorationCancelledError, match="task left this host"):
        Task(root, state_dir, snapshots=False, cancelled=cancelled)
    assert checks == 4
    again = Task(root, state_dir, snapshots=False)
    assert again.state() == expected
    again.close()
