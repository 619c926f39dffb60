"""State directory locks and cleanup, compaction, early commits, checkpoints, snapshots."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from common.errors import ConfigError, StoreIOError
from common.serdes import Serdes
from statestores.base import RocksDBBase
from statestores.checkpoint import OffsetCheckpoint
from statestores.compaction import ChangelogRecord, compact, replay
from statestores.context import StandaloneContext
from statestores.rocksdb_options import CONFIG_SETTER_KEY, RocksDBSettings, load_config_setter
from statestores.snapshots import LocalSnapshotStorage, SnapshotManager
from statestores.state_directory import StateDirectory, TaskDirectoryLockedError
from statestores.state_manager import ProcessorStateManager
from statestores.stores import Stores

LOCKER = textwrap.dedent(
    """
    import sys
    from statestores.state_directory import StateDirectory, TaskDirectoryLockedError
    try:
        StateDirectory(sys.argv[1], "app").lock("0_1")
        print("locked")
    except TaskDirectoryLockedError as exc:
        print("refused:", exc)
    """
)


def test_a_second_process_cannot_lock_a_task_directory(tmp_path: Path) -> None:
    directory = StateDirectory(str(tmp_path), "app")
    path = directory.lock("0_1")
    assert path == str(tmp_path / "app" / "0_1") and directory.locked() == {"0_1"}
    other = subprocess.run(
        [sys.executable, "-c", LOCKER, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert other.stdout.startswith("refused:") and "0_1" in other.stdout
    directory.unlock("0_1")
    again = subprocess.run(
        [sys.executable, "-c", LOCKER, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert again.stdout.strip() == "locked"  # the lock died with that process


def test_lock_error_is_a_streams_error(tmp_path: Path) -> None:
    first, second = StateDirectory(str(tmp_path), "app"), StateDirectory(str(tmp_path), "app")
    first.lock("1_0")
    with pytest.raises(TaskDirectoryLockedError, match="locked by another process"):
        second.lock("1_0")  # flock locks are per open file, so this conflicts too


def test_cleanup_removes_only_idle_unowned_task_directories(tmp_path: Path) -> None:
    directory = StateDirectory(str(tmp_path), "app")
    for task in ("0_0", "0_1", "0_2"):
        Path(directory.task_dir(task), "data").write_text("x")
    directory.lock("0_0")  # owned
    old = time.time() - 3600
    for task in ("0_0", "0_1"):
        os.utime(directory.task_dir(task), (old, old))
    os.utime(Path(tmp_path, "app", "0_2"), None)  # recently used
    assert directory.clean_removed_tasks(cleanup_delay_ms=600_000) == ["0_1"]
    assert directory.task_ids() == ["0_0", "0_2"]
    directory.close()


def test_compaction_keeps_latest_per_key_and_what_restores_need() -> None:
    rng = random.Random(3)
    now = 1_000_000
    records = [
        ChangelogRecord(
            offset,
            b"k%d" % rng.randrange(1500),
            None if rng.random() < 0.2 else b"v%d" % offset,
            now - 10_000 + offset,
        )
        for offset in range(2000)
    ]
    horizon = 1500
    result = compact(records, clean_horizon=horizon, now_ms=now, delete_retention_ms=9_000)
    assert result.removed > 300 and result.tombstones_removed > 0
    assert [r for r in result.kept if r.offset >= horizon] == records[horizon:]
    # a full restore and a restore from the horizon give what they gave before
    assert replay(result.kept) == replay(records)
    below = [r for r in result.kept if r.offset < horizon]
    assert len({r.key for r in below}) == len(below)  # one record per key below the horizon
    # young tombstones survive
    young = compact(records, clean_horizon=horizon, now_ms=now, delete_retention_ms=10**9)
    assert young.tombstones_removed == 0


def test_early_commit_is_requested_past_the_uncommitted_limit(tmp_path: Path) -> None:
    requests: list[int] = []
    manager = ProcessorStateManager(
        application_id="app",
        task_id="0_0",
        partition=0,
        state_dir=str(tmp_path),
        app_config={"statestore.uncommitted.max.bytes": 1000},
        commit_requester=lambda: requests.append(1),
    )
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("s"), Serdes.String(), Serdes.String()
    ).build()
    store.init(manager)
    for i in range(20):
        store.put(f"key-{i}", "x" * 100)
    assert requests == [1] and manager.commit_requested  # once per transaction
    manager.prepare_commit("tid", 1)
    manager.commit()
    assert not manager.commit_requested
    assert store.get("key-19") == "x" * 100
    manager.close()


def test_abort_discards_every_layer(tmp_path: Path) -> None:
    manager = ProcessorStateManager(
        application_id="app", task_id="0_0", partition=0, state_dir=str(tmp_path), app_config={}
    )
    store = (
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("s"), Serdes.String(), Serdes.String()
        )
        .with_caching_enabled()
        .build()
    )
    store.init(manager)
    store.put("a", "1")
    manager.prepare_commit("tid", 1)
    manager.commit()
    store.put("a", "2")
    store.put("b", "3")
    manager.prepare_commit("tid", 2)
    manager.abort()
    assert dict(store.all()) == {"a": "1"}
    manager.close()


def test_checkpoint_file_round_trip_and_malformed(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpoint(str(tmp_path))
    assert checkpoint.read() == {}
    checkpoint.write({("app-s-changelog", 0): 12, ("app-t-changelog", 0): 7})
    assert checkpoint.read() == {("app-s-changelog", 0): 12, ("app-t-changelog", 0): 7}
    Path(checkpoint.path).write_text("0\n3\nx 0 1\n")
    with pytest.raises(StoreIOError, match="malformed"):
        checkpoint.read()


def test_snapshots_are_incremental_and_pruned(tmp_path: Path) -> None:
    storage = LocalSnapshotStorage(str(tmp_path / "remote"))
    manager = SnapshotManager(storage, "app", "0_0", keep=2)
    source = tmp_path / "ckpt"
    for offset, sst in ((10, ["1.sst"]), (20, ["1.sst", "2.sst"]), (30, ["2.sst", "3.sst"])):
        source.mkdir()
        (source / "IDENTITY").write_text("db-1")
        (source / "CURRENT").write_text(f"current {offset}")
        for name in sst:
            (source / name).write_text(name)
        manager.upload("s", str(source), offset)
        shutil.rmtree(source)
    assert [s.offset for s in manager.list("s")] == [10, 20, 30]
    assert manager.prune("s") == [10]
    assert [s.offset for s in manager.list("s")] == [20, 30] and manager.horizon("s") == 20
    files = storage.list_keys("snapshots/app/0_0/s/files/")
    assert sorted(f.rsplit("/", 1)[1] for f in files) == ["1.sst", "2.sst", "3.sst"]
    target = tmp_path / "restored"
    newest = manager.newest("s", at_most=25)
    assert newest is not None and newest.offset == 20
    manager.download(newest, str(target))
    assert sorted(os.listdir(target)) == ["1.sst", "2.sst", "CURRENT", "IDENTITY"]
    assert (target / "CURRENT").read_text() == "current 20"


class GrowBuffers:
    """A config setter used by the test below."""

    calls: list[str] = []

    def set_config(self, store_name: str, options: object, configs: object) -> None:
        GrowBuffers.calls.append(store_name)
        options.set_write_buffer_size(1 << 20)  # type: ignore[attr-defined]


def test_rocksdb_config_setter_is_applied(tmp_path: Path) -> None:
    path = f"{__name__}:GrowBuffers"
    assert load_config_setter("") is None
    with pytest.raises(ConfigError, match="rocksdb.config.setter"):
        load_config_setter("no.such.module:Setter")
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("tuned"), Serdes.String(), Serdes.String()
    ).build()
    store.init(
        StandaloneContext(state_dir=str(tmp_path), app_config={"rocksdb.config.setter": path})
    )
    store.put("a", "b")
    store.flush()
    assert GrowBuffers.calls == ["tuned"] and store.get("a") == "b"
    store.close()


class DefaultManifest:
    """Gives a store RocksDB's own MANIFEST bound (1 GiB)."""

    def set_config(self, store_name: str, options: object, configs: object) -> None:
        options.set_max_manifest_file_size(1 << 30)  # type: ignore[attr-defined]


def _flush_many(path: Path, app_config: dict[str, str], flushes: int) -> dict[str, int]:
    base = RocksDBBase(str(path / "db"), "counts", app_config)
    try:
        for i in range(flushes):
            base.db[f"word-{i % 40}".encode()] = str(i).encode()
            base.db.flush()
        base.checkpoint(str(path / "snapshot"))
        assert base.db[b"word-1"] == str(max(i for i in range(flushes) if i % 40 == 1)).encode()
    finally:
        base.close()
    return {
        kind: sum(f.stat().st_size for f in (path / kind).glob("MANIFEST-*"))
        for kind in ("db", "snapshot")
    }


def test_a_long_lived_store_keeps_its_manifest_and_snapshots_small(tmp_path: Path) -> None:
    """Every flush appends to RocksDB's MANIFEST and every snapshot copies it: with
    RocksDB's own bound (1 GiB) a store open for months copies ever more; here it rolls
    over at 16 KiB, and a store reopened with many files gets room for their entries."""
    flushes = 300
    unbounded = _flush_many(
        tmp_path / "unbounded", {CONFIG_SETTER_KEY: f"{__name__}:DefaultManifest"}, flushes
    )
    bounded = _flush_many(tmp_path / "bounded", {}, flushes)
    bound = RocksDBSettings().max_manifest_bytes
    assert unbounded["db"] > 2 * bound and unbounded["snapshot"] > 2 * bound
    # a manifest passes the bound by at most the last edit before it rolls
    assert bounded["db"] <= bound + 4096 and bounded["snapshot"] <= bound + 4096
    settings = RocksDBSettings()
    assert settings.manifest_bound(0) == settings.manifest_bound(10) == bound
    assert settings.manifest_bound(1000) == 1000 * 1024 > bound


class NoMemtableBloom:
    """Turns the memtables' bloom filter off."""

    def set_config(self, store_name: str, options: object, configs: object) -> None:
        options.set_memtable_prefix_bloom_ratio(0.0)  # type: ignore[attr-defined]
        options.set_memtable_whole_key_filtering(False)  # type: ignore[attr-defined]


def test_a_store_filters_its_memtables_by_whole_key(tmp_path: Path) -> None:
    """New keys (a count's every first word) are looked up absent: the memtables carry a
    bloom filter of whole keys (RocksDB's own options file says so), unless a config
    setter turns it off; absent and present keys read right either way."""
    setter = {CONFIG_SETTER_KEY: f"{__name__}:NoMemtableBloom"}
    for config, expect in (({}, ("true", 0.1)), (setter, ("false", 0.0))):
        path = tmp_path / f"db-{expect[0]}"
        base = RocksDBBase(str(path), "counts", config)
        try:
            base.write({b"present": b"1"}, (), {})
            assert base.get(b"present") == b"1" and base.get(b"absent") is None
        finally:
            base.close()
        options = max(path.glob("OPTIONS-*")).read_text()
        assert f"memtable_whole_key_filtering={expect[0]}" in options
        assert f"memtable_prefix_bloom_size_ratio={expect[1]:.6f}" in options
